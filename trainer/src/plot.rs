//! `agentrt plot RUN`: the curves of a run as one PNG (reward, accuracy, tool calls, KL, loss, and the
//! routing evaluation when the run has one; for an `agentrt sft` run, train and validation loss, lr, grad
//! norm and tokens).

use crate::error::TrainError;
use crate::run_dir::{RunDir, METRICS, ROUTING_EVAL};
use agentrt_charts::{write_line_charts, LineChart, Series};
use std::path::{Path, PathBuf};

/// The file `plot_run` writes inside the run directory.
pub const CURVES: &str = "curves.png";

fn series(lines: &[serde_json::Value], name: &str, key: &str) -> Series {
    Series {
        name: name.into(),
        points: lines.iter().filter_map(|l| Some((l["step"].as_f64()?, l.pointer(key)?.as_f64()?))).collect(),
    }
}

fn chart(title: &str, y: &str, series: Vec<Series>) -> LineChart {
    LineChart { title: title.into(), x_label: "step".into(), y_label: y.into(), series }
}

/// Writes `RUN/curves.png` (or `out`) from `RUN/metrics.jsonl`; returns the path.
pub fn plot_run(run: &Path, out: Option<&Path>) -> Result<PathBuf, TrainError> {
    let dir = RunDir { path: run.to_path_buf() };
    let lines = dir.read_lines(METRICS)?;
    if lines.is_empty() {
        return Err(TrainError::Run(format!("{}: no metrics yet ({} is empty or missing)", run.display(), METRICS)));
    }
    if lines.iter().any(|l| l.get("train_loss").is_some()) {
        return plot_sft(run, &lines, out);
    }
    let mut charts = vec![
        chart("reward", "mean reward", vec![series(&lines, "mean", "/reward_mean"), series(&lines, "std", "/reward_std")]),
        chart("accuracy", "fraction correct", vec![series(&lines, "accuracy", "/accuracy")]),
        chart("tool calls", "per episode", vec![series(&lines, "tool calls", "/tool_calls"), series(&lines, "turns", "/turns")]),
        chart("KL to base", "mean per token", vec![series(&lines, "kl", "/kl")]),
        chart("loss", "loss", vec![series(&lines, "loss", "/loss")]),
        chart("seconds per step", "s", vec![series(&lines, "step", "/seconds/step"), series(&lines, "generate", "/seconds/generate"), series(&lines, "update", "/seconds/update")]),
    ];
    let routing = dir.read_lines(ROUTING_EVAL)?;
    if !routing.is_empty() {
        charts.push(chart(
            "routing eval: accuracy",
            "fraction correct",
            vec![series(&routing, "both", "/both/accuracy"), series(&routing, "retain only", "/retain_only/accuracy"), series(&routing, "forget only", "/forget_only/accuracy")],
        ));
        charts.push(chart(
            "routing eval: flagged",
            "fraction flagged",
            vec![series(&routing, "both", "/both/flagged"), series(&routing, "retain only", "/retain_only/flagged"), series(&routing, "forget only", "/forget_only/flagged")],
        ));
    }
    let path = out.map(Path::to_path_buf).unwrap_or_else(|| run.join(CURVES));
    write_line_charts(&path, &charts, 2).map_err(|e| TrainError::Run(format!("plotting {}: {e}", path.display())))?;
    Ok(path)
}

/// The curves of an `agentrt sft` run: train and validation loss, learning rate, gradient norm, tokens.
fn plot_sft(run: &Path, lines: &[serde_json::Value], out: Option<&Path>) -> Result<PathBuf, TrainError> {
    let charts = vec![
        chart("loss", "-mean log p per model token", vec![series(lines, "train", "/train_loss"), series(lines, "validation", "/val_loss")]),
        chart("learning rate", "lr", vec![series(lines, "lr", "/lr")]),
        chart("gradient norm", "before clipping", vec![series(lines, "grad norm", "/grad_norm")]),
        chart("tokens per step", "tokens", vec![series(lines, "all", "/tokens"), series(lines, "model", "/model_tokens")]),
    ];
    let path = out.map(Path::to_path_buf).unwrap_or_else(|| run.join(CURVES));
    write_line_charts(&path, &charts, 2).map_err(|e| TrainError::Run(format!("plotting {}: {e}", path.display())))?;
    Ok(path)
}
