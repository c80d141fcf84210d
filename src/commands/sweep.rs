//! `agentrt sweep`: a grid of `agentrt train` runs and a summary table (seed 004).

use agentrt_trainer::sweep::{expand, point_start, summary_table, Axis, PointStart};
use std::path::PathBuf;
use std::process::{Child, Command};

/// Arguments of `agentrt sweep`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt sweep --grid algorithm.lr=1e-5,1e-4 --grid algorithm.beta=0,0.02 --set run.max_steps=20 --parallel 2\n\n\
    Each grid point is one `agentrt train` child process in OUTPUT_DIR/RUN_NAME (names carry the swept\n\
    values). Every point's config is checked before anything runs. The table is printed and written to\n\
    OUTPUT_DIR/sweep_summary.md.\n\n\
    Run again with the same arguments, a sweep goes on where it stopped: a point that reached\n\
    run.max_steps is kept, one that finished a step resumes where it stopped (`train --resume`,\n\
    which refuses a config changed beyond its length and cadences), the rest start.")]
pub struct Args {
    /// One axis, `section.key=v1,v2,...` (repeatable; the grid is their product).
    #[arg(long, required = true)]
    pub grid: Vec<String>,
    /// A fixed override for every run, `section.key=value` (repeatable).
    #[arg(long = "set")]
    pub set: Vec<String>,
    /// A base TOML config for every run.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Runs at once.
    #[arg(long, default_value_t = 1)]
    pub parallel: usize,
    /// Extra arguments passed to every `agentrt train` (e.g. `--fixture`, `--index-dir DIR`).
    #[arg(last = true)]
    pub train_args: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let axes = args.grid.iter().map(|g| Axis::parse(g)).collect::<Result<Vec<_>, _>>()?;
    let points = expand(args.config.as_deref(), &args.set, &axes)?;
    let output_dir = PathBuf::from(&points[0].config.run.output_dir);
    eprintln!("sweep: {} runs, {} at a time, into {}", points.len(), args.parallel.max(1), output_dir.display());
    let exe = std::env::current_exe()?;
    let mut statuses: Vec<Option<i32>> = vec![None; points.len()];
    let mut running: Vec<(usize, Child)> = Vec::new();
    let mut next = 0;
    while next < points.len() || !running.is_empty() {
        while next < points.len() && running.len() < args.parallel.max(1) {
            let p = &points[next];
            let mut cmd = Command::new(&exe);
            cmd.arg("train").arg("--no-progress");
            match point_start(&output_dir, p)? {
                PointStart::Done { step } => {
                    eprintln!("sweep: {} reached step {step} before: kept", p.run_name);
                    statuses[next] = Some(0);
                    next += 1;
                    continue;
                }
                PointStart::Resume { step } => {
                    eprintln!("sweep: resuming {} after step {step}", p.run_name);
                    cmd.arg("--resume").arg(output_dir.join(&p.run_name));
                }
                PointStart::Fresh => {
                    eprintln!("sweep: starting {}", p.run_name);
                    cmd.arg("--run-name").arg(&p.run_name);
                }
            }
            if let Some(c) = &args.config {
                cmd.arg("--config").arg(c);
            }
            for o in &p.overrides {
                cmd.arg("--set").arg(o);
            }
            cmd.args(&args.train_args);
            running.push((next, cmd.spawn()?));
            next += 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut still = Vec::new();
        for (i, mut child) in running {
            match child.try_wait()? {
                Some(status) => {
                    eprintln!("sweep: {} exited with {status}", points[i].run_name);
                    statuses[i] = status.code();
                }
                None => still.push((i, child)),
            }
        }
        running = still;
    }
    let table = summary_table(&output_dir, &points, &statuses)?;
    std::fs::create_dir_all(&output_dir)?;
    std::fs::write(output_dir.join("sweep_summary.md"), &table)?;
    println!("{table}");
    if statuses.iter().any(|s| *s != Some(0)) {
        anyhow::bail!("some runs failed (see the exit column)");
    }
    Ok(())
}
