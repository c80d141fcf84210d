//! `agentrt sweep` (seed 004): a grid of values times fixed parameters; each point is one `agentrt train`
//! run (a child process, so runs are isolated and N can go at once), and a summary table at the end.

use crate::config::TrainConfig;
use crate::error::TrainError;
use crate::run_dir::{RunDir, DEV_EVAL, METRICS};
use std::path::Path;

/// One axis of the grid: `section.key=v1,v2,...`.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// The swept `section.key`.
    pub key: String,
    /// The values it takes, one point of the grid each.
    pub values: Vec<String>,
}

impl Axis {
    /// Parses `section.key=v1,v2,...`; an empty list or a key without a section is an error.
    pub fn parse(spec: &str) -> Result<Axis, TrainError> {
        let (key, values) = spec.split_once('=').ok_or_else(|| TrainError::Config(format!("grid `{spec}`: expected section.key=v1,v2")))?;
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect();
        if values.is_empty() || !key.contains('.') {
            return Err(TrainError::Config(format!("grid `{spec}`: expected section.key=v1,v2")));
        }
        Ok(Axis { key: key.trim().into(), values })
    }
}

/// One point of the grid: its overrides, its config and its run name.
#[derive(Debug, Clone)]
pub struct Point {
    /// The `--set` overrides of this point: the fixed ones, then its axis values.
    pub overrides: Vec<String>,
    /// The resolved and checked config of its run.
    pub config: TrainConfig,
    /// The name of its run directory.
    pub run_name: String,
}

/// The cartesian product of the axes, each point layered on `fixed` (and `file`), checked before anything
/// runs. Run names carry the hyperparameters, plus any swept key the default name leaves out.
pub fn expand(file: Option<&Path>, fixed: &[String], axes: &[Axis]) -> Result<Vec<Point>, TrainError> {
    let mut combos: Vec<Vec<String>> = vec![vec![]];
    for axis in axes {
        combos = combos.into_iter().flat_map(|c| axis.values.iter().map(move |v| [c.clone(), vec![format!("{}={v}", axis.key)]].concat())).collect();
    }
    let mut points = Vec::with_capacity(combos.len());
    for combo in combos {
        let overrides: Vec<String> = fixed.iter().cloned().chain(combo.iter().cloned()).collect();
        let config = TrainConfig::from_layers(file, &overrides)?;
        let mut name = config.run_name();
        for o in &combo {
            let (key, value) = o.split_once('=').expect("built above");
            let short = key.rsplit('.').next().unwrap_or(key);
            if !["algorithm.lr", "rollout.num_rollouts", "algorithm.beta", "run.seed", "algorithm.advantage", "model.dual_lora"].contains(&key) {
                name.push_str(&format!("_{short}{value}"));
            }
        }
        points.push(Point { overrides, config, run_name: name });
    }
    let mut names: Vec<&str> = points.iter().map(|p| p.run_name.as_str()).collect();
    names.sort();
    names.dedup();
    if names.len() != points.len() {
        return Err(TrainError::Config("two grid points get the same run name: give them different values".into()));
    }
    Ok(points)
}

/// A markdown table of each run's last step and best reward (runs without metrics say so).
pub fn summary_table(output_dir: &Path, points: &[Point], statuses: &[Option<i32>]) -> Result<String, TrainError> {
    let mut s = String::from(
        "| run | exit | steps | reward (last) | accuracy (last) | best reward | held-out accuracy (first → last) | tool calls | s/step | distinct samples | pairwise Jaccard | degenerate |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (p, status) in points.iter().zip(statuses) {
        let dir = RunDir { path: output_dir.join(&p.run_name) };
        let lines = dir.read_lines(METRICS)?;
        let exit = status.map_or("killed".to_string(), |c| c.to_string());
        match lines.last() {
            None => s.push_str(&format!("| {} | {exit} | 0 | - | - | - | - | - | - | - | - | - |\n", p.run_name)),
            Some(l) => {
                // A missing value is an error naming the run and the key, not a NaN in the table.
                let number = |l: &serde_json::Value, key: &str| {
                    l.pointer(key)
                        .and_then(|v| v.as_f64())
                        .ok_or_else(|| TrainError::Run(format!("{}/{METRICS}: a line has no number at `{key}`", dir.path.display())))
                };
                let mut best = f64::NEG_INFINITY;
                for line in &lines {
                    best = best.max(number(line, "/reward_mean")?);
                }
                // The held-out slice (run.eval_steps), when the run evaluated one: before training, and last.
                let dev = dir.read_lines(DEV_EVAL)?;
                let held_out = match (dev.first(), dev.last()) {
                    (Some(a), Some(b)) => {
                        let acc = |l: &serde_json::Value| {
                            l["accuracy"].as_f64().ok_or_else(|| TrainError::Run(format!("{}/{DEV_EVAL}: a line has no `accuracy`", dir.path.display())))
                        };
                        format!("{:.3} → {:.3} (step {})", acc(a)?, acc(b)?, b["step"])
                    }
                    _ => "-".to_string(),
                };
                let degenerate = l
                    .get("degenerate")
                    .and_then(|v| v.as_bool())
                    .ok_or_else(|| TrainError::Run(format!("{}/{METRICS}: the last line has no `degenerate` flag", dir.path.display())))?;
                s.push_str(&format!(
                    "| {} | {exit} | {} | {:.3} | {:.3} | {:.3} | {held_out} | {:.2} | {:.1} | {:.0}% | {:.3} | {} |\n",
                    p.run_name,
                    l["step"],
                    number(l, "/reward_mean")?,
                    number(l, "/accuracy")?,
                    best,
                    number(l, "/tool_calls")?,
                    number(l, "/seconds/step")?,
                    number(l, "/unique_samples")? * 100.0,
                    number(l, "/mean_jaccard")?,
                    if degenerate { "**yes**" } else { "no" }
                ))
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_expands_with_distinct_names() {
        let axes = [Axis::parse("algorithm.lr=1e-5,1e-4").unwrap(), Axis::parse("rollout.max_turns=2,3").unwrap()];
        let points = expand(None, &["run.max_steps=3".into()], &axes).unwrap();
        assert_eq!(points.len(), 4);
        assert_eq!(points[0].run_name, "smollm2-135m_lr1e-5_g4_beta0.02_s42_max_turns2");
        assert!(points.iter().all(|p| p.config.run.max_steps == 3));
        assert!(Axis::parse("lr").is_err());
        assert!(expand(None, &[], &[Axis::parse("algorithm.lr=abc").unwrap()]).is_err());
    }
}
