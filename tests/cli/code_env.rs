//! `agentrt train --env code` and `agentrt eval --env code` end to end, on a tiny random model and two
//! small tasks: the commands run, log the reward's parts, and write pass@k and per-task results that a
//! stopped evaluation resumes from.

use crate::common::{agentrt, metrics, read_json, read_jsonl, succeed, tiny_model};
use std::path::{Path, PathBuf};

/// Two tasks in HumanEval's format, with their splits.
fn tasks(dir: &Path) -> PathBuf {
    let p = dir.join("tasks.jsonl");
    let rows = [
        serde_json::json!({"task_id": "T/1", "prompt": "def add(a, b):\n    \"\"\"Add two numbers.\"\"\"\n", "canonical_solution": "    return a + b\n",
            "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n", "entry_point": "add", "split": "train"}),
        serde_json::json!({"task_id": "T/2", "prompt": "def neg(a):\n    \"\"\"Negate.\"\"\"\n", "canonical_solution": "    return -a\n",
            "test": "def check(candidate):\n    assert candidate(1) == -1\n", "entry_point": "neg", "split": "train"}),
    ];
    std::fs::write(&p, rows.iter().map(|r| r.to_string()).collect::<Vec<_>>().join("\n")).unwrap();
    p
}

/// Training the code environment logs the test reward's parts, and its held-out slice (`run.eval_steps`)
/// comes from the code tasks' own held-out split (`test`, the default `run.eval_split` of this environment),
/// graded by their tests: not from the wiki's questions.
#[test]
fn train_env_code_logs_each_part_of_the_test_reward_and_evaluates_its_held_out_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let (model, tasks, out) = (tiny_model(dir.path()), tasks(dir.path()), dir.path().join("runs"));
    let held_out = serde_json::json!({"task_id": "T/3", "prompt": "def sub(a, b):\n    \"\"\"Subtract b from a.\"\"\"\n", "canonical_solution": "    return a - b\n",
        "test": "def check(candidate):\n    assert candidate(3, 1) == 2\n", "entry_point": "sub", "split": "test"});
    std::fs::write(&tasks, format!("{}\n{held_out}\n", std::fs::read_to_string(&tasks).unwrap())).unwrap();
    succeed(
        agentrt()
            .args([
                "train",
                "--env",
                "code",
                "--no-progress",
                "--model",
                model.to_str().unwrap(),
                "--max-steps",
                "2",
                "--num-rollouts",
                "2",
                "--batch-size",
                "2",
            ])
            .args(["--advantage", "reinforce", "--set", "rollout.max_new_tokens=12", "--set", &format!("env.code.tasks={}", tasks.display())])
            .args(["--set", "run.eval_steps=1", "--set", "run.eval_skip=0"])
            .args(["--output-dir", out.to_str().unwrap(), "--run-name", "code"]),
    );
    let lines = metrics(&out.join("code"));
    assert_eq!(lines.len(), 2);
    for line in &lines {
        for key in ["reward_tests", "reward_perfect", "reward_mean", "accuracy"] {
            assert!(line[key].is_number(), "{key} missing from {line}");
        }
        assert_eq!(line["turns"], 1.0, "a code episode is one reply");
    }
    let config = std::fs::read_to_string(out.join("code/config.toml")).unwrap();
    assert!(config.contains("[env]") && config.contains("name = \"code\""), "{config}");
    let transcript = std::fs::read_to_string(out.join("code/transcripts.jsonl")).unwrap();
    assert!(transcript.contains("\"tests\""), "the transcript keeps each sample's test results");
    // The held-out slice: the one `test` task, before the first step and after each.
    let dev = read_jsonl(&out.join("code/dev_eval.jsonl"));
    assert_eq!(dev.iter().map(|l| l["step"].as_u64().unwrap()).collect::<Vec<_>>(), vec![0, 1, 2], "{dev:?}");
    assert!(dev.iter().all(|l| l["questions"] == 1 && l["accuracy"].is_number()), "{dev:?}");
    assert!(lines.iter().all(|l| l["dev_accuracy"].is_number()), "{lines:?}");
}

#[test]
fn eval_env_code_reports_pass_at_k_per_task_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (model, tasks, out) = (tiny_model(dir.path()), tasks(dir.path()), dir.path().join("eval"));
    let eval = |extra: &[&str]| {
        agentrt()
            .args(["eval", "--env", "code", "--model", model.to_str().unwrap(), "--questions", tasks.to_str().unwrap()])
            .args(["--num-generations", "2", "--temperature", "1", "--max-new-tokens", "8", "--output-dir", out.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap()
    };
    let first = eval(&[]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let results = read_json(&out.join("results.json"));
    let m = &results["metrics"];
    assert_eq!((m["num_tasks"].as_u64(), m["n"].as_u64()), (Some(2), Some(2)));
    for k in ["1", "2"] {
        let p = m["pass_at"][k].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p), "pass@{k} = {p}");
    }
    assert_eq!(m["outcomes"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum::<u64>(), 4, "{m}");
    assert_eq!(std::fs::read_to_string(out.join("tasks.jsonl")).unwrap().lines().count(), 2);
    assert_eq!(std::fs::read_to_string(out.join("samples.jsonl")).unwrap().lines().count(), 4);

    // The same output again is refused; --resume finds every task done and reports the same numbers.
    let again = eval(&[]);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("--resume"));
    let resumed = eval(&["--resume"]);
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(String::from_utf8_lossy(&resumed.stderr).contains("2 tasks done"));
    let after = read_json(&out.join("results.json"));
    assert_eq!(after["metrics"], results["metrics"]);
    // Other settings do not resume silently.
    let other = eval(&["--resume", "--seed", "9"]);
    assert!(!other.status.success() && String::from_utf8_lossy(&other.stderr).contains("other settings"));
    // Greedy sampling cannot give n different samples.
    let greedy = agentrt().args(["eval", "--env", "code", "--num-generations", "3", "--model", model.to_str().unwrap()]).output().unwrap();
    assert!(!greedy.status.success() && String::from_utf8_lossy(&greedy.stderr).contains("--temperature 0"));
}

/// `--regrade` grades stored replies again under the code tests' own limits, with no model: a slow but
/// correct answer fails under a small `env.code.test_fuel` and passes under the default.
#[test]
fn eval_env_code_regrade_grades_stored_replies_under_new_limits() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = tasks(dir.path());
    let from = dir.path().join("sampled");
    std::fs::create_dir_all(&from).unwrap();
    let settings =
        serde_json::json!({"policy": "hand-written", "tasks": tasks.display().to_string(), "split": "all", "num_generations": 2, "reasoning_format": false});
    std::fs::write(from.join("settings.json"), settings.to_string()).unwrap();
    // T/1: a correct answer that loops before returning, and a wrong one; T/2: correct, and no code at all.
    let slow_add = "```python\ndef add(a, b):\n    s = 0\n    for i in range(200000):\n        s += i\n    return a + b\n```";
    let replies = [
        ("T/1", slow_add),
        ("T/1", "```python\ndef add(a, b):\n    return a - b\n```"),
        ("T/2", "```python\ndef neg(a):\n    return -a\n```"),
        ("T/2", "no code"),
    ];
    let mut lines = String::new();
    for (i, (id, reply)) in replies.iter().enumerate() {
        lines.push_str(&serde_json::json!({"task_id": id, "sample": i % 2, "reply": reply}).to_string());
        lines.push('\n');
    }
    std::fs::write(from.join("samples.jsonl"), lines).unwrap();
    let regrade = |out: &str, extra: &[&str]| {
        let out = dir.path().join(out);
        succeed(agentrt().args(["eval", "--regrade", from.to_str().unwrap(), "--output-dir", out.to_str().unwrap()]).args(extra));
        read_json(&out.join("results.json"))
    };
    let roomy = regrade("roomy", &[]);
    assert_eq!(roomy["metrics"]["outcomes"], serde_json::json!({"passed": 2, "wrong_answer": 1, "format": 1}), "{roomy}");
    assert_eq!(roomy["settings"]["limits"]["fuel"], 2_000_000_000u64);
    assert_eq!(roomy["settings"]["regraded_from"], from.display().to_string());
    // --regrade implies --env code.
    let tight = regrade("tight", &["--set", "env.code.test_fuel=1000000"]);
    assert_eq!(tight["metrics"]["outcomes"], serde_json::json!({"passed": 1, "wrong_answer": 1, "format": 1, "limit": 1}), "{tight}");
    // The replies' own directory is not overwritten.
    let o = agentrt().args(["eval", "--env", "code", "--regrade", from.to_str().unwrap(), "--output-dir", from.to_str().unwrap()]).output().unwrap();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("another --output-dir"));
}
