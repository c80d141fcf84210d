//! Grader components (the `agentrt:tools/grader` world): an environment package's own reward, bounded as
//! a program is. Uses guest-tools/test-grader, which grades a number and misbehaves when a task asks.

use agentrt_runtime::{FixtureTools, GradeFailure, Limit, Limits, Sandbox, SandboxConfig, SandboxError, EXAMPLE_PLUGIN_WASM, TEST_GRADER_WASM};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

async fn sandbox() -> Sandbox {
    Sandbox::new(SandboxConfig::default(), Arc::new(FixtureTools::default())).await.unwrap()
}

/// Tight bounds, so a runaway grader ends in well under a second.
fn tight() -> Limits {
    Limits { fuel: 50_000_000, memory_bytes: 16 << 20, timeout: Duration::from_millis(500), ..Limits::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grader_component_scores_answers_with_named_parts() {
    let sandbox = sandbox().await;
    let grader = sandbox.load_grader(Path::new(TEST_GRADER_WASM)).unwrap();
    let task = r#"{"id": "a1", "question": "2 + 40?", "answer": 42}"#;
    let right = grader.grade(task, "The total is 42.", tight()).await.unwrap();
    assert_eq!((right.parts, right.correct), (vec![("number".to_string(), 1.0)], true));
    let wrong = grader.grade(task, "41", tight()).await.unwrap();
    assert_eq!((wrong.parts, wrong.correct), (vec![("number".to_string(), 0.0)], false));
    let refused = grader.grade(r#"{"id": "a2"}"#, "42", tight()).await.unwrap_err();
    assert!(matches!(&refused, GradeFailure::Refused { message, .. } if message.contains("no numeric `answer`")), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grader_that_loops_or_allocates_fails_that_grade_naming_the_limit() {
    let sandbox = sandbox().await;
    let grader = sandbox.load_grader(Path::new(TEST_GRADER_WASM)).unwrap();
    let looping = grader.grade(r#"{"answer": 1, "misbehave": "loop"}"#, "1", tight()).await.unwrap_err();
    assert_eq!(looping, GradeFailure::Limit { file: "test_grader.wasm".into(), limit: Limit::Fuel }, "{looping}");
    // With fuel to spare, the clock ends it.
    let slow = Limits { fuel: u64::MAX / 2, ..tight() };
    let timed_out = grader.grade(r#"{"answer": 1, "misbehave": "loop"}"#, "1", slow).await.unwrap_err();
    assert_eq!(timed_out, GradeFailure::Limit { file: "test_grader.wasm".into(), limit: Limit::Time }, "{timed_out}");
    let allocating = grader.grade(r#"{"answer": 1, "misbehave": "allocate"}"#, "1", tight()).await.unwrap_err();
    assert_eq!(allocating, GradeFailure::Limit { file: "test_grader.wasm".into(), limit: Limit::Memory }, "{allocating}");
    assert!(allocating.to_string().contains("memory"), "{allocating}");
    let panicked = grader.grade(r#"{"answer": 1, "misbehave": "panic"}"#, "1", tight()).await.unwrap_err();
    assert!(matches!(&panicked, GradeFailure::Crashed { message, .. } if message.contains("asked to panic")), "{panicked}");
    // Each grade is a fresh instance: the grader is as good as new after all of that.
    let after = grader.grade(r#"{"answer": 7}"#, "7", tight()).await.unwrap();
    assert!(after.correct);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_of_another_world_is_refused_as_a_grader_naming_the_file() {
    let sandbox = sandbox().await;
    let error = sandbox.load_grader(Path::new(EXAMPLE_PLUGIN_WASM)).err().expect("a plug-in tool is not a grader");
    assert!(
        matches!(&error, SandboxError::WrongWorld { origin, world: "grader", reason } if origin.ends_with("word_stats_tool.wasm") && reason.contains("grading")),
        "{error}"
    );
}
