//! TensorBoard reads back, step by step, the scalars a run writes: metrics lines whose reward, accuracy,
//! loss and timings are nonzero and change at every step go through `RunDir::append`, as the trainer
//! writes them, and TensorBoard's own reader (bench/tensorboard_reader.sh: the pinned `tensorboard`
//! package from PyPI, installed into `$AGENTRT_CACHE/toolchains` on first use; python3 with venv is
//! needed) must find every one of them at its step with its value, and nothing else.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_trainer::run_dir::{DEV_EVAL, METRICS, TRANSCRIPTS};
use agentrt_trainer::RunDir;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Scalar series by tag: each (step, value).
type Series = BTreeMap<String, Vec<(i64, f32)>>;

/// The scalar series TensorBoard's reader finds in `run`, and its text tags.
fn read_with_tensorboard(run: &Path) -> (Series, Vec<String>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/tensorboard_reader.sh");
    let output = Command::new("bash").arg(&script).arg(run).output().expect("running tensorboard_reader.sh");
    assert!(output.status.success(), "{} failed:\n{}", script.display(), String::from_utf8_lossy(&output.stderr));
    let read: serde_json::Value = serde_json::from_slice(&output.stdout).expect("the reader prints one JSON object");
    let scalars = read["scalars"]
        .as_object()
        .expect("scalars by tag")
        .iter()
        .map(|(tag, series)| {
            let points = series.as_array().unwrap().iter().map(|p| (p[0].as_i64().unwrap(), p[1].as_f64().unwrap() as f32)).collect();
            (tag.clone(), points)
        })
        .collect();
    let tensors = read["tensors"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect();
    (scalars, tensors)
}

#[test]
fn tensorboard_reads_back_every_scalar_of_every_step_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir { path: dir.path().to_path_buf() };
    let rewards = [0.25, -0.125, 0.6875, 1.3];
    let accuracies = [0.125, 0.5, 0.375, 0.875];
    let losses = [2.75, -0.0625, 0.001, 31.5];
    let seconds = [1.5, 2.25, 0.75, 3.1];
    let mut written = Series::new();
    let mut record = |tag: &str, step: i64, value: f64| written.entry(tag.to_string()).or_default().push((step, value as f32));
    for (i, step) in (1..=4i64).enumerate() {
        // A metrics line as the trainer writes it: numbers, a nested object, a flag, a string and a null.
        let line = json!({
            "step": step,
            "reward_mean": rewards[i],
            "accuracy": accuracies[i],
            "loss": losses[i],
            "questions_seen": 2 * step,
            "seconds": {"step": seconds[i], "generate": seconds[i] / 3.0},
            "degenerate": step == 3,
            "sampler": "local",
            "grad_norm": null,
        });
        run.append(METRICS, &line).unwrap();
        record("reward_mean", step, rewards[i]);
        record("accuracy", step, accuracies[i]);
        record("loss", step, losses[i]);
        record("questions_seen", step, (2 * step) as f64);
        record("seconds/step", step, seconds[i]);
        record("seconds/generate", step, seconds[i] / 3.0);
        record("degenerate", step, if step == 3 { 1.0 } else { 0.0 });
        if step % 2 == 0 {
            let eval = json!({"step": step, "accuracy": accuracies[i] / 2.0, "f1": 0.1 * step as f64});
            run.append(DEV_EVAL, &eval).unwrap();
            record("held_out/accuracy", step, accuracies[i] / 2.0);
            record("held_out/f1", step, 0.1 * step as f64);
            // Under `held_out/` the line's own `step` is a leaf like any other.
            record("held_out/step", step, step as f64);
        }
    }
    let transcript = json!({"step": 2, "episode": {"question": {"question": "Who?"}, "reward": 0.5, "turns": [{"reply": "Paris"}]}});
    run.append(TRANSCRIPTS, &transcript).unwrap();

    // What is compared can catch a wrong value: no series is zero at any step or the same two steps running.
    for tag in ["reward_mean", "accuracy", "loss", "seconds/step"] {
        let values: Vec<f32> = written[tag].iter().map(|&(_, v)| v).collect();
        assert!(values.iter().all(|&v| v != 0.0) && values.windows(2).all(|w| w[0] != w[1]), "{tag}: {values:?}");
    }

    let (read, tensors) = read_with_tensorboard(dir.path());
    assert_eq!(read.keys().collect::<Vec<_>>(), written.keys().collect::<Vec<_>>(), "the scalar tags");
    for (tag, series) in &written {
        // f32 is what an event holds: each value must come back exactly.
        assert_eq!(&read[tag], series, "{tag}: read (step, value) against written");
    }
    assert_eq!(tensors, ["transcripts"], "the text tags");
}
