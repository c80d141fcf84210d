//! `environment.toml`: what an environment package declares, as read from its folder. Every key is
//! checked when the file is read, and an error names the file and the key.

use serde::Deserialize;
use std::path::Path;

/// The manifest's file name in a package folder.
pub const MANIFEST: &str = "environment.toml";

/// `environment.toml`, as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The environment's name (logs, reports); kebab-case by convention.
    pub name: String,
    /// One line on what is asked.
    #[serde(default)]
    pub description: String,
    /// The tasks: a JSON Lines file in the folder, a task a line (`id`, `question`, `split`, and whatever
    /// the grader reads).
    pub tasks: String,
    /// Plug-in tool components (`.wasm`, as `--tool` takes them) the programs may call, relative to the
    /// folder; `wiki` names the built-in wiki tools (served over the search index).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Which split trains, which one training evaluates on, and which one `agentrt eval` plays.
    #[serde(default)]
    pub splits: SplitsTable,
    /// The system prompt and the worked demonstration.
    pub prompt: PromptTable,
    /// How replies are read and bounded.
    #[serde(default)]
    pub reply: ReplyTable,
    /// Bounds of the programs an episode runs, over `[rollout]`'s.
    #[serde(default)]
    pub sandbox: SandboxTable,
    /// Who scores a final answer.
    pub grader: GraderTable,
}

/// `[splits]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SplitsTable {
    /// The split `agentrt train` plays.
    pub train: String,
    /// The split training evaluates on while it runs (`run.eval_split` empty).
    pub held_out: String,
    /// The split `agentrt eval` plays without `--split` (`all`: every task).
    pub eval: String,
}

impl Default for SplitsTable {
    fn default() -> Self {
        SplitsTable { train: "train".into(), held_out: "test".into(), eval: "test".into() }
    }
}

/// `[prompt]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptTable {
    /// The system prompt: a file in the folder (`{plugins}` in it lists the tools).
    pub system: String,
    /// A worked episode shown before every question: a JSON Lines file of turns (`{"role", "content"}`),
    /// as `env.wiki.demonstration` takes; none when absent.
    #[serde(default)]
    pub demonstration: Option<String>,
}

/// `[reply]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplyTable {
    /// `final_answer`: the whole reply is the answer, one turn; `tool_programs`: fenced Python programs
    /// call the tools over several turns, and `<answer>…</answer>` ends the episode.
    pub grammar: String,
    /// Where the sampler ends a reply (`tool_programs` always ends at a closed fence and at `</answer>`).
    pub stop: Vec<String>,
    /// Tokens a reply may take when no flag or adapter says.
    pub max_new_tokens: Option<usize>,
    /// Turns an episode may take (`tool_programs`); `final_answer` plays one.
    pub max_turns: Option<usize>,
}

impl Default for ReplyTable {
    fn default() -> Self {
        ReplyTable { grammar: "final_answer".into(), stop: Vec::new(), max_new_tokens: None, max_turns: None }
    }
}

/// `[sandbox]`: the bounds of the programs of an episode (and of the grader component, unless `[grader]`
/// gives its own).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxTable {
    /// Fuel a program may burn.
    pub fuel: Option<u64>,
    /// Wall time a program may take, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Memory a program may use, in MiB.
    pub memory_mib: Option<usize>,
}

/// `[grader]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraderTable {
    /// `exact` (the answer equals the task's `answer` or one of its `answers`, after SQuAD's
    /// normalisation), `numeric` (the last number in the answer is the task's `answer`, within
    /// `tolerance`), `judge` (`judge` below), or `component` (`path` below).
    pub kind: String,
    /// `numeric`: the relative tolerance (default 1e-6, of the larger of 1 and |answer|).
    #[serde(default)]
    pub tolerance: Option<f64>,
    /// `judge`: `rule`, `rule:0.5` or `openai:MODEL@BASE_URL`, as `env.wiki.judge` takes.
    #[serde(default)]
    pub judge: Option<String>,
    /// `component`: the grader component (`.wasm` of the `agentrt:tools/grader` world), in the folder.
    #[serde(default)]
    pub path: Option<String>,
    /// `component`: fuel one grade may burn (default 1,000,000,000).
    #[serde(default)]
    pub fuel: Option<u64>,
    /// `component`: wall time one grade may take, in milliseconds (default 2,000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// `component`: memory one grade may use, in MiB (default 64).
    #[serde(default)]
    pub memory_mib: Option<usize>,
}

impl Manifest {
    /// Reads `dir/environment.toml`; an error names the file and, for a bad key, the key.
    pub fn read(dir: &Path) -> Result<Manifest, String> {
        let file = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&file).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound && !dir.is_dir() {
                format!("no environment `{}`: it is neither a built-in one (wiki, code) nor a folder", dir.display())
            } else {
                format!("{}: {e} (an environment package is a folder with an {MANIFEST}; `agentrt env new NAME` writes one)", file.display())
            }
        })?;
        let manifest: Manifest = toml::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        manifest.validate().map_err(|e| format!("{}: {e}", file.display()))?;
        Ok(manifest)
    }

    /// Checks what can be checked without the files it names.
    fn validate(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("name: empty".into());
        }
        if !["final_answer", "tool_programs"].contains(&self.reply.grammar.as_str()) {
            return Err(format!("reply.grammar: `{}`: expected final_answer or tool_programs", self.reply.grammar));
        }
        if self.reply.max_new_tokens == Some(0) || self.reply.max_turns == Some(0) {
            return Err("reply.max_new_tokens / reply.max_turns: must be at least 1".into());
        }
        if self.reply.grammar == "final_answer" && self.reply.max_turns.is_some_and(|t| t > 1) {
            return Err("reply.max_turns: a final_answer reply is one turn; tool_programs plays several".into());
        }
        for (key, value) in [
            ("sandbox.fuel", self.sandbox.fuel),
            ("sandbox.timeout_ms", self.sandbox.timeout_ms),
            ("grader.fuel", self.grader.fuel),
            ("grader.timeout_ms", self.grader.timeout_ms),
        ] {
            if value == Some(0) {
                return Err(format!("{key}: must be at least 1"));
            }
        }
        if self.sandbox.memory_mib == Some(0) || self.grader.memory_mib == Some(0) {
            return Err("sandbox.memory_mib / grader.memory_mib: must be at least 1".into());
        }
        let g = &self.grader;
        let misplaced = |key: &str, given: bool| if given { Err(format!("grader.{key}: only for another kind than `{}`", g.kind)) } else { Ok(()) };
        match g.kind.as_str() {
            "exact" => {}
            "numeric" => {
                if g.tolerance.is_some_and(|t| !(t >= 0.0 && t.is_finite())) {
                    return Err("grader.tolerance: must be a finite number, 0 or more".into());
                }
            }
            "judge" => {
                if g.judge.as_deref().is_none_or(|j| j.trim().is_empty()) {
                    return Err("grader.judge: the judge (`rule`, `rule:0.5` or `openai:MODEL@BASE_URL`) is missing".into());
                }
            }
            "component" => {
                if g.path.as_deref().is_none_or(|p| p.trim().is_empty()) {
                    return Err("grader.path: the grader component's .wasm (the agentrt:tools/grader world) is missing".into());
                }
            }
            other => return Err(format!("grader.kind: `{other}`: expected exact, numeric, judge or component")),
        }
        misplaced("tolerance", g.tolerance.is_some() && g.kind != "numeric")?;
        misplaced("judge", g.judge.is_some() && g.kind != "judge")?;
        misplaced("path", g.path.is_some() && g.kind != "component")?;
        misplaced("fuel / timeout_ms / memory_mib", (g.fuel.is_some() || g.timeout_ms.is_some() || g.memory_mib.is_some()) && g.kind != "component")?;
        Ok(())
    }
}
