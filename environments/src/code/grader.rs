//! The code environment's reward: the answer's code against each of the task's tests, each test its
//! own sandboxed program.

use crate::code::answer::{extract_code, solution};
use crate::code::tasks::CodeTask;
use crate::code::test_cases::TestCases;
use agentrt_rollout::{FailureKind, Grade, Grader, Question, RolloutError, TestFailure, TestResult, TestRun};
use agentrt_runtime::{Limits, ProgramError, Sandbox};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Arc;

/// How answers are scored: `base_weight` × the fraction of tests passed + `perfect_weight` when all pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TestReward {
    /// Reward for passing every test, paid pro rata to the fraction passed (logged as `tests`).
    pub base_weight: f32,
    /// Bonus when every test passes (logged as `perfect`).
    pub perfect_weight: f32,
    /// Run at most this many of a task's tests (its first ones); 0: all.
    pub max_tests_per_problem: usize,
    /// The answer must be `<reasoning>…</reasoning><answer>…</answer>`.
    pub reasoning_format: bool,
}

/// Grades code answers by running the tests of the task whose id is the question's.
pub struct TestGrader {
    sandbox: Arc<Sandbox>,
    tasks: HashMap<String, (CodeTask, TestCases)>,
    limits: Limits,
    reward: TestReward,
    /// Test programs in flight at once.
    concurrency: usize,
}

impl TestGrader {
    /// A grader for `tasks`, running every test under `limits`. Fails on a task whose tests cannot be
    /// read (no `def check(` at the start of a line).
    pub fn new(sandbox: Arc<Sandbox>, tasks: &[CodeTask], limits: Limits, reward: TestReward) -> Result<Self, RolloutError> {
        let mut by_id = HashMap::new();
        for t in tasks {
            let cases = TestCases::parse(&t.test).ok_or_else(|| RolloutError::Invalid(format!("task {}: its test code defines no check(candidate)", t.id)))?;
            by_id.insert(t.id.clone(), (t.clone(), cases));
        }
        Ok(TestGrader { sandbox, tasks: by_id, limits, reward, concurrency: crate::programs_in_flight() })
    }

    /// The test programs of `code` for task `id`, as many as the grader runs.
    pub fn programs(&self, id: &str, code: &str) -> Option<Vec<String>> {
        let (task, cases) = self.tasks.get(id)?;
        let n = match self.reward.max_tests_per_problem {
            0 => cases.len(),
            max => cases.len().min(max),
        };
        let solution = solution(task, code);
        Some((0..n).map(|i| cases.program(&solution, &task.entry_point, i)).collect())
    }

    async fn run_tests(&self, programs: Vec<String>) -> Vec<TestResult> {
        use futures::StreamExt;
        futures::stream::iter(programs)
            .map(|p| {
                let (sandbox, limits) = (self.sandbox.clone(), self.limits);
                async move { sandbox.run_with_limits(&p, limits).await }
            })
            .buffered(self.concurrency)
            .map(|report| TestResult { failure: report.result.err().map(|e| failure_of(&e)) })
            .collect()
            .await
    }

    fn grade_of(&self, run: TestRun) -> Grade {
        let total = run.total().max(1) as f32;
        let tests = self.reward.base_weight * run.passed as f32 / total;
        let perfect = if run.all_passed() { self.reward.perfect_weight } else { 0.0 };
        Grade {
            reward: tests + perfect,
            correct: run.all_passed(),
            components: vec![("tests".into(), tests), ("perfect".into(), perfect)],
            partial_credit: None,
            well_formed: run.unrunnable.is_none(),
            verdict: None,
            tests: Some(run),
            grader_error: None,
        }
    }
}

/// What kind of failure a test's error is: a failed assertion is a wrong answer.
pub fn failure_of(error: &ProgramError) -> TestFailure {
    let kind = match error {
        ProgramError::Syntax { .. } => FailureKind::Syntax,
        ProgramError::Exception { type_name, .. } if type_name == "AssertionError" => FailureKind::WrongAnswer,
        ProgramError::LimitExceeded { .. } => FailureKind::Limit,
        ProgramError::Exception { .. }
        | ProgramError::UnknownTool { .. }
        | ProgramError::ToolFailed { .. }
        | ProgramError::Forbidden { .. }
        | ProgramError::GuestTrap { .. } => FailureKind::Exception,
    };
    let message: String = error.to_string().chars().take(300).collect();
    TestFailure { kind, message }
}

#[async_trait]
impl Grader for TestGrader {
    fn name(&self) -> String {
        let r = &self.reward;
        format!("tests(base {}, perfect {}{})", r.base_weight, r.perfect_weight, if r.reasoning_format { ", reasoning format" } else { "" })
    }

    async fn grade(&self, items: &[(&Question, &str)]) -> Result<Vec<Grade>, RolloutError> {
        let mut grades = Vec::with_capacity(items.len());
        for (question, reply) in items {
            let code = match extract_code(reply, self.reward.reasoning_format) {
                Ok(code) => code,
                Err(why) => {
                    let run = TestRun { passed: 0, results: vec![], unrunnable: Some(TestFailure { kind: FailureKind::Format, message: why }) };
                    grades.push(self.grade_of(run));
                    continue;
                }
            };
            let programs = self
                .programs(&question.id, &code)
                .ok_or_else(|| RolloutError::Invalid(format!("question {} is not a task of this code environment", question.id)))?;
            let results = self.run_tests(programs).await;
            let passed = results.iter().filter(|r| r.failure.is_none()).count();
            grades.push(self.grade_of(TestRun { passed, results, unrunnable: None }));
        }
        Ok(grades)
    }
}
