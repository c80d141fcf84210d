//! Environments: everything that defines a task, in one place, so `train`, `eval` and `trajectories`
//! play the same episodes.
//!
//! The design in three parts:
//! Each environment has a folder: [`wiki`] (answer questions about the corpus by writing programs that
//! search and read it) and [`code`] (write a function from its signature and docstring). The design in
//! three parts, each answered by the environment's folder:
//! - **what is asked**: an environment's questions: the wiki's questions file ([`wiki::questions`]) or
//!   the code environment's tasks ([`code::tasks`]: a signature and docstring, hidden tests, an entry
//!   point), with their splits; training and evaluation take them from [`Environment::questions`].
//! - **how it is played**: the system prompt and demonstration, the episode bounds, the
//!   [`ReplyGrammar`] (wiki: programs that call tools, several turns, [`wiki::ToolPrograms`]; code: one
//!   reply whose code is the answer, [`code::WholeReply`]), and the stop strings the sampler ends a reply
//!   at. [`Environment::settings`] is all of it as one comparable value.
//! - **how it is scored**: a [`Grader`]: the judge for the wiki ([`wiki::JudgeGrader`]), the task's tests
//!   for code ([`code::grader::TestGrader`]: each test its own sandboxed program); each grade carries its
//!   reward's named parts, which training weighs and logs one by one.
//!
//! An environment is chosen by name (`wiki`, `code`) in the `[env]` section of a training config
//! ([`EnvSection`]), which `agentrt train` and `agentrt eval --env` read the same way.

pub mod agent_file;
pub mod code;
/// Test set-up shared with other crates' tests; not part of the product's API (the `testing` feature,
/// which only dev-dependencies turn on).
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod wiki;

pub use agent_file::{shipped_adapter, AgentSettings, AGENT_FILE, SHIPPED};
use agentrt_policy::Message;
use agentrt_rollout::{EpisodeRunner, EpisodeSpec, Grader, Question, ReplyGrammar, RolloutError};
use agentrt_runtime::Sandbox;
pub use code::settings::{CodeSection, CODE_TEST_FUEL, CODE_TEST_TIMEOUT_MS};
use code::tasks::CodeTask;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wiki::WikiQuestions;
pub use wiki::WikiSection;

/// Which environment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnvName {
    /// Answer questions about a Wikipedia corpus by writing programs that search and read it.
    #[default]
    Wiki,
    /// Write a Python function from its signature and docstring; its tests are the reward.
    Code,
}

impl EnvName {
    /// Every environment, by the name `--env` and `env.name` spell it.
    pub const ALL: [(EnvName, &'static str); 2] = [(EnvName::Wiki, wiki::NAME), (EnvName::Code, code::NAME)];

    /// `wiki` or `code` (as `--env` and `env.name` spell it).
    pub fn parse(name: &str) -> Result<EnvName, String> {
        EnvName::ALL.iter().find(|(_, n)| *n == name).map(|(e, _)| *e).ok_or_else(|| format!("unknown environment `{name}`: expected wiki or code"))
    }

    /// The name as `--env` and `env.name` spell it; the inverse of [`EnvName::parse`].
    pub fn as_str(self) -> &'static str {
        EnvName::ALL.iter().find(|(e, _)| *e == self).map(|(_, n)| *n).expect("every environment is in ALL")
    }
}

/// The `[env]` section of a training config: which environment is played, and each environment's own
/// settings (`[env.wiki]`, `[env.code]`); what every environment has (turns, sampling, the sandbox's
/// bounds) is `[rollout]`'s [`EpisodeSpec`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    /// Which environment is played (`env.name`; default `wiki`).
    pub name: EnvName,
    /// `[env.wiki]`: the questions file, the prompt and the judge.
    #[serde(default)]
    pub wiki: WikiSection,
    /// `[env.code]`: the tasks, the reply format, the reward and the tests' bounds.
    #[serde(default)]
    pub code: CodeSection,
}

impl EnvSection {
    /// Checks both environments' settings; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        self.wiki.validate()?;
        self.code.validate(self.name == EnvName::Code)
    }

    /// How this environment plays `spec` (the `[rollout]` keys): the wiki as it stands; the code
    /// environment one reply, read whole as the answer, each test under `env.code.test_fuel` and `test_timeout_ms`
    /// (memory and tool-call bounds are `[rollout]`'s). The one place a spec is adapted: an
    /// [`Environment`] holds the result, and every command asks it.
    pub fn played(&self, spec: &EpisodeSpec) -> EpisodeSpec {
        match self.name {
            EnvName::Wiki => spec.clone(),
            EnvName::Code => EpisodeSpec { max_turns: 1, fuel: self.code.test_fuel, timeout_ms: self.code.test_timeout_ms, ..spec.clone() },
        }
    }

    /// How a reply is read: programs that call tools (wiki), or the whole reply as the answer (code).
    pub fn reply_grammar(&self) -> Arc<dyn ReplyGrammar> {
        match self.name {
            EnvName::Wiki => Arc::new(wiki::ToolPrograms),
            EnvName::Code => Arc::new(code::WholeReply),
        }
    }

    /// Whether programs call the wiki's tools (so the sandbox needs the search index); the code
    /// environment's test programs call none.
    pub fn serves_wiki_tools(&self) -> bool {
        self.name == EnvName::Wiki
    }

    /// Whether answers are graded by tests (reported as pass@k over tasks) rather than judged (accuracy).
    pub fn grades_with_tests(&self) -> bool {
        self.name == EnvName::Code
    }

    /// The split training evaluates on while it runs (`run.eval_split` empty): the wiki's `dev`, the code
    /// tasks' `test` (HumanEval's documented split).
    pub fn held_out_split(&self) -> &'static str {
        match self.name {
            EnvName::Wiki => "dev",
            EnvName::Code => "test",
        }
    }

    /// The split an evaluation plays when none is given: the wiki's `dev`; all of the code tasks (as
    /// published pass@k numbers use).
    pub fn default_eval_split(&self) -> &'static str {
        match self.name {
            EnvName::Wiki => "dev",
            EnvName::Code => "all",
        }
    }

    /// Plays the environment `name` (`--env`): a config that names the wiki (the default) may be played
    /// as another; a config that names another environment only as itself.
    pub fn select(&mut self, name: &str) -> Result<(), String> {
        let name = EnvName::parse(name)?;
        if name != self.name && self.name != EnvName::Wiki {
            return Err(format!("--env {}: the config plays the {} environment", name.as_str(), self.name.as_str()));
        }
        self.name = name;
        Ok(())
    }

    /// This section as the code environment (its `[env.code]` keys kept): what `eval --regrade` grades again,
    /// since only test-graded replies can be regraded.
    pub fn as_code(&self) -> EnvSection {
        EnvSection { name: EnvName::Code, ..self.clone() }
    }

    /// The split training plays: `env.wiki.split` or `env.code.split`.
    pub fn training_split(&self) -> &str {
        match self.name {
            EnvName::Wiki => &self.wiki.split,
            EnvName::Code => &self.code.split,
        }
    }

    /// The key that names the split training plays (`env.wiki.split`, `env.code.split`), as errors name it.
    pub fn split_key(&self) -> &'static str {
        match self.name {
            EnvName::Wiki => "env.wiki.split",
            EnvName::Code => "env.code.split",
        }
    }

    /// The questions of `split` (`all`: every one) of the played environment's file. None is an error
    /// naming the split and the file.
    pub fn read_questions(&self, split: &str) -> Result<Vec<Question>, RolloutError> {
        Dataset::read(self)?.questions(split)
    }

    /// Tokens a reply may take when neither a flag nor an adapter's settings say: a wiki reply is a short
    /// program or an answer; a code reply restates the signature and docstring before the body (at 384
    /// tokens, about 13% of Qwen2.5-Coder's HumanEval replies were cut before their closing fence).
    pub fn default_max_new_tokens(&self) -> usize {
        match self.name {
            EnvName::Wiki => EpisodeSpec::default().max_new_tokens,
            EnvName::Code => 512,
        }
    }

    /// Where replies stop.
    pub fn stop_strings(&self) -> Vec<String> {
        let stops = match self.name {
            EnvName::Wiki => wiki::STOP_STRINGS,
            EnvName::Code => code::CODE_STOP_STRINGS,
        };
        stops.iter().map(|s| s.to_string()).collect()
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
    /// How an episode is played here ([`EnvSection::played`] of the command's spec).
    pub spec: EpisodeSpec,
    /// How a reply is read.
    pub reply_grammar: Arc<dyn ReplyGrammar>,
    /// The strings the sampler ends a reply at.
    pub stop: Vec<String>,
    /// Scores final answers: the judge for the wiki, the task's tests for code.
    pub grader: Arc<dyn Grader>,
    /// What is asked, by split.
    dataset: Dataset,
    /// What serves the wiki tools (the index the gold pages are checked against).
    tools: Arc<dyn agentrt_runtime::ToolHost>,
}

/// An environment's questions: the wiki's file (read per split when asked), or the code tasks (read
/// once, when the environment is built: its grader holds them too).
enum Dataset {
    Wiki(WikiQuestions),
    Code { path: PathBuf, tasks: Vec<CodeTask> },
}

impl Dataset {
    fn read(section: &EnvSection) -> Result<Dataset, RolloutError> {
        Ok(match section.name {
            EnvName::Wiki => Dataset::Wiki(WikiQuestions::new(Path::new(&section.wiki.questions))),
            EnvName::Code => {
                let path = PathBuf::from(&section.code.tasks);
                Dataset::Code { tasks: code::tasks::read_tasks(&path, None)?, path }
            }
        })
    }

    fn questions(&self, split: &str) -> Result<Vec<Question>, RolloutError> {
        let wanted = |s: &Option<String>| split == "all" || s.as_deref() == Some(split);
        let (questions, path) = match self {
            Dataset::Wiki(questions) => (questions.of_split(split)?, questions.path()),
            Dataset::Code { path, tasks } => (tasks.iter().map(code::tasks::question_of).filter(|q| wanted(&q.split)).collect(), path.as_path()),
        };
        if questions.is_empty() {
            return Err(RolloutError::Invalid(format!("no questions of split `{split}` in {}", path.display())));
        }
        Ok(questions)
    }
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
    /// How an episode is played.
    pub spec: EpisodeSpec,
    /// How a reply is read (the grammar's name: `tool_programs`, `final_answer`).
    pub reply_format: &'static str,
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
            spec: self.spec.clone(),
            reply_grammar: self.reply_grammar.clone(),
        }
    }

    /// Everything that decides how this environment's episodes play, as one comparable value.
    pub fn settings(&self) -> EnvironmentSettings {
        EnvironmentSettings {
            name: self.name,
            system_prompt: self.system_prompt.clone(),
            demonstration: self.demonstration.iter().map(|m| (m.role.clone(), m.content.clone())).collect(),
            spec: self.spec.clone(),
            reply_format: self.reply_grammar.name(),
            stop: self.stop.clone(),
            grader: self.grader.name(),
        }
    }
}

impl Environment {
    /// The environment `section` names, playing `spec` (the `[rollout]` keys; [`EnvSection::played`]
    /// adapts them), with its own settings (`[env.wiki]`, `[env.code]`); the code environment reads its
    /// tasks here, once (the grader knows every task, whichever split is played).
    pub fn build(section: &EnvSection, spec: &EpisodeSpec, sandbox: Arc<Sandbox>) -> Result<Environment, RolloutError> {
        section.validate().map_err(RolloutError::Invalid)?;
        spec.validate().map_err(|e| RolloutError::Invalid(format!("rollout.{e}")))?;
        let spec = section.played(spec);
        let (stop, reply_grammar) = (section.stop_strings(), section.reply_grammar());
        let dataset = Dataset::read(section)?;
        let tools = sandbox.tools().clone();
        let (system_prompt, demonstration, grader): (String, Vec<Message>, Arc<dyn Grader>) = match &dataset {
            Dataset::Wiki(_) => {
                let (prompt, demonstration, grader) = wiki::played(&section.wiki, &sandbox)?;
                (prompt, demonstration, grader)
            }
            Dataset::Code { tasks, .. } => {
                let grader = code::grader::TestGrader::new(sandbox, tasks, spec.limits(), section.code.test_reward())?;
                let prompt = if section.code.reasoning_format { code::CODE_REASONING_SYSTEM_PROMPT } else { code::CODE_SYSTEM_PROMPT };
                (prompt.into(), Vec::new(), Arc::new(grader))
            }
        };
        Ok(Environment { name: section.name, system_prompt, demonstration, spec, reply_grammar, stop, grader, dataset, tools })
    }

    /// How a reply is sampled here: the spec's sampling keys, ending at this environment's stop strings.
    pub fn sampling(&self) -> agentrt_policy::SamplingParams {
        self.spec.sampling(self.stop.clone())
    }

    /// The questions of `split` (`all`: every one); none is an error naming the split and the file.
    pub fn questions(&self, split: &str) -> Result<Vec<Question>, RolloutError> {
        self.dataset.questions(split)
    }

    /// Checks what this environment names against the index the tools serve: the gold pages (`page`) of
    /// `questions`, and the pages its demonstration shows. A question whose page the index does not hold
    /// loses its `page` (its search is then not scored as a miss), and a warning names how many and what
    /// to check: questions about another corpus than the index's are the usual cause (`--index-dir`); a
    /// demonstration of pages the index lacks gets a warning of its own. Returns how many questions lost
    /// their page. Only the wiki names pages; elsewhere nothing is checked.
    pub async fn check_index(&self, questions: &mut [Question]) -> Result<usize, RolloutError> {
        if self.name != EnvName::Wiki {
            return Ok(0);
        }
        let shown = wiki::prompt::page_ids_shown(&self.demonstration);
        let mut known = std::collections::HashMap::<String, bool>::new();
        for page in questions.iter().filter_map(|q| q.page.as_ref()).chain(&shown) {
            if known.contains_key(page) {
                continue;
            }
            let held = match self.tools.view_sections(page).await {
                Ok(_) => true,
                Err(agentrt_runtime::ToolFailure::NotFound(_)) => false,
                Err(e) => return Err(RolloutError::Invalid(format!("checking the page {page:?} against the index: {e}"))),
            };
            known.insert(page.clone(), held);
        }
        let not_held: Vec<&str> = shown.iter().filter(|p| !known[*p]).map(String::as_str).collect();
        if !not_held.is_empty() {
            tracing::warn!(
                "the demonstration shown before every question reads pages the search index does not hold ({}): it was written for another corpus \
                 (the built-in one for the bundled Wikipedia pages). Give one of your own (env.wiki.demonstration = \"FILE.jsonl\", docs/your-data.md) or none (false)",
                not_held.join(", ")
            );
        }
        let named = questions.iter().filter(|q| q.page.is_some()).count();
        let mut missing: Vec<String> = Vec::new();
        for q in questions.iter_mut() {
            if q.page.as_ref().is_some_and(|p| !known[p]) {
                missing.push(q.page.take().expect("just checked"));
            }
        }
        let lost = missing.len();
        if lost > 0 {
            missing.sort();
            missing.dedup();
            let examples: Vec<&str> = missing.iter().take(3).map(String::as_str).collect();
            let why = if lost == named { "none of them is in it: the questions are probably about another corpus" } else { "their searches are not scored" };
            tracing::warn!(
                "{lost} of {named} questions name a gold page the search index does not hold ({} pages, e.g. {}): {why}. \
                 The index is chosen by --index-dir (or AGENTRT_INDEX_DIR; default: where `agentrt index` writes it), the questions by --questions / env.wiki.questions",
                missing.len(),
                examples.join(", ")
            );
        }
        Ok(lost)
    }

    /// The code task `id`, for an environment graded by a task's tests (`None` otherwise, or for an
    /// unknown id).
    pub fn code_task(&self, id: &str) -> Option<&CodeTask> {
        match &self.dataset {
            Dataset::Code { tasks, .. } => tasks.iter().find(|t| t.id == id),
            Dataset::Wiki(_) => None,
        }
    }
}
