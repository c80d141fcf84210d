//! The one run loop of `agentrt train` and `agentrt sft`: everything about a run but what one step does.
//!
//! The design in three parts:
//! - **where a run starts** ([`RunStart`]): a new run directory with its config, or an existing one
//!   reopened to resume (its saved config, checked against what a resume may change; its newest complete
//!   checkpoint or resume state); the adapters the run starts from (that state's, or the warm start of
//!   `[model]`); and then its optimizer state, with the logs of steps after it dropped.
//! - **what a step is** ([`RunStep`]): each command supplies only its step, "do one step, return its
//!   metrics line", given the learner and the run's data position; plus, where it has them, work before
//!   the first step and logs written after the step's metrics line.
//! - **what the loop does around it** ([`RunLoop::run`]): the progress (a bar on a terminal, else each
//!   step's metrics line and a throttled progress line), the metrics line through [`RunDir::append`], and
//!   the saved state (adapters, `agent.json`, optimizer, data position) after every step: a checkpoint
//!   every `save_steps` and at the last step (the oldest beyond the limit deleted), a resume state after
//!   the others, so a kill at any instant loses at most the step in flight.
//!
//! A resumed run repeats the uninterrupted one bit for bit: every step's randomness is a function of the
//! run's seed and the step (the data order, [`crate::trainer::sample_seed`]), the saved state is exact
//! (f32 adapters and optimizer moments), and the arithmetic does not depend on thread timing
//! (docs/reliability.md says what the promise depends on).

use crate::error::TrainError;
use crate::learner::Learner;
use crate::model_section::ModelSection;
use crate::run_config::{check_resumable, RunConfig};
use crate::run_dir::{write_atomic, RunDir, TrainerState, CONFIG, METRICS};
use agentrt_environments::AgentSettings;
use agentrt_policy::Policy;
use agentrt_progress::Progress;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A run directory ready for a run: created for a new run, or reopened to resume one.
pub(crate) struct RunStart {
    /// The run directory.
    pub run: RunDir,
    /// Whether the run resumes (`--resume`), with or without a checkpoint to continue from.
    resume: bool,
    /// The newest complete checkpoint or resume state when resuming (`None`: a new run, or none written
    /// yet), with its step.
    saved: Option<(usize, PathBuf)>,
    /// The newest complete checkpoint (`None`: a new run, or none written yet).
    last_checkpoint: Option<PathBuf>,
}

/// Where a run's steps begin: the steps done and the data position, as its checkpoint recorded them (both
/// 0 for a fresh start).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Position {
    /// Optimizer steps done.
    pub step: usize,
    /// Items (questions, conversations) taken from the run's data order.
    pub seen: usize,
}

impl RunStart {
    /// A new run directory for `config` (one that already holds a run that finished a step is an error),
    /// or, with `resume`, the run in `run_dir`, whose saved config `config` must match but for
    /// [`RunConfig::CHANGEABLE_ON_RESUME`] once it finished a step (the saved `config.toml` is updated to it).
    pub fn open<C: RunConfig>(run_dir: &Path, config: &C, resume: bool) -> Result<RunStart, TrainError> {
        if !resume {
            return Ok(RunStart { run: RunDir::create(run_dir, config)?, resume, saved: None, last_checkpoint: None });
        }
        let (run, saved) = RunDir::open::<C>(run_dir)?;
        if crate::run_dir::has_progress(run_dir)? {
            check_resumable(&saved, config, C::CHANGEABLE_ON_RESUME)?;
        }
        if *config != saved {
            write_atomic(&run.path.join(CONFIG), config.to_toml().as_bytes())?;
        }
        let saved = run.newest_saved()?;
        let last_checkpoint = run.checkpoints()?.pop().map(|(_, p)| p);
        Ok(RunStart { run, resume, saved, last_checkpoint })
    }

    /// Whether the run starts from its initial adapters: a new run, or a resumed one that saved nothing yet.
    pub fn is_fresh(&self) -> bool {
        self.saved.is_none()
    }

    /// Gives `policy` the adapters the run starts from: the saved state's when resuming from one, else
    /// `model`'s (`model.init_adapter`, or fresh ones drawn from `seed`); returns where the steps begin.
    pub fn start_adapters(&self, policy: &mut Policy, model: &ModelSection, seed: u64) -> Result<Position, TrainError> {
        match &self.saved {
            Some((_, checkpoint)) => {
                let state = RunDir::read_state(checkpoint)?;
                policy.load_adapters(&RunDir::adapters_of(checkpoint))?;
                Ok(Position { step: state.step, seen: state.questions_seen })
            }
            None => {
                crate::warm_start::start_adapters(policy, model, seed)?;
                Ok(Position { step: 0, seen: 0 })
            }
        }
    }

    /// The loop over the run's steps from `at`, with `learner` (holding the adapters of
    /// [`RunStart::start_adapters`]): when resuming, the learner's optimizer gets the saved state's and the
    /// logs lose the lines of steps after it (work the resumed run redoes); a resume with nothing saved
    /// starts over, its logs cleared.
    pub fn into_loop(self, mut learner: Learner, at: Position, plan: Plan) -> Result<RunLoop, TrainError> {
        let RunStart { run, resume, saved, last_checkpoint } = self;
        if let Some((step, path)) = &saved {
            let p = RunDir::optimizer_of(path);
            learner.optimizer.load_state(&p).map_err(|e| TrainError::OptimizerState { path: p.clone(), source: e })?;
            run.truncate_logs_after(*step)?;
            tracing::info!("resuming {} from {} (step {step}, {} {} seen)", run.path.display(), path.display(), at.seen, plan.seen_unit);
        } else if resume {
            run.clear_logs()?;
            tracing::info!("resuming {}: nothing saved yet, starting from step 0", run.path.display());
        }
        Ok(RunLoop { run, learner, at, last_checkpoint, plan })
    }
}

/// What the loop needs to know of a run besides its steps.
pub(crate) struct Plan {
    /// The progress's label (the command: `train`, `sft`).
    pub label: &'static str,
    /// What the data position counts, as the resume message says it (`questions`, `conversations`).
    pub seen_unit: &'static str,
    /// The run's last step.
    pub total_steps: usize,
    /// A checkpoint every this many steps (and at the last step); a resume state after every other step.
    pub save_steps: usize,
    /// Checkpoints kept, oldest deleted first (0 keeps all).
    pub save_total_limit: usize,
    /// The run's seed and name, recorded with each checkpoint.
    pub seed: u64,
    /// See `seed`.
    pub run_name: String,
    /// How the adapters are to be played (the base model they sit on, the episode spec, the prompt), saved
    /// as each checkpoint's `agent.json`.
    pub agent: AgentSettings,
    /// Show progress: a bar on a terminal; elsewhere each step's metrics line and a progress line with the
    /// ETA. Without it, only the metrics lines.
    pub progress: bool,
}

/// What one command's step is; the loop does the rest.
pub(crate) trait RunStep {
    /// The step's line in `metrics.jsonl`.
    type Metrics: Serialize;

    /// Work before the first step, once the progress shows (a fresh run's held-out evaluation at step 0).
    async fn begin(&mut self, _learner: &mut Learner, _run: &RunDir) -> Result<(), TrainError> {
        Ok(())
    }

    /// Step `step`: takes its data from position `seen` on (moving it past what it took), updates
    /// `learner`, and returns its metrics line (logs the step writes before it go to `run`).
    async fn step(&mut self, step: usize, learner: &mut Learner, seen: &mut usize, run: &RunDir) -> Result<Self::Metrics, TrainError>;

    /// Logs of step `step` that follow its metrics line, before its checkpoint.
    async fn after_metrics(&mut self, _step: usize, _learner: &mut Learner, _run: &RunDir) -> Result<(), TrainError> {
        Ok(())
    }

    /// The progress message after a step (the bar's, and the throttled line's).
    fn status(&self, metrics: &Self::Metrics) -> String;
}

/// A run's steps, ready to go ([`RunStart::into_loop`]).
pub(crate) struct RunLoop {
    /// The run directory.
    pub run: RunDir,
    /// The adapters and their optimizer.
    pub learner: Learner,
    at: Position,
    last_checkpoint: Option<PathBuf>,
    plan: Plan,
}

/// What a run that went through all its steps leaves.
pub(crate) struct Finished {
    /// The run directory.
    pub run: RunDir,
    /// The newest checkpoint written (or resumed from), if any.
    pub last_checkpoint: Option<PathBuf>,
}

impl RunLoop {
    /// Says `headline` (what the run does), then runs the steps after `at` up to `plan.total_steps`, each
    /// [`RunStep::step`] followed by its metrics line, [`RunStep::after_metrics`] and its saved state: a
    /// checkpoint on the cadence, else a resume state.
    pub async fn run<S: RunStep>(self, headline: &str, command: &mut S) -> Result<Finished, TrainError> {
        let RunLoop { run, mut learner, at, mut last_checkpoint, plan } = self;
        tracing::info!("{headline}");
        // The progress measures from here, so a resumed run's ETA counts only the steps it ran.
        let bar = plan.progress.then(|| Progress::new(plan.label, "steps", plan.total_steps as u64, at.step as u64));
        command.begin(&mut learner, &run).await?;
        let mut seen = at.seen;
        for step in at.step + 1..=plan.total_steps {
            let metrics = command.step(step, &mut learner, &mut seen, &run).await?;
            run.append(METRICS, &metrics)?;
            command.after_metrics(step, &mut learner, &run).await?;
            let state = TrainerState { step, questions_seen: seen, seed: plan.seed, run_name: plan.run_name.clone() };
            if step.is_multiple_of(plan.save_steps) || step == plan.total_steps {
                last_checkpoint = Some(run.save_checkpoint(&learner.policy, &plan.agent, &learner.optimizer, &state, plan.save_total_limit)?);
            } else {
                run.save_resume_state(&learner.policy, &plan.agent, &learner.optimizer, &state)?;
            }
            if !bar.as_ref().is_some_and(Progress::is_terminal) {
                tracing::info!("step {step}: {}", serde_json::to_value(&metrics).expect("metrics lines serialise"));
            }
            if let Some(b) = &bar {
                b.set(step as u64, command.status(&metrics));
            }
        }
        if let Some(b) = bar {
            b.finish();
        }
        Ok(Finished { run, last_checkpoint })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learner::{LearnerConfig, LossScale, Sample};
    use crate::SftConfig;

    /// A step that takes three items of data, trains on one short sample and says where it stands; its
    /// `after_metrics` logs a line of its own. It fails at step `fails_at` (a run that dies there).
    struct Counting {
        begun: usize,
        fails_at: Option<usize>,
    }

    #[derive(Serialize)]
    struct Counted {
        step: usize,
        seen: usize,
    }

    impl RunStep for Counting {
        type Metrics = Counted;

        async fn begin(&mut self, _learner: &mut Learner, _run: &RunDir) -> Result<(), TrainError> {
            self.begun += 1;
            Ok(())
        }

        async fn step(&mut self, step: usize, learner: &mut Learner, seen: &mut usize, _run: &RunDir) -> Result<Counted, TrainError> {
            if self.fails_at == Some(step) {
                return Err(TrainError::Run(format!("step {step} dies")));
            }
            *seen += 3;
            let sample = Sample { ids: vec![1, 2, 3, 4], model_mask: vec![false, false, true, true], advantage: 1.0, routed: false, sampled_logprobs: vec![] };
            learner.accumulate(&[sample], LossScale::PerSample { samples: 1 })?;
            learner.step()?;
            Ok(Counted { step, seen: *seen })
        }

        async fn after_metrics(&mut self, step: usize, _learner: &mut Learner, run: &RunDir) -> Result<(), TrainError> {
            run.append(crate::run_dir::TRANSCRIPTS, &serde_json::json!({ "step": step }))
        }

        fn status(&self, m: &Counted) -> String {
            format!("seen {}", m.seen)
        }
    }

    /// Runs `dir` to `total_steps` (saving every 2nd step) from where it stands, as a command does.
    async fn run_to(dir: &Path, total_steps: usize, resume: bool) -> (Finished, Counting) {
        let (finished, step) = run_failing(dir, total_steps, resume, None).await;
        (finished.unwrap(), step)
    }

    /// [`run_to`], with the run dying at step `fails_at`.
    async fn run_failing(dir: &Path, total_steps: usize, resume: bool, fails_at: Option<usize>) -> (Result<Finished, TrainError>, Counting) {
        let config = SftConfig::default();
        let start = RunStart::open(dir, &config, resume).unwrap();
        let mut policy = agentrt_policy::tiny::tiny_policy(agentrt_policy::Arch::Llama, 1).unwrap();
        let at = start.start_adapters(&mut policy, &config.model, 7).unwrap();
        let learner = Learner::new(policy, LearnerConfig::plain(1e-2, 1.0)).unwrap();
        let plan = Plan {
            label: "test",
            seen_unit: "items",
            total_steps,
            save_steps: 2,
            save_total_limit: 0,
            seed: 7,
            run_name: "counting".into(),
            agent: AgentSettings::new(
                "tiny",
                &agentrt_rollout::EpisodeSpec { max_turns: 1, max_new_tokens: 8, ..Default::default() },
                &agentrt_environments::WikiSection { demonstration: false.into(), ..Default::default() },
            ),
            progress: false,
        };
        let mut step = Counting { begun: 0, fails_at };
        let finished = start.into_loop(learner, at, plan).unwrap().run("counting", &mut step).await;
        (finished, step)
    }

    fn steps_and_seen(run: &RunDir) -> Vec<(u64, u64)> {
        run.read_lines(METRICS).unwrap().iter().map(|l| (l["step"].as_u64().unwrap(), l["seen"].as_u64().unwrap())).collect()
    }

    #[tokio::test]
    async fn a_run_checkpoints_on_its_cadence_and_a_resume_goes_on_from_the_newest_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run");
        let (finished, step) = run_to(&path, 3, false).await;
        assert_eq!(step.begun, 1);
        assert_eq!(steps_and_seen(&finished.run), [(1, 3), (2, 6), (3, 9)]);
        assert_eq!(finished.run.checkpoints().unwrap().iter().map(|(s, _)| *s).collect::<Vec<_>>(), [2, 3], "every 2nd step and the last");
        assert_eq!(finished.last_checkpoint, Some(path.join("checkpoint-3")));

        // Killed before step 3's checkpoint was complete: its logs are redone from checkpoint-2.
        std::fs::remove_file(path.join("checkpoint-3/trainer_state.json")).unwrap();
        let (finished, _) = run_to(&path, 5, true).await;
        assert_eq!(steps_and_seen(&finished.run), [(1, 3), (2, 6), (3, 9), (4, 12), (5, 15)], "each step once, the data position continued");
        let transcripts: Vec<u64> = finished.run.read_lines(crate::run_dir::TRANSCRIPTS).unwrap().iter().map(|l| l["step"].as_u64().unwrap()).collect();
        assert_eq!(transcripts, [1, 2, 3, 4, 5], "the step's own logs are cut back and redone too");
        let state = RunDir::read_state(&path.join("checkpoint-5")).unwrap();
        assert_eq!((state.step, state.questions_seen, state.run_name.as_str()), (5, 15, "counting"));

        // A run directory that holds a run is not started again.
        let e = RunStart::open(&path, &SftConfig::default(), false).err().unwrap().to_string();
        assert!(e.contains("--resume"), "{e}");
    }

    #[tokio::test]
    async fn a_resume_without_a_checkpoint_starts_over_from_step_0() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run");
        let (finished, _) = run_to(&path, 1, false).await;
        std::fs::remove_dir_all(path.join("checkpoint-1")).unwrap();
        assert_eq!(finished.run.read_lines(METRICS).unwrap().len(), 1);
        let (finished, step) = run_to(&path, 2, true).await;
        assert_eq!(step.begun, 1);
        assert_eq!(steps_and_seen(&finished.run), [(1, 3), (2, 6)]);
    }

    /// A step between checkpoints leaves a resume state (the one before it deleted), so a run that dies
    /// mid-step goes on from the step before, not from the last checkpoint; a checkpoint makes the resume
    /// states before it redundant, and they go.
    #[tokio::test]
    async fn every_step_leaves_a_resume_state_so_a_death_loses_only_the_step_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run");
        let (died, _) = run_failing(&path, 6, false, Some(6)).await;
        assert!(died.err().unwrap().to_string().contains("step 6 dies"));
        let run = RunDir { path: path.clone() };
        assert_eq!(run.checkpoints().unwrap().iter().map(|(s, _)| *s).collect::<Vec<_>>(), [2, 4]);
        assert_eq!(run.resume_states().unwrap().iter().map(|(s, _)| *s).collect::<Vec<_>>(), [5], "only the newest resume state is kept");
        assert_eq!(run.newest_saved().unwrap().map(|(s, _)| s), Some(5));
        for f in ["adapters/adapter_model.safetensors", "agent.json", "optimizer.safetensors", "trainer_state.json"] {
            assert!(path.join("resume-5").join(f).is_file(), "resume-5 lacks {f}");
        }

        let (finished, step) = run_to(&path, 6, true).await;
        assert_eq!(step.begun, 1);
        assert_eq!(steps_and_seen(&finished.run), [(1, 3), (2, 6), (3, 9), (4, 12), (5, 15), (6, 18)], "step 6 once, from resume-5's position");
        assert_eq!(finished.last_checkpoint, Some(path.join("checkpoint-6")));
        assert!(finished.run.resume_states().unwrap().is_empty(), "the last checkpoint leaves no resume state behind");

        // Dies in its first step: nothing saved, so the resume starts over with its logs cleared.
        let fresh = dir.path().join("fresh");
        let (died, _) = run_failing(&fresh, 2, false, Some(1)).await;
        assert!(died.is_err());
        let (finished, _) = run_to(&fresh, 2, true).await;
        assert_eq!(steps_and_seen(&finished.run), [(1, 3), (2, 6)]);
    }
}
