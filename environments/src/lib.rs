//! Environments: everything that defines a task, in one place, so `train`, `eval` and `trajectories`
//! play the same episodes.
//!
//! The design in three parts:
//! - **what is asked**: an environment's questions: the wiki's question files
//!   (`agentrt_search::questions`, the one reader, which `agentrt_rollout` re-exports) or the code environment's tasks ([`code::tasks`]: a signature and
//!   docstring, hidden tests, an entry point), with their splits.
//! - **how it is played**: the system prompt and demonstration, the episode bounds and the
//!   [`ReplyFormat`] (wiki: programs that call tools, several turns; code: one reply whose code is the
//!   answer), and the stop strings the sampler ends a reply at. [`Environment::settings`] is all of it as
//!   one comparable value.
//! - **how it is scored**: a [`Grader`]: the judge for the wiki, the task's tests for code
//!   ([`code::grader::TestGrader`]: each test its own sandboxed program; reward = `base_weight` × tests
//!   passed + `perfect_weight` when all pass, each part logged apart).
//!
//! An environment is chosen by name (`wiki`, `code`) in the `[env]` section of a training config
//! ([`EnvSection`]), which `agentrt train` and `agentrt eval --env` read the same way.

pub mod code;

use agentrt_policy::Message;
use agentrt_rollout::{EpisodeConfig, EpisodeRunner, Grader, ReplyFormat};
use agentrt_runtime::Sandbox;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Which environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnvName {
    /// Answer questions about a Wikipedia corpus by writing programs that search and read it.
    Wiki,
    /// Write a Python function from its signature and docstring; its tests are the reward.
    Code,
}

impl EnvName {
    /// `wiki` or `code` (as `--env` and `env.name` spell it).
    pub fn parse(name: &str) -> Result<EnvName, String> {
        match name {
            "wiki" => Ok(EnvName::Wiki),
            "code" => Ok(EnvName::Code),
            other => Err(format!("unknown environment `{other}`: expected wiki or code")),
        }
    }

    /// The name as `--env` and `env.name` spell it; the inverse of [`EnvName::parse`].
    pub fn as_str(self) -> &'static str {
        match self {
            EnvName::Wiki => "wiki",
            EnvName::Code => "code",
        }
    }
}

/// The wiki environment's reply length when nothing else sets it (see [`EnvSection::default_max_new_tokens`]).
pub const WIKI_MAX_NEW_TOKENS: usize = 160;

/// Fuel a code test may burn when `env.test_fuel` does not say (ten times `rollout.fuel`'s default, so a
/// correct but plain solution of a HumanEval task is not cut short: at 200 million, 18 of 1,640
/// Qwen2.5-Coder samples that CPython passes failed on fuel alone).
pub const CODE_TEST_FUEL: u64 = 2_000_000_000;

/// A code test's wall time when `env.test_timeout_ms` does not say: HumanEval's harness allows 3 s.
pub const CODE_TEST_TIMEOUT_MS: u64 = 3_000;

/// The `[env]` section of a training config: which environment, and the code environment's own keys
/// (the wiki's live in `[data]` and `[rollout]`, where they were before environments had a name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    /// Which environment is played (`env.name`; default `wiki`).
    pub name: EnvName,
    /// Code tasks (JSON Lines in HumanEval's format).
    pub tasks: String,
    /// Which tasks train: `train`, `test` or `all` (HumanEval's documented split: every fourth is `test`).
    pub split: String,
    /// Require `<reasoning>…</reasoning><answer>…</answer>` (a reply without it scores 0).
    pub reasoning_format: bool,
    /// Reward for passing every test, paid pro rata.
    pub base_weight: f64,
    /// Added when every test passes.
    pub perfect_weight: f64,
    /// Tests run per task at most (its first ones); 0: all.
    pub max_tests_per_problem: usize,
    /// Fuel each test program may burn. A test calls the candidate on real inputs (HumanEval/147 loops
    /// over 10^6 triples: 0.75 billion fuel, about 0.1 s), far more work than a wiki program's tool calls.
    #[serde(default = "default_test_fuel")]
    pub test_fuel: u64,
    /// Wall time each test program may take, in milliseconds (HumanEval's own harness gives a task 3 s).
    #[serde(default = "default_test_timeout_ms")]
    pub test_timeout_ms: u64,
}

// Configs saved before the code tests had their own limits load with the defaults.
fn default_test_fuel() -> u64 {
    CODE_TEST_FUEL
}

fn default_test_timeout_ms() -> u64 {
    CODE_TEST_TIMEOUT_MS
}

impl Default for EnvSection {
    fn default() -> Self {
        EnvSection {
            name: EnvName::Wiki,
            tasks: "data/humaneval/HumanEval.jsonl".into(),
            split: "train".into(),
            reasoning_format: false,
            base_weight: 1.0,
            perfect_weight: 0.5,
            max_tests_per_problem: 0,
            test_fuel: CODE_TEST_FUEL,
            test_timeout_ms: CODE_TEST_TIMEOUT_MS,
        }
    }
}

impl EnvSection {
    /// Checks ranges; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        for (key, v) in [("env.base_weight", self.base_weight), ("env.perfect_weight", self.perfect_weight)] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(format!("{key}: must be a finite number, 0 or more"));
            }
        }
        if self.name == EnvName::Code && self.base_weight + self.perfect_weight == 0.0 {
            return Err("env.base_weight / env.perfect_weight: both 0 would reward nothing".into());
        }
        if self.test_fuel == 0 || self.test_timeout_ms == 0 {
            return Err("env.test_fuel / env.test_timeout_ms: must be at least 1".into());
        }
        if !["train", "test", "all"].contains(&self.split.as_str()) {
            return Err(format!("env.split: `{}`: expected train, test or all", self.split));
        }
        Ok(())
    }

    /// The episode bounds of this environment over `wiki` (the wiki's, from `[rollout]`): the code
    /// environment plays one reply, read whole as the answer, and runs each test under `test_fuel` and
    /// `test_timeout_ms` (memory and output bounds are `[rollout]`'s).
    pub fn episode_config(&self, wiki: EpisodeConfig) -> EpisodeConfig {
        match self.name {
            EnvName::Wiki => wiki,
            EnvName::Code => EpisodeConfig {
                max_turns: 1,
                reply_format: ReplyFormat::FinalAnswer,
                limits: agentrt_runtime::Limits { fuel: self.test_fuel, timeout: std::time::Duration::from_millis(self.test_timeout_ms), ..wiki.limits },
                ..wiki
            },
        }
    }

    /// Tokens a reply may take when neither a flag nor an adapter's settings say: a wiki reply is a short
    /// program or an answer; a code reply restates the signature and docstring before the body (at 384
    /// tokens, about 13% of Qwen2.5-Coder's HumanEval replies were cut before their closing fence).
    pub fn default_max_new_tokens(&self) -> usize {
        match self.name {
            EnvName::Wiki => WIKI_MAX_NEW_TOKENS,
            EnvName::Code => 512,
        }
    }

    /// Where replies stop.
    pub fn stop_strings(&self) -> Vec<String> {
        let stops = match self.name {
            EnvName::Wiki => agentrt_rollout::STOP_STRINGS,
            EnvName::Code => code::CODE_STOP_STRINGS,
        };
        stops.iter().map(|s| s.to_string()).collect()
    }

    /// The test reward of the code environment.
    pub fn test_reward(&self) -> code::grader::TestReward {
        code::grader::TestReward {
            base_weight: self.base_weight as f32,
            perfect_weight: self.perfect_weight as f32,
            max_tests_per_problem: self.max_tests_per_problem,
            reasoning_format: self.reasoning_format,
        }
    }
}

/// A task definition, built once per command: what an [`EpisodeRunner`] needs, and the stop strings
/// for the sampler.
pub struct Environment {
    /// Which environment this is.
    pub name: EnvName,
    /// The system prompt every episode starts with, rendered (the wiki's lists the sandbox's plug-ins).
    pub system_prompt: String,
    /// Earlier turns shown before every question (few-shot); may be empty.
    pub demonstration: Vec<Message>,
    /// The episode bounds and reply format, already adapted to this environment.
    pub episode: EpisodeConfig,
    /// The strings the sampler ends a reply at.
    pub stop: Vec<String>,
    /// Scores final answers: the judge for the wiki, the task's tests for code.
    pub grader: Arc<dyn Grader>,
}

/// Everything that decides how an episode plays, as one value (two commands that build equal settings
/// play the same episodes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvironmentSettings {
    /// Which environment.
    pub name: EnvName,
    /// The rendered system prompt.
    pub system_prompt: String,
    /// The demonstration's turns, as `(role, content)`.
    pub demonstration: Vec<(String, String)>,
    /// The episode bounds and reply format.
    pub episode: EpisodeConfig,
    /// The strings the sampler ends a reply at.
    pub stop: Vec<String>,
    /// The grader's description ([`Grader::name`]: `rule(f1>=0.80)`, `tests(base 1, perfect 0.5)`).
    pub grader: String,
}

impl Environment {
    /// The runner that plays this environment's episodes in `sandbox`.
    pub fn runner(&self, sandbox: Arc<Sandbox>) -> EpisodeRunner {
        EpisodeRunner {
            sandbox,
            grader: self.grader.clone(),
            system_prompt: self.system_prompt.clone(),
            demonstration: self.demonstration.clone(),
            config: self.episode.clone(),
        }
    }

    /// Everything that decides how this environment's episodes play, as one comparable value.
    pub fn settings(&self) -> EnvironmentSettings {
        EnvironmentSettings {
            name: self.name,
            system_prompt: self.system_prompt.clone(),
            demonstration: self.demonstration.iter().map(|m| (m.role.clone(), m.content.clone())).collect(),
            episode: self.episode.clone(),
            stop: self.stop.clone(),
            grader: self.grader.name(),
        }
    }
}

/// The wiki environment's settings, from `[rollout]` (or an adapter's `agent.json`, or eval's flags).
#[derive(Debug, Clone)]
pub struct WikiSettings {
    /// `short`, `full` or the prompt's own text (`{plugins}` lists the sandbox's plug-ins).
    pub system_prompt: String,
    /// Show the worked demonstration before every question.
    pub demonstration: bool,
    /// `rule`, `rule:0.5` or `openai:MODEL@URL`.
    pub judge: String,
}

impl Environment {
    /// The environment `section` names. The wiki one reads `wiki` for its prompt and judge; the code one
    /// reads its tasks (all of them: the grader knows every task, whichever split is played). `episode`
    /// is the wiki's bounds; [`EnvSection::episode_config`] adapts them.
    pub fn build(
        section: &EnvSection,
        wiki: &WikiSettings,
        episode: EpisodeConfig,
        sandbox: Arc<Sandbox>,
    ) -> Result<Environment, agentrt_rollout::RolloutError> {
        section.validate().map_err(agentrt_rollout::RolloutError::Invalid)?;
        let episode = section.episode_config(episode);
        let stop = section.stop_strings();
        match section.name {
            EnvName::Wiki => {
                let plugins = sandbox.plugins().signatures();
                let judge =
                    agentrt_judge::judge_from_spec(&wiki.judge).map_err(|e| agentrt_rollout::RolloutError::Invalid(format!("judge {:?}: {e}", wiki.judge)))?;
                Ok(Environment {
                    name: EnvName::Wiki,
                    system_prompt: agentrt_rollout::system_prompt(agentrt_rollout::system_prompt_template(&wiki.system_prompt), &plugins),
                    demonstration: if wiki.demonstration { agentrt_rollout::demonstration() } else { Vec::new() },
                    episode,
                    stop,
                    grader: Arc::new(agentrt_rollout::JudgeGrader::new(judge)),
                })
            }
            EnvName::Code => {
                let tasks = code::tasks::read_tasks(std::path::Path::new(&section.tasks), None)?;
                let grader = code::grader::TestGrader::new(sandbox, &tasks, episode.limits, section.test_reward())?;
                let prompt = if section.reasoning_format { code::CODE_REASONING_SYSTEM_PROMPT } else { code::CODE_SYSTEM_PROMPT };
                Ok(Environment { name: EnvName::Code, system_prompt: prompt.into(), demonstration: Vec::new(), episode, stop, grader: Arc::new(grader) })
            }
        }
    }
}

/// The code environment's questions of `split` (`train`, `test`, `all`): one per task.
pub fn code_questions(section: &EnvSection, split: &str) -> Result<Vec<agentrt_rollout::Question>, agentrt_rollout::RolloutError> {
    let tasks = code::tasks::read_tasks(std::path::Path::new(&section.tasks), Some(split))?;
    Ok(tasks.iter().map(code::tasks::question_of).collect())
}
