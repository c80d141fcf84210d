//! Every hyperparameter of a run, as TOML: embedded defaults, a user file, `--set section.key=value`
//! overrides, each checked (unknown keys are errors, not ignored).

use crate::error::TrainError;
use agentrt_environments::EnvSection;
use agentrt_policy::{Routing, Target};
use agentrt_rollout::EpisodeSpec;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The embedded defaults (`trainer/default.toml`).
pub const DEFAULT_CONFIG: &str = include_str!("../default.toml");

/// Every hyperparameter of an `agentrt train` run, one field per section of `trainer/default.toml`; saved as
/// the run's config.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// The base model and its LoRA adapters.
    pub model: ModelSection,
    /// The wiki questions the run trains on.
    pub data: DataSection,
    /// How each step's episodes are played: batch, sampling, prompt, sampler, judge and sandbox limits.
    pub rollout: RolloutSection,
    /// How rewards become an update: advantages, the KL penalty, the optimizer and reward shaping.
    pub algorithm: AlgorithmSection,
    /// Gradient routing: which samples train only the forget adapter, and its evaluation.
    pub routing: RoutingSection,
    /// The run's length, seed and name, and how often it logs and saves checkpoints.
    pub run: RunSection,
    /// Which environment, and the code environment's keys (absent from configs saved before it had a
    /// name: those ran the wiki).
    #[serde(default)]
    pub env: EnvSection,
}

/// `[model]`: the base model and the LoRA adapters trained on it (shared by `train` and `sft`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// `smollm2-135m`, `qwen2.5-coder-0.5b`, a .gguf file or a safetensors directory.
    pub name: String,
    /// `cpu` or `cuda:N`: where the model runs and trains.
    pub device: String,
    /// Rank of each fresh LoRA adapter (a warm start's own rank wins).
    pub lora_rank: usize,
    /// LoRA alpha: the adapters' update is scaled by alpha / rank (a warm start's own alpha wins).
    pub lora_alpha: f64,
    /// The projections of each layer that get adapters.
    pub lora_targets: Vec<Target>,
    /// Two adapters per layer (retain, forget) for gradient routing; required by a routing detector.
    pub dual_lora: bool,
    /// Recompute each block in the backward pass instead of keeping its activations (less memory, slower).
    pub recompute_layers: bool,
    /// Start from this adapter (a PEFT adapter directory or a run's `checkpoint-N`) instead of fresh ones;
    /// empty: fresh adapters. In RL it is also the KL reference (base + this adapter, frozen).
    #[serde(default)]
    pub init_adapter: String,
}

/// `[data]`: where the wiki's training questions come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSection {
    /// The questions file (JSON Lines).
    pub questions: String,
    /// The split of that file that trains.
    pub split: String,
}

/// `[rollout]`: how many episodes a step plays and where they are sampled; how each episode is played
/// (turns, sampling, prompt, judge, sandbox bounds) is its [`EpisodeSpec`], whose keys sit in the same
/// section and which every checkpoint saves as its `agent.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutSection {
    /// Questions per step.
    pub batch_size: usize,
    /// Rollouts per question: the group that GRPO and RLOO compare.
    pub num_rollouts: usize,
    /// `local` (in-process with candle) or `openai:MODEL@URL1,URL2,...` (OpenAI-compatible servers that load
    /// each step's adapter, so they stay on-policy).
    pub sampler: String,
    /// With an `openai:` sampler: take the sampled ids and log-probs from the server (vLLM, `agentrt serve`)
    /// rather than re-tokenising its text; only then is the server-trainer log-prob gap measured.
    #[serde(default = "exact_tokens_default")]
    pub sampler_exact_tokens: bool,
    /// How every episode is played.
    #[serde(flatten)]
    pub episode: EpisodeSpec,
}

fn exact_tokens_default() -> bool {
    true
}

/// How advantages are computed from a group's rewards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdvantageKind {
    /// The reward minus a constant baseline (`algorithm.baseline`); no group is skipped.
    Reinforce,
    /// The reward minus the mean of the other rollouts of its question (leave-one-out).
    Rloo,
    /// The reward minus its group's mean, divided by the group's std with `algorithm.scale_by_std`.
    Grpo,
}

impl AdvantageKind {
    /// The name a config and the CLI give it (serde's, lowercase).
    pub fn name(self) -> &'static str {
        match self {
            AdvantageKind::Reinforce => "reinforce",
            AdvantageKind::Rloo => "rloo",
            AdvantageKind::Grpo => "grpo",
        }
    }
}

fn default_true() -> bool {
    true
}

/// `[algorithm]`: how rewards become advantages, the KL penalty, AdamW and reward shaping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlgorithmSection {
    /// How a group's rewards become advantages.
    pub advantage: AdvantageKind,
    /// REINFORCE's constant baseline.
    pub baseline: f64,
    /// GRPO: divide each group's advantages by its reward std.
    pub scale_by_std: bool,
    /// Weight of the KL penalty to the reference (k3 per model token); 0 turns it off and saves a forward pass.
    pub beta: f64,
    /// AdamW learning rate.
    pub lr: f64,
    /// AdamW weight decay.
    pub weight_decay: f64,
    /// Global gradient norm the update is clipped to (0: no clipping).
    pub max_grad_norm: f64,
    /// Rollout batches whose gradients are summed before one optimizer step.
    pub gradient_accumulation_steps: usize,
    /// Forward the prompt a step's samples share once, in the policy's pass and the KL reference's,
    /// instead of once per sample (the same loss and gradients; false: every sample whole, as before).
    #[serde(default = "default_true")]
    pub shared_prefix_update: bool,
    /// Added to an episode's reward when one of its programs ran without an error (0: the judge alone).
    pub program_bonus: f64,
    /// Partial credit: this times the best token F1 of the final answer against the gold answers.
    pub f1_weight: f64,
    /// Added when the episode ended with an `<answer>` reply.
    pub format_bonus: f64,
    /// DAPO's soft overlong punishment: up to this much reward lost by a reply that runs into the last
    /// `overlong_buffer` tokens of `rollout.max_new_tokens` (0: off).
    #[serde(default)]
    pub overlong_penalty: f64,
    /// Tokens before the reply limit where the overlong penalty starts (0: only a reply cut at the limit).
    #[serde(default)]
    pub overlong_buffer: usize,
    /// DAPO's dynamic sampling: drop groups whose rewards are all equal and draw more questions until
    /// `rollout.batch_size` groups carry a signal (or `max_draws` x `batch_size` were drawn).
    #[serde(default)]
    pub dynamic_sampling: bool,
    /// The cap of dynamic sampling, in multiples of `rollout.batch_size` questions per accumulation batch.
    #[serde(default = "default_max_draws")]
    pub max_draws: usize,
    /// How the policy-gradient loss is averaged over a step's tokens.
    #[serde(default)]
    pub loss_aggregation: LossAggregation,
    /// Optimizer steps per step's samples (each on a part of whole groups); with more than one, the
    /// PPO-clipped objective applies.
    #[serde(default = "default_one")]
    pub mini_batches: usize,
    /// Passes over a step's samples.
    #[serde(default = "default_one")]
    pub update_epochs: usize,
    /// The clipped objective keeps each token's probability ratio to the sampler above `1 - clip_low` ...
    #[serde(default = "default_clip_low")]
    pub clip_low: f64,
    /// ... and below `1 + clip_high` (DAPO's clip-higher: a larger upper bound lets rare good tokens grow).
    #[serde(default = "default_clip_high")]
    pub clip_high: f64,
}

fn default_max_draws() -> usize {
    4
}

fn default_one() -> usize {
    1
}

fn default_clip_low() -> f64 {
    0.2
}

fn default_clip_high() -> f64 {
    0.28
}

/// How the policy-gradient loss of a step is averaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LossAggregation {
    /// The mean over each sample's model tokens, then over the samples (GRPO's original).
    #[default]
    Sample,
    /// The mean over all model tokens of the step (DAPO's token-level loss).
    Token,
}

/// `[routing]`: which samples train only the forget adapter, and the three-mode evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingSection {
    /// `none`, `contains:TEXT`, `regex:PATTERN` or `tool:NAME` (see [`crate::routing::Detector`]).
    pub detector: String,
    /// What unflagged samples train: both adapters (`shared`) or the retain adapter alone (`exclusive`).
    pub unflagged: Routing,
    /// Every this many steps, evaluate with both adapters, retain only and forget only (0: off).
    pub eval_routing_steps: usize,
    /// Questions each routing evaluation plays.
    pub eval_questions: usize,
}

/// `[run]`: the run's length, seed and name, and how often it logs and saves checkpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    /// Optimizer steps the run takes.
    pub max_steps: usize,
    /// Seeds the data order, the sampling and fresh adapters.
    pub seed: u64,
    /// Where run directories are created.
    pub output_dir: String,
    /// The run directory's name; empty: built from the hyperparameters.
    pub run_name: String,
    /// Write sample transcripts every this many steps.
    pub logging_steps: usize,
    /// Save a checkpoint every this many steps.
    pub save_steps: usize,
    /// Checkpoints kept, oldest deleted first (0 keeps all).
    pub save_total_limit: usize,
    /// Greedy evaluation on the held-out slice before the first step and every this many steps (0: off).
    #[serde(default)]
    pub eval_steps: usize,
    /// Questions in the held-out slice.
    #[serde(default = "default_eval_questions")]
    pub eval_questions: usize,
    /// The split of the environment's questions the slice (and the routing evaluation) comes from; empty:
    /// the environment's held-out split (the wiki's `dev`, the code tasks' `test`).
    #[serde(default)]
    pub eval_split: String,
    /// The slice starts after this many questions of the split's seed-0 order (those `agentrt eval
    /// --num-samples N` with N up to this reports).
    #[serde(default = "default_eval_skip")]
    pub eval_skip: usize,
}

fn default_eval_questions() -> usize {
    100
}

fn default_eval_skip() -> usize {
    300
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig::from_layers(None, &[]).expect("the embedded default config is valid")
    }
}

impl RunConfig for TrainConfig {
    const DEFAULTS: &'static str = DEFAULT_CONFIG;
    const DEFAULTS_NAME: &'static str = "embedded defaults";
    const RUN_DIRECTORY: &'static str = "a run directory";
    const CHANGEABLE_ON_RESUME: &'static [&'static str] = &[
        "run.max_steps",
        "run.logging_steps",
        "run.save_steps",
        "run.save_total_limit",
        "run.output_dir",
        "run.run_name",
        "routing.eval_routing_steps",
        "run.eval_steps",
    ];

    fn run_section(&self) -> (&str, &str) {
        (&self.run.output_dir, &self.run.run_name)
    }

    /// Seed 004's convention, `smollm2-135m_lr1e-5_g4_beta0.02_s42`, plus the advantage and `dual` when not
    /// the defaults.
    fn derived_name(&self) -> String {
        let mut name = format!(
            "{}_lr{}_g{}_beta{}_s{}",
            model_stem(&self.model.name),
            short_float(self.algorithm.lr),
            self.rollout.num_rollouts,
            self.algorithm.beta,
            self.run.seed
        );
        if self.algorithm.advantage != AdvantageKind::Grpo {
            name.push_str(&format!("_{}", self.algorithm.advantage.name()));
        }
        if self.model.dual_lora {
            name.push_str("_dual");
        }
        name
    }

    fn validate(&self) -> Result<(), TrainError> {
        let bad = |key: &str, why: &str| Err(TrainError::Config(format!("{key}: {why}")));
        let r = &self.rollout;
        let a = &self.algorithm;
        if r.batch_size == 0 {
            return bad("rollout.batch_size", "must be at least 1");
        }
        if r.num_rollouts == 0 {
            return bad("rollout.num_rollouts", "must be at least 1");
        }
        if r.num_rollouts == 1 && a.advantage != AdvantageKind::Reinforce {
            return bad("rollout.num_rollouts", "GRPO and RLOO compare rollouts of one question: use at least 2, or advantage = \"reinforce\"");
        }
        if let Err(e) = r.episode.validate() {
            return Err(TrainError::Config(format!("rollout.{e}")));
        }
        if !(a.lr > 0.0 && a.lr < 1.0) {
            return bad("algorithm.lr", "must be in (0, 1)");
        }
        for (key, v) in [("algorithm.program_bonus", a.program_bonus), ("algorithm.f1_weight", a.f1_weight), ("algorithm.format_bonus", a.format_bonus)] {
            if !(v >= 0.0 && v.is_finite()) {
                return bad(key, "must be a finite number, 0 or more");
            }
        }
        if a.beta < 0.0 || a.max_grad_norm < 0.0 || a.weight_decay < 0.0 {
            return bad("algorithm.beta / max_grad_norm / weight_decay", "must not be negative");
        }
        if a.gradient_accumulation_steps == 0 {
            return bad("algorithm.gradient_accumulation_steps", "must be at least 1");
        }
        if !(a.overlong_penalty >= 0.0 && a.overlong_penalty.is_finite()) {
            return bad("algorithm.overlong_penalty", "must be a finite number, 0 or more");
        }
        if a.overlong_buffer >= r.episode.max_new_tokens {
            return bad("algorithm.overlong_buffer", "must be below rollout.max_new_tokens (the penalty starts that many tokens before the limit)");
        }
        if a.dynamic_sampling && a.advantage == AdvantageKind::Reinforce {
            return bad("algorithm.dynamic_sampling", "drops groups whose rewards are all equal, which carry a signal only for grpo and rloo, not reinforce");
        }
        if a.max_draws == 0 {
            return bad("algorithm.max_draws", "must be at least 1 (a step draws at most max_draws x rollout.batch_size questions)");
        }
        if a.mini_batches == 0 || a.update_epochs == 0 {
            return bad("algorithm.mini_batches / update_epochs", "must be at least 1");
        }
        if a.mini_batches > r.batch_size * a.gradient_accumulation_steps {
            return bad("algorithm.mini_batches", "a mini-batch holds whole groups: at most rollout.batch_size x gradient_accumulation_steps of them");
        }
        if !(a.clip_low > 0.0 && a.clip_low < 1.0 && a.clip_high > 0.0 && a.clip_high.is_finite()) {
            return bad("algorithm.clip_low / clip_high", "clip_low in (0, 1), clip_high above 0");
        }
        if self.run.eval_steps > 0 && self.run.eval_questions == 0 {
            return bad("run.eval_questions", "must be at least 1 when run.eval_steps is on");
        }
        if self.model.lora_rank == 0 || self.model.lora_targets.is_empty() {
            return bad("model.lora_rank / model.lora_targets", "need a rank of at least 1 and at least one target");
        }
        crate::routing::Detector::parse(&self.routing.detector)?;
        if self.routing.detector != "none" && !self.model.dual_lora {
            return bad("routing.detector", "routing needs two adapters: set model.dual_lora = true");
        }
        if self.routing.eval_routing_steps > 0 && !self.model.dual_lora {
            return bad("routing.eval_routing_steps", "the three-mode evaluation needs model.dual_lora = true");
        }
        self.env.validate().map_err(TrainError::Config)?;
        if self.run.max_steps == 0 || self.run.save_steps == 0 || self.run.logging_steps == 0 {
            return bad("run.max_steps / save_steps / logging_steps", "must be at least 1");
        }
        Ok(())
    }
}

/// A model's name in a run's name: a named model as it is, a file or directory by its stem.
pub(crate) fn model_stem(model: &str) -> &str {
    Path::new(model).file_stem().and_then(|s| s.to_str()).unwrap_or("model")
}

/// `1e-5` rather than `0.00001`.
fn short_float(x: f64) -> String {
    format!("{x:e}")
}

/// The config of a command that makes a run directory (`agentrt train`'s [`TrainConfig`], `agentrt sft`'s
/// [`crate::SftConfig`]): built from its embedded defaults, a file and `--set` overrides, saved as the
/// run's `config.toml`, read back exactly, and layered again to resume. The one home of how every such
/// config is built, resumed, read and saved; each config brings its defaults, what a resume may change,
/// and its own checks.
pub trait RunConfig: Sized + Serialize + serde::de::DeserializeOwned + PartialEq {
    /// The embedded defaults (TOML with every key).
    const DEFAULTS: &'static str;
    /// What errors call the defaults.
    const DEFAULTS_NAME: &'static str;
    /// What errors call a directory holding a run of this config (`a run directory`).
    const RUN_DIRECTORY: &'static str;
    /// The keys a resumed run may change: its length and how often it logs, evaluates and saves.
    const CHANGEABLE_ON_RESUME: &'static [&'static str];

    /// `run.output_dir` (where run directories go) and `run.run_name` (empty: derived).
    fn run_section(&self) -> (&str, &str);

    /// The run's name when `run.run_name` is empty: the model's and the hyperparameters that tell runs apart.
    fn derived_name(&self) -> String;

    /// The run's name: `run.run_name`, or [`RunConfig::derived_name`].
    fn run_name(&self) -> String {
        match self.run_section().1 {
            "" => self.derived_name(),
            given => given.to_string(),
        }
    }

    /// The run directory this config names: `output_dir/run_name`.
    fn run_dir(&self) -> std::path::PathBuf {
        Path::new(self.run_section().0).join(self.run_name())
    }

    /// Checks ranges and combinations; the message names the key.
    fn validate(&self) -> Result<(), TrainError>;

    /// The defaults, then the file (a partial file is fine: its keys replace the defaults'), then each
    /// `section.key=value` override (the value parsed as TOML, else taken as a string); then checked.
    fn from_layers(file: Option<&Path>, overrides: &[String]) -> Result<Self, TrainError> {
        let config: Self = layered(Self::DEFAULTS, Self::DEFAULTS_NAME, file, overrides)?;
        config.validate().map_err(|e| located(e, file, overrides))?;
        Ok(config)
    }

    /// The config a resumed run goes on with: its saved `config.toml` (`saved`) with `file` and
    /// `overrides` layered over it (not over the defaults, so a key not given keeps its saved value); an
    /// error names every key that differs from the saved one outside [`RunConfig::CHANGEABLE_ON_RESUME`].
    fn resumed(saved: &Path, file: Option<&Path>, overrides: &[String]) -> Result<Self, TrainError> {
        let text = std::fs::read_to_string(saved).map_err(|e| TrainError::Config(format!("{}: {e}", saved.display())))?;
        let old: Self = toml::from_str(&text).map_err(|e| TrainError::Config(format!("{}: {e}", saved.display())))?;
        let new: Self = layered(&text, &saved.display().to_string(), file, overrides)?;
        check_resumable(&old, &new, Self::CHANGEABLE_ON_RESUME)?;
        new.validate().map_err(|e| located(e, file, overrides))?;
        Ok(new)
    }

    /// Reads a saved run's `config.toml` exactly (no defaults layered under it), then checks it.
    fn read(path: &Path) -> Result<Self, TrainError> {
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::Config(format!("{}: {e}", path.display())))?;
        let config: Self = toml::from_str(&text).map_err(|e| TrainError::Config(format!("{}: {e}", path.display())))?;
        config.validate()?;
        Ok(config)
    }

    /// The config as TOML, as saved in the run's config.toml.
    fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a config always serialises")
    }
}

/// A config from layers, for every command that has one (`train`, `sft`): the embedded `defaults`
/// (`what` names them in errors), then the file (a partial file is fine: its keys replace the defaults'),
/// then each `section.key=value` override (the value parsed as TOML, else taken as a string). Unknown
/// keys are errors, by the config type's `deny_unknown_fields`.
pub(crate) fn layered<T: serde::de::DeserializeOwned>(defaults: &str, what: &str, file: Option<&Path>, overrides: &[String]) -> Result<T, TrainError> {
    let mut value: toml::Table = defaults.parse().map_err(|e| TrainError::Config(format!("{what}: {e}")))?;
    let typed = |value: &toml::Table| toml::Value::Table(value.clone()).try_into::<T>();
    if let Err(e) = typed(&value) {
        return Err(TrainError::Config(format!("{what}: {}", type_error(&e))));
    }
    // Each key is type-checked as it lands, so a wrong type is reported where it was written: the file and
    // line, or the --set that gave it (the layers below it are known to be well typed).
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::Config(format!("{}: {e}", path.display())))?;
        let user: toml::Table = text.parse().map_err(|e| TrainError::Config(format!("{}: {e}", path.display())))?;
        merge(&mut value, user, path.display().to_string(), &text, |section, key, value| {
            typed(value).map(drop).map_err(|e| {
                let line = key_line(&text, section, key).map(|l| format!(":{l}")).unwrap_or_default();
                TrainError::Config(format!("{}{line}: {section}.{key}: {}", path.display(), type_error(&e)))
            })
        })?;
    }
    for o in overrides {
        set(&mut value, o)?;
        typed(&value).map_err(|e| TrainError::Config(format!("--set {o}: {}", type_error(&e))))?;
    }
    typed(&value).map_err(|e| TrainError::Config(format!("{e}")))
}

/// A range or combination error of `validate` (`section.key: why`, or `section.a / b: why`), prefixed
/// with where its key was given: the last `--set` that names it, else the file and line. Unchanged when
/// the key came from the defaults.
fn located(e: TrainError, file: Option<&Path>, overrides: &[String]) -> TrainError {
    let TrainError::Config(message) = e else { return e };
    let Some((names, _)) = message.split_once(": ") else { return TrainError::Config(message) };
    let Some((section, _)) = names.split_once('.') else { return TrainError::Config(message) };
    let keys: Vec<&str> = names.split(" / ").map(|k| k.trim().strip_prefix(section).and_then(|k| k.strip_prefix('.')).unwrap_or(k.trim())).collect();
    let given = |o: &String| o.split_once('=').is_some_and(|(path, _)| keys.iter().any(|k| path.trim() == format!("{section}.{k}")));
    if let Some(o) = overrides.iter().rev().find(|o| given(o)) {
        return TrainError::Config(format!("--set {o}: {message}"));
    }
    if let Some(path) = file {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Some(line) = keys.iter().find_map(|k| key_line(&text, section, k)) {
                return TrainError::Config(format!("{}:{line}: {message}", path.display()));
            }
        }
    }
    TrainError::Config(message)
}

/// ` (did you mean `x`?)` for the candidate closest to `name` by edit distance, when one is close enough
/// to be a typo (at most a third of the name's letters, and at least one, differ).
fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|&(d, _)| d <= limit)
        .min()
        .map(|(_, c)| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

/// Levenshtein distance: the fewest insertions, deletions and substitutions from `a` to `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The sections of `base` that have `key`, as `[a], [b]`.
fn sections_with(base: &toml::Table, key: &str) -> Vec<String> {
    base.iter().filter(|(_, v)| v.as_table().is_some_and(|t| t.contains_key(key))).map(|(s, _)| format!("[{s}]")).collect()
}

/// The 1-based line of a top-level `key = ...` (before any `[section]`) or of the header `[key]`.
fn top_line(text: &str, key: &str) -> Option<usize> {
    let mut in_section = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            if header.trim() == key {
                return Some(i + 1);
            }
            in_section = true;
        } else if !in_section && line.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('=') || rest.starts_with('.')) {
            return Some(i + 1);
        }
    }
    None
}

/// A deserialisation error's message without the `in `section.key`` suffix its caller already names.
fn type_error(e: &toml::de::Error) -> String {
    e.message().trim().to_string()
}

/// The 1-based line of `section.key` in a TOML file's text: under its `[section]` header, or as a dotted
/// `section.key = ...` at the top (a best effort for error messages; `None` when not found).
fn key_line(text: &str, section: &str, key: &str) -> Option<usize> {
    let mut current = String::new();
    let assigns = |line: &str, name: &str| line.strip_prefix(name).is_some_and(|rest| rest.trim_start().starts_with('='));
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            current = header.trim().to_string();
        } else if (current == section && assigns(line, key)) || (current.is_empty() && assigns(line, &format!("{section}.{key}"))) {
            return Some(i + 1);
        }
    }
    None
}

/// A resumed run may change how long it goes on and how often it logs, evaluates and saves (the keys of
/// `changeable`); any other key that differs from the saved config is an error naming it and both
/// values, since a run changed midway would be neither the old run nor a new one.
pub(crate) fn check_resumable<T: Serialize>(saved: &T, resumed: &T, changeable: &[&str]) -> Result<(), TrainError> {
    let table = |c: &T| toml::Table::try_from(c).expect("a config always serialises");
    let (old, new) = (table(saved), table(resumed));
    let mut changed = Vec::new();
    for (section, values) in &new {
        let (Some(values), Some(before)) = (values.as_table(), old.get(section).and_then(|v| v.as_table())) else { continue };
        for (key, value) in values {
            let name = format!("{section}.{key}");
            if before.get(key) != Some(value) && !changeable.contains(&name.as_str()) {
                changed.push(format!("{name} = {} (saved: {})", value, before.get(key).map(|v| v.to_string()).unwrap_or_else(|| "absent".into())));
            }
        }
    }
    if changed.is_empty() {
        Ok(())
    } else {
        Err(TrainError::Config(format!(
            "--resume continues the run as it was configured; only {} may change, but this would change {}: start a new run from its last checkpoint (--init-adapter RUN/checkpoint-N) to change them",
            changeable.join(", "),
            changed.join(", ")
        )))
    }
}

/// Lays `user`'s keys over `base` (`origin` names where they come from in errors, `text` is what was
/// parsed, for line numbers), each checked by `check` once it is in place, so the first bad key is the
/// one reported.
pub(crate) fn merge(
    base: &mut toml::Table,
    user: toml::Table,
    origin: String,
    text: &str,
    mut check: impl FnMut(&str, &str, &toml::Table) -> Result<(), TrainError>,
) -> Result<(), TrainError> {
    for (section, v) in user {
        let toml::Value::Table(v) = v else {
            let at = top_line(text, &section).map(|l| format!(":{l}")).unwrap_or_default();
            if base.get(&section).is_some_and(toml::Value::is_table) {
                return Err(TrainError::Config(format!("{origin}{at}: `{section}` must be a [section]")));
            }
            let home = sections_with(base, &section);
            let hint = if home.is_empty() { String::new() } else { format!(": put it under {}", home.join(" or ")) };
            return Err(TrainError::Config(format!("{origin}{at}: `{section}` is outside any [section] (top-level keys are not allowed){hint}")));
        };
        if !base.get(&section).is_some_and(toml::Value::is_table) {
            let at = top_line(text, &section).map(|l| format!(":{l}")).unwrap_or_default();
            let hint = did_you_mean(&section, base.iter().filter(|(_, v)| v.is_table()).map(|(s, _)| s.as_str()));
            return Err(TrainError::Config(format!("{origin}{at}: unknown section [{section}]{hint}")));
        }
        for (key, value) in v {
            let target = base.get_mut(&section).and_then(|t| t.as_table_mut()).expect("a table, checked above");
            if !target.contains_key(&key) {
                let at = key_line(text, &section, &key).map(|l| format!(":{l}")).unwrap_or_default();
                let hint = did_you_mean(&key, target.keys().map(String::as_str));
                return Err(TrainError::Config(format!("{origin}{at}: unknown key {section}.{key}{hint}")));
            }
            target.insert(key.clone(), value);
            check(&section, &key, base)?;
        }
    }
    Ok(())
}

/// Applies one `section.key=value`.
pub fn set(base: &mut toml::Table, assignment: &str) -> Result<(), TrainError> {
    let (path, raw) = assignment.split_once('=').ok_or_else(|| TrainError::Config(format!("`{assignment}`: expected section.key=value")))?;
    let (section, key) = path.trim().split_once('.').ok_or_else(|| TrainError::Config(format!("`{path}`: expected section.key")))?;
    let sections = did_you_mean(section, base.iter().filter(|(_, v)| v.is_table()).map(|(s, _)| s.as_str()));
    let table = base
        .get_mut(section)
        .and_then(|t| t.as_table_mut())
        .ok_or_else(|| TrainError::Config(format!("`{assignment}`: unknown section [{section}]{sections}")))?;
    let keys = did_you_mean(key, table.keys().map(String::as_str));
    let old = table.get(key).ok_or_else(|| TrainError::Config(format!("`{assignment}`: unknown key {section}.{key}{keys}")))?;
    let raw = raw.trim();
    let parsed: toml::Value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").expect("just parsed"),
        Err(_) => toml::Value::String(raw.to_string()),
    };
    // A float key given an integer (`lr=1`) is still a float.
    let parsed = match (old, parsed) {
        (toml::Value::Float(_), toml::Value::Integer(i)) => toml::Value::Float(i as f64),
        (toml::Value::String(_), toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_)) => toml::Value::String(raw.to_string()),
        // A list key given one bare value (`data.train=a.jsonl`) is a list of one.
        (toml::Value::Array(_), v @ toml::Value::String(_)) => toml::Value::Array(vec![v]),
        (_, v) => v,
    };
    table.insert(key.to_string(), parsed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error `from_layers` gives for this file and these `--set`s.
    fn layered_error(file: Option<&Path>, overrides: &[&str]) -> String {
        let overrides: Vec<String> = overrides.iter().map(|o| o.to_string()).collect();
        TrainConfig::from_layers(file, &overrides).unwrap_err().to_string()
    }

    /// `from_layers` fails for a config file holding `text`; its error is the file's path, then `at`.
    fn assert_file_error(text: &str, at: &str) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, text).unwrap();
        assert_layered_error(Some(&p), &[], format!("{}:{at}", p.display()));
    }

    /// `from_layers` fails for this file and these `--set`s, and its error says `expected`.
    fn assert_layered_error(file: Option<&Path>, overrides: &[&str], expected: impl AsRef<str>) {
        let e = layered_error(file, overrides);
        assert!(e.contains(expected.as_ref()), "{e}");
    }

    #[test]
    fn an_advantage_kind_is_named_as_serde_names_it() {
        for kind in [AdvantageKind::Reinforce, AdvantageKind::Rloo, AdvantageKind::Grpo] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.name());
        }
    }

    /// `default.toml` is the one source of the defaults; the types that also stand alone (an `agent.json`
    /// lacking a key reads `EpisodeSpec`'s defaults; an old config without `[env]` reads `EnvSection`'s)
    /// must agree with it, key by key.
    #[test]
    fn the_types_defaults_agree_with_default_toml_key_by_key() {
        fn differing<T: Serialize>(section: &str, from_toml: &T, from_type: &T) -> Vec<String> {
            let table = |v: &T| toml::Table::try_from(v).expect("a section serialises");
            let (a, b) = (table(from_toml), table(from_type));
            assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "[{section}]: the same keys");
            a.iter().filter(|(k, v)| b.get(*k) != Some(v)).map(|(k, v)| format!("{section}.{k}: default.toml {v}, Default {}", b[k])).collect()
        }
        let c = TrainConfig::default();
        let mut wrong = differing("rollout", &c.rollout.episode, &EpisodeSpec::default());
        wrong.extend(differing("env", &c.env, &EnvSection::default()));
        assert!(wrong.is_empty(), "{wrong:#?}");
        assert_eq!(c.data.questions, agentrt_rollout::DEFAULT_QUESTIONS_FILE);
    }

    #[test]
    fn defaults_parse_and_name_the_run() {
        let c = TrainConfig::default();
        assert_eq!(c.model.name, agentrt_policy::DEFAULT_MODEL_NAME, "one name for the default model");
        assert_eq!(c.run_name(), "smollm2-135m_lr1e-4_g4_beta0.02_s42");
        let c = TrainConfig::from_layers(None, &["algorithm.lr=1e-5".into(), "algorithm.advantage=rloo".into(), "rollout.sampler=openai:m@http://x/v1".into()])
            .unwrap();
        assert_eq!(c.run_name(), "smollm2-135m_lr1e-5_g4_beta0.02_s42_rloo");
        assert_eq!(c.rollout.sampler, "openai:m@http://x/v1");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        // A saved config is read whole, not layered: the flattened episode keys still admit no stranger.
        let saved = DEFAULT_CONFIG.replace("[rollout]\n", "[rollout]\nmax_turnz = 2\n");
        let e = toml::from_str::<TrainConfig>(&saved).unwrap_err().to_string();
        assert!(e.contains("max_turnz"), "{e}");
        assert_layered_error(None, &["algorithm.lrr=1"], "algorithm.lrr");
        assert_layered_error(None, &["rollout.num_rollouts=1"], "rollout.num_rollouts");
        assert_layered_error(None, &["routing.detector=contains:x"], "dual_lora");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "[algorithm]\nlr = 0.001\n[nope]\nx = 1\n").unwrap();
        let e = layered_error(Some(&p), &[]);
        assert!(e.contains("c.toml") && e.contains("[nope]"), "{e}");
        // A wrong type names the file, the line and the key; a --set names itself.
        assert_file_error("# my run\n[algorithm]\nlr = 0.001\n\n[rollout]\ntemperature = 0.7\nbatch_size = \"two\"\n", "7: rollout.batch_size: invalid type");
        assert_layered_error(None, &["rollout.batch_size=two"], "--set rollout.batch_size=two: invalid type");
        std::fs::write(&p, "[algorithm]\nlr = 0.001\n").unwrap();
        assert_eq!(TrainConfig::from_layers(Some(&p), &[]).unwrap().algorithm.lr, 0.001);
    }

    #[test]
    fn an_unknown_key_names_its_line_and_the_key_it_resembles() {
        assert_file_error("[algorithm]\nlr = 0.001\n\n[rollout]\nnum_rolouts = 4\n", "5: unknown key rollout.num_rolouts (did you mean `num_rollouts`?)");
        assert_layered_error(None, &["rollout.num_rolouts=4"], "unknown key rollout.num_rolouts (did you mean `num_rollouts`?)");
        assert_layered_error(None, &["rolout.num_rollouts=4"], "unknown section [rolout] (did you mean `rollout`?)");
        assert_file_error("[algorithm]\nlr = 0.001\n[algorythm]\nbeta = 0\n", "3: unknown section [algorythm] (did you mean `algorithm`?)");
        // Nothing close: no guess.
        let e = layered_error(None, &["algorithm.zzzzzz=1"]);
        assert!(e.contains("unknown key algorithm.zzzzzz") && !e.contains("did you mean"), "{e}");
    }

    #[test]
    fn an_out_of_range_value_names_the_file_and_line_or_the_set() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "# mine\n[algorithm]\nbeta = 0.01\nlr = -1\n").unwrap();
        assert_layered_error(Some(&p), &[], format!("{}:4: algorithm.lr: must be in (0, 1)", p.display()));
        // The --set that gave it wins over the file.
        assert_layered_error(Some(&p), &["algorithm.lr=2"], "--set algorithm.lr=2: algorithm.lr: must be in (0, 1)");
        // A key of a combined check (`beta / max_grad_norm / weight_decay`) is found too.
        assert_file_error("[algorithm]\nweight_decay = -0.5\n", "2: algorithm.beta / max_grad_norm / weight_decay");
    }

    #[test]
    fn a_key_outside_any_section_says_so_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "# mine\nmax_steps = 10\n[run]\nseed = 1\n").unwrap();
        let e = layered_error(Some(&p), &[]);
        assert!(e.contains(&format!("{}:2: `max_steps` is outside any [section] (top-level keys are not allowed): put it under [run]", p.display())), "{e}");
        assert!(!e.contains("unknown section"), "{e}");
    }

    #[test]
    fn saved_config_round_trips() {
        let c = TrainConfig::from_layers(None, &["model.dual_lora=true".into(), "routing.detector=contains:hack".into(), "routing.unflagged=exclusive".into()])
            .unwrap();
        assert_eq!(c.routing.unflagged, Routing::Exclusive);
        assert_layered_error(None, &["routing.unflagged=both"], "unflagged");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.toml");
        std::fs::write(&p, c.to_toml()).unwrap();
        assert_eq!(TrainConfig::read(&p).unwrap(), c);
    }

    #[test]
    fn a_resumed_run_keeps_its_saved_config_and_may_change_only_its_length_and_cadences() {
        let saved = TrainConfig::from_layers(None, &["algorithm.lr=3e-5".into(), "run.max_steps=10".into()]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.toml");
        std::fs::write(&p, saved.to_toml()).unwrap();

        let same = TrainConfig::resumed(&p, None, &[]).unwrap();
        assert_eq!(same, saved, "a key not given keeps its saved value, not the default's");
        let longer = TrainConfig::resumed(&p, None, &["run.max_steps=30".into(), "run.save_steps=2".into(), "algorithm.lr=3e-5".into()]).unwrap();
        assert_eq!((longer.run.max_steps, longer.run.save_steps, longer.algorithm.lr), (30, 2, 3e-5));

        let e = TrainConfig::resumed(&p, None, &["algorithm.lr=1e-3".into(), "rollout.num_rollouts=8".into()]).unwrap_err().to_string();
        assert!(
            e.contains("algorithm.lr = 0.001 (saved: 0.00003)") && e.contains("rollout.num_rollouts = 8 (saved: 4)") && e.contains("--init-adapter"),
            "{e}"
        );
        let e = check_resumable(&saved, &TrainConfig::default(), TrainConfig::CHANGEABLE_ON_RESUME).unwrap_err().to_string();
        assert!(e.contains("algorithm.lr = 0.0001 (saved: 0.00003)") && !e.contains("run.max_steps ="), "{e}");
    }
}
