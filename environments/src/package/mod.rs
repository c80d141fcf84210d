//! Environment packages: an environment as a folder, named by its path (`--env DIR`, `env.name =
//! "DIR"`), with no Rust. The folder holds an `environment.toml` ([`manifest`]) naming its tasks file
//! ([`tasks`]), its system prompt and demonstration, its reply grammar, the plug-in tools its programs
//! call, its episode bounds and its grader ([`graders`]: built-in ones by name, or a grader component
//! run bounded in the sandbox).
//!
//! The built-in environments are packages of the same kind: [`crate::wiki::package`] and
//! [`crate::code::package`] describe them with the same [`Package`] value, so the trainer and the CLI ask
//! a package what to play and never which environment it is.

pub mod graders;
pub mod manifest;
pub mod tasks;

use agentrt_rollout::{EpisodeSpec, ReplyGrammar};
use agentrt_runtime::Limits;
pub use manifest::{Manifest, MANIFEST};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Default bounds of one grade by a grader component: a grader does less than a program that searches
/// (no tool calls), but may be written in Python, whose start-up alone burns tens of millions of fuel.
pub const GRADER_FUEL: u64 = 1_000_000_000;
/// Wall time of one grade by a grader component, in milliseconds, when `[grader]` does not say.
pub const GRADER_TIMEOUT_MS: u64 = 2_000;
/// Memory of one grade by a grader component, in MiB, when `[grader]` does not say.
pub const GRADER_MEMORY_MIB: usize = 64;

/// An environment, as data: what is asked, how it is played, how it is scored.
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    /// Its name (logs, reports, the run's environment.json).
    pub name: String,
    /// What is asked.
    pub tasks: Tasks,
    /// Which split trains, which one training evaluates on, which one `agentrt eval` plays.
    pub splits: Splits,
    /// How a reply is read.
    pub grammar: Grammar,
    /// Where the sampler ends a reply.
    pub stop: Vec<String>,
    /// Tokens a reply may take when no flag or adapter says (`None`: [`EpisodeSpec`]'s default).
    pub max_new_tokens: Option<usize>,
    /// What the package fixes of an episode, over `[rollout]`'s keys.
    pub bounds: Bounds,
    /// Whether programs call the wiki's tools (so the sandbox needs the search index).
    pub wiki_tools: bool,
    /// Plug-in tool components its programs call.
    pub plugins: Vec<PathBuf>,
    /// The system prompt and demonstration.
    pub prompt: Prompt,
    /// Who scores a final answer.
    pub grader: GraderChoice,
}

/// The tasks file, by format.
#[derive(Debug, Clone, PartialEq)]
pub enum Tasks {
    /// The wiki's questions (JSON Lines or Parquet with question, answer or answers, page).
    WikiQuestions(PathBuf),
    /// HumanEval-format code tasks.
    CodeTasks(PathBuf),
    /// A package's rows ([`tasks::TaskRows`]).
    Rows(PathBuf),
}

impl Tasks {
    /// The file.
    pub fn path(&self) -> &Path {
        match self {
            Tasks::WikiQuestions(p) | Tasks::CodeTasks(p) | Tasks::Rows(p) => p,
        }
    }
}

/// The splits a package plays.
#[derive(Debug, Clone, PartialEq)]
pub struct Splits {
    /// The split `agentrt train` plays.
    pub train: String,
    /// The key that sets it, as errors name it (`env.wiki.split`, or the manifest's `splits.train`).
    pub train_key: String,
    /// The split training evaluates on while it runs (`run.eval_split` empty).
    pub held_out: String,
    /// The split `agentrt eval` plays without `--split`.
    pub eval: String,
}

/// How a reply is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grammar {
    /// Fenced programs call the tools over several turns; `<answer>` ends the episode.
    ToolPrograms,
    /// The whole reply is the answer, in one turn.
    FinalAnswer,
}

impl Grammar {
    /// The grammar's reader.
    pub fn reader(self) -> Arc<dyn ReplyGrammar> {
        match self {
            Grammar::ToolPrograms => Arc::new(crate::wiki::ToolPrograms),
            Grammar::FinalAnswer => Arc::new(crate::code::WholeReply),
        }
    }
}

/// What a package fixes of an episode, over `[rollout]`'s keys (`None`: `[rollout]`'s value).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bounds {
    /// Turns an episode takes at most.
    pub max_turns: Option<usize>,
    /// Fuel a program may burn.
    pub fuel: Option<u64>,
    /// Wall time a program may take, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Memory a program may use, in MiB.
    pub memory_mib: Option<usize>,
}

/// Where the system prompt and the demonstration come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// The wiki's (`[env.wiki]`: short, full or own text; the built-in demonstration, none, or a file).
    Wiki(crate::WikiSection),
    /// A fixed text (`{plugins}` in it lists the plug-in tools), and a file of demonstration turns.
    Text {
        /// The system prompt's template.
        system: String,
        /// A JSON Lines file of turns shown before every question.
        demonstration: Option<PathBuf>,
    },
}

/// Who scores a final answer.
#[derive(Debug, Clone, PartialEq)]
pub enum GraderChoice {
    /// A judge against the gold answers.
    Judge {
        /// `rule`, `rule:0.5` or `openai:MODEL@BASE_URL`.
        spec: String,
        /// The setting that named it (`env.wiki.judge`, `grader.judge`), as errors name it.
        key: &'static str,
        /// The beta of the F-score given as partial credit (`env.wiki.partial_credit_beta`; 1: F1).
        partial_credit_beta: f64,
    },
    /// The code task's tests, each its own sandboxed program.
    Tests(crate::code::grader::TestReward),
    /// Normalised exact match.
    Exact,
    /// The last number, within a relative tolerance.
    Numeric {
        /// The relative tolerance.
        tolerance: f64,
    },
    /// A grader component, each grade under `limits`.
    Component {
        /// The `.wasm`.
        path: PathBuf,
        /// Fuel, memory and wall time of one grade.
        limits: Limits,
    },
}

impl Package {
    /// Reads the package in folder `dir` (its `environment.toml`); the files it names are the folder's.
    /// An error names the file and the key.
    pub fn read(dir: &Path) -> Result<Package, String> {
        let m = Manifest::read(dir)?;
        let file = |name: &str| dir.join(name);
        let grader = match m.grader.kind.as_str() {
            "exact" => GraderChoice::Exact,
            "numeric" => GraderChoice::Numeric { tolerance: m.grader.tolerance.unwrap_or(graders::NUMERIC_TOLERANCE) },
            "judge" => GraderChoice::Judge {
                spec: m.grader.judge.clone().expect("validated: a judge grader names its judge"),
                key: "grader.judge",
                partial_credit_beta: 1.0,
            },
            _ => GraderChoice::Component {
                path: file(m.grader.path.as_deref().expect("validated: a component grader names its path")),
                limits: Limits {
                    fuel: m.grader.fuel.unwrap_or(GRADER_FUEL),
                    timeout: Duration::from_millis(m.grader.timeout_ms.unwrap_or(GRADER_TIMEOUT_MS)),
                    memory_bytes: m.grader.memory_mib.unwrap_or(GRADER_MEMORY_MIB) << 20,
                    ..Limits::default()
                },
            },
        };
        let grammar = if m.reply.grammar == "tool_programs" { Grammar::ToolPrograms } else { Grammar::FinalAnswer };
        let max_turns = match grammar {
            Grammar::FinalAnswer => Some(1),
            Grammar::ToolPrograms => m.reply.max_turns,
        };
        // A tool program's reply ends where its grammar says (a closed fence, an answer), whatever else
        // the manifest adds.
        let mut stop: Vec<String> = match grammar {
            Grammar::ToolPrograms => crate::wiki::STOP_STRINGS.iter().map(|s| s.to_string()).collect(),
            Grammar::FinalAnswer => Vec::new(),
        };
        for s in m.reply.stop {
            if !stop.contains(&s) {
                stop.push(s);
            }
        }
        let system = std::fs::read_to_string(file(&m.prompt.system))
            .map_err(|e| format!("{}: prompt.system {}: {e}", dir.join(MANIFEST).display(), file(&m.prompt.system).display()))?;
        Ok(Package {
            name: m.name.clone(),
            tasks: Tasks::Rows(file(&m.tasks)),
            splits: Splits {
                train: m.splits.train.clone(),
                train_key: format!("{} splits.train", dir.join(MANIFEST).display()),
                held_out: m.splits.held_out,
                eval: m.splits.eval,
            },
            grammar,
            stop,
            max_new_tokens: m.reply.max_new_tokens,
            bounds: Bounds { max_turns, fuel: m.sandbox.fuel, timeout_ms: m.sandbox.timeout_ms, memory_mib: m.sandbox.memory_mib },
            wiki_tools: m.tools.iter().any(|t| t == "wiki"),
            plugins: m.tools.iter().filter(|t| *t != "wiki").map(|t| file(t)).collect(),
            prompt: Prompt::Text { system, demonstration: m.prompt.demonstration.as_deref().map(file) },
            grader,
        })
    }

    /// How this package plays `spec` (the `[rollout]` keys): its own bounds over them. The one place a
    /// spec is adapted: an [`crate::Environment`] holds the result, and every command asks it.
    pub fn played(&self, spec: &EpisodeSpec) -> EpisodeSpec {
        let b = &self.bounds;
        EpisodeSpec {
            max_turns: b.max_turns.unwrap_or(spec.max_turns),
            fuel: b.fuel.unwrap_or(spec.fuel),
            timeout_ms: b.timeout_ms.unwrap_or(spec.timeout_ms),
            memory_mib: b.memory_mib.unwrap_or(spec.memory_mib),
            ..spec.clone()
        }
    }

    /// Whether answers are graded by tests (reported as pass@k over tasks) rather than judged (accuracy).
    pub fn grades_with_tests(&self) -> bool {
        matches!(self.grader, GraderChoice::Tests(_))
    }

    /// Tokens a reply may take when neither a flag nor an adapter's settings say.
    pub fn default_max_new_tokens(&self) -> usize {
        self.max_new_tokens.unwrap_or(EpisodeSpec::default().max_new_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CodeSection, EnvSection, WikiSection};

    /// The built-in environments, as packages, play what they played before packages existed: the wiki
    /// several turns of tool programs under `[rollout]`'s bounds, judged, `dev` held out; code one whole
    /// reply of up to 512 tokens, each test under its own fuel and time, `test` held out, all evaluated.
    #[test]
    fn the_built_in_environments_are_packages_that_play_as_before() {
        let spec = EpisodeSpec::default();
        let wiki = EnvSection::default().package().unwrap();
        assert_eq!((wiki.name.as_str(), wiki.grammar, wiki.wiki_tools, wiki.played(&spec)), ("wiki", Grammar::ToolPrograms, true, spec.clone()));
        assert_eq!((wiki.splits.train.as_str(), wiki.splits.held_out.as_str(), wiki.splits.eval.as_str()), ("train", "dev", "dev"));
        assert_eq!(
            (wiki.default_max_new_tokens(), wiki.grader.clone(), wiki.stop.clone()),
            (
                spec.max_new_tokens,
                GraderChoice::Judge { spec: "rule".into(), key: "env.wiki.judge", partial_credit_beta: 1.0 },
                ["</answer>", "</tool>", "\n```\n"].map(String::from).to_vec()
            )
        );
        assert_eq!(wiki.prompt, Prompt::Wiki(WikiSection::default()));

        let code = EnvSection { name: "code".into(), ..EnvSection::default() }.package().unwrap();
        let played = code.played(&spec);
        assert_eq!((played.max_turns, played.fuel, played.timeout_ms, played.memory_mib), (1, 2_000_000_000, 3_000, spec.memory_mib));
        assert_eq!((code.grammar, code.wiki_tools, code.default_max_new_tokens(), code.grades_with_tests()), (Grammar::FinalAnswer, false, 512, true));
        assert_eq!((code.splits.train.as_str(), code.splits.held_out.as_str(), code.splits.eval.as_str()), ("train", "test", "all"));
        assert_eq!(code.stop, vec!["\n```\n".to_string(), "</answer>".to_string()]);
        assert_eq!(code.grader, GraderChoice::Tests(CodeSection::default().test_reward()));
        assert!(matches!(&code.prompt, Prompt::Text { system, demonstration: None } if system == crate::code::CODE_SYSTEM_PROMPT));
    }

    fn package(manifest: &str) -> Result<Package, String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MANIFEST), manifest).unwrap();
        std::fs::write(dir.path().join("prompt.md"), "Answer.").unwrap();
        Package::read(dir.path())
    }

    const MINIMAL: &str = "name = \"m\"\ntasks = \"t.jsonl\"\n[prompt]\nsystem = \"prompt.md\"\n[grader]\nkind = \"numeric\"\n";

    #[test]
    fn a_manifest_reads_with_its_defaults_and_paths_in_its_folder() {
        let p = package(MINIMAL).unwrap();
        assert_eq!((p.grammar, p.bounds.max_turns, p.grader.clone()), (Grammar::FinalAnswer, Some(1), GraderChoice::Numeric { tolerance: 1e-6 }));
        assert_eq!((p.splits.train.as_str(), p.splits.held_out.as_str(), p.splits.eval.as_str()), ("train", "test", "test"));
        assert!(matches!(&p.tasks, Tasks::Rows(path) if path.ends_with("t.jsonl")));
        assert!(matches!(&p.prompt, Prompt::Text { system, .. } if system == "Answer."));
        let tools = package(&MINIMAL.replace("tasks = \"t.jsonl\"\n", "tasks = \"t.jsonl\"\ntools = [\"wiki\", \"calc.wasm\"]\n")).unwrap();
        assert!(tools.wiki_tools && tools.plugins.len() == 1 && tools.plugins[0].ends_with("calc.wasm"));
    }

    #[test]
    fn a_bad_manifest_is_refused_naming_the_key() {
        for (manifest, expected) in [
            (MINIMAL.replace("kind = \"numeric\"", "kind = \"vibes\""), "grader.kind: `vibes`"),
            (MINIMAL.replace("kind = \"numeric\"", "kind = \"component\""), "grader.path"),
            (MINIMAL.replace("kind = \"numeric\"", "kind = \"judge\""), "grader.judge"),
            (MINIMAL.replace("kind = \"numeric\"", "kind = \"exact\"\ntolerance = 0.1"), "grader.tolerance: only for another kind"),
            (MINIMAL.to_string() + "[reply]\ngrammar = \"poetry\"\n", "reply.grammar: `poetry`"),
            (MINIMAL.to_string() + "[reply]\nmax_turns = 3\n", "a final_answer reply is one turn"),
            (MINIMAL.to_string() + "[sandbox]\nfuel = 0\n", "sandbox.fuel: must be at least 1"),
            (MINIMAL.replace("name = \"m\"", "name = \"m\"\ncolour = \"red\""), "unknown field `colour`"),
            (MINIMAL.replace("system = \"prompt.md\"", "system = \"missing.md\""), "prompt.system"),
        ] {
            let error = package(&manifest).unwrap_err();
            assert!(error.contains(MANIFEST) && error.contains(expected), "{manifest}\n=> {error}");
        }
    }
}
