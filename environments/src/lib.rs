//! Environments: everything that defines a task, in one place, so `train`, `eval` and `trajectories`
//! play the same episodes.
//!
//! An environment is a [`Package`]: plain data saying what is asked, how it is played and how it is
//! scored. Two are built in, each in its folder: [`wiki`] (answer questions about the corpus by writing
//! programs that search and read it) and [`code`] (write a function from its signature and docstring);
//! any other is a folder with an `environment.toml` ([`package`]), named by its path. The trainer and the
//! CLI ask the package, never which environment it is. The design in three parts:
//! - **what is asked**: the tasks with their splits: the wiki's questions file ([`wiki::questions`]),
//!   the code tasks ([`code::tasks`]: a signature and docstring, hidden tests, an entry point), or a
//!   package's rows ([`package::tasks`]); training and evaluation take them from
//!   [`Environment::questions`].
//! - **how it is played**: the system prompt and demonstration, the episode bounds, the
//!   [`ReplyGrammar`](agentrt_rollout::ReplyGrammar) (programs that call tools over several turns, [`wiki::ToolPrograms`]; or one reply
//!   that is the answer, [`code::WholeReply`]), the plug-in tools, and the stop strings the sampler ends
//!   a reply at. [`Environment::settings`] is all of it as one comparable value.
//! - **how it is scored**: a [`Grader`]: a judge ([`wiki::JudgeGrader`]), the task's tests
//!   ([`code::grader::TestGrader`]: each test its own sandboxed program), a built-in match
//!   ([`package::graders`]: exact, numeric) or a grader component run bounded in the sandbox; each grade
//!   carries its reward's named parts, which training weighs and logs one by one.
//!
//! An environment is chosen by `env.name` in the `[env]` section of a training config ([`EnvSection`]),
//! or `--env`, which `agentrt train` and `agentrt eval` read the same way.

pub mod agent_file;
pub mod code;
pub mod package;
/// Test set-up shared with other crates' tests; not part of the product's API (the `testing` feature,
/// which only dev-dependencies turn on).
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod wiki;

pub use agent_file::{shipped_adapter, AgentSettings, AGENT_FILE, SHIPPED};
use agentrt_policy::Message;
use agentrt_rollout::{EpisodeRunner, EpisodeSpec, Grader, Question, RolloutError};
use agentrt_runtime::Sandbox;
pub use code::settings::{CodeSection, CODE_TEST_FUEL, CODE_TEST_TIMEOUT_MS};
use code::tasks::CodeTask;
use package::tasks::TaskRows;
pub use package::{GraderChoice, Package, Prompt, Tasks};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wiki::WikiQuestions;
pub use wiki::WikiSection;

/// The `[env]` section of a training config: which environment is played (`wiki`, `code`, or the
/// folder of an environment package), and the built-in environments' own settings (`[env.wiki]`,
/// `[env.code]`); what every environment has (turns, sampling, the sandbox's bounds) is `[rollout]`'s
/// [`EpisodeSpec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    /// Which environment is played (`env.name`): `wiki` (the default), `code`, or the folder of an
    /// environment package (a path holding an `environment.toml`).
    pub name: String,
    /// `[env.wiki]`: the questions file, the prompt and the judge.
    #[serde(default)]
    pub wiki: WikiSection,
    /// `[env.code]`: the tasks, the reply format, the reward and the tests' bounds.
    #[serde(default)]
    pub code: CodeSection,
}

impl Default for EnvSection {
    fn default() -> Self {
        EnvSection { name: wiki::NAME.into(), wiki: WikiSection::default(), code: CodeSection::default() }
    }
}

impl EnvSection {
    /// Checks the built-in environments' settings and that `env.name` names an environment (a package's
    /// manifest is read and checked); the message names the key, or the file and its key.
    pub fn validate(&self) -> Result<(), String> {
        self.package().map(|_| ())
    }

    /// The environment `env.name` names, as a [`Package`]: the wiki or the code environment with their
    /// sections' settings, or the package in that folder; checked as [`EnvSection::validate`] checks.
    pub fn package(&self) -> Result<Package, String> {
        self.wiki.validate()?;
        self.code.validate(self.name == code::NAME)?;
        match self.name.as_str() {
            wiki::NAME => Ok(wiki::package(&self.wiki)),
            code::NAME => Ok(code::package(&self.code)),
            folder => Package::read(Path::new(folder)).map_err(|e| format!("env.name: {e}")),
        }
    }

    /// Plays the environment `name` (`--env`): a config that names the wiki (the default) may be played
    /// as another; a config that names another environment only as itself.
    pub fn select(&mut self, name: &str) -> Result<(), String> {
        if name != self.name && self.name != wiki::NAME {
            return Err(format!("--env {name}: the config plays the {} environment", self.name));
        }
        self.name = name.to_string();
        self.package().map(|_| ())
    }

    /// This section as the code environment (its `[env.code]` keys kept): what `eval --regrade` grades again,
    /// since only test-graded replies can be regraded.
    pub fn as_code(&self) -> EnvSection {
        EnvSection { name: code::NAME.into(), ..self.clone() }
    }

    /// The questions of `split` (`all`: every one) of the played environment's file. None is an error
    /// naming the split and the file.
    pub fn read_questions(&self, split: &str) -> Result<Vec<Question>, RolloutError> {
        let package = self.package().map_err(RolloutError::Invalid)?;
        Dataset::read(&package)?.questions(split)
    }
}

/// Sandboxed programs a grader keeps in flight at once (a code task's tests, a grader component's
/// grades): two per core, so one waiting on its instance's start leaves the core to the other.
pub(crate) fn programs_in_flight() -> usize {
    2 * std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// The environments built in, by the name `env.name` and `--env` give them; any other name is a package's
/// folder.
pub const BUILT_IN: [&str; 2] = [wiki::NAME, code::NAME];

/// A task definition, built once per command: what an [`EpisodeRunner`] needs, and the stop strings
/// for the sampler.
pub struct Environment {
    /// Which environment this is: what it asks, how it is played and scored, as data.
    pub package: Package,
    /// The system prompt every episode starts with, rendered (the wiki's lists the sandbox's plug-ins).
    pub system_prompt: String,
    /// Earlier turns shown before every question (few-shot); may be empty.
    pub demonstration: Vec<Message>,
    /// How an episode is played here ([`Package::played`] of the command's spec).
    pub spec: EpisodeSpec,
    /// Scores final answers: the judge for the wiki, the task's tests for code, a package's grader.
    pub grader: Arc<dyn Grader>,
    /// What is asked, by split.
    dataset: Dataset,
    /// What serves the wiki tools (the index the gold pages are checked against).
    tools: Arc<dyn agentrt_runtime::ToolHost>,
}

/// An environment's questions: the wiki's file (read per split when asked), the code tasks, or a
/// package's rows (read once, when the environment is built: their graders hold them too).
enum Dataset {
    Wiki(WikiQuestions),
    Code { path: PathBuf, tasks: Vec<CodeTask> },
    Rows(Arc<TaskRows>),
}

impl Dataset {
    fn read(package: &Package) -> Result<Dataset, RolloutError> {
        Ok(match &package.tasks {
            Tasks::WikiQuestions(path) => Dataset::Wiki(WikiQuestions::new(path)),
            Tasks::CodeTasks(path) => Dataset::Code { tasks: code::tasks::read_tasks(path, None)?, path: path.clone() },
            Tasks::Rows(path) => Dataset::Rows(Arc::new(TaskRows::read(path)?)),
        })
    }

    fn questions(&self, split: &str) -> Result<Vec<Question>, RolloutError> {
        let wanted = |s: &Option<String>| split == "all" || s.as_deref() == Some(split);
        let (questions, path) = match self {
            Dataset::Wiki(questions) => (questions.of_split(split)?, questions.path()),
            Dataset::Code { path, tasks } => (tasks.iter().map(code::tasks::question_of).filter(|q| wanted(&q.split)).collect(), path.as_path()),
            Dataset::Rows(rows) => (rows.questions(split), rows.path()),
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
    /// Which environment (`wiki`, `code`, a package's name).
    pub name: String,
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
            reply_grammar: self.package.grammar.reader(),
        }
    }

    /// Everything that decides how this environment's episodes play, as one comparable value.
    pub fn settings(&self) -> EnvironmentSettings {
        EnvironmentSettings {
            name: self.package.name.clone(),
            system_prompt: self.system_prompt.clone(),
            demonstration: self.demonstration.iter().map(|m| (m.role.clone(), m.content.clone())).collect(),
            spec: self.spec.clone(),
            reply_format: self.package.grammar.reader().name(),
            stop: self.package.stop.clone(),
            grader: self.grader.name(),
        }
    }
}

impl Environment {
    /// The environment `section` names, playing `spec` (the `[rollout]` keys; [`Package::played`]
    /// adapts them), with its own settings; the tasks of the code environment and of a package are read
    /// here, once (their graders know every task, whichever split is played).
    pub fn build(section: &EnvSection, spec: &EpisodeSpec, sandbox: Arc<Sandbox>) -> Result<Environment, RolloutError> {
        let package = section.package().map_err(RolloutError::Invalid)?;
        spec.validate().map_err(|e| RolloutError::Invalid(format!("rollout.{e}")))?;
        let spec = package.played(spec);
        let dataset = Dataset::read(&package)?;
        let tools = sandbox.tools().clone();
        let (system_prompt, demonstration) = match &package.prompt {
            Prompt::Wiki(settings) => wiki::prompt_of(settings, &sandbox)?,
            Prompt::Text { system, demonstration } => {
                // Plug-ins are listed where the template says, or at its end when the package names some.
                let listed = system.contains(wiki::PLUGINS_PLACEHOLDER) || !package.plugins.is_empty();
                let prompt = if listed { wiki::system_prompt(system, &sandbox.plugins().signatures()) } else { system.clone() };
                let turns = match demonstration {
                    Some(file) => wiki::Demonstration::File(file.display().to_string()).turns().map_err(RolloutError::Invalid)?,
                    None => Vec::new(),
                };
                (prompt, turns)
            }
        };
        let grader: Arc<dyn Grader> = match (&package.grader, &dataset) {
            (GraderChoice::Judge { spec, key, partial_credit_beta }, _) => wiki::judge_grader(spec, key, *partial_credit_beta)?,
            (GraderChoice::Tests(reward), Dataset::Code { tasks, .. }) => Arc::new(code::grader::TestGrader::new(sandbox, tasks, spec.limits(), *reward)?),
            (GraderChoice::Exact, _) => Arc::new(package::graders::ExactGrader),
            (GraderChoice::Numeric { tolerance }, _) => Arc::new(package::graders::NumericGrader { tolerance: *tolerance }),
            (GraderChoice::Component { path, limits }, Dataset::Rows(rows)) => {
                let component = sandbox.load_grader(path).map_err(|e| RolloutError::Invalid(format!("grader.path: {e}")))?;
                Arc::new(package::graders::ComponentGrader::new(component, rows.clone(), *limits))
            }
            (GraderChoice::Tests(_), _) => return Err(RolloutError::Invalid("a test grader grades code tasks (HumanEval's format)".into())),
            (GraderChoice::Component { .. }, _) => return Err(RolloutError::Invalid("a grader component grades a package's task rows".into())),
        };
        Ok(Environment { package, system_prompt, demonstration, spec, grader, dataset, tools })
    }

    /// How a reply is sampled here: the spec's sampling keys, ending at this environment's stop strings.
    pub fn sampling(&self) -> agentrt_policy::SamplingParams {
        self.spec.sampling(self.package.stop.clone())
    }

    /// How a reply after a tool's output is sampled, where the spec gives it a temperature of its own.
    pub fn sampling_after_tool(&self) -> Option<agentrt_policy::SamplingParams> {
        self.spec.sampling_after_tool(self.package.stop.clone())
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
        if !self.package.wiki_tools {
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
            Dataset::Wiki(_) | Dataset::Rows(_) => None,
        }
    }
}
