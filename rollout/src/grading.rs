//! How an episode's final answer becomes a reward: an environment's [`Grader`]. The wiki environment
//! asks a judge; the code environment runs the task's tests in the sandbox. Either way
//! an episode gets one [`Grade`]: the reward, whether it counts as correct, and the named parts the
//! reward adds up from, which training logs one by one.

use crate::error::RolloutError;
use crate::questions::Question;
use agentrt_judge::Verdict;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// The grade of one final answer.
#[derive(Debug, Clone, Serialize)]
pub struct Grade {
    /// The reward in `[0, 1]` for a judge, `[0, base_weight + perfect_weight]` for tests.
    pub reward: f32,
    /// Counted as a correct answer (accuracy, pass@k): the judge said so, or every test passed.
    pub correct: bool,
    /// The parts `reward` is the sum of, by name (`judge`; `tests`, `perfect`), logged apart.
    pub components: Vec<(String, f32)>,
    /// Partial credit from 0 to 1 for an answer short of right, where the environment has a measure of it
    /// (the wiki: the answer's best token F1 against the gold answers; none for code, whose tests already
    /// pay pro rata). Training pays `algorithm.f1_weight` of it.
    pub partial_credit: Option<f64>,
    /// The answer came in the form the environment asks for (code: its tests could run, the code block and
    /// any required reasoning format found; the wiki: always, its `<answer>` tag being the reply
    /// grammar's). Training pays `algorithm.format_bonus` for it on an episode that ended with an answer.
    pub well_formed: bool,
    /// The judge's verdict, when a judge graded.
    pub verdict: Option<Verdict>,
    /// Each test's result, when tests graded.
    pub tests: Option<TestRun>,
    /// Why the grader gave no grade for this answer (a grader component ran past a bound, crashed or
    /// refused the task): the answer then scores 0 and counts as wrong, and the run goes on.
    pub grader_error: Option<String>,
}

/// Grades final answers. Implementations must be cheap to share between tasks.
#[async_trait]
pub trait Grader: Send + Sync {
    /// A short description for logs and reports (`rule(f1>=0.80)`, `tests(base 1, perfect 0.5)`).
    fn name(&self) -> String;

    /// One grade per `(question, final answer)`, in order. An error is a failure to grade (a dead
    /// judge, an unknown task), never a wrong answer.
    async fn grade(&self, items: &[(&Question, &str)]) -> Result<Vec<Grade>, RolloutError>;
}

/// How each of a task's tests went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestRun {
    /// Tests that passed.
    pub passed: usize,
    /// One entry per test run, in the task's order.
    pub results: Vec<TestResult>,
    /// Why no test could run (the reply had no code, or not in the required format); `results` is then
    /// empty and the reward 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unrunnable: Option<TestFailure>,
}

impl TestRun {
    /// Tests that ran.
    pub fn total(&self) -> usize {
        self.results.len()
    }

    /// Every test ran and passed.
    pub fn all_passed(&self) -> bool {
        self.unrunnable.is_none() && !self.results.is_empty() && self.passed == self.results.len()
    }

    /// The first failure's kind: what went wrong with the answer, for a failure-kind tally.
    pub fn first_failure(&self) -> Option<FailureKind> {
        self.unrunnable.as_ref().map(|f| f.kind).or_else(|| self.results.iter().find_map(|r| r.failure.as_ref().map(|f| f.kind)))
    }
}

/// One test's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestResult {
    /// `None` when the test passed.
    pub failure: Option<TestFailure>,
}

/// Why a test failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestFailure {
    /// What kind of failure, for the tally.
    pub kind: FailureKind,
    /// The error as the sandbox reported it (cut to a few hundred characters).
    pub message: String,
}

/// The kinds of failure `agentrt eval --env code` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// No code in the reply, or not in the required `<reasoning>`/`<answer>` format.
    Format,
    /// The program does not parse.
    Syntax,
    /// An exception other than a failed assertion (a NameError, a TypeError, a forbidden import...).
    Exception,
    /// A sandbox limit: fuel, memory, wall time, output.
    Limit,
    /// A test's assertion failed: the code ran and gave a wrong answer.
    WrongAnswer,
}

impl FailureKind {
    /// Every kind, in declaration order (for listing a full tally).
    pub const ALL: [FailureKind; 5] = [FailureKind::Format, FailureKind::Syntax, FailureKind::Exception, FailureKind::Limit, FailureKind::WrongAnswer];

    /// The kind's snake_case name (`wrong_answer`), as serialised and reported.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Format => "format",
            FailureKind::Syntax => "syntax",
            FailureKind::Exception => "exception",
            FailureKind::Limit => "limit",
            FailureKind::WrongAnswer => "wrong_answer",
        }
    }
}
