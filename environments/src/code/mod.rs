//! The code environment: write a function from its signature and docstring; the reward is its tests,
//! run in the sandbox.

/// The environment's name, as `--env` and `env.name` spell it.
pub const NAME: &str = "code";

pub mod answer;
pub mod grader;
pub mod settings;
pub mod tasks;
pub mod test_cases;

use crate::package::{Bounds, GraderChoice, Grammar, Package, Prompt, Splits, Tasks};

/// Tokens a code reply may take when no flag or adapter says: a reply restates the signature and
/// docstring before the body (at 384 tokens, about 13% of Qwen2.5-Coder's HumanEval replies were cut
/// before their closing fence).
pub const CODE_MAX_NEW_TOKENS: usize = 512;

/// The code environment as a package: its tasks, split, reply format and reward from `[env.code]`; one
/// reply, read whole as the answer; each test a program under `env.code.test_fuel` and `test_timeout_ms`
/// (memory and tool-call bounds are `[rollout]`'s); HumanEval's `test` split held out, and all of it
/// evaluated (as published pass@k numbers use).
pub fn package(settings: &settings::CodeSection) -> Package {
    let system = if settings.reasoning_format { CODE_REASONING_SYSTEM_PROMPT } else { CODE_SYSTEM_PROMPT };
    Package {
        name: NAME.into(),
        tasks: Tasks::CodeTasks(settings.tasks.clone().into()),
        splits: Splits { train: settings.split.clone(), train_key: "env.code.split".into(), held_out: "test".into(), eval: "all".into() },
        grammar: Grammar::FinalAnswer,
        stop: CODE_STOP_STRINGS.iter().map(|s| s.to_string()).collect(),
        max_new_tokens: Some(CODE_MAX_NEW_TOKENS),
        bounds: Bounds { max_turns: Some(1), fuel: Some(settings.test_fuel), timeout_ms: Some(settings.test_timeout_ms), memory_mib: None },
        wiki_tools: false,
        plugins: Vec::new(),
        prompt: Prompt::Text { system: system.into(), demonstration: None },
        grader: GraderChoice::Tests(settings.test_reward()),
    }
}

/// The code environment's system prompt (plain format).
pub const CODE_SYSTEM_PROMPT: &str = "You are an expert Python programmer. Complete the function the user gives you. Reply with the whole function, its imports included, in one ```python code block.";

/// The code environment's system prompt when the reasoning format is required.
pub const CODE_REASONING_SYSTEM_PROMPT: &str = "You are an expert Python programmer. Complete the function the user gives you. First think inside <reasoning>...</reasoning>, then give the whole function, its imports included, inside <answer>...</answer> as one ```python code block.";

/// Where a reply stops: after the code block closes (or the answer, in the reasoning format), so the
/// model's commentary after its code costs no tokens.
pub const CODE_STOP_STRINGS: &[&str] = &["\n```\n", "</answer>"];

/// The code environment's reply grammar: every reply is the final answer, graded whole (its code is run
/// by the grader against the task's tests, not as a tool program).
#[derive(Debug, Clone, Copy, Default)]
pub struct WholeReply;

impl agentrt_rollout::ReplyGrammar for WholeReply {
    fn name(&self) -> &'static str {
        "final_answer"
    }

    fn read(&self, reply: &str) -> agentrt_rollout::ReplyAction {
        agentrt_rollout::ReplyAction::Answer(reply.to_string())
    }
}
