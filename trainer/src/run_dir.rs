//! A run directory: the resolved config, metrics, transcripts, checkpoints and the resume state, all
//! written so that a kill at any moment leaves every file readable (whole-file writes go through a
//! temporary file and a rename; a checkpoint or a resume state is assembled in a hidden directory and
//! renamed into place).
//!
//! Two kinds of saved state share one layout (adapters, `agent.json`, optimizer, `trainer_state.json`):
//! `checkpoint-N`, on the run's `save_steps` cadence and kept up to `save_total_limit`, for people; and
//! `resume-N`, written after every step that is not a checkpoint's and replacing the one before, so that a
//! kill loses at most the step in flight. A resume starts from the newest of either.

use crate::error::{io_err, TrainError};
use crate::metrics::StepMetrics;
use crate::run_config::RunConfig;
use agentrt_assets::FileError;
use agentrt_environments::AgentSettings;
use agentrt_policy::{AdamW, Policy};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where training resumes from: written last into a checkpoint, so its presence marks a complete one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Optimizer steps done.
    pub step: usize,
    /// Questions consumed from the data order.
    pub questions_seen: usize,
    /// The run's seed (`run.seed`), recorded with the checkpoint.
    pub seed: u64,
    /// The run's name, recorded with the checkpoint.
    pub run_name: String,
}

/// The metrics log: one JSON line per step (what `plot` and `sweep` read).
pub const METRICS: &str = "metrics.jsonl";
/// Sample episodes, one JSON line each, written every `run.logging_steps` steps.
pub const TRANSCRIPTS: &str = "transcripts.jsonl";
/// The three-mode routing evaluations, one JSON line each (every `routing.eval_routing_steps` steps).
pub const ROUTING_EVAL: &str = "routing_eval.jsonl";
/// Each step's groups and how many of their rollouts were right, one line a step ([`crate::draw`]).
pub const GROUPS: &str = "groups.jsonl";
/// The greedy evaluations on the held-out slice (`run.eval_steps`), one JSON object a line, step 0 first.
pub const DEV_EVAL: &str = "dev_eval.jsonl";
/// The training curves `agentrt plot` draws into the run directory.
pub const CURVES: &str = "curves.png";
/// The run's resolved config, which `--resume` reads back.
pub const CONFIG: &str = "config.toml";
/// What the run's episodes are sent and how they are played, as sent: the rendered system prompt (plug-in
/// tools listed), the demonstration's turns, the episode spec, the reply format, stop strings and grader.
pub const ENVIRONMENT: &str = "environment.json";
const STATE: &str = "trainer_state.json";
/// The logs a run appends to, one JSON line a record, each record's `step` saying which step wrote it.
const LOGS: [&str; 5] = [METRICS, TRANSCRIPTS, ROUTING_EVAL, DEV_EVAL, GROUPS];
/// The name of a checkpoint's directory before its step (`checkpoint-N`).
const CHECKPOINT_PREFIX: &str = "checkpoint-";
/// The name of a resume state's directory before its step (`resume-N`).
const RESUME_PREFIX: &str = "resume-";
const OPTIMIZER: &str = "optimizer.safetensors";
const ADAPTERS: &str = "adapters";

/// An open run directory.
pub struct RunDir {
    /// The run directory itself.
    pub path: PathBuf,
}

/// Writes `bytes` to `path` atomically (temporary file in the same directory, fsync, rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    agentrt_assets::write_atomic(path, bytes).map_err(io_err(path))
}

impl RunDir {
    /// Creates a new run directory for `config` and saves it there. A directory that holds a run which
    /// finished a step is an error (resume it or pick another name); one whose run never finished a step
    /// (refused by a check, or stopped before its first step ended) holds nothing worth keeping and is
    /// started anew, so the corrected command simply runs.
    pub fn create<C: RunConfig>(path: &Path, config: &C) -> Result<RunDir, TrainError> {
        if path.join(CONFIG).exists() {
            if has_progress(path)? {
                return Err(TrainError::Run(format!(
                    "{} already holds a run: continue it with `--resume`, or choose another --output-dir or --run-name",
                    path.display()
                )));
            }
            tracing::info!("{} held a run that never finished a step: starting it anew", path.display());
            clear_unstarted(path)?;
        }
        std::fs::create_dir_all(path).map_err(io_err(path))?;
        let dir = RunDir { path: path.to_path_buf() };
        write_atomic(&path.join(CONFIG), config.to_toml().as_bytes())?;
        Ok(dir)
    }

    /// Opens an existing run directory and its saved config.
    pub fn open<C: RunConfig>(path: &Path) -> Result<(RunDir, C), TrainError> {
        let config = C::read(&path.join(CONFIG)).map_err(|e| TrainError::Run(format!("{}: not {} ({e})", path.display(), C::RUN_DIRECTORY)))?;
        Ok((RunDir { path: path.to_path_buf() }, config))
    }

    /// Appends one line to `file` as JSON (a whole line per write; a reader drops a torn last line), and the
    /// same to the run's TensorBoard event file: a metrics, held-out or routing line as scalars at its
    /// `step`, a transcript as text. The line is a typed one ([`StepMetrics`], [`crate::metrics::SftStepMetrics`],
    /// …): serialised through a JSON value, its keys are sorted.
    pub fn append<T: Serialize + ?Sized>(&self, file: &str, line: &T) -> Result<(), TrainError> {
        let value = &serde_json::to_value(line).expect("run log lines serialise");
        let p = self.path.join(file);
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&p).map_err(io_err(&p))?;
        let mut text = serde_json::to_string(value).expect("JSON values serialise");
        text.push('\n');
        f.write_all(text.as_bytes()).map_err(io_err(&p))?;
        f.flush().map_err(io_err(&p))?;
        let step = value["step"].as_i64().unwrap_or(0);
        let events = agentrt_tensorboard::event_file(&self.path);
        let written = match file {
            METRICS => agentrt_tensorboard::append_scalars(&self.path, step, value),
            ROUTING_EVAL => agentrt_tensorboard::append_scalars(&self.path, step, &serde_json::json!({ "routing": value })),
            DEV_EVAL => agentrt_tensorboard::append_scalars(&self.path, step, &serde_json::json!({ "held_out": value })),
            TRANSCRIPTS => agentrt_tensorboard::append_text(&self.path, "transcripts", step, &transcript_markdown(value)),
            _ => Ok(()),
        };
        written.map_err(io_err(&events))
    }

    /// The steps of this `agentrt train` run's `metrics.jsonl`, in order ([`StepMetrics::read`]).
    pub fn step_metrics(&self) -> Result<Vec<StepMetrics>, TrainError> {
        StepMetrics::read(&self.path.join(METRICS))
    }

    /// The steps of this `agentrt sft` run's `metrics.jsonl`, in order.
    pub fn sft_metrics(&self) -> Result<Vec<crate::metrics::SftStepMetrics>, TrainError> {
        crate::metrics::SftStepMetrics::read(&self.path.join(METRICS))
    }

    /// This run's held-out evaluations (`dev_eval.jsonl`), in order; none when it ran none.
    pub fn held_out_evals(&self) -> Result<Vec<crate::metrics::HeldOutEval>, TrainError> {
        crate::metrics::HeldOutEval::read(&self.path.join(DEV_EVAL))
    }

    /// This run's routing evaluations (`routing_eval.jsonl`), in order; none when it ran none.
    pub fn routing_evals(&self) -> Result<Vec<crate::metrics::RoutingEval>, TrainError> {
        crate::metrics::RoutingEval::read(&self.path.join(ROUTING_EVAL))
    }

    /// The lines of a JSON Lines file of this run, untyped (a torn last line from a kill is skipped).
    pub fn read_lines(&self, file: &str) -> Result<Vec<serde_json::Value>, TrainError> {
        read_jsonl(&self.path.join(file))
    }

    /// Drops every log line and the TensorBoard file: a resume with nothing saved starts the run over, and
    /// what it logged before its first saved step (the held-out slice at step 0 among it) is written again.
    pub fn clear_logs(&self) -> Result<(), TrainError> {
        for file in LOGS.into_iter().chain([agentrt_tensorboard::EVENT_FILE]) {
            let p = self.path.join(file);
            if p.exists() {
                std::fs::remove_file(&p).map_err(io_err(&p))?;
            }
        }
        Ok(())
    }

    /// Drops log lines and TensorBoard records of steps after `step` (they belong to work a resume redoes),
    /// atomically.
    pub fn truncate_logs_after(&self, step: usize) -> Result<(), TrainError> {
        for file in LOGS {
            let p = self.path.join(file);
            if !p.exists() {
                continue;
            }
            // The kept lines as they were written: parsed and printed again, a float may come back an ulp off
            // (serde_json's parser is fast, not exact), and a resumed run's rows would differ from a straight one's.
            let kept: String =
                read_jsonl_lines(&p)?.into_iter().filter(|(v, _)| v["step"].as_u64().is_none_or(|s| s as usize <= step)).map(|(_, line)| line + "\n").collect();
            write_atomic(&p, kept.as_bytes())?;
        }
        // The TensorBoard file too: its records of later steps, and a record a kill or a full disk tore, after
        // which TensorBoard would read none of what the resumed run appends.
        let events = agentrt_tensorboard::event_file(&self.path);
        if events.exists() {
            let kept = agentrt_tensorboard::records_through(&events, step as i64).map_err(io_err(&events))?;
            write_atomic(&events, &kept)?;
        }
        Ok(())
    }

    /// Complete checkpoints, oldest first.
    pub fn checkpoints(&self) -> Result<Vec<(usize, PathBuf)>, TrainError> {
        self.complete(CHECKPOINT_PREFIX)
    }

    /// Complete resume states, oldest first (one, unless a kill came between writing a new one and
    /// deleting the one before).
    pub fn resume_states(&self) -> Result<Vec<(usize, PathBuf)>, TrainError> {
        self.complete(RESUME_PREFIX)
    }

    /// What a resume starts from: the newest complete checkpoint or resume state (a checkpoint when both
    /// are of one step), with its step.
    pub fn newest_saved(&self) -> Result<Option<(usize, PathBuf)>, TrainError> {
        let checkpoint = self.checkpoints()?.pop();
        let resume = self.resume_states()?.pop();
        Ok(match (checkpoint, resume) {
            (Some(c), Some(r)) if r.0 > c.0 => Some(r),
            (Some(c), _) => Some(c),
            (None, r) => r,
        })
    }

    /// The complete saved states whose directory is `PREFIXN` (a `trainer_state.json` in it: written
    /// last, it marks a complete one), oldest first.
    fn complete(&self, prefix: &str) -> Result<Vec<(usize, PathBuf)>, TrainError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.path).map_err(io_err(&self.path))? {
            let entry = entry.map_err(io_err(&self.path))?;
            let name = entry.file_name().to_string_lossy().to_string();
            if let Some(n) = name.strip_prefix(prefix).and_then(|n| n.parse::<usize>().ok()) {
                if entry.path().join(STATE).is_file() {
                    out.push((n, entry.path()));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Saves adapters (PEFT format), the settings they are played with (`agent.json`), optimizer state and
    /// trainer state as `checkpoint-STEP`, then deletes the oldest beyond `keep` and every resume state it
    /// makes redundant.
    pub fn save_checkpoint(&self, policy: &Policy, agent: &AgentSettings, optimizer: &AdamW, state: &TrainerState, keep: usize) -> Result<PathBuf, TrainError> {
        let path = self.save_state_dir(CHECKPOINT_PREFIX, policy, agent, optimizer, state)?;
        let all = self.checkpoints()?;
        if keep > 0 && all.len() > keep {
            for (_, p) in &all[..all.len() - keep] {
                std::fs::remove_dir_all(p).map_err(io_err(p))?;
            }
        }
        self.remove_resume_states_through(state.step)?;
        Ok(path)
    }

    /// Saves what a resume needs after step `state.step` as `resume-STEP` (the same files as a checkpoint),
    /// then deletes the resume states before it: only once the new one is complete, so a kill at any
    /// instant leaves one to resume from.
    pub fn save_resume_state(&self, policy: &Policy, agent: &AgentSettings, optimizer: &AdamW, state: &TrainerState) -> Result<PathBuf, TrainError> {
        let path = self.save_state_dir(RESUME_PREFIX, policy, agent, optimizer, state)?;
        self.remove_resume_states_through(state.step.saturating_sub(1))?;
        Ok(path)
    }

    fn remove_resume_states_through(&self, step: usize) -> Result<(), TrainError> {
        for (s, p) in self.resume_states()? {
            if s <= step {
                std::fs::remove_dir_all(&p).map_err(io_err(&p))?;
            }
        }
        Ok(())
    }

    /// Writes `PREFIXSTEP` whole: assembled as a hidden `.PREFIXSTEP.partial`, its trainer state last, then
    /// renamed into place.
    fn save_state_dir(&self, prefix: &str, policy: &Policy, agent: &AgentSettings, optimizer: &AdamW, state: &TrainerState) -> Result<PathBuf, TrainError> {
        let final_path = self.path.join(format!("{prefix}{}", state.step));
        let partial = self.path.join(format!(".{prefix}{}.partial", state.step));
        tracing::debug!("step {}: writing {}", state.step, final_path.display());
        if partial.exists() {
            std::fs::remove_dir_all(&partial).map_err(io_err(&partial))?;
        }
        std::fs::create_dir_all(&partial).map_err(io_err(&partial))?;
        policy.save_adapters(&partial.join(ADAPTERS))?;
        agent.write(&partial)?;
        let opt = partial.join(OPTIMIZER);
        optimizer.save_state(&opt).map_err(|e| TrainError::OptimizerState { path: opt.clone(), source: e })?;
        write_atomic(&partial.join(STATE), serde_json::to_string_pretty(state).expect("state serialises").as_bytes())?;
        if final_path.exists() {
            std::fs::remove_dir_all(&final_path).map_err(io_err(&final_path))?;
        }
        std::fs::rename(&partial, &final_path).map_err(io_err(&final_path))?;
        Ok(final_path)
    }

    /// Reads a checkpoint's trainer state.
    pub fn read_state(checkpoint: &Path) -> Result<TrainerState, TrainError> {
        let p = checkpoint.join(STATE);
        let text = std::fs::read_to_string(&p).map_err(io_err(&p))?;
        serde_json::from_str(&text).map_err(|e| TrainError::from(FileError::malformed(p, format!("corrupt trainer state: {e}"))))
    }

    /// The adapters directory of a checkpoint.
    pub fn adapters_of(checkpoint: &Path) -> PathBuf {
        checkpoint.join(ADAPTERS)
    }

    /// The optimizer state file of a checkpoint.
    pub fn optimizer_of(checkpoint: &Path) -> PathBuf {
        checkpoint.join(OPTIMIZER)
    }
}

/// Whether the run in `dir` finished a step: a line in its metrics log or a complete checkpoint. A run
/// without either was refused or stopped before its first step ended: nothing of it is worth resuming.
pub fn has_progress(dir: &Path) -> Result<bool, TrainError> {
    if !dir.is_dir() {
        return Ok(false);
    }
    let run = RunDir { path: dir.to_path_buf() };
    Ok(!run.read_lines(METRICS)?.is_empty() || run.newest_saved()?.is_some())
}

/// Removes what a run that never finished a step wrote (its config, logs, TensorBoard file, partial
/// checkpoints), leaving anything else in the folder alone.
fn clear_unstarted(dir: &Path) -> Result<(), TrainError> {
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name().to_string_lossy().to_string();
        let ours = [CONFIG, ENVIRONMENT].contains(&name.as_str())
            || LOGS.contains(&name.as_str())
            || name == agentrt_tensorboard::EVENT_FILE
            || name == CURVES
            || name == crate::external::SERVED_ADAPTERS
            || ([CHECKPOINT_PREFIX, RESUME_PREFIX].iter().any(|p| name.starts_with(&format!(".{p}"))) && name.ends_with(".partial"));
        if !ours {
            continue;
        }
        let p = entry.path();
        let removed = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
        removed.map_err(io_err(&p))?;
    }
    Ok(())
}

/// A transcript line as TensorBoard's text plugin shows it (markdown): the question, then each reply
/// and observation in code blocks.
fn transcript_markdown(line: &serde_json::Value) -> String {
    let e = &line["episode"];
    let mut text = format!("**{}** (reward {})\n\n", e["question"]["question"].as_str().unwrap_or(""), e["reward"]);
    for turn in e["turns"].as_array().into_iter().flatten() {
        text.push_str(&format!("```\n{}\n```\n", turn["reply"].as_str().unwrap_or("")));
        if let Some(obs) = turn["observation"].as_str() {
            text.push_str(&format!("```\n{obs}\n```\n"));
        }
    }
    text
}

fn read_jsonl(p: &Path) -> Result<Vec<serde_json::Value>, TrainError> {
    Ok(read_jsonl_lines(p)?.into_iter().map(|(v, _)| v).collect())
}

/// The whole lines of a JSON Lines file, each parsed and as written (a torn last line from a kill is
/// skipped; any other line that does not parse is an error naming it).
fn read_jsonl_lines(p: &Path) -> Result<Vec<(serde_json::Value, String)>, TrainError> {
    if !p.exists() {
        return Ok(vec![]);
    }
    let text = std::fs::read_to_string(p).map_err(io_err(p))?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str(line) {
            Ok(v) => out.push((v, line.to_string())),
            // Only the last line can be torn by a kill during its write.
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
            Err(e) => return Err(FileError::malformed(p, format!("line {}: {e}", i + 1)).into()),
        }
    }
    Ok(out)
}

/// The order questions are used in: a seeded permutation per epoch, so position `k` always means the same
/// question for a given seed and a resumed run sees exactly the questions the killed one would have.
pub struct DataOrder {
    n: usize,
    seed: u64,
    epoch: usize,
    permutation: Vec<usize>,
}

impl DataOrder {
    /// The order over `n` questions for `seed`, starting at epoch 0.
    pub fn new(n: usize, seed: u64) -> DataOrder {
        assert!(n > 0, "no questions");
        let mut d = DataOrder { n, seed, epoch: usize::MAX, permutation: vec![] };
        d.load_epoch(0);
        d
    }

    fn load_epoch(&mut self, epoch: usize) {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(self.seed ^ (epoch as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        self.permutation = (0..self.n).collect();
        self.permutation.shuffle(&mut rng);
        self.epoch = epoch;
    }

    /// The question index at `position`.
    pub fn at(&mut self, position: usize) -> usize {
        let epoch = position / self.n;
        if epoch != self.epoch {
            self.load_epoch(epoch);
        }
        self.permutation[position % self.n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_order_is_a_stable_permutation_per_epoch() {
        let mut a = DataOrder::new(10, 1);
        let first: Vec<usize> = (0..10).map(|i| a.at(i)).collect();
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        let second: Vec<usize> = (10..20).map(|i| a.at(i)).collect();
        let mut b = DataOrder::new(10, 1);
        assert_eq!(b.at(13), second[3]);
        assert_eq!(b.at(2), first[2]);
    }

    #[test]
    fn torn_last_line_is_skipped_and_truncation_keeps_earlier_steps() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir { path: dir.path().to_path_buf() };
        for s in 1..=4 {
            run.append(METRICS, &serde_json::json!({"step": s})).unwrap();
        }
        let p = dir.path().join(METRICS);
        let mut text = std::fs::read_to_string(&p).unwrap();
        text.push_str("{\"step\": 5, \"rew");
        std::fs::write(&p, text).unwrap();
        assert_eq!(run.read_lines(METRICS).unwrap().len(), 4);
        run.truncate_logs_after(2).unwrap();
        let steps: Vec<u64> = run.read_lines(METRICS).unwrap().iter().map(|v| v["step"].as_u64().unwrap()).collect();
        assert_eq!(steps, vec![1, 2]);
    }

    /// The kept lines are the bytes written: this float comes back an ulp off when parsed and printed again.
    #[test]
    fn truncation_keeps_the_lines_it_keeps_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir { path: dir.path().to_path_buf() };
        run.append(METRICS, &serde_json::json!({"step": 1, "grad_norm": 0.22258451415058977})).unwrap();
        let written = std::fs::read(dir.path().join(METRICS)).unwrap();
        run.append(METRICS, &serde_json::json!({"step": 2, "grad_norm": 0.5})).unwrap();
        run.truncate_logs_after(1).unwrap();
        assert_eq!(std::fs::read(dir.path().join(METRICS)).unwrap(), written);
    }

    #[test]
    fn truncation_cuts_the_tensorboard_file_back_to_whole_records_of_kept_steps() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir { path: dir.path().to_path_buf() };
        for s in 1..=3 {
            run.append(METRICS, &serde_json::json!({"step": s, "reward_mean": 0.5})).unwrap();
        }
        // A full disk during step 3's record: half of it written.
        let events = agentrt_tensorboard::event_file(dir.path());
        let bytes = std::fs::read(&events).unwrap();
        std::fs::write(&events, &bytes[..bytes.len() - 9]).unwrap();
        assert!(agentrt_tensorboard::read_records(&events).is_err());
        run.truncate_logs_after(1).unwrap();
        run.append(METRICS, &serde_json::json!({"step": 2, "reward_mean": 0.7})).unwrap();
        let steps: Vec<i64> = agentrt_tensorboard::read_records(&events).unwrap().iter().map(|r| r.step).collect();
        assert_eq!(steps, [0, 1, 2], "the version record, then steps 1 and 2, all whole");
    }
}
