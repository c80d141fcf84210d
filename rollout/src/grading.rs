//! How an episode's final answer becomes a reward: an environment's [`Grader`]. The wiki environment
//! asks a judge ([`JudgeGrader`]); the code environment runs the task's tests in the sandbox. Either way
//! an episode gets one [`Grade`]: the reward, whether it counts as correct, and the named parts the
//! reward adds up from, which training logs one by one.

use crate::error::RolloutError;
use crate::questions::Question;
use agentrt_judge::{Judge, JudgeInput, Verdict};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The grade of one final answer.
#[derive(Debug, Clone, Serialize)]
pub struct Grade {
    /// The reward in `[0, 1]` for a judge, `[0, base_weight + perfect_weight]` for tests.
    pub reward: f32,
    /// Counted as a correct answer (accuracy, pass@k): the judge said so, or every test passed.
    pub correct: bool,
    /// The parts `reward` is the sum of, by name (`judge`; `tests`, `perfect`), logged apart.
    pub components: Vec<(String, f32)>,
    /// The judge's verdict, when a judge graded.
    pub verdict: Option<Verdict>,
    /// Each test's result, when tests graded.
    pub tests: Option<TestRun>,
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

/// The wiki environment's grader: a [`Judge`] against the question's gold answers, `concurrency`
/// verdicts in flight at once.
pub struct JudgeGrader {
    /// Judges each final answer against the question's gold answers.
    pub judge: Arc<dyn Judge>,
    /// Verdicts in flight at once (at least 1 is used).
    pub concurrency: usize,
}

impl JudgeGrader {
    /// A grader asking `judge`, 8 verdicts at a time.
    pub fn new(judge: Arc<dyn Judge>) -> Self {
        JudgeGrader { judge, concurrency: 8 }
    }
}

#[async_trait]
impl Grader for JudgeGrader {
    fn name(&self) -> String {
        self.judge.name()
    }

    async fn grade(&self, items: &[(&Question, &str)]) -> Result<Vec<Grade>, RolloutError> {
        // Each verdict on its own task (owning its input), `concurrency` at a time.
        let permits = Arc::new(tokio::sync::Semaphore::new(self.concurrency.max(1)));
        let tasks: Vec<_> = items
            .iter()
            .map(|(q, a)| {
                let input = JudgeInput::new(q.question.clone(), q.answers.clone(), a.to_string());
                let (judge, permits) = (self.judge.clone(), permits.clone());
                tokio::spawn(async move {
                    let _permit = permits.acquire_owned().await.expect("the semaphore is never closed");
                    judge.judge(&input).await
                })
            })
            .collect();
        let mut verdicts = Vec::with_capacity(tasks.len());
        for t in tasks {
            verdicts.push(t.await.map_err(|e| RolloutError::Invalid(format!("a judge task failed: {e}")))?);
        }
        verdicts
            .into_iter()
            .map(|v| {
                let v = v?;
                // Both judges give 0 or 1; an LLM judge's `yes` and the rule judge's matches are the 1s.
                let correct = v.reward > 0.5;
                Ok(Grade { reward: v.reward, correct, components: vec![("judge".into(), v.reward)], verdict: Some(v), tests: None })
            })
            .collect()
    }
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
