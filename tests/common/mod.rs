//! What the CLI tests share: the binary, the fixture questions and a short `agentrt train` on a tiny model.
// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn agentrt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agentrt"))
}

pub fn tiny_model(dir: &Path) -> PathBuf {
    agentrt_policy::tiny::tiny_model_dir(dir).unwrap()
}

/// Three train-split questions about the fixture corpus (its pages: denver_broncos, paris, oxygen).
pub fn questions(dir: &Path) -> PathBuf {
    let p = dir.join("questions.jsonl");
    let rows = [
        r#"{"id": "q1", "question": "Who did the Broncos defeat in Super Bowl 50?", "answer": "Carolina Panthers", "page": "denver_broncos", "split": "train"}"#,
        r#"{"id": "q2", "question": "What is the capital of France?", "answer": "Paris", "page": "paris", "split": "train"}"#,
        r#"{"id": "q3", "question": "Who discovered oxygen?", "answer": "Carl Wilhelm Scheele", "page": "oxygen", "split": "train"}"#,
    ];
    std::fs::write(&p, rows.join("\n")).unwrap();
    p
}

/// `agentrt train` on the fixture tools: `steps` steps of 2 questions x 2 rollouts, short replies, a
/// checkpoint every step.
pub fn train_args(model: &Path, questions: &Path, out: &Path, name: &str, steps: usize) -> Vec<String> {
    [
        "train",
        "--fixture",
        "--no-progress",
        "--model",
        model.to_str().unwrap(),
        "--set",
        &format!("data.questions={}", questions.display()),
        "--max-steps",
        &steps.to_string(),
        "--num-rollouts",
        "2",
        "--batch-size",
        "2",
        "--advantage",
        "reinforce",
        "--lr",
        "1e-2",
        "--set",
        "run.save_steps=1",
        "--set",
        "rollout.max_new_tokens=16",
        "--set",
        "rollout.max_turns=2",
        "--output-dir",
        out.to_str().unwrap(),
        "--run-name",
        name,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}
