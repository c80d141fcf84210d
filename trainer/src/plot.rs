//! `agentrt plot RUN`: the curves of a run as one PNG (reward, accuracy, tool calls, KL, loss, the groups
//! dynamic sampling drew, kept and dropped, the held-out slice's accuracy and the routing evaluation when
//! the run has them; for an `agentrt sft` run, train and validation loss, lr, grad
//! norm and tokens).

use crate::error::TrainError;
use crate::metrics::StepMetrics;
use crate::run_dir::{RunDir, DEV_EVAL, METRICS, ROUTING_EVAL};
use agentrt_charts::{write_line_charts, LineChart, Series};
use std::path::{Path, PathBuf};

/// The file `plot_run` writes inside the run directory.
pub const CURVES: &str = "curves.png";

/// The points of `key` (a JSON pointer) over the lines of `file`. A `null` value is a step without one
/// (a validation loss between evaluations); a missing key or a value that is not a number is an error
/// naming the line, never a silently dropped point.
fn series(lines: &[serde_json::Value], file: &str, name: &str, key: &str) -> Result<Series, TrainError> {
    let mut points = Vec::with_capacity(lines.len());
    for (i, l) in lines.iter().enumerate() {
        let bad = |what: &str| TrainError::Run(format!("{file} line {}: {what}", i + 1));
        let step = l["step"].as_f64().ok_or_else(|| bad("no numeric `step`"))?;
        match l.pointer(key) {
            None => return Err(bad(&format!("no `{}` (written by another version of agentrt?)", key.trim_start_matches('/').replace('/', ".")))),
            Some(serde_json::Value::Null) => {}
            Some(v) => points.push((step, v.as_f64().ok_or_else(|| bad(&format!("`{key}` is {v}, not a number")))?)),
        }
    }
    Ok(Series { name: name.into(), points })
}

/// The points of one field over a training run's steps; a value that is not finite (written as `null`)
/// is a step without one.
fn curve(steps: &[StepMetrics], name: &str, value: impl Fn(&StepMetrics) -> f64) -> Series {
    let points = steps.iter().map(|m| (m.step as f64, value(m))).filter(|(_, v)| v.is_finite()).collect();
    Series { name: name.into(), points }
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
    let steps = dir.step_metrics()?;
    let mut charts = vec![
        chart("reward", "mean reward", vec![curve(&steps, "mean", |m| m.reward_mean), curve(&steps, "std", |m| m.reward_std)]),
        chart("accuracy", "fraction correct", vec![curve(&steps, "accuracy", |m| m.accuracy)]),
        chart("tool calls", "per episode", vec![curve(&steps, "tool calls", |m| m.tool_calls), curve(&steps, "turns", |m| m.turns)]),
        chart("KL to base", "mean per token", vec![curve(&steps, "kl", |m| m.kl)]),
        chart("loss", "loss", vec![curve(&steps, "loss", |m| m.loss)]),
        chart(
            "seconds per step",
            "s",
            vec![curve(&steps, "step", |m| m.seconds.step), curve(&steps, "generate", |m| m.seconds.generate), curve(&steps, "update", |m| m.seconds.update)],
        ),
        chart(
            "groups per step",
            "groups",
            vec![
                curve(&steps, "drawn", |m| m.groups_drawn as f64),
                curve(&steps, "kept", |m| m.groups_kept as f64),
                // Dynamic sampling drops exactly the all-equal groups; lines written before groups_equal
                // was logged counted them as dropped either way.
                curve(&steps, "equal rewards (no signal)", |m| m.groups_equal.max(m.groups_dropped) as f64),
            ],
        ),
    ];
    let dev = dir.read_lines(DEV_EVAL)?;
    if !dev.is_empty() {
        charts.push(chart(
            "held-out slice (greedy)",
            "fraction correct",
            vec![
                series(&dev, DEV_EVAL, "accuracy", "/accuracy")?,
                series(&dev, DEV_EVAL, "95% low", "/accuracy_low")?,
                series(&dev, DEV_EVAL, "95% high", "/accuracy_high")?,
                series(&dev, DEV_EVAL, "answer F1", "/answer_f1")?,
            ],
        ));
    }
    let routing = dir.read_lines(ROUTING_EVAL)?;
    if !routing.is_empty() {
        charts.push(chart(
            "routing eval: accuracy",
            "fraction correct",
            vec![
                series(&routing, ROUTING_EVAL, "both", "/both/accuracy")?,
                series(&routing, ROUTING_EVAL, "retain only", "/retain_only/accuracy")?,
                series(&routing, ROUTING_EVAL, "forget only", "/forget_only/accuracy")?,
            ],
        ));
        charts.push(chart(
            "routing eval: flagged",
            "fraction flagged",
            vec![
                series(&routing, ROUTING_EVAL, "both", "/both/flagged")?,
                series(&routing, ROUTING_EVAL, "retain only", "/retain_only/flagged")?,
                series(&routing, ROUTING_EVAL, "forget only", "/forget_only/flagged")?,
            ],
        ));
    }
    let path = out.map(Path::to_path_buf).unwrap_or_else(|| run.join(CURVES));
    write_line_charts(&path, &charts, 2).map_err(|e| TrainError::Run(format!("plotting {}: {e}", path.display())))?;
    Ok(path)
}

/// The curves of an `agentrt sft` run: train and validation loss, learning rate, gradient norm, tokens.
fn plot_sft(run: &Path, lines: &[serde_json::Value], out: Option<&Path>) -> Result<PathBuf, TrainError> {
    let charts = vec![
        chart("loss", "-mean log p per model token", vec![series(lines, METRICS, "train", "/train_loss")?, series(lines, METRICS, "validation", "/val_loss")?]),
        chart("learning rate", "lr", vec![series(lines, METRICS, "lr", "/lr")?]),
        chart("gradient norm", "before clipping", vec![series(lines, METRICS, "grad norm", "/grad_norm")?]),
        chart("tokens per step", "tokens", vec![series(lines, METRICS, "all", "/tokens")?, series(lines, METRICS, "model", "/model_tokens")?]),
    ];
    let path = out.map(Path::to_path_buf).unwrap_or_else(|| run.join(CURVES));
    write_line_charts(&path, &charts, 2).map_err(|e| TrainError::Run(format!("plotting {}: {e}", path.display())))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_missing_metric_is_an_error_naming_the_line_and_null_is_a_step_without_one() {
        let lines = vec![json!({"step": 1, "val_loss": 2.5}), json!({"step": 2, "val_loss": null}), json!({"step": 3, "val_loss": 2.0})];
        assert_eq!(series(&lines, METRICS, "v", "/val_loss").unwrap().points, vec![(1.0, 2.5), (3.0, 2.0)]);
        let lines = vec![json!({"step": 1, "accuracy": 0.5}), json!({"step": 2})];
        let e = series(&lines, METRICS, "a", "/accuracy").unwrap_err().to_string();
        assert!(e.contains("metrics.jsonl line 2") && e.contains("`accuracy`"), "{e}");
        let e = series(&[json!({"step": 1, "accuracy": "high"})], METRICS, "a", "/accuracy").unwrap_err().to_string();
        assert!(e.contains("not a number"), "{e}");
    }

    #[test]
    fn a_training_curve_is_a_field_over_the_steps_and_a_non_finite_value_is_a_step_without_one() {
        let steps: Vec<StepMetrics> = [(1, 0.5), (2, f64::NAN), (3, 0.25)].map(|(step, loss)| StepMetrics { step, loss, ..crate::metrics::example() }).into();
        assert_eq!(curve(&steps, "loss", |m| m.loss).points, vec![(1.0, 0.5), (3.0, 0.25)]);
        assert_eq!(curve(&steps, "kept", |m| m.groups_kept as f64).points, vec![(1.0, 1.0), (2.0, 1.0), (3.0, 1.0)]);
    }
}
