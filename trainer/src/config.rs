//! Every hyperparameter of an `agentrt train` run, one section each, as `trainer/default.toml` lays them out;
//! how such a config is layered, resumed and read is [`crate::run_config`]'s.

use crate::error::TrainError;
use crate::model_section::model_stem;
pub use crate::model_section::ModelSection;
use crate::run_config::RunConfig;
use agentrt_environments::EnvSection;
use agentrt_policy::Routing;
use agentrt_rollout::EpisodeSpec;
use serde::{Deserialize, Serialize};

/// The embedded defaults (`trainer/default.toml`).
pub const DEFAULT_CONFIG: &str = include_str!("../default.toml");

/// Every hyperparameter of an `agentrt train` run, one field per section of `trainer/default.toml`; saved as
/// the run's config.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// The base model and its LoRA adapters.
    pub model: ModelSection,
    /// How each step's episodes are played, in every environment: batch, turns, sampling, sampler and sandbox limits.
    pub rollout: RolloutSection,
    /// How rewards become an update: advantages, the KL penalty, the optimizer and reward shaping.
    pub algorithm: AlgorithmSection,
    /// Gradient routing: which samples train only the forget adapter, and its evaluation.
    pub routing: RoutingSection,
    /// The run's length, seed and name, and how often it logs and saves checkpoints.
    pub run: RunSection,
    /// Which environment is played, and each environment's own settings (`[env.wiki]`, `[env.code]`).
    /// Configs saved before it had a name ran the wiki.
    #[serde(default)]
    pub env: EnvSection,
}

/// `[rollout]`: how many episodes a step plays and where they are sampled; how each episode is played
/// (turns, sampling, observation size, sandbox bounds) is its [`EpisodeSpec`], whose keys sit in the same
/// section and which every checkpoint saves in its `agent.json`.
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
    /// How the local sampler multiplies the frozen weights: 8-bit activations (faster; log-probs a little off
    /// the learner's) or f32 (the training forward's products). Configs saved before it sampled in f32.
    #[serde(default)]
    pub sampler_activations: agentrt_policy::DecodeActivations,
    /// How the next questions are chosen: `order` (every one in the seeded order) or `unsettled` (passing
    /// over questions whose last `settled_after` groups were each all right or all wrong, but for a share
    /// `settled_share` of them): [`crate::draw`].
    #[serde(default)]
    pub draw: crate::draw::DrawRule,
    /// Under `draw = "unsettled"`: the groups in a row, each all right or all wrong, that settle a question.
    #[serde(default = "settled_after_default")]
    pub settled_after: usize,
    /// Under `draw = "unsettled"`: the share of settled questions drawn all the same, so nothing is forgotten.
    #[serde(default = "settled_share_default")]
    pub settled_share: f64,
    /// An earlier run's `groups.jsonl` the questions' records start from (empty: this run's alone).
    #[serde(default)]
    pub draw_records: String,
    /// How every episode is played.
    #[serde(flatten)]
    pub episode: EpisodeSpec,
}

fn exact_tokens_default() -> bool {
    true
}

fn settled_after_default() -> usize {
    2
}

fn settled_share_default() -> f64 {
    0.1
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
    /// Forward a step's samples as the trie of their tokens (what they share computed once, the output
    /// head only at the model's tokens), in the policy's pass and the KL reference's (the same loss and
    /// gradients; false: every sample whole and padded, as before).
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
    /// The cap of the truncated importance weight learner / sampler on each token's policy-gradient term
    /// (0: off; configs saved before it had none).
    #[serde(default)]
    pub sampler_correction: f64,
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
    /// What the slice decodes with: f32 (as `agentrt eval`) or int8 (as the sampler, faster).
    #[serde(default)]
    pub eval_activations: agentrt_policy::DecodeActivations,
}

fn default_eval_questions() -> usize {
    100
}

fn default_eval_skip() -> usize {
    300
}

/// The embedded defaults with fresh adapters (`model.init_adapter` empty, so no warm start lays an
/// adapter's settings over them): what `eval` and `trajectories` play when no config is given, the
/// environment as it is, not as the shipped adapter was trained. `agentrt train` on the defaults warm-starts
/// from the shipped adapter (`TrainConfig::from_layers(None, &[])`).
impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig::from_layers(None, &["model.init_adapter=".to_string()]).expect("the embedded default config is valid")
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
        "run.eval_activations",
    ];
    // Unset: every reply samples at `rollout.temperature`.
    const OPTIONAL_KEYS: &'static [&'static str] = &["rollout.temperature_after_tool"];
    // Where the wiki's and the code environment's keys were before each environment had its section.
    const MOVED_KEYS: &'static [(&'static str, &'static str)] = &[
        ("data.questions", "env.wiki.questions"),
        ("data.split", "env.wiki.split"),
        ("rollout.system_prompt", "env.wiki.system_prompt"),
        ("rollout.demonstration", "env.wiki.demonstration"),
        ("rollout.judge", "env.wiki.judge"),
        ("env.tasks", "env.code.tasks"),
        ("env.split", "env.code.split"),
        ("env.reasoning_format", "env.code.reasoning_format"),
        ("env.base_weight", "env.code.base_weight"),
        ("env.perfect_weight", "env.code.perfect_weight"),
        ("env.max_tests_per_problem", "env.code.max_tests_per_problem"),
        ("env.test_fuel", "env.code.test_fuel"),
        ("env.test_timeout_ms", "env.code.test_timeout_ms"),
    ];

    fn run_section(&self) -> (&str, &str) {
        (&self.run.output_dir, &self.run.run_name)
    }

    /// `model.init_adapter = "shipped"`: the adapter shipped for this model and environment, or none.
    fn resolve(&mut self) -> Result<(), TrainError> {
        crate::warm_start::resolve_shipped(&mut self.model, &self.env);
        Ok(())
    }

    /// The warm start's `agent.json`: it plays as it was trained unless the user says otherwise.
    fn warm_start_layer(&self) -> Result<Option<toml::Table>, TrainError> {
        crate::warm_start::played_as_trained(&self.model)
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
        if r.settled_after == 0 {
            return bad("rollout.settled_after", "must be at least 1");
        }
        if !(0.0..=1.0).contains(&r.settled_share) {
            return bad("rollout.settled_share", "must lie in [0, 1]");
        }
        if !r.draw_records.is_empty() && !std::path::Path::new(&r.draw_records).is_file() {
            return bad("rollout.draw_records", &format!("{}: no such file (an earlier run's groups.jsonl)", r.draw_records));
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

/// `1e-5` rather than `0.00001`.
fn short_float(x: f64) -> String {
    format!("{x:e}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_config::check_resumable;
    use std::path::Path;

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
    /// lacking a key reads `EpisodeSpec`'s and `WikiSection`'s defaults; an old config without `[env]` reads
    /// `EnvSection`'s) must agree with it, key by key.
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
        wrong.extend(differing("env.wiki", &c.env.wiki, &agentrt_environments::WikiSection::default()));
        wrong.extend(differing("env.code", &c.env.code, &agentrt_environments::CodeSection::default()));
        assert!(wrong.is_empty(), "{wrong:#?}");
        assert_eq!(c.env, EnvSection::default());
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
    fn an_optional_key_the_defaults_leave_out_can_be_given_by_file_and_by_set() {
        let after_tool = |c: &TrainConfig| c.rollout.episode.temperature_after_tool;
        assert_eq!(after_tool(&TrainConfig::from_layers(None, &[]).unwrap()), None);
        let set = TrainConfig::from_layers(None, &["rollout.temperature_after_tool=1.1".into()]).unwrap();
        assert_eq!(after_tool(&set), Some(1.1));
        // An integer is a temperature too, and a saved config reads back with the key it was given.
        assert_eq!(after_tool(&TrainConfig::from_layers(None, &["rollout.temperature_after_tool=1".into()]).unwrap()), Some(1.0));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, set.to_toml()).unwrap();
        assert_eq!(after_tool(&TrainConfig::read(&p).unwrap()), Some(1.1));
        std::fs::write(&p, "[rollout]\ntemperature = 0.8\ntemperature_after_tool = 1.2\n").unwrap();
        assert_eq!(after_tool(&TrainConfig::from_layers(Some(&p), &[]).unwrap()), Some(1.2));
        // Its type and range are still checked, where it was written.
        assert_layered_error(None, &["rollout.temperature_after_tool=hot"], "--set rollout.temperature_after_tool=hot: invalid type");
        assert_file_error("[rollout]\ntemperature_after_tool = \"hot\"\n", "2: rollout.temperature_after_tool: invalid type");
        assert_layered_error(None, &["rollout.temperature_after_tool=3"], "temperature_after_tool");
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

    /// Sections nest: `[env.wiki]` in a file and `env.wiki.KEY` in a `--set` reach their key, the rest of
    /// the section keeps its defaults, and a stranger is named with its line and the key it resembles.
    #[test]
    fn nested_sections_layer_key_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "[env.wiki]\njudge = \"rule:0.5\"\n\n[env.code]\ntest_fuel = 9\n").unwrap();
        // Fresh adapters: no warm start lays an adapter's prompt over the defaults.
        let c = TrainConfig::from_layers(Some(&p), &["env.wiki.split=dev".into(), "model.init_adapter=".into()]).unwrap();
        assert_eq!((c.env.wiki.judge.as_str(), c.env.wiki.split.as_str(), c.env.code.test_fuel), ("rule:0.5", "dev", 9));
        assert_eq!((c.env.wiki.system_prompt.as_str(), c.env.code.test_timeout_ms), ("short", 3000), "the rest keeps its defaults");
        assert_file_error("[env.wiki]\njudg = \"rule\"\n", "2: unknown key env.wiki.judg (did you mean `judge`?)");
        assert_file_error("[env.wik]\njudge = \"rule\"\n", "1: unknown section [env.wik] (did you mean `wiki`?)");
        assert_file_error("[env]\nwiki = 3\n", "2: `env.wiki` must be a [section]");
        assert_file_error("[env.code]\ntest_fuel = \"lots\"\n", "2: env.code.test_fuel: invalid type");
        assert_layered_error(None, &["env.wiki.judg=rule"], "unknown key env.wiki.judg (did you mean `judge`?)");
        assert_layered_error(None, &["env.wiki=rule"], "[env.wiki] is a section: set one of its keys");
        // A range error names the nested key and where it was given.
        assert_file_error("[env.code]\nname = 1\n", "2: unknown key env.code.name");
        assert_layered_error(
            None,
            &["env.name=code", "env.code.base_weight=0", "env.code.perfect_weight=0"],
            "--set env.code.perfect_weight=0: env.code.base_weight / env.code.perfect_weight: both 0",
        );
    }

    /// The wiki's keys lived in `[data]` and `[rollout]`, the code environment's flat in `[env]`, until each
    /// environment had its section: a file, a `--set` or a saved run's config.toml that names them there
    /// reads them where they are now; one that sets a key in both places is refused.
    #[test]
    fn keys_where_they_were_before_the_env_sections_read_where_they_are() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config-before-env-sections.toml");
        let run = tempfile::tempdir().unwrap();
        let saved = finished_run(run.path(), &std::fs::read_to_string(&fixture).unwrap());
        let old = TrainConfig::read(&saved).unwrap();
        // A run saved before the 8-bit sampler reads as it ran: f32 sampling, no correction.
        let expected = TrainConfig::from_layers(
            None,
            &[
                "env.name=code".into(),
                "env.code.test_fuel=7".into(),
                "env.wiki.judge=rule:0.5".into(),
                "rollout.sampler_activations=f32".into(),
                "algorithm.sampler_correction=0".into(),
            ],
        )
        .unwrap();
        assert_eq!(old, expected);
        // Such a run resumes, and may still change only its length.
        let resumed = TrainConfig::resumed(&saved, true, None, &["run.max_steps=20".into()]).unwrap();
        assert_eq!((resumed.run.max_steps, &resumed.env), (20, &expected.env));
        let e = TrainConfig::resumed(&saved, true, None, &["rollout.judge=rule".into()]).unwrap_err().to_string();
        assert!(e.contains("env.wiki.judge = \"rule\" (saved: \"rule:0.5\")"), "{e}");
        // A user's file in the old layout, and --set with the old names.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "[data]\nsplit = \"dev\"\n\n[rollout]\nsystem_prompt = \"full\"\nmax_turns = 2\n\n[env]\ntest_timeout_ms = 900\n").unwrap();
        let c = TrainConfig::from_layers(Some(&p), &["data.questions=q.jsonl".into(), "env.reasoning_format=true".into()]).unwrap();
        assert_eq!((c.env.wiki.split.as_str(), c.env.wiki.system_prompt.as_str(), c.rollout.episode.max_turns), ("dev", "full", 2));
        assert_eq!((c.env.code.test_timeout_ms, c.env.wiki.questions.as_str(), c.env.code.reasoning_format), (900, "q.jsonl", true));
        // Both places at once is ambiguous.
        assert_file_error(
            "[data]\nsplit = \"dev\"\n\n[env.wiki]\nsplit = \"train\"\n",
            " sets both `data.split` (where it was) and `env.wiki.split` (where it is now)",
        );
    }

    /// A run directory in `dir` that finished a step (its metrics log has a line), saved with `config`;
    /// the path of its config.toml. (A run that never finished a step may change any key on resume.)
    fn finished_run(dir: &Path, config: &str) -> std::path::PathBuf {
        std::fs::write(dir.join(crate::run_dir::METRICS), "{\"step\": 1}\n").unwrap();
        let p = dir.join(crate::run_dir::CONFIG);
        std::fs::write(&p, config).unwrap();
        p
    }

    #[test]
    fn a_run_that_never_finished_a_step_may_change_any_key_on_resume() {
        let saved = TrainConfig::from_layers(None, &["algorithm.lr=3e-5".into()]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(crate::run_dir::CONFIG);
        std::fs::write(&p, saved.to_toml()).unwrap();
        let changed = TrainConfig::resumed(&p, false, None, &["algorithm.lr=1e-3".into(), "rollout.num_rollouts=8".into()]).unwrap();
        assert_eq!((changed.algorithm.lr, changed.rollout.num_rollouts), (1e-3, 8));
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
    fn the_held_out_slice_decodes_in_f32_unless_told_int8_and_other_words_are_refused() {
        assert_eq!(TrainConfig::default().run.eval_activations, agentrt_policy::DecodeActivations::F32);
        let int8 = TrainConfig::from_layers(None, &["run.eval_activations=int8".into()]).unwrap();
        assert_eq!(int8.run.eval_activations, agentrt_policy::DecodeActivations::Int8);
        let e = TrainConfig::from_layers(None, &["run.eval_activations=f16".into()]).unwrap_err().to_string();
        assert!(e.contains("eval_activations") && e.contains("f16"), "{e}");
        // A config saved before the key existed reads as f32, as it was played.
        let older = TrainConfig::default().to_toml().replace("eval_activations = \"f32\"\n", "");
        assert!(!older.contains("eval_activations"));
        let read: TrainConfig = toml::from_str(&older).unwrap();
        assert_eq!(read.run.eval_activations, agentrt_policy::DecodeActivations::F32);
    }

    #[test]
    fn a_resumed_run_keeps_its_saved_config_and_may_change_only_its_length_and_cadences() {
        let saved = TrainConfig::from_layers(None, &["algorithm.lr=3e-5".into(), "run.max_steps=10".into()]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = finished_run(dir.path(), &saved.to_toml());

        let same = TrainConfig::resumed(&p, true, None, &[]).unwrap();
        assert_eq!(same, saved, "a key not given keeps its saved value, not the default's");
        let longer = TrainConfig::resumed(&p, true, None, &["run.max_steps=30".into(), "run.save_steps=2".into(), "algorithm.lr=3e-5".into()]).unwrap();
        assert_eq!((longer.run.max_steps, longer.run.save_steps, longer.algorithm.lr), (30, 2, 3e-5));
        // How the held-out slice is decoded is the evaluation's, not the training's: a resume may change it.
        let int8 = TrainConfig::resumed(&p, true, None, &["run.eval_activations=int8".into()]).unwrap();
        assert_eq!((saved.run.eval_activations, int8.run.eval_activations), (agentrt_policy::DecodeActivations::F32, agentrt_policy::DecodeActivations::Int8));

        let e = TrainConfig::resumed(&p, true, None, &["algorithm.lr=1e-3".into(), "rollout.num_rollouts=8".into()]).unwrap_err().to_string();
        assert!(
            e.contains("algorithm.lr = 0.001 (saved: 0.00003)") && e.contains("rollout.num_rollouts = 8 (saved: 4)") && e.contains("--init-adapter"),
            "{e}"
        );
        let e = check_resumable(&saved, &TrainConfig::default(), TrainConfig::CHANGEABLE_ON_RESUME).unwrap_err().to_string();
        assert!(e.contains("algorithm.lr = 0.0001 (saved: 0.00003)") && !e.contains("run.max_steps ="), "{e}");
    }
}
