//! `agentrt plot RUN`: the curves of a run as one PNG (reward, accuracy, tool calls, KL, the sampled tokens'
//! entropy proxy, the share of episodes that read on with a second program, loss, the groups
//! dynamic sampling drew, kept and dropped, the held-out slice's accuracy and the routing evaluation when
//! the run has them; for an `agentrt sft` run, train and validation loss, lr, grad
//! norm and tokens).

use crate::error::TrainError;
use crate::metrics::{HeldOutEval, RoutingEval, RoutingModeEval, SftStepMetrics, StepMetrics};
use crate::run_dir::{RunDir, CURVES, METRICS};
use agentrt_charts::{write_line_charts, LineChart, Series};
use std::path::{Path, PathBuf};

/// The points of one field over a log's lines (`at` gives a line's step); a value that is not finite
/// (written as `null`) is a step without one.
fn curve<T>(lines: &[T], at: impl Fn(&T) -> usize, name: &str, value: impl Fn(&T) -> f64) -> Series {
    let points = lines.iter().map(|l| (at(l) as f64, value(l))).filter(|(_, v)| v.is_finite()).collect();
    Series { name: name.into(), points }
}

/// [`curve`] over a training run's steps.
fn step_curve(steps: &[StepMetrics], name: &str, value: impl Fn(&StepMetrics) -> f64) -> Series {
    curve(steps, |m| m.step, name, value)
}

fn chart(title: &str, y: &str, series: Vec<Series>) -> LineChart {
    LineChart { title: title.into(), x_label: "step".into(), y_label: y.into(), series }
}

/// Writes `RUN/curves.png` (or `out`) from `RUN/metrics.jsonl`; returns the path.
pub fn plot_run(run: &Path, out: Option<&Path>) -> Result<PathBuf, TrainError> {
    let dir = RunDir { path: run.to_path_buf() };
    // An `agentrt sft` run's lines read as SFT steps (a training step's lack their loss fields).
    if let Ok(sft) = dir.sft_metrics() {
        if !sft.is_empty() {
            return plot_sft(run, &sft, out);
        }
    }
    let steps = dir.step_metrics()?;
    if steps.is_empty() {
        return Err(TrainError::Run(format!("{}: no metrics yet ({} is empty or missing)", run.display(), METRICS)));
    }
    let mut charts = vec![
        chart("reward", "mean reward", vec![step_curve(&steps, "mean", |m| m.reward_mean), step_curve(&steps, "std", |m| m.reward_std)]),
        chart("accuracy", "fraction correct", vec![step_curve(&steps, "accuracy", |m| m.accuracy)]),
        chart("tool calls", "per episode", vec![step_curve(&steps, "tool calls", |m| m.tool_calls), step_curve(&steps, "turns", |m| m.turns)]),
        chart("KL to base", "mean per token", vec![step_curve(&steps, "kl", |m| m.kl)]),
        // Null (not plotted) on steps logged before it was, or sampled by a server without log-probs.
        chart(
            "entropy (sampled tokens)",
            "-mean log p per model token",
            vec![
                step_curve(&steps, "every reply", |m| m.sampled_token_nll.unwrap_or(f64::NAN)),
                step_curve(&steps, "first reply", |m| m.sampled_token_nll_first_reply.unwrap_or(f64::NAN)),
                step_curve(&steps, "after a tool", |m| m.sampled_token_nll_after_tool.unwrap_or(f64::NAN)),
            ],
        ),
        chart("reading on", "fraction of episodes", vec![step_curve(&steps, "a second program", |m| m.read_more)]),
        chart("loss", "loss", vec![step_curve(&steps, "loss", |m| m.loss)]),
        chart(
            "seconds per step",
            "s",
            vec![
                step_curve(&steps, "step", |m| m.seconds.step),
                step_curve(&steps, "generate", |m| m.seconds.generate),
                step_curve(&steps, "update", |m| m.seconds.update),
            ],
        ),
        chart(
            "groups per step",
            "groups",
            vec![
                step_curve(&steps, "drawn", |m| m.groups_drawn as f64),
                step_curve(&steps, "kept", |m| m.groups_kept as f64),
                // Dynamic sampling drops exactly the all-equal groups; lines written before groups_equal
                // was logged counted them as dropped either way.
                step_curve(&steps, "equal rewards (no signal)", |m| m.groups_equal.max(m.groups_dropped) as f64),
                step_curve(&steps, "questions passed over (settled)", |m| m.questions_passed_over as f64),
            ],
        ),
    ];
    let dev = dir.held_out_evals()?;
    if !dev.is_empty() {
        let held_out = |name: &str, value: fn(&HeldOutEval) -> f64| curve(&dev, |l| l.step, name, value);
        charts.push(chart(
            "held-out slice (greedy)",
            "fraction correct",
            vec![
                held_out("accuracy", |l| l.accuracy),
                held_out("95% low", |l| l.accuracy_low),
                held_out("95% high", |l| l.accuracy_high),
                held_out("answer F1", |l| l.answer_f1),
            ],
        ));
    }
    let routing = dir.routing_evals()?;
    if !routing.is_empty() {
        let modes = |value: fn(&RoutingModeEval) -> f64| {
            let mode = |name: &str, of: fn(&RoutingEval) -> &RoutingModeEval| curve(&routing, |l| l.step, name, |l| value(of(l)));
            vec![mode("both", |l| &l.both), mode("retain only", |l| &l.retain_only), mode("forget only", |l| &l.forget_only)]
        };
        charts.push(chart("routing eval: accuracy", "fraction correct", modes(|m| m.accuracy)));
        charts.push(chart("routing eval: flagged", "fraction flagged", modes(|m| m.flagged)));
    }
    let path = out.map(Path::to_path_buf).unwrap_or_else(|| run.join(CURVES));
    write_line_charts(&path, &charts, 2).map_err(|e| TrainError::Run(format!("plotting {}: {e}", path.display())))?;
    Ok(path)
}

/// The curves of an `agentrt sft` run: train and validation loss, learning rate, gradient norm, tokens.
fn plot_sft(run: &Path, steps: &[SftStepMetrics], out: Option<&Path>) -> Result<PathBuf, TrainError> {
    let sft = |name: &str, value: fn(&SftStepMetrics) -> f64| curve(steps, |m| m.step, name, value);
    let charts = vec![
        chart("loss", "-mean log p per model token", vec![sft("train", |m| m.train_loss), sft("validation", |m| m.val_loss.unwrap_or(f64::NAN))]),
        chart("learning rate", "lr", vec![sft("lr", |m| m.lr)]),
        chart("gradient norm", "before clipping", vec![sft("grad norm", |m| m.grad_norm.unwrap_or(f64::NAN))]),
        chart("tokens per step", "tokens", vec![sft("all", |m| m.tokens as f64), sft("model", |m| m.model_tokens as f64)]),
    ];
    let path = out.map(Path::to_path_buf).unwrap_or_else(|| run.join(CURVES));
    write_line_charts(&path, &charts, 2).map_err(|e| TrainError::Run(format!("plotting {}: {e}", path.display())))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_training_curve_is_a_field_over_the_steps_and_a_non_finite_value_is_a_step_without_one() {
        let steps: Vec<StepMetrics> = [(1, 0.5), (2, f64::NAN), (3, 0.25)].map(|(step, loss)| StepMetrics { step, loss, ..crate::metrics::example() }).into();
        assert_eq!(step_curve(&steps, "loss", |m| m.loss).points, vec![(1.0, 0.5), (3.0, 0.25)]);
        assert_eq!(step_curve(&steps, "kept", |m| m.groups_kept as f64).points, vec![(1.0, 1.0), (2.0, 1.0), (3.0, 1.0)]);
    }
}
