//! The training loop on the wiki task: rollouts in the sandbox, advantages, routing, update, logs and
//! checkpoints.

use crate::advantages::advantages;
use crate::config::LossAggregation;
use crate::config::TrainConfig;
use crate::draw::{keeps_settled, DrawRule, GroupOutcome, QuestionRecords, StepGroups};
use crate::error::TrainError;
use crate::external::{AdapterPublisher, ExternalSampler};
use crate::learner::{model_tokens, Learner, LearnerConfig, LossScale, Sample, UpdateStats};
use crate::metrics::{HeldOutEval, RoutingEval, RoutingModeEval, StepMetrics, StepSeconds};
use crate::reward::RewardParts;
use crate::routing::Detector;
use crate::run_config::RunConfig;
use crate::run_dir::{DataOrder, RunDir, DEV_EVAL, ROUTING_EVAL, TRANSCRIPTS};
use crate::run_loop::{Plan, RunStart, RunStep};
use agentrt_environments::{AgentSettings, Environment};
use agentrt_eval::Metrics;
use agentrt_policy::{AdamWConfig, ModelSource, Policy, SamplingParams};
use agentrt_rollout::{seeded_order, Episode, EpisodeRunner, LocalPolicy, OpenAiPolicy, OpenAiPolicyConfig, Question, TurnPolicy};
use agentrt_runtime::Sandbox;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Where to run and whether to continue.
pub struct TrainRequest {
    /// The run's resolved config (saved as its config.toml).
    pub config: TrainConfig,
    /// The run directory (`output_dir/run_name` unless given).
    pub run_dir: PathBuf,
    /// Continue the run in `run_dir` from its newest saved state. `config` must then be its saved config but
    /// for `TrainConfig::CHANGEABLE_ON_RESUME` (`TrainConfig::resumed` makes one); the run's `config.toml`
    /// is updated to it.
    pub resume: bool,
    /// Show progress: a bar on a terminal; elsewhere each step's metrics line and a progress line with the
    /// ETA. Without it, only the metrics lines.
    pub progress: bool,
}

/// What a finished (or stopped) run reports.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    /// Where the run's files are.
    pub run_dir: PathBuf,
    /// The run's last step (`run.max_steps`).
    pub steps: usize,
    /// The newest checkpoint written (or resumed from), if any.
    pub last_checkpoint: Option<PathBuf>,
    /// Steps this invocation ran (a resumed run's earlier ones not counted).
    pub steps_run: usize,
    /// Steps of the whole run (a resumed run's earlier ones included), as its `metrics.jsonl` logs them.
    pub run_steps: usize,
    /// Of those, the steps whose update changed the adapters: 0 when every group of every step had equal
    /// rewards, and the run trained nothing.
    pub run_steps_updated: usize,
}

/// How the learner updates under a config: `[algorithm]`'s KL weight, clipping, AdamW and shared-prefix update.
pub fn learner_config(config: &TrainConfig) -> LearnerConfig {
    let a = &config.algorithm;
    LearnerConfig {
        beta: a.beta,
        max_grad_norm: a.max_grad_norm,
        optimizer: AdamWConfig { lr: a.lr, weight_decay: a.weight_decay, ..AdamWConfig::default() },
        share_prefixes: a.shared_prefix_update,
        // One optimizer step per step's samples keeps the ratio to the sampler at 1: nothing to clip.
        clip: (a.mini_batches > 1 || a.update_epochs > 1).then_some((a.clip_low, a.clip_high)),
        sampler_correction: (a.sampler_correction > 0.0).then_some(a.sampler_correction),
    }
}

/// The split the held-out slice and the routing evaluation play: `run.eval_split`, or the environment's
/// held-out split when it is empty.
pub fn eval_split<'a>(config: &'a TrainConfig, env: &'a Environment) -> &'a str {
    match config.run.eval_split.as_str() {
        "" => &env.package.splits.held_out,
        named => named,
    }
}

/// The questions of the held-out split (`run.eval_split`, or the environment's held-out split when it is
/// empty); an error says which key chose the split.
fn held_out_questions(config: &TrainConfig, env: &Environment) -> Result<Vec<Question>, TrainError> {
    let key = match config.run.eval_split.as_str() {
        "" => format!("run.eval_split (empty: the {} environment's held-out split, `{}`)", env.package.name, env.package.splits.held_out),
        _ => "run.eval_split".to_string(),
    };
    env.questions(eval_split(config, env)).map_err(|e| in_key(e, &key))
}

/// An error reading the questions of a split, prefixed with the config key that asked for it.
fn in_key(e: agentrt_rollout::RolloutError, key: &str) -> TrainError {
    TrainError::Config(format!("{key}: {e}"))
}

/// The held-out slice a config evaluates during training (`run.eval_*`): `eval_questions` questions of
/// the environment's [`eval_split`] after the first `eval_skip` of its seed-0 order ([`seeded_order`], the
/// order `agentrt eval --num-samples N --seed 0` takes its first N from). Empty when `run.eval_steps` is 0.
pub fn eval_slice(config: &TrainConfig, env: &Environment) -> Result<Vec<Question>, TrainError> {
    let r = &config.run;
    if r.eval_steps == 0 {
        return Ok(vec![]);
    }
    let split_name = eval_split(config, env);
    let split = held_out_questions(config, env)?;
    let n = split.len();
    let slice: Vec<Question> = seeded_order(split, 0).into_iter().skip(r.eval_skip).take(r.eval_questions).collect();
    if slice.is_empty() {
        return Err(TrainError::Config(format!(
            "run.eval_steps: the slice is empty: the {} environment has {n} questions of split `{split_name}`, and run.eval_skip skips {}: set run.eval_skip below {n}",
            env.package.name,
            r.eval_skip
        )));
    }
    Ok(slice)
}

/// The seed of the sampler of step `step` (from 1), draw `micro` (the accumulation batch, then dynamic
/// sampling's further draws), of a run seeded `seed`.
pub fn sample_seed(seed: u64, step: usize, micro: usize) -> u64 {
    seed.wrapping_mul(1_000_003).wrapping_add((step * 131 + micro) as u64)
}

/// A warm start from an adapter trained with other prompt settings (its `agent.json`) than this run's
/// plays it off its training distribution: say so, naming both. An unreadable `agent.json` is an error
/// (an adapter without one, e.g. a PEFT directory from elsewhere, is fine).
fn warn_if_played_otherwise(config: &TrainConfig) -> Result<(), TrainError> {
    if config.model.init_adapter.is_empty() {
        return Ok(());
    }
    if let Some(a) = AgentSettings::read(Path::new(&config.model.init_adapter))? {
        let (w, r) = (&config.env.wiki, &config.rollout.episode);
        if (a.system_prompt.as_str(), &a.demonstration, a.spec.max_turns) != (w.system_prompt.as_str(), &w.demonstration, r.max_turns) {
            tracing::warn!(
                "model.init_adapter {} was trained with system_prompt {:?}, demonstration {}, max_turns {} (its agent.json), but this run plays it with {:?}, {}, {}: set env.wiki.system_prompt / env.wiki.demonstration / rollout.max_turns to match unless that is the point",
                config.model.init_adapter, a.system_prompt, a.demonstration, a.spec.max_turns, w.system_prompt, w.demonstration, r.max_turns
            );
        }
    }
    Ok(())
}

/// Trains; returns when `max_steps` are done. Every `save_steps` a checkpoint is written atomically,
/// with the `agent.json` of how this run plays the policy.
pub async fn train(request: TrainRequest, sandbox: Arc<Sandbox>) -> Result<TrainSummary, TrainError> {
    let TrainRequest { config, run_dir, resume, progress } = request;
    let seed = config.run.seed;

    // The environment is built once: its questions (the code tasks read once) serve training, the
    // held-out slice and the routing evaluation alike. All of it is checked before the run directory is
    // made, so a refused run leaves nothing behind.
    let env = Environment::build(&config.env, &config.rollout.episode, sandbox.clone())?;
    let mut questions = env.questions(&env.package.splits.train).map_err(|e| in_key(e, &env.package.splits.train_key))?;
    env.check_index(&mut questions).await?;
    let eval_questions: Vec<Question> = if config.routing.eval_routing_steps > 0 {
        // The routing evaluation plays held-out questions (run.eval_split's, in file order).
        held_out_questions(&config, &env)?.into_iter().take(config.routing.eval_questions).collect()
    } else {
        vec![]
    };
    let mut dev_slice = eval_slice(&config, &env)?;
    env.check_index(&mut dev_slice).await?;
    let start = RunStart::open(&run_dir, &config, resume)?;
    let sent = serde_json::to_string_pretty(&env.settings()).expect("environment settings serialise") + "\n";
    crate::run_dir::write_atomic(&start.run.path.join(crate::run_dir::ENVIRONMENT), sent.as_bytes())?;

    let device = agentrt_policy::parse_device(&config.model.device)?;
    let mut policy = Policy::load(&ModelSource::parse(&config.model.name), &device)?;
    // The rollouts' arithmetic (the activations the config names); the held-out slice is played as
    // `run.eval_activations` says (f32 by default, as `agentrt eval` plays it).
    if policy.decoder.set_decode_activations(config.rollout.sampler_activations) != config.rollout.sampler_activations {
        // The default asks for int8; a model without GGUF blocks (a safetensors directory) samples in f32.
        tracing::info!("sampling `{}` with f32 activations: it has no GGUF blocks to multiply with 8-bit activations", config.model.name);
    }
    policy.recompute_layers = config.model.recompute_layers;
    policy.decoder.learner_products = config.model.learner_products;
    let at = start.start_adapters(&mut policy, &config.model, seed)?;
    let fresh = start.is_fresh();
    if fresh {
        warn_if_played_otherwise(&config)?;
    }
    // A warm start's KL reference is the warm-started model (base + the initial adapter, frozen).
    let reference = if config.algorithm.beta > 0.0 { crate::warm_start::reference_adapters(&policy, &config.model)? } else { None };
    policy.set_routing(config.routing.unflagged);
    let mut learner = Learner::new(policy, learner_config(&config))?;
    learner.set_reference(reference);
    let plan = Plan {
        label: "train",
        seen_unit: "questions",
        total_steps: config.run.max_steps,
        save_steps: config.run.save_steps,
        save_total_limit: config.run.save_total_limit,
        seed,
        run_name: config.run_name(),
        agent: AgentSettings::new(&config.model.name, &config.rollout.episode, &config.env.wiki).trained_in(&config.env),
        progress,
    };
    let run_loop = start.into_loop(learner, at, plan)?;

    let detector = Detector::parse(&config.routing.detector)?;
    let (runner, sampling, sampling_after_tool) = (env.runner(sandbox), env.sampling(), env.sampling_after_tool());
    let remote = match config.rollout.sampler.as_str() {
        "local" => None,
        s if s.starts_with("openai:") => {
            if sampling_after_tool.is_some() {
                return Err(TrainError::Config(format!(
                    "rollout.temperature_after_tool is set, but rollout.sampler `{s}` samples every reply alike: leave it unset or sample locally"
                )));
            }
            let mut c = OpenAiPolicyConfig::parse(s)?;
            c.temperature = sampling.temperature;
            c.max_tokens = sampling.max_tokens;
            c.stop = sampling.stop.clone();
            c.exact_tokens = config.rollout.sampler_exact_tokens;
            c.top_p = sampling.top_p;
            c.top_k = sampling.top_k;
            Some(c)
        }
        other => return Err(TrainError::Config(format!("rollout.sampler `{other}`: expected local or openai:MODEL@BASE_URL"))),
    };

    let headline = format!(
        "training {} on the {} environment ({} questions of split {}, {} x {} rollouts per step, {} steps) into {}",
        run_loop.learner.policy.base_name,
        env.package.name,
        questions.len(),
        env.package.splits.train,
        config.rollout.batch_size,
        config.rollout.num_rollouts,
        config.run.max_steps,
        run_loop.run.path.display()
    );
    // The questions' records: an earlier run's groups (`rollout.draw_records`), then this run's own (a
    // resumed run's, its lines past the saved step already dropped).
    let mut records = QuestionRecords::default();
    for path in [std::path::PathBuf::from(&config.rollout.draw_records), run_loop.run.path.join(crate::run_dir::GROUPS)] {
        if !path.as_os_str().is_empty() {
            let read = QuestionRecords::read(&path)?;
            records.merge(read);
        }
    }
    let mut step = TrainStep {
        config: &config,
        records,
        order: DataOrder::new(questions.len(), seed),
        questions,
        eval_questions,
        dev_slice,
        fresh,
        detector,
        runner,
        sampling,
        sampling_after_tool,
        // Loads each step's adapter on the servers; unloads them when the run ends, fails or is dropped.
        publisher: remote.clone().map(AdapterPublisher::new).transpose()?,
        remote,
        transcripts: Vec::new(),
        last_samples: Vec::new(),
        steps_run: 0,
        steps_updated: 0,
    };
    let finished = run_loop.run(&headline, &mut step).await?;
    if let Some(p) = &mut step.publisher {
        p.unload_all().await;
    }
    report_collapse(&step.last_samples);
    if step.steps_run > 0 && step.steps_updated < step.steps_run {
        tracing::warn!("{} of {} steps updated nothing: every group of theirs had equal rewards", step.steps_run - step.steps_updated, step.steps_run);
    }
    // Whether the run trained anything is the whole run's question: a resumed run's earlier steps count.
    let logged = StepMetrics::read(&finished.run.path.join(crate::run_dir::METRICS))?;
    Ok(TrainSummary {
        run_dir: finished.run.path,
        steps: config.run.max_steps,
        last_checkpoint: finished.last_checkpoint,
        steps_run: step.steps_run,
        run_steps: logged.len(),
        run_steps_updated: logged.iter().filter(|m| m.optimizer_steps > 0).count(),
    })
}

/// One RL step: the next questions of the seeded order played `num_rollouts` times each (with dynamic
/// sampling, round after round), the update, the held-out slice on its cadence; then, after the metrics
/// line, sample transcripts and the routing evaluation on theirs.
struct TrainStep<'a> {
    config: &'a TrainConfig,
    /// Each question's groups so far, which `rollout.draw = "unsettled"` reads.
    records: QuestionRecords,
    questions: Vec<Question>,
    order: DataOrder,
    /// The questions of the routing evaluation (`routing.eval_routing_steps`).
    eval_questions: Vec<Question>,
    /// The held-out slice (`run.eval_steps`; empty when off).
    dev_slice: Vec<Question>,
    /// Whether the run starts from its initial adapters (then the slice is evaluated before step 1).
    fresh: bool,
    detector: Detector,
    runner: EpisodeRunner,
    /// How replies are sampled: the environment's (`Environment::sampling`).
    sampling: SamplingParams,
    /// How replies after a tool's output are sampled where they differ (`rollout.temperature_after_tool`).
    sampling_after_tool: Option<SamplingParams>,
    /// The servers that sample, when `rollout.sampler` names them.
    remote: Option<OpenAiPolicyConfig>,
    publisher: Option<AdapterPublisher>,
    /// The step's episodes to write to `transcripts.jsonl` (on `run.logging_steps`) after its metrics line.
    transcripts: Vec<Episode>,
    /// The last step's samples (question id, replies), for the collapse check at the end.
    last_samples: Vec<(String, String)>,
    /// Steps this invocation ran, and of those the ones that took an optimizer step.
    steps_run: usize,
    steps_updated: usize,
}

impl TrainStep<'_> {
    /// The question at the next position of the seeded order, passing over settled ones under
    /// `rollout.draw = "unsettled"` (counted in `passed_over`). An error when every question is settled
    /// and `settled_share` is 0: nothing could be drawn.
    fn next_question(&mut self, questions_seen: &mut usize, passed_over: &mut usize) -> Result<Question, TrainError> {
        let r = &self.config.rollout;
        let unsettled = r.draw == DrawRule::Unsettled;
        if unsettled && r.settled_share == 0.0 && self.questions.iter().all(|q| self.records.settled(&q.id, r.settled_after)) {
            return Err(TrainError::Run(format!(
                "rollout.draw = \"unsettled\": every one of the {} questions is settled (its last {} groups all right or all wrong) and rollout.settled_share is 0: nothing left to draw",
                self.questions.len(),
                r.settled_after
            )));
        }
        // Ends: an unsettled question comes within two epochs (each a permutation of all of them), and a
        // settled one is kept for a share of the positions above 0.
        loop {
            let position = *questions_seen;
            *questions_seen += 1;
            let q = &self.questions[self.order.at(position)];
            if unsettled && self.records.settled(&q.id, r.settled_after) && !keeps_settled(self.config.run.seed, position, r.settled_share) {
                *passed_over += 1;
                continue;
            }
            return Ok(q.clone());
        }
    }
}

impl RunStep for TrainStep<'_> {
    type Metrics = StepMetrics;

    async fn begin(&mut self, learner: &mut Learner, run: &RunDir) -> Result<(), TrainError> {
        if !self.dev_slice.is_empty() && self.fresh {
            let activations = self.config.run.eval_activations;
            let dev = dev_eval(&mut learner.policy, &self.runner, &self.dev_slice, &self.sampling, activations).await?.line(0);
            run.append(DEV_EVAL, &dev)?;
            tracing::info!("held-out slice before training: {}", serde_json::to_value(&dev).expect("held-out lines serialise"));
        }
        Ok(())
    }

    async fn step(&mut self, step: usize, learner: &mut Learner, questions_seen: &mut usize, run: &RunDir) -> Result<StepMetrics, TrainError> {
        let config = self.config;
        let (seed, group) = (config.run.seed, config.rollout.num_rollouts);
        let step_started = Instant::now();
        // The phases are named in the debug log (`AGENTRT_LOG=debug`): where a kill landed, and what the
        // kill test aims at.
        tracing::debug!("step {step}: sampling");
        let mut drawn = Drawn::new(self.remote.is_none());
        // The servers sample with the adapters as they are now (after step - 1 updates).
        let served = match (&self.remote, &mut self.publisher) {
            (Some(c), Some(p)) => Some(OpenAiPolicyConfig { model: p.publish(&learner.policy, &run.path, step - 1).await?, ..c.clone() }),
            _ => None,
        };
        let batch_size = config.rollout.batch_size;
        let accumulation = config.algorithm.gradient_accumulation_steps;
        let dynamic = config.algorithm.dynamic_sampling;
        for micro in 0..accumulation {
            // Dynamic sampling draws the groups still missing, round after round, until the batch is full
            // or the cap is reached; without it one round of batch_size groups.
            let (mut kept, mut drawn_here, mut round) = (0, 0, 0);
            let cap = config.algorithm.max_draws * batch_size;
            loop {
                let want = if dynamic { (batch_size - kept).min(cap - drawn_here) } else { batch_size };
                let mut batch: Vec<Question> = Vec::with_capacity(want * group);
                while batch.len() < want * group {
                    let q = self.next_question(questions_seen, &mut drawn.passed_over)?;
                    batch.extend(std::iter::repeat_n(q, group));
                }
                drawn_here += want;
                let seed = sample_seed(seed, step, micro + round * accumulation);
                kept += drawn
                    .play(&self.runner, (&self.sampling, self.sampling_after_tool.as_ref()), learner, served.as_ref(), &batch, seed, &self.detector, config)
                    .await?;
                round += 1;
                if !dynamic || kept == batch_size || drawn_here >= cap {
                    break;
                }
            }
        }

        // Every group's outcome, in the questions' records and in groups.jsonl (a resume reads it back).
        self.records.add(&drawn.outcomes);
        run.append(crate::run_dir::GROUPS, &StepGroups { step, groups: std::mem::take(&mut drawn.outcomes) })?;

        // The update: the kept groups in `mini_batches` parts, each one optimizer step, `update_epochs` times.
        tracing::debug!("step {step}: update");
        let started = Instant::now();
        let mut update = UpdateStats::default();
        let mut optimizer_s = 0.0;
        update.logprob_gap.add(learner.measure_gap(&drawn.unread)?);
        let parts = mini_batches(&drawn.groups, config.algorithm.mini_batches);
        let mut norms = Vec::new();
        for _ in 0..config.algorithm.update_epochs {
            for part in &parts {
                let samples: Vec<Sample> = part.concat();
                let scale = match config.algorithm.loss_aggregation {
                    LossAggregation::Token => LossScale::PerToken { tokens: model_tokens(&samples).max(1) },
                    // Without dynamic sampling (and one part) the step's loss is averaged over every sample
                    // drawn, all-equal groups included, as it always was; otherwise over those trained.
                    LossAggregation::Sample if !dynamic && parts.len() == 1 => LossScale::PerSample { samples: batch_size * group * accumulation },
                    LossAggregation::Sample => LossScale::PerSample { samples: samples.len().max(1) },
                };
                let s = learner.accumulate(&samples, scale)?;
                update.seconds.add(s.seconds);
                update.rows += s.rows;
                update.tokens += s.tokens;
                update.loss += s.loss;
                update.kl += s.kl * s.model_tokens as f64;
                update.model_tokens += s.model_tokens;
                update.samples += s.samples;
                update.clipped_tokens += s.clipped_tokens;
                update.logprob_gap.add(s.logprob_gap);
                let clock = Instant::now();
                norms.extend(learner.step()?);
                optimizer_s += clock.elapsed().as_secs_f64();
            }
        }
        if parts.is_empty() {
            // Nothing to train on: still one (empty) step, which applies nothing.
            norms.extend(learner.step()?);
        }
        if update.model_tokens > 0 {
            update.kl /= update.model_tokens as f64;
        }
        let update = Update { stats: update, grad_norms: norms, seconds: started.elapsed().as_secs_f64(), optimizer_s };

        self.last_samples = drawn.episodes.iter().map(|e| (e.question.id.clone(), agentrt_eval::sample_text(e))).collect();
        let mut line = drawn.metrics(step, *questions_seen, &update, config, step_started.elapsed().as_secs_f64())?;
        self.steps_run += 1;
        if line.optimizer_steps > 0 {
            self.steps_updated += 1;
        } else {
            tracing::warn!("step {step}: {}", no_update(&line, config));
        }
        if !self.dev_slice.is_empty() && (step.is_multiple_of(config.run.eval_steps) || step == config.run.max_steps) {
            let dev = dev_eval(&mut learner.policy, &self.runner, &self.dev_slice, &self.sampling, config.run.eval_activations).await?;
            run.append(DEV_EVAL, &dev.line(step))?;
            line.dev_accuracy = Some(dev.metrics.accuracy.value);
            line.dev_answer_f1 = Some(dev.metrics.answer_f1.value);
            line.dev_tool_calls = Some(dev.metrics.tool_calls.value);
            line.dev_questions = Some(dev.questions);
        }
        self.transcripts = if step.is_multiple_of(config.run.logging_steps) { drawn.episodes.into_iter().take(group).collect() } else { Vec::new() };
        Ok(line)
    }

    async fn after_metrics(&mut self, step: usize, learner: &mut Learner, run: &RunDir) -> Result<(), TrainError> {
        for e in std::mem::take(&mut self.transcripts) {
            run.append(TRANSCRIPTS, &TranscriptLine { step, episode: &e })?;
        }
        let config = self.config;
        if config.routing.eval_routing_steps > 0 && step.is_multiple_of(config.routing.eval_routing_steps) {
            let r = routing_eval(&mut learner.policy, &self.runner, &self.eval_questions, &self.detector, &self.sampling, step).await?;
            run.append(ROUTING_EVAL, &r)?;
        }
        Ok(())
    }

    fn status(&self, line: &StepMetrics) -> String {
        format!("reward {:.3} acc {:.3}", line.reward_mean, line.accuracy)
    }
}

/// A line of `transcripts.jsonl`: a sample episode of a step.
#[derive(Serialize)]
struct TranscriptLine<'a> {
    step: usize,
    episode: &'a Episode,
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.collect();
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The end-of-run collapse check on the last step's samples: distinct samples, similarity, the flag,
/// and a few samples to look at (high reward with low diversity is template collapse).
fn report_collapse(samples: &[(String, String)]) {
    if samples.is_empty() {
        return;
    }
    let d = agentrt_eval::Diversity::of(samples.iter().map(|(q, s)| (q.as_str(), s.clone())), Default::default());
    tracing::info!(
        "last step's samples: {}/{} distinct, mean pairwise Jaccard {:.3}{}; degenerate: {}",
        d.unique_samples.successes,
        d.unique_samples.total,
        d.mean_jaccard,
        d.mean_jaccard_within_question.map(|j| format!(" ({j:.3} within a question)")).unwrap_or_default(),
        if d.degenerate { "YES (template collapse: look at the samples)" } else { "no" }
    );
    for (q, s) in agentrt_eval::spread(samples, 3) {
        tracing::info!("  [{q}] {}", agentrt_eval::preview(s, 3));
    }
}

/// What a step drew and played: every episode (kept or dropped), the kept groups' samples, and the
/// counts dynamic sampling reports.
struct Drawn {
    episodes: Vec<Episode>,
    parts: Vec<RewardParts>,
    /// The samples of each group kept for the update (its rewards differ, or REINFORCE keeps it).
    groups: Vec<Vec<Sample>>,
    /// Samples of dropped groups whose sampled log-probs came from a server: the off-policy gap is
    /// measured on them too.
    unread: Vec<Sample>,
    groups_drawn: usize,
    groups_kept: usize,
    groups_equal: usize,
    groups_dropped: usize,
    rounds: usize,
    routed: usize,
    times: agentrt_rollout::PhaseTimes,
    /// What local sampling read and reused (a server's sampling is not counted: its engine knows).
    tokens: Option<agentrt_policy::TokenCounts>,
    /// Over the model tokens of every episode drawn whose sampled log-probs are known: the sum of their
    /// negative log-probs and how many, in the first reply and in the replies after a tool's output
    /// (`sampled_token_nll_first_reply`, `_after_tool`; together `sampled_token_nll`).
    sampled_nll: [(f64, usize); 2],
    /// Each group drawn, with how many of its rollouts were right (`groups.jsonl`).
    outcomes: Vec<GroupOutcome>,
    /// Positions of the order passed over as settled (`rollout.draw = "unsettled"`).
    passed_over: usize,
}

/// The mean negative log-prob over two (sum, tokens) tallies; `None` over no token.
fn mean_nll(a: (f64, usize), b: (f64, usize)) -> Option<f64> {
    let tokens = a.1 + b.1;
    (tokens > 0).then(|| (a.0 + b.0) / tokens as f64)
}

impl Drawn {
    fn new(local: bool) -> Drawn {
        Drawn {
            episodes: vec![],
            parts: vec![],
            groups: vec![],
            unread: vec![],
            groups_drawn: 0,
            groups_kept: 0,
            groups_equal: 0,
            groups_dropped: 0,
            rounds: 0,
            routed: 0,
            times: Default::default(),
            tokens: local.then(Default::default),
            sampled_nll: [(0.0, 0); 2],
            outcomes: vec![],
            passed_over: 0,
        }
    }

    /// Plays `batch` (consecutive groups of `rollout.num_rollouts`), scores it, and keeps the groups that
    /// carry a signal; returns how many it kept.
    #[allow(clippy::too_many_arguments)]
    async fn play(
        &mut self,
        runner: &EpisodeRunner,
        (sampling, after_tool): (&SamplingParams, Option<&SamplingParams>),
        learner: &Learner,
        served: Option<&OpenAiPolicyConfig>,
        batch: &[Question],
        seed: u64,
        detector: &Detector,
        config: &TrainConfig,
    ) -> Result<usize, TrainError> {
        let group = config.rollout.num_rollouts;
        let local = LocalPolicy::new(&learner.policy, sampling.clone(), seed).with_after_tool(after_tool.cloned());
        let (mut rollouts, logprobs_known) = match served {
            None => {
                let r = runner.run(&local, batch).await?;
                if let (Some(t), Some(c)) = (self.tokens.as_mut(), local.token_counts()) {
                    t.add(c);
                }
                (r, true)
            }
            Some(c) => {
                let sampler = ExternalSampler::new(OpenAiPolicy::new(c.clone())?, local, &learner.policy);
                let r = runner.run(&sampler as &dyn TurnPolicy, batch).await?;
                (r, sampler.retokenised.load(std::sync::atomic::Ordering::Relaxed) == 0)
            }
        };
        self.rounds += 1;
        self.times.generate_s += rollouts.times.generate_s;
        self.times.tools_s += rollouts.times.tools_s;
        self.times.judge_s += rollouts.times.judge_s;
        let parts: Vec<RewardParts> = rollouts.episodes.iter().map(|e| RewardParts::of(e, &config.algorithm, config.rollout.episode.max_new_tokens)).collect();
        for (e, p) in rollouts.episodes.iter_mut().zip(&parts) {
            e.reward = p.total();
        }
        self.parts.extend(parts);
        let rewards: Vec<f32> = rollouts.episodes.iter().map(|e| e.reward).collect();
        let a = &config.algorithm;
        // A group whose rewards are all equal is dropped: it carries no signal, and its KL term alone is
        // not worth a forward and backward pass (165 s of a 230 s step measured on the defaults when every
        // group was all-equal).
        let (adv, skip) = advantages(&rewards, group, a.advantage, a.baseline, a.scale_by_std);
        let mut kept = 0;
        for ((episodes, adv), skip) in rollouts.episodes.chunks(group).zip(adv.chunks(group)).zip(skip.chunks(group)) {
            let mut samples = Vec::with_capacity(group);
            for (e, &advantage) in episodes.iter().zip(adv) {
                let t = e.conversation.tokens.as_ref().ok_or_else(|| TrainError::Run("an episode has no token trace".into()))?;
                let routed = detector.flags(e);
                self.routed += routed as usize;
                let sampled_logprobs = if logprobs_known { t.sampled_logprobs.clone() } else { Vec::new() };
                // A run of model tokens is a reply; every reply after the first follows a tool's output.
                let mut replies_begun = 0;
                for (i, (lp, &model)) in sampled_logprobs.iter().zip(&t.model_mask).enumerate() {
                    if model && (i == 0 || !t.model_mask[i - 1]) {
                        replies_begun += 1;
                    }
                    if model {
                        let kind = &mut self.sampled_nll[usize::from(replies_begun > 1)];
                        kind.0 -= *lp as f64;
                        kind.1 += 1;
                    }
                }
                samples.push(Sample { ids: t.ids.clone(), model_mask: t.model_mask.clone(), advantage, routed, sampled_logprobs });
            }
            self.groups_drawn += 1;
            let correct = episodes.iter().filter(|e| e.outcome == agentrt_rollout::EpisodeOutcome::Correct).count();
            self.outcomes.push(GroupOutcome { id: episodes[0].question.id.clone(), correct, of: episodes.len() });
            if skip[0] {
                // All equal: no gradient either way; dynamic sampling also drops it and draws another.
                self.groups_equal += 1;
                self.groups_dropped += usize::from(config.algorithm.dynamic_sampling);
                // With servers sampling, the off-policy gap is measured on every sample, the dropped ones
                // too: a step whose groups were all dropped would otherwise say nothing of it. Sampling
                // locally the gap is float rounding, not worth that pass.
                if served.is_some() && logprobs_known {
                    self.unread.extend(samples);
                }
            } else {
                self.groups_kept += 1;
                kept += 1;
                self.groups.push(samples);
            }
        }
        self.episodes.extend(rollouts.episodes);
        Ok(kept)
    }
}

/// Why a step took no optimizer step, for its warning: every group it drew had equal rewards.
fn no_update(line: &StepMetrics, config: &TrainConfig) -> String {
    let a = &config.algorithm;
    format!(
        "no update: all {} groups had equal rewards (reward mean {:.3}), which carry no signal for {}; the adapters are unchanged",
        line.groups_drawn,
        line.reward_mean,
        a.advantage.name()
    )
}

/// `groups` cut into at most `n` consecutive parts of whole groups, as even as they go (none when there
/// are no groups).
fn mini_batches(groups: &[Vec<Sample>], n: usize) -> Vec<&[Vec<Sample>]> {
    if groups.is_empty() {
        return vec![];
    }
    let n = n.clamp(1, groups.len());
    let (base, extra) = (groups.len() / n, groups.len() % n);
    let mut out = Vec::with_capacity(n);
    let mut at = 0;
    for i in 0..n {
        let len = base + usize::from(i < extra);
        out.push(&groups[at..at + len]);
        at += len;
    }
    out
}

/// The held-out slice played greedily with the adapters as they are.
struct DevEval {
    /// Questions in the slice.
    questions: usize,
    /// `agentrt eval`'s metrics of its episodes: accuracy, answer F1 and tool calls also go on the step's
    /// metrics line.
    metrics: Metrics,
    /// How long playing and measuring it took.
    seconds: f64,
}

impl DevEval {
    /// Its `dev_eval.jsonl` line at `step` (0: before training).
    fn line(&self, step: usize) -> HeldOutEval {
        let m = &self.metrics;
        HeldOutEval {
            step,
            questions: self.questions,
            accuracy: m.accuracy.value,
            accuracy_low: m.accuracy.ci95.0,
            accuracy_high: m.accuracy.ci95.1,
            answer_f1: m.answer_f1.value,
            tool_calls: m.tool_calls.value,
            search_hit_rate: m.search_hit_rate.value,
            seconds: self.seconds,
        }
    }
}

/// Greedy episodes on the held-out slice with the adapters as they are, decoded with `activations`
/// (`run.eval_activations`).
async fn dev_eval(
    policy: &mut Policy,
    runner: &EpisodeRunner,
    questions: &[Question],
    sampling: &SamplingParams,
    activations: agentrt_policy::DecodeActivations,
) -> Result<DevEval, TrainError> {
    let sampler = policy.decoder.decode_activations;
    policy.decoder.set_decode_activations(activations);
    let played = dev_eval_as_set(policy, runner, questions, sampling).await;
    policy.decoder.decode_activations = sampler;
    played
}

/// [`dev_eval`] once the policy decodes as the slice asks.
async fn dev_eval_as_set(policy: &Policy, runner: &EpisodeRunner, questions: &[Question], sampling: &SamplingParams) -> Result<DevEval, TrainError> {
    let started = Instant::now();
    let local = LocalPolicy::new(policy, SamplingParams { temperature: 0.0, ..sampling.clone() }, 0);
    let batch = runner.run(&local, questions).await?;
    let metrics = Metrics::from_episodes(&batch.episodes);
    Ok(DevEval { questions: questions.len(), metrics, seconds: started.elapsed().as_secs_f64() })
}

/// What a step's update did: the learner's sums, each optimizer step's gradient norm, and its seconds.
struct Update {
    stats: UpdateStats,
    grad_norms: Vec<f64>,
    seconds: f64,
    /// Of `seconds`: the optimizer steps.
    optimizer_s: f64,
}

impl Drawn {
    /// The step's metrics line (without the held-out slice's, which the caller adds on the steps that
    /// evaluate it): what was drawn and played, what `update` did, and the step's seconds so far.
    fn metrics(&self, step: usize, questions_seen: usize, update: &Update, config: &TrainConfig, step_s: f64) -> Result<StepMetrics, TrainError> {
        let (episodes, parts, u) = (&self.episodes, &self.parts, &update.stats);
        // The episode metrics are `agentrt eval`'s, by the same definitions; the rest is training's own.
        let m = Metrics::from_episodes(episodes);
        let rm = m.mean_reward;
        let diversity = m.diversity.as_ref();
        let norms = &update.grad_norms;
        let mut line = StepMetrics {
            step,
            questions_seen,
            episodes: episodes.len(),
            reward_mean: rm,
            reward_std: mean(episodes.iter().map(|e| (e.reward as f64 - rm).powi(2))).sqrt(),
            reward_judge: mean(parts.iter().map(|p| p.judge as f64)),
            reward_program: mean(parts.iter().map(|p| p.program as f64)),
            reward_f1: mean(parts.iter().map(|p| p.f1 as f64)),
            reward_format: mean(parts.iter().map(|p| p.format as f64)),
            reward_overlong: mean(parts.iter().map(|p| p.overlong as f64)),
            reward_tests: None,
            reward_perfect: None,
            grader_parts: Default::default(),
            accuracy: m.accuracy.value,
            answer_f1: m.answer_f1.value,
            tool_calls: m.tool_calls.value,
            turns: m.avg_turns,
            model_tokens: m.avg_model_tokens,
            program_replies: m.program_replies.value,
            runnable_program_replies: m.runnable_program_replies.value,
            programs_ok: m.runnable_programs.map_or(0.0, |r| r.value),
            search_hit_rate: m.search_hit_rate.value,
            unique_samples: diversity.map_or(0.0, |d| d.unique_samples.value),
            mean_jaccard: diversity.map_or(0.0, |d| d.mean_jaccard),
            mean_jaccard_within_question: diversity.and_then(|d| d.mean_jaccard_within_question),
            degenerate: diversity.is_some_and(|d| d.degenerate),
            routed_fraction: self.routed as f64 / episodes.len().max(1) as f64,
            groups_drawn: self.groups_drawn,
            groups_kept: self.groups_kept,
            groups_equal: self.groups_equal,
            groups_dropped: self.groups_dropped,
            draw_rounds: self.rounds,
            loss: u.loss,
            kl: u.kl,
            grad_norm: (!norms.is_empty()).then(|| norms.iter().sum::<f64>() / norms.len() as f64),
            trained_samples: u.samples,
            optimizer_steps: norms.len(),
            clip_fraction: u.clipped_tokens as f64 / u.model_tokens.max(1) as f64,
            logprob_gap_mean: u.logprob_gap.means().map(|m| m.0),
            logprob_gap_abs_mean: u.logprob_gap.means().map(|m| m.1),
            logprob_gap_tokens: u.logprob_gap.tokens,
            sampled_token_nll: mean_nll(self.sampled_nll[0], self.sampled_nll[1]),
            sampled_token_nll_first_reply: mean_nll(self.sampled_nll[0], (0.0, 0)),
            sampled_token_nll_after_tool: mean_nll(self.sampled_nll[1], (0.0, 0)),
            questions_passed_over: self.passed_over,
            read_more: m.read_more.map_or(0.0, |r| r.value),
            lr: config.algorithm.lr,
            beta: config.algorithm.beta,
            tokens_prefilled: self.tokens.map(|t| t.prefilled),
            tokens_reused: self.tokens.map(|t| t.reused),
            tokens_sampled: self.tokens.map(|t| t.sampled),
            sampler_steps: self.tokens.map(|t| t.steps),
            update_rows: u.rows,
            update_tokens: u.tokens,
            seconds: StepSeconds {
                generate: self.times.generate_s,
                generate_forward: self.tokens.map_or(0.0, |t| t.forward_us as f64 / 1e6),
                tools: self.times.tools_s,
                judge: self.times.judge_s,
                update: update.seconds,
                update_reference: u.seconds.reference,
                update_forward: u.seconds.forward,
                update_backward: u.seconds.backward,
                update_optimizer: update.optimizer_s,
                step: step_s,
            },
            dev_accuracy: None,
            dev_answer_f1: None,
            dev_tool_calls: None,
            dev_questions: None,
        };
        // The grader's own parts, each the mean over the step's episodes (0 for one without it).
        let mut names: Vec<&str> = episodes.iter().flat_map(|e| e.reward_components.iter().map(|(n, _)| n.as_str())).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let part = mean(episodes.iter().map(|e| e.reward_components.iter().find(|(n, _)| n == name).map_or(0.0, |(_, v)| *v as f64)));
            match name {
                // The judge's reward is its grade's one part: `reward_judge` already.
                "judge" => {}
                "tests" => line.reward_tests = Some(part),
                "perfect" => line.reward_perfect = Some(part),
                other => {
                    let key = format!("reward_{other}");
                    if serde_json::to_value(&line).expect("a step's metrics serialise").get(&key).is_some() {
                        return Err(TrainError::Run(format!(
                            "the grader gave a reward part `{other}`, whose metric `{key}` is training's own: rename the part"
                        )));
                    }
                    line.grader_parts.insert(key, part);
                }
            }
        }
        Ok(line)
    }
}

/// Evaluates with both adapters, retain only and forget only (greedy, one episode per question).
async fn routing_eval(
    policy: &mut Policy,
    runner: &EpisodeRunner,
    questions: &[Question],
    detector: &Detector,
    sampling: &SamplingParams,
    step: usize,
) -> Result<RoutingEval, TrainError> {
    let params = SamplingParams { temperature: 0.0, ..sampling.clone() };
    let mut mode = async |(retain, forget): (f64, f64)| -> Result<RoutingModeEval, TrainError> {
        policy.set_adapter_scales(retain, forget);
        let local = LocalPolicy::new(policy, params.clone(), 0);
        let result = runner.run(&local, questions).await;
        policy.set_adapter_scales(1.0, 1.0);
        let batch = result?;
        let m = Metrics::from_episodes(&batch.episodes);
        let flagged = batch.episodes.iter().filter(|e| detector.flags(e)).count();
        Ok(RoutingModeEval { accuracy: m.accuracy.value, reward_mean: m.mean_reward, flagged: agentrt_eval::Rate::new(flagged, batch.episodes.len()).value })
    };
    Ok(RoutingEval { step, both: mode((1.0, 1.0)).await?, retain_only: mode((1.0, 0.0)).await?, forget_only: mode((0.0, 1.0)).await? })
}
