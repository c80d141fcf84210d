//! `agentrt sft`: supervised LoRA fine-tuning on conversations, with the RL trainer's parts.
//!
//! The design in three parts:
//! - **what it reads**: [`crate::sft_data`] reads chat conversations and agentrt transcripts, and renders each
//!   with the rollout crate's `TraceBuilder` (one rendering path for rollouts and SFT): the loss covers each
//!   assistant reply's tokens and its end-of-turn token, nothing of the system, user and tool turns or the
//!   template's glue. Conversations over `data.max_seq_tokens` are dropped and counted; a seeded slice is
//!   held back for the validation loss.
//! - **how it learns**: the [`Learner`] of RL with advantage 1 and beta 0, so the loss of a conversation is
//!   `-mean log p` over its model tokens, and a step's loss is the mean of those over its conversations
//!   (every conversation weighs the same, however long: the RL loss's normalisation). The same adapters
//!   (fresh, or `model.init_adapter`), the same routing (a flagged conversation trains only the forget
//!   adapter), clipping and AdamW, with an optional linear warm-up.
//! - **what it records**: the same [`RunDir`]: config.toml, metrics.jsonl (train loss, val loss, tokens, lr,
//!   grad norm per step), `checkpoint-N/` (adapters, optimizer, data position) that `--resume` continues
//!   from exactly, and curves.png ([`crate::plot::plot_run`]).

use crate::error::TrainError;
use crate::learner::{Learner, LearnerConfig, LossScale, Sample, UpdateStats};
use crate::metrics::SftStepMetrics;
use crate::model_section::{model_stem, ModelSection};
use crate::routing::Detector;
use crate::run_config::RunConfig;
use crate::run_dir::{DataOrder, RunDir};
use crate::run_loop::{Plan, RunStart, RunStep};
use crate::sft_data::{read_conversations, tokenize, Example, ReadStats, TranscriptOptions};
use agentrt_environments::AgentSettings;
use agentrt_policy::{AdamWConfig, ModelSource, Policy, Routing};
use agentrt_rollout::EpisodeSpec;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The embedded defaults (`trainer/sft.toml`).
pub const DEFAULT_SFT_CONFIG: &str = include_str!("../sft.toml");

/// Every setting of an SFT run (see `trainer/sft.toml` for each key's meaning).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftConfig {
    /// The base model and adapters, as `[model]` of `agentrt train`.
    pub model: ModelSection,
    /// The conversations to train and validate on.
    pub data: SftDataSection,
    /// Batching, length, learning rate and validation cadence.
    pub sft: SftSection,
    /// Which conversations train only the forget adapter.
    pub routing: SftRoutingSection,
    /// The run's seed and name, and how often it saves checkpoints.
    pub run: SftRunSection,
}

/// `[data]` of an SFT run: the conversation files, the validation slice and how transcripts are prompted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftDataSection {
    /// JSON Lines files to train on: chat conversations, or `agentrt eval` / `agentrt train` transcripts.
    pub train: Vec<String>,
    /// A separate validation file; empty: hold back a seeded slice of `train`.
    pub val: String,
    /// The fraction of `train` held back for validation when `val_examples` is 0.
    pub val_fraction: f64,
    /// Conversations held back for validation (0: `val_fraction` decides).
    pub val_examples: usize,
    /// A conversation longer than this many tokens is dropped (counted, never truncated).
    pub max_seq_tokens: usize,
    /// The system prompt transcripts get (`short`, `full` or the text), as the run that wrote them showed it.
    pub system_prompt: String,
    /// The worked episode transcripts get (`true`: the built-in one; `false`; or a file of turns), as the run
    /// that wrote them showed it.
    pub demonstration: agentrt_environments::wiki::Demonstration,
    /// Keep only transcripts judged correct (rejection sampling); chat conversations are always kept.
    pub only_correct: bool,
}

/// `[sft]`: batching, length, AdamW and validation cadence of an SFT run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftSection {
    /// Conversations per micro-batch.
    pub batch_size: usize,
    /// Micro-batches per optimizer step.
    pub gradient_accumulation_steps: usize,
    /// Passes over the training conversations (a seeded new order each), unless `max_steps` is above 0.
    pub epochs: usize,
    /// Optimizer steps, when above 0 (it then overrides `epochs`).
    pub max_steps: usize,
    /// AdamW learning rate after the warm-up.
    pub lr: f64,
    /// Steps of linear warm-up from 0 to `lr`.
    pub warmup_steps: usize,
    /// AdamW weight decay.
    pub weight_decay: f64,
    /// Global gradient norm the update is clipped to (0: no clipping).
    pub max_grad_norm: f64,
    /// The validation loss every this many steps and at the end (0: only at the end).
    pub eval_steps: usize,
}

/// `[routing]` of an SFT run: which conversations train only the forget adapter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftRoutingSection {
    /// `none`, `contains:TEXT`, `regex:PATTERN` or `tool:NAME`; a conversation's own `"routed"` wins over it.
    pub detector: String,
    /// What unflagged conversations train: both adapters (`shared`) or the retain adapter alone (`exclusive`).
    pub unflagged: Routing,
}

/// `[run]` of an SFT run: seed, name and checkpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftRunSection {
    /// Seeds the validation slice, the data order and fresh adapters.
    pub seed: u64,
    /// Where run directories are created.
    pub output_dir: String,
    /// The run directory's name; empty: built from the hyperparameters.
    pub run_name: String,
    /// Save a checkpoint every this many steps (and at the end).
    pub save_steps: usize,
    /// Checkpoints kept, oldest deleted first (0 keeps all).
    pub save_total_limit: usize,
}

impl Default for SftConfig {
    fn default() -> Self {
        let value: toml::Table = DEFAULT_SFT_CONFIG.parse().expect("the embedded SFT defaults parse");
        toml::Value::Table(value).try_into().expect("the embedded SFT defaults are an SftConfig")
    }
}

impl RunConfig for SftConfig {
    const DEFAULTS: &'static str = DEFAULT_SFT_CONFIG;
    const DEFAULTS_NAME: &'static str = "embedded SFT defaults";
    const RUN_DIRECTORY: &'static str = "an SFT run directory";
    const CHANGEABLE_ON_RESUME: &'static [&'static str] =
        &["sft.max_steps", "sft.epochs", "sft.eval_steps", "run.save_steps", "run.save_total_limit", "run.output_dir", "run.run_name"];

    fn run_section(&self) -> (&str, &str) {
        (&self.run.output_dir, &self.run.run_name)
    }

    /// `smollm2-135m_sft_lr1e-4_b4_s42` (plus `_dual`).
    fn derived_name(&self) -> String {
        let batch = self.sft.batch_size * self.sft.gradient_accumulation_steps;
        let mut name = format!("{}_sft_lr{:e}_b{batch}_s{}", model_stem(&self.model.name), self.sft.lr, self.run.seed);
        if self.model.dual_lora {
            name.push_str("_dual");
        }
        name
    }

    fn validate(&self) -> Result<(), TrainError> {
        let bad = |key: &str, why: &str| Err(TrainError::Config(format!("{key}: {why}")));
        let (d, s) = (&self.data, &self.sft);
        if !(0.0..1.0).contains(&d.val_fraction) {
            return bad("data.val_fraction", "must be in [0, 1)");
        }
        if d.max_seq_tokens < 2 {
            return bad("data.max_seq_tokens", "must be at least 2");
        }
        if s.batch_size == 0 || s.gradient_accumulation_steps == 0 {
            return bad("sft.batch_size / sft.gradient_accumulation_steps", "must be at least 1");
        }
        if s.epochs == 0 && s.max_steps == 0 {
            return bad("sft.epochs / sft.max_steps", "one of them must be above 0");
        }
        if !(s.lr > 0.0 && s.lr < 1.0) {
            return bad("sft.lr", "must be in (0, 1)");
        }
        if s.weight_decay < 0.0 || s.max_grad_norm < 0.0 {
            return bad("sft.weight_decay / sft.max_grad_norm", "must not be negative");
        }
        if self.model.lora_rank == 0 || self.model.lora_targets.is_empty() {
            return bad("model.lora_rank / model.lora_targets", "need a rank of at least 1 and at least one target");
        }
        Detector::parse(&self.routing.detector)?;
        if self.routing.detector != "none" && !self.model.dual_lora {
            return bad("routing.detector", "routing needs two adapters: set model.dual_lora = true");
        }
        if self.run.save_steps == 0 {
            return bad("run.save_steps", "must be at least 1");
        }
        Ok(())
    }
}

impl SftConfig {
    /// The learning rate of `step` (1-based): linear warm-up over `warmup_steps`, then `lr`.
    pub fn lr_at(&self, step: usize) -> f64 {
        let w = self.sft.warmup_steps;
        if w > 0 && step <= w {
            self.sft.lr * step as f64 / w as f64
        } else {
            self.sft.lr
        }
    }
}

/// Where to run and whether to continue.
pub struct SftRequest {
    /// The resolved settings, saved as the run's config.toml.
    pub config: SftConfig,
    /// The run directory to create, or to continue with `resume`.
    pub run_dir: PathBuf,
    /// Continue the run in `run_dir` from its newest saved state. `config` must then be its saved config but
    /// for `SftConfig::CHANGEABLE_ON_RESUME` (`SftConfig::resumed` makes one); the run's `config.toml` is
    /// updated to it.
    pub resume: bool,
    /// Show a progress bar on a terminal (each step's metrics line is printed otherwise).
    pub progress: bool,
}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct SftSummary {
    /// Where the run's files are.
    pub run_dir: PathBuf,
    /// Optimizer steps of the whole run.
    pub steps: usize,
    /// The newest checkpoint written (or resumed from), if any.
    pub last_checkpoint: Option<PathBuf>,
    /// Conversations trained on, after dropping and holding back.
    pub train_examples: usize,
    /// Conversations held back for the validation loss.
    pub val_examples: usize,
    /// Conversations dropped for exceeding `data.max_seq_tokens`.
    pub dropped_too_long: usize,
    /// The last validation loss measured (`None` without validation).
    pub final_val_loss: Option<f64>,
}

/// How the training conversations prompt the model, for the checkpoints' `agent.json`: their system
/// prompt (named `full` or `short` when it is that template), whether they show the demonstration, the
/// most replies an episode of them holds and the longest reply in tokens (plus a quarter, for a longer
/// question quoted in a program, rounded up to 32 and at least the episode default of 160, so the adapter
/// can write what it was taught).
fn agent_settings_of(model: &str, fallback_prompt: &str, conversations: &[crate::sft_data::Conversation], longest_reply: usize) -> AgentSettings {
    use agentrt_environments::wiki::{demonstration, system_prompt, DEFAULT_SYSTEM_PROMPT, FULL_SYSTEM_PROMPT};
    let demo = demonstration();
    let mut prompts: Vec<String> = Vec::new();
    let (mut with_demo, mut max_turns) = (0, 1);
    for c in conversations {
        let system = c.messages.iter().find(|m| m.role == "system").map(|m| m.content.clone()).unwrap_or_default();
        if !prompts.contains(&system) {
            prompts.push(system);
        }
        let last_user = c.messages.iter().rposition(|m| m.role == "user").unwrap_or(0);
        let shown =
            c.messages.iter().skip_while(|m| m.role == "system").take(demo.len()).map(|m| (&m.role, &m.content)).eq(demo.iter().map(|m| (&m.role, &m.content)));
        with_demo += shown as usize;
        max_turns = max_turns.max(c.messages[last_user..].iter().filter(|m| m.role == "assistant").count());
    }
    if prompts.len() > 1 || (with_demo != 0 && with_demo != conversations.len()) {
        tracing::warn!(
            "the training conversations differ in how they prompt ({} system prompts; {with_demo} of {} show the demonstration): agent.json records the first prompt and what most do",
            prompts.len(),
            conversations.len()
        );
    }
    let text = prompts.into_iter().next().unwrap_or_default();
    let named = if text == system_prompt(FULL_SYSTEM_PROMPT, &[]) {
        "full".to_string()
    } else if text == system_prompt(DEFAULT_SYSTEM_PROMPT, &[]) {
        "short".to_string()
    } else if text.is_empty() {
        tracing::warn!("the training conversations have no system prompt; agent.json records data.system_prompt = {fallback_prompt:?}, which `agentrt eval --adapter` will show");
        fallback_prompt.to_string()
    } else {
        text
    };
    // The rest (observation size, sandbox bounds, sampling) are the episode defaults, which the
    // conversations of `agentrt trajectories synth` were played with.
    AgentSettings {
        model: model.into(),
        system_prompt: named,
        demonstration: (with_demo * 2 > conversations.len()).into(),
        spec: EpisodeSpec { max_turns, max_new_tokens: (longest_reply + longest_reply / 4).div_ceil(32).max(5) * 32, ..EpisodeSpec::default() },
        // Conversations do not say which environment played them: the wiki's, as `agentrt eval` assumes.
        environment: None,
    }
}

/// The longest run of model tokens in one example (one reply and its end-of-turn token).
fn longest_reply(e: &Example) -> usize {
    e.model_mask.split(|m| !m).map(|run| run.len()).max().unwrap_or(0)
}

/// The training and validation examples of a config: read, rendered, filtered and split (seeded).
pub fn load_examples(config: &SftConfig, policy: &Policy) -> Result<(Vec<Example>, Vec<Example>, usize, ReadStats), TrainError> {
    load_examples_and_settings(config, policy).map(|(t, v, d, s, _)| (t, v, d, s))
}

/// What [`load_examples_and_settings`] reads: training and validation examples, the examples dropped,
/// the reading counts, and the agent settings the conversations imply.
type ExamplesAndSettings = (Vec<Example>, Vec<Example>, usize, ReadStats, AgentSettings);

/// [`load_examples`], and the agent settings the training conversations imply.
fn load_examples_and_settings(config: &SftConfig, policy: &Policy) -> Result<ExamplesAndSettings, TrainError> {
    let d = &config.data;
    if d.train.is_empty() {
        return Err(TrainError::Config("data.train: no training file: pass --data FILE (JSON Lines of conversations or agentrt transcripts)".into()));
    }
    let opts = TranscriptOptions { system_prompt: d.system_prompt.clone(), demonstration: d.demonstration.clone(), only_correct: d.only_correct };
    let detector = Detector::parse(&config.routing.detector)?;
    let mut stats = ReadStats::default();
    let mut dropped = 0;
    let mut train_conversations = Vec::new();
    let mut read = |path: &str, stats: &mut ReadStats, keep: Option<&mut Vec<crate::sft_data::Conversation>>| -> Result<Vec<Example>, TrainError> {
        let (conversations, s) = read_conversations(Path::new(path), &opts)?;
        stats.conversations += s.conversations;
        stats.transcripts += s.transcripts;
        stats.not_correct += s.not_correct;
        stats.empty_reply += s.empty_reply;
        let (examples, too_long) = tokenize(policy, &conversations, &detector, config.model.dual_lora, d.max_seq_tokens)?;
        if too_long > 0 {
            tracing::warn!("{path}: dropped {too_long} of {} conversations longer than data.max_seq_tokens = {}", conversations.len(), d.max_seq_tokens);
        }
        dropped += too_long;
        if let Some(keep) = keep {
            keep.extend(conversations);
        }
        Ok(examples)
    };
    let mut train = Vec::new();
    for p in &d.train {
        train.extend(read(p, &mut stats, Some(&mut train_conversations))?);
    }
    let mut val = if d.val.is_empty() { vec![] } else { read(&d.val, &mut stats, None)? };
    let settings = agent_settings_of(&config.model.name, &d.system_prompt, &train_conversations, train.iter().map(longest_reply).max().unwrap_or(0));
    if d.val.is_empty() {
        let n_val = if d.val_examples > 0 { d.val_examples } else { (d.val_fraction * train.len() as f64).round() as usize };
        if n_val > 0 {
            if n_val >= train.len() {
                return Err(TrainError::Config(format!(
                    "data.val_examples / val_fraction: {n_val} held back of {} conversations leaves none to train on",
                    train.len()
                )));
            }
            let mut order: Vec<usize> = (0..train.len()).collect();
            order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(config.run.seed ^ 0x5f7_da7a));
            let mut held: Vec<bool> = vec![false; train.len()];
            for &i in &order[..n_val] {
                held[i] = true;
            }
            let all = std::mem::take(&mut train);
            for (e, h) in all.into_iter().zip(held) {
                if h {
                    val.push(e)
                } else {
                    train.push(e)
                }
            }
        }
    }
    if train.is_empty() {
        return Err(TrainError::Config(format!(
            "data.train: no conversations to train on ({dropped} dropped as longer than data.max_seq_tokens, {} transcripts left out)",
            stats.not_correct + stats.empty_reply
        )));
    }
    Ok((train, val, dropped, stats, settings))
}

/// The validation loss: the mean over conversations of `-mean log p` over each one's model tokens (the
/// training loss's normalisation), with both adapters on; and the model tokens it covered.
pub fn validation_loss(policy: &Policy, examples: &[Example]) -> Result<(f64, usize), TrainError> {
    let mut total = 0.0;
    let mut tokens = 0;
    for chunk in examples.chunks(4) {
        let seqs: Vec<Vec<u32>> = chunk.iter().map(|e| e.ids.clone()).collect();
        let masks: Vec<Vec<bool>> = chunk.iter().map(|e| e.model_mask.clone()).collect();
        // Forward as a trie (the shared system prompt once, no padding) and scored only where the loss reads.
        let lp = policy.token_logprobs_tree(&seqs, &masks, false)?.detach();
        let m = Policy::target_mask(&seqs, &masks, lp.dim(1)?, policy.device())?;
        let sums: Vec<f32> = (&lp * &m)?.sum(1)?.to_vec1()?;
        let counts: Vec<f32> = m.sum(1)?.to_vec1()?;
        for (s, c) in sums.iter().zip(&counts) {
            if *c > 0.0 {
                total += -(*s as f64) / *c as f64;
                tokens += *c as usize;
            }
        }
    }
    Ok((total / examples.len().max(1) as f64, tokens))
}

/// Fine-tunes; returns when the steps are done. Every `run.save_steps` (and at the end) a checkpoint is
/// written atomically. It drives the run loop on a runtime of its own, on this thread: call it from
/// synchronous code, not from within an async runtime.
pub fn sft(request: SftRequest) -> Result<SftSummary, TrainError> {
    // The run loop is async for `agentrt train`'s episodes; a step here never waits, so a runtime on this
    // thread drives it.
    let runtime = tokio::runtime::Builder::new_current_thread().build().map_err(|e| TrainError::Run(format!("starting the SFT run's runtime: {e}")))?;
    runtime.block_on(run_sft(request))
}

async fn run_sft(request: SftRequest) -> Result<SftSummary, TrainError> {
    let SftRequest { config, run_dir, resume, progress } = request;
    let start = RunStart::open(&run_dir, &config, resume)?;
    let seed = config.run.seed;
    let device = agentrt_policy::parse_device(&config.model.device)?;
    let mut policy = Policy::load(&ModelSource::parse(&config.model.name), &device)?;
    policy.recompute_layers = config.model.recompute_layers;
    policy.decoder.learner_products = config.model.learner_products;
    let (train_set, val_set, dropped, stats, agent) = load_examples_and_settings(&config, &policy)?;
    tracing::info!(
        "sft data: {} chat conversations and {} transcripts read ({} not correct, {} with an empty reply left out); {} dropped as longer than {} tokens; {} to train on, {} held back for validation",
        stats.conversations, stats.transcripts, stats.not_correct, stats.empty_reply, dropped, config.data.max_seq_tokens, train_set.len(), val_set.len()
    );

    let at = start.start_adapters(&mut policy, &config.model, seed)?;
    policy.set_routing(config.routing.unflagged);
    let s = &config.sft;
    let learner = Learner::new(
        policy,
        LearnerConfig {
            optimizer: AdamWConfig { lr: s.lr, weight_decay: s.weight_decay, ..AdamWConfig::default() },
            ..LearnerConfig::plain(s.lr, s.max_grad_norm)
        },
    )?;
    let per_step = s.batch_size * s.gradient_accumulation_steps;
    let total_steps = if s.max_steps > 0 { s.max_steps } else { (s.epochs * train_set.len()).div_ceil(per_step) };
    let plan = Plan {
        label: "sft",
        seen_unit: "conversations",
        total_steps,
        save_steps: config.run.save_steps,
        save_total_limit: config.run.save_total_limit,
        seed,
        run_name: config.run_name(),
        agent,
        progress,
    };
    let run_loop = start.into_loop(learner, at, plan)?;
    let headline = format!(
        "fine-tuning {} ({} conversations x {per_step} per step, {total_steps} steps) into {}",
        run_loop.learner.policy.base_name,
        train_set.len(),
        run_loop.run.path.display()
    );
    let mut step =
        SftStep { config: &config, train_set: &train_set, val_set: &val_set, order: DataOrder::new(train_set.len(), seed), total_steps, final_val: None };
    let finished = run_loop.run(&headline, &mut step).await?;
    Ok(SftSummary {
        run_dir: finished.run.path,
        steps: total_steps,
        last_checkpoint: finished.last_checkpoint,
        train_examples: train_set.len(),
        val_examples: val_set.len(),
        dropped_too_long: dropped,
        final_val_loss: step.final_val,
    })
}

/// One SFT step: the next `batch_size x gradient_accumulation_steps` conversations of the seeded order,
/// one optimizer step at the step's learning rate, and the validation loss on its cadence.
struct SftStep<'a> {
    config: &'a SftConfig,
    train_set: &'a [Example],
    val_set: &'a [Example],
    order: DataOrder,
    total_steps: usize,
    /// The last validation loss measured.
    final_val: Option<f64>,
}

impl RunStep for SftStep<'_> {
    type Metrics = SftStepMetrics;

    async fn step(&mut self, step: usize, learner: &mut Learner, seen: &mut usize, _run: &RunDir) -> Result<SftStepMetrics, TrainError> {
        let started = Instant::now();
        let s = &self.config.sft;
        let per_step = s.batch_size * s.gradient_accumulation_steps;
        let lr = self.config.lr_at(step);
        learner.optimizer.config.lr = lr;
        let mut update = UpdateStats::default();
        let (mut tokens, mut routed) = (0, 0);
        for _ in 0..s.gradient_accumulation_steps {
            let samples: Vec<Sample> = (0..s.batch_size)
                .map(|i| {
                    let e = &self.train_set[self.order.at(*seen + i)];
                    tokens += e.ids.len();
                    routed += e.routed as usize;
                    Sample { ids: e.ids.clone(), model_mask: e.model_mask.clone(), advantage: 1.0, routed: e.routed, sampled_logprobs: Vec::new() }
                })
                .collect();
            *seen += s.batch_size;
            let u = learner.accumulate(&samples, LossScale::PerSample { samples: per_step })?;
            update.loss += u.loss;
            update.model_tokens += u.model_tokens;
            update.samples += u.samples;
        }
        let grad_norm = learner.step()?;
        let eval_now = !self.val_set.is_empty() && ((s.eval_steps > 0 && step.is_multiple_of(s.eval_steps)) || step == self.total_steps);
        let (val_loss, val_tokens) = if eval_now {
            let (l, t) = validation_loss(&learner.policy, self.val_set)?;
            self.final_val = Some(l);
            (Some(l), Some(t))
        } else {
            (None, None)
        };
        Ok(SftStepMetrics {
            step,
            epoch: *seen as f64 / self.train_set.len() as f64,
            examples_seen: *seen,
            train_loss: update.loss,
            val_loss,
            val_tokens,
            model_tokens: update.model_tokens,
            tokens,
            routed,
            lr,
            grad_norm,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    fn status(&self, m: &SftStepMetrics) -> String {
        let v = m.val_loss.map(|v| format!(" val {v:.4}")).unwrap_or_default();
        format!("loss {:.4}{v}", m.train_loss)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sft.toml` repeats `[model]` so that `agentrt sft --print-config` shows every key; the two copies
    /// must not drift apart (one concept, one set of defaults).
    #[test]
    fn sft_and_train_share_the_model_defaults() {
        assert_eq!(SftConfig::default().model, crate::TrainConfig::default().model);
    }
}
