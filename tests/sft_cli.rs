//! `agentrt sft` end to end on a tiny random model served from a safetensors directory: a kill -9 in the
//! middle of a run and its resumption (as `agentrt train`'s test), then RL warm-started from the SFT adapter
//! with `agentrt train --init-adapter`, whose first step's KL to its reference is zero (the reference is the
//! warm-started model).

use std::path::{Path, PathBuf};
use std::process::Command;

fn agentrt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agentrt"))
}

fn tiny_model(dir: &Path) -> PathBuf {
    agentrt_policy::tiny::tiny_model_dir(dir).unwrap()
}

fn chat_data(dir: &Path) -> PathBuf {
    let p = dir.join("chat.jsonl");
    let lines: Vec<String> = (0..24)
        .map(|i| {
            serde_json::json!({"messages": [
                {"role": "user", "content": format!("q{i}?")},
                {"role": "assistant", "content": "```python\nprint(search_pages(\"Paris\"))\n```"},
                {"role": "tool", "content": "[paris]"},
                {"role": "assistant", "content": format!("<answer>{}</answer>", i % 3)},
            ]})
            .to_string()
        })
        .collect();
    std::fs::write(&p, lines.join("\n")).unwrap();
    p
}

fn sft_args(model: &Path, data: &Path, out: &Path, name: &str, steps: usize) -> Vec<String> {
    [
        "sft",
        "--no-progress",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--max-steps",
        &steps.to_string(),
        "--batch-size",
        "4",
        "--lr",
        "1e-2",
        "--set",
        "run.save_steps=1",
        "--set",
        "data.val_examples=4",
        "--set",
        "sft.eval_steps=2",
        "--output-dir",
        out.to_str().unwrap(),
        "--run-name",
        name,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn metrics(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("metrics.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).expect("every metrics line parses")).collect()
}

fn run_ok(args: &[String]) -> String {
    let out = agentrt().args(args).output().unwrap();
    assert!(out.status.success(), "agentrt {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn sft_kill_nine_then_resume_then_rl_from_its_adapter() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data, out) = (tiny_model(dir.path()), chat_data(dir.path()), dir.path().join("runs"));
    let run = out.join("killed");
    let mut child = agentrt().args(sft_args(&model, &data, &out, "killed", 100_000)).stderr(std::process::Stdio::null()).spawn().unwrap();
    let started = std::time::Instant::now();
    while !run.join("checkpoint-2").join("trainer_state.json").exists() {
        assert!(started.elapsed().as_secs() < 300, "no checkpoint-2 after 5 minutes");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let stdout = run_ok(&["sft", "--no-progress", "--resume", run.to_str().unwrap(), "--max-steps", "6"].map(String::from));
    assert!(stdout.contains("final validation loss"), "{stdout}");
    let m = metrics(&run);
    assert_eq!(m.iter().map(|l| l["step"].as_u64().unwrap()).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5, 6], "each step once, in order");
    assert_eq!(m.iter().map(|l| l["examples_seen"].as_u64().unwrap()).collect::<Vec<_>>(), vec![4, 8, 12, 16, 20, 24], "the data position continues");
    assert!(m[5]["val_loss"].as_f64().is_some());
    for entry in std::fs::read_dir(&run).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        assert!(!name.ends_with(".partial") && !name.ends_with(".tmp"), "left over: {name}");
    }
    for f in [
        "config.toml",
        "curves.png",
        "checkpoint-6/adapters/adapter_config.json",
        "checkpoint-6/optimizer.safetensors",
        "checkpoint-6/trainer_state.json",
        "checkpoint-6/agent.json",
    ] {
        assert!(run.join(f).is_file(), "missing {f}");
    }
    // The adapter carries how it was trained: the base model, and the conversations' prompt (none here, so
    // the data.system_prompt default), demonstration (none) and most replies per episode (two).
    let agent: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run.join("checkpoint-6/agent.json")).unwrap()).unwrap();
    assert_eq!(agent["model"].as_str(), model.to_str(), "{agent}");
    assert_eq!(
        (agent["system_prompt"].as_str(), agent["demonstration"].as_bool(), agent["max_turns"].as_u64()),
        (Some("short"), Some(false), Some(2)),
        "{agent}"
    );
    assert!(agent["max_new_tokens"].as_u64().unwrap() >= 160, "{agent}");

    // RL warm-started from the SFT adapter: the KL reference is the warm-started model, so the first step's
    // KL (measured before the update) is zero although the adapter is far from the base model.
    let qs = dir.path().join("questions.jsonl");
    std::fs::write(&qs, r#"{"id": "q2", "question": "What is the capital of France?", "answer": "Paris", "page": "paris", "split": "train"}"#).unwrap();
    let rl = out.join("rl");
    run_ok(
        &[
            "train",
            "--fixture",
            "--no-progress",
            "--model",
            model.to_str().unwrap(),
            "--set",
            &format!("data.questions={}", qs.display()),
            "--max-steps",
            "1",
            "--num-rollouts",
            "2",
            "--batch-size",
            "1",
            "--advantage",
            "reinforce",
            "--beta",
            "0.1",
            "--set",
            "rollout.max_new_tokens=16",
            "--set",
            "rollout.max_turns=2",
            "--init-adapter",
            run.join("checkpoint-6").to_str().unwrap(),
            "--output-dir",
            out.to_str().unwrap(),
            "--run-name",
            "rl",
        ]
        .map(String::from),
    );
    let m = metrics(&rl);
    assert!(m[0]["trained_samples"].as_u64().unwrap() > 0, "{}", m[0]);
    assert!(m[0]["kl"].as_f64().unwrap().abs() < 1e-4, "first-step KL to the warm-started reference: {}", m[0]);
    assert!(std::fs::read_to_string(rl.join("config.toml")).unwrap().contains("checkpoint-6"));

    // `agentrt eval --adapter` with no --model plays the adapter on its own base model and settings.
    let ev = dir.path().join("eval");
    run_ok(
        &[
            "eval",
            "--fixture",
            "--questions",
            qs.to_str().unwrap(),
            "--split",
            "train",
            "--num-samples",
            "1",
            "--max-new-tokens",
            "8",
            "--adapter",
            run.join("checkpoint-6").to_str().unwrap(),
            "--output-dir",
            ev.to_str().unwrap(),
        ]
        .map(String::from),
    );
    let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(ev.join("results.json")).unwrap()).unwrap();
    let policy = results["info"]["policy"].as_str().unwrap();
    assert!(policy.starts_with(&format!("{} + ", model.display())) && !policy.contains("demonstration"), "{policy}");
    assert_eq!(results["info"]["max_turns"].as_u64(), Some(2), "{results}");
}
