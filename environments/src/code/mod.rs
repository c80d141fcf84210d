//! The code environment: write a function from its signature and docstring; the reward is its tests,
//! run in the sandbox.

/// The environment's name, as `--env` and `env.name` spell it.
pub const NAME: &str = "code";

pub mod answer;
pub mod grader;
pub mod settings;
pub mod tasks;
pub mod test_cases;

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
