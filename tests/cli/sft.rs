//! `agentrt sft` end to end on a tiny random model served from a safetensors directory: a kill -9 in the
//! middle of a run and its resumption (as `agentrt train`'s test), then RL warm-started from the SFT adapter
//! with `agentrt train --init-adapter`, whose first step's KL to its reference is zero (the reference is the
//! warm-started model).

use crate::common::{agentrt, kill_nine_then_resume, metrics, read_json, run_ok, set_flag, succeed, tiny_model, train_args};
use std::path::{Path, PathBuf};

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

/// `agentrt sft` on `data`: `steps` steps of 4 conversations, a checkpoint every step, the validation loss
/// every second.
fn sft_args(model: &Path, data: &Path, out: &Path, name: &str, steps: usize) -> Vec<String> {
    let steps = steps.to_string();
    let flags: [&[&str]; 4] = [
        &["sft", "--no-progress", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(), "--max-steps", &steps],
        &["--batch-size", "4", "--lr", "1e-2", "--set", "run.save_steps=1"],
        &["--set", "data.val_examples=4", "--set", "sft.eval_steps=2"],
        &["--output-dir", out.to_str().unwrap(), "--run-name", name],
    ];
    flags.concat().into_iter().map(String::from).collect()
}

#[test]
fn sft_kill_nine_then_resume_then_rl_from_its_adapter() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data, out) = (tiny_model(dir.path()), chat_data(dir.path()), dir.path().join("runs"));
    let run = out.join("killed");
    let resume = ["sft", "--no-progress", "--resume", run.to_str().unwrap(), "--max-steps", "6"].map(String::from);
    let (stdout, m) = kill_nine_then_resume(&sft_args(&model, &data, &out, "killed", 100_000), &resume, &run, 6);
    assert!(stdout.contains("final validation loss"), "{stdout}");
    assert_eq!(m.iter().map(|l| l["examples_seen"].as_u64().unwrap()).collect::<Vec<_>>(), vec![4, 8, 12, 16, 20, 24], "the data position continues");
    assert!(m[5]["val_loss"].as_f64().is_some());
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
    let agent = read_json(&run.join("checkpoint-6/agent.json"));
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
    let mut args = train_args(&model, &qs, &out, "rl", 1);
    set_flag(&mut args, "--batch-size", "1");
    args.extend(["--beta", "0.1", "--init-adapter", run.join("checkpoint-6").to_str().unwrap()].map(String::from));
    run_ok(args);
    let m = metrics(&rl);
    assert!(m[0]["trained_samples"].as_u64().unwrap() > 0, "{}", m[0]);
    assert!(m[0]["kl"].as_f64().unwrap().abs() < 1e-4, "first-step KL to the warm-started reference: {}", m[0]);
    assert!(std::fs::read_to_string(rl.join("config.toml")).unwrap().contains("checkpoint-6"));

    // `agentrt eval --adapter` with no --model plays the adapter on its own base model and settings.
    let ev = dir.path().join("eval");
    succeed(
        agentrt().args(["eval", "--fixture", "--questions", qs.to_str().unwrap(), "--split", "train", "--num-samples", "1", "--max-new-tokens", "8"]).args([
            "--adapter",
            run.join("checkpoint-6").to_str().unwrap(),
            "--output-dir",
            ev.to_str().unwrap(),
        ]),
    );
    let results = read_json(&ev.join("results.json"));
    let policy = results["info"]["policy"].as_str().unwrap();
    assert!(policy.starts_with(&format!("{} + ", model.display())) && !policy.contains("demonstration"), "{policy}");
    assert_eq!(results["info"]["max_turns"].as_u64(), Some(2), "{results}");
}
