//! `agentrt sweep` (seed 004): a grid of values times fixed parameters; each point is one `agentrt train`
//! run (a child process, so runs are isolated and N can go at once), and a summary table at the end.

use crate::config::TrainConfig;
use crate::error::TrainError;
use crate::run_config::RunConfig;
use crate::run_dir::RunDir;
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

/// Where a grid point's run stands when the sweep starts (again): a sweep stopped part-way, by a kill or the
/// end of a sitting, goes on where it stopped when it is run again with the same arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointStart {
    /// No step finished yet (or no run there): start it.
    Fresh,
    /// Steps finished, fewer than `run.max_steps`: resume it where it stopped (`train --resume`,
    /// which refuses a config that changed beyond its length and cadences).
    Resume {
        /// The last step its metrics log holds.
        step: usize,
    },
    /// It reached `run.max_steps`: keep it.
    Done {
        /// The last step its metrics log holds.
        step: usize,
    },
}

/// Where `point`'s run in `output_dir` stands ([`PointStart`]).
pub fn point_start(output_dir: &Path, point: &Point) -> Result<PointStart, TrainError> {
    let path = output_dir.join(&point.run_name);
    if !crate::run_dir::has_progress(&path)? {
        return Ok(PointStart::Fresh);
    }
    let run = RunDir { path };
    let step = run.step_metrics()?.last().map_or(0, |m| m.step);
    // Done once its last step is saved too: a kill between the last metrics line and its checkpoint
    // leaves that step to redo.
    let saved = run.newest_saved()?.map_or(0, |(s, _)| s);
    Ok(if step >= point.config.run.max_steps && saved >= point.config.run.max_steps { PointStart::Done { step } } else { PointStart::Resume { step } })
}

/// A markdown table of each run's last step and best reward (runs without metrics say so).
pub fn summary_table(output_dir: &Path, points: &[Point], statuses: &[Option<i32>]) -> Result<String, TrainError> {
    let mut s = String::from(
        "| run | exit | steps | reward (last) | accuracy (last) | best reward | held-out accuracy (first → last) | tool calls | s/step | distinct samples | pairwise Jaccard | degenerate |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (p, status) in points.iter().zip(statuses) {
        let dir = RunDir { path: output_dir.join(&p.run_name) };
        let steps = dir.step_metrics()?;
        let exit = status.map_or("killed".to_string(), |c| c.to_string());
        match steps.last() {
            None => s.push_str(&format!("| {} | {exit} | 0 | - | - | - | - | - | - | - | - | - |\n", p.run_name)),
            Some(l) => {
                let best = steps.iter().map(|m| m.reward_mean).fold(f64::NEG_INFINITY, f64::max);
                // The held-out slice (run.eval_steps), when the run evaluated one: before training, and last.
                let dev = dir.held_out_evals()?;
                let held_out = match (dev.first(), dev.last()) {
                    (Some(a), Some(b)) => format!("{:.3} → {:.3} (step {})", a.accuracy, b.accuracy, b.step),
                    _ => "-".to_string(),
                };
                s.push_str(&format!(
                    "| {} | {exit} | {} | {:.3} | {:.3} | {:.3} | {held_out} | {:.2} | {:.1} | {:.0}% | {:.3} | {} |\n",
                    p.run_name,
                    l.step,
                    l.reward_mean,
                    l.accuracy,
                    best,
                    l.tool_calls,
                    l.seconds.step,
                    l.unique_samples * 100.0,
                    l.mean_jaccard,
                    if l.degenerate { "**yes**" } else { "no" }
                ))
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::StepMetrics;

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

    #[test]
    fn a_point_starts_fresh_resumes_after_a_step_and_is_kept_once_it_reached_its_steps() {
        let dir = tempfile::tempdir().unwrap();
        let points = expand(None, &["run.max_steps=3".into()], &[Axis::parse("run.seed=1,2").unwrap()]).unwrap();
        let p = &points[0];
        assert_eq!(point_start(dir.path(), p).unwrap(), PointStart::Fresh, "no run directory yet");
        let run = RunDir::create(&dir.path().join(&p.run_name), &p.config).unwrap();
        assert_eq!(point_start(dir.path(), p).unwrap(), PointStart::Fresh, "a config but no finished step");
        for step in 1..=3 {
            run.append(crate::run_dir::METRICS, &StepMetrics { step, ..crate::metrics::example() }).unwrap();
            assert_eq!(point_start(dir.path(), p).unwrap(), PointStart::Resume { step }, "after step {step}");
        }
        // Its last step logged but not yet saved (a kill in between): that step is redone.
        let last = run.path.join("checkpoint-3");
        std::fs::create_dir_all(&last).unwrap();
        std::fs::write(last.join("trainer_state.json"), "{}").unwrap();
        assert_eq!(point_start(dir.path(), p).unwrap(), PointStart::Done { step: 3 }, "once its last step is saved");
        assert_eq!(point_start(dir.path(), &points[1]).unwrap(), PointStart::Fresh, "the other point's run is its own");
    }

    #[test]
    fn the_summary_reads_each_runs_step_metrics_and_names_a_line_that_is_not_one() {
        let dir = tempfile::tempdir().unwrap();
        let points = expand(None, &[], &[Axis::parse("run.seed=1,2").unwrap()]).unwrap();
        let run = RunDir { path: dir.path().join(&points[0].run_name) };
        std::fs::create_dir_all(&run.path).unwrap();
        for (step, reward) in [(1, 0.75), (2, 0.25)] {
            run.append(crate::run_dir::METRICS, &StepMetrics { step, reward_mean: reward, ..crate::metrics::example() }).unwrap();
        }
        let table = summary_table(dir.path(), &points, &[Some(0), None]).unwrap();
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert!(rows[0].starts_with(&format!("| {} | 0 | 2 | 0.250 | 0.500 | 0.750 |", points[0].run_name)), "{table}");
        assert!(rows[1].starts_with(&format!("| {} | killed | 0 | - |", points[1].run_name)), "{table}");

        std::fs::write(run.path.join(crate::run_dir::METRICS), "{\"step\": 1, \"reward_mean\": 0.5}\n").unwrap();
        let e = summary_table(dir.path(), &points, &[Some(0), None]).unwrap_err().to_string();
        assert!(e.contains("metrics.jsonl: line 1") && e.contains("missing field"), "{e}");
    }
}
