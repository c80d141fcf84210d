//! The code environment built from a training config owns its tasks: it reads the tasks file once, when
//! it is built, and evaluates from what it holds (its questions, its grader's tests, each task's prompt),
//! so the file can be gone by then.

use agentrt_rollout::{EpisodeOutcome, ScriptedPolicy};
use agentrt_runtime::{NoWikiTools, Sandbox, SandboxConfig};
use agentrt_trainer::{RunConfig, TrainConfig};
use std::collections::HashMap;
use std::sync::Arc;

const TASKS: &str = r#"{"task_id": "T/0", "prompt": "def add(a, b):\n    \"\"\"Their sum.\"\"\"\n", "canonical_solution": "    return a + b\n", "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n", "entry_point": "add"}
{"task_id": "T/1", "prompt": "def double(x):\n    \"\"\"Twice x.\"\"\"\n", "canonical_solution": "    return 2 * x\n", "test": "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(0) == 0\n", "entry_point": "double"}
"#;

#[test]
fn the_code_environment_reads_its_tasks_once_and_evaluates_from_them() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks, TASKS).unwrap();
    let config = TrainConfig::from_layers(None, &["env.name=code".to_string(), format!("env.code.tasks={:?}", tasks.display().to_string())]).unwrap();

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let sandbox = Arc::new(Sandbox::new(SandboxConfig::default(), Arc::new(NoWikiTools)).await.unwrap());
        let environment = agentrt_environments::Environment::build(&config.env, &config.rollout.episode, sandbox.clone()).unwrap();
        std::fs::remove_file(&tasks).unwrap();

        let questions = environment.questions("all").unwrap();
        assert_eq!(questions.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(), ["T/0", "T/1"]);
        assert!(questions[0].question.contains("def add(a, b):"), "{}", questions[0].question);
        assert_eq!(environment.code_task("T/1").map(|t| t.entry_point.as_str()), Some("double"));
        // HumanEval's documented split, by task number: T/0 holds out, T/1 trains.
        assert_eq!(environment.questions("train").unwrap()[0].id, "T/1");
        let e = environment.questions("dev").unwrap_err().to_string();
        assert!(e.contains("split `dev`") && e.contains("tasks.jsonl"), "{e}");

        // T/0 is answered right, T/1 wrong: the grader runs each task's tests from the tasks it holds.
        let replies = HashMap::from([
            ("T/0".to_string(), vec!["```python\ndef add(a, b):\n    return a + b\n```".to_string()]),
            ("T/1".to_string(), vec!["```python\ndef double(x):\n    return x + 1\n```".to_string()]),
        ]);
        let batch = environment.runner(sandbox).run(&ScriptedPolicy::new(replies), &questions).await.unwrap();
        let outcomes: Vec<EpisodeOutcome> = batch.episodes.iter().map(|e| e.outcome).collect();
        assert_eq!(outcomes, [EpisodeOutcome::Correct, EpisodeOutcome::WrongAnswer]);
        assert_eq!(batch.episodes[0].turns.len(), 1, "the code environment plays one reply");
        let passed: Vec<usize> = batch.episodes.iter().map(|e| e.tests.as_ref().unwrap().passed).collect();
        assert_eq!(passed, [2, 0]);
    });
}

#[test]
fn the_held_out_slice_comes_from_the_environment_played() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks, TASKS).unwrap();
    let layers = |split: &str| {
        vec![
            "env.name=code".to_string(),
            format!("env.code.tasks={:?}", tasks.display().to_string()),
            "run.eval_steps=5".to_string(),
            format!("run.eval_split={split:?}"),
            "run.eval_skip=0".to_string(),
        ]
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let sandbox = Arc::new(Sandbox::new(SandboxConfig::default(), Arc::new(NoWikiTools)).await.unwrap());
        // The code tasks' held-out split (T/0 by HumanEval's documented split), not the wiki's questions.
        let config = TrainConfig::from_layers(None, &layers("test")).unwrap();
        let environment = agentrt_environments::Environment::build(&config.env, &config.rollout.episode, sandbox.clone()).unwrap();
        let slice = agentrt_trainer::eval_slice(&config, &environment).unwrap();
        assert_eq!(slice.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(), ["T/0"]);
        // The wiki's split name is refused by the code environment, naming the split and the tasks file.
        let config = TrainConfig::from_layers(None, &layers("dev")).unwrap();
        let environment = agentrt_environments::Environment::build(&config.env, &config.rollout.episode, sandbox).unwrap();
        let e = agentrt_trainer::eval_slice(&config, &environment).unwrap_err().to_string();
        assert!(e.contains("split `dev`") && e.contains("tasks.jsonl"), "{e}");
    });
}
