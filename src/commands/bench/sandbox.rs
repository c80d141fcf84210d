//! `agentrt bench sandbox`: what it costs to run one 3-call program in a fresh sandbox instance,
//! against the obvious alternative of a fresh `python3` process with the same tools as plain
//! functions. Both sides serve the tools from the same three-page fixture, so neither measures a
//! search index.

use super::{side, Side};
use agentrt_runtime::{FixtureTools, Sandbox, SandboxConfig};
use serde::Serialize;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The measured program: search, list the first hit's sections, read one, print.
pub const PROGRAM: &str = r#"hits = search_pages("Denver Broncos Super Bowl")
sections = view_sections(hits[0]["page_id"])
text = read_section(sections[1]["section_id"])
print(f"{hits[0]['title']}: {text[:40]}")
"#;

/// Arguments of `agentrt bench sandbox`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt bench sandbox\n  \
    agentrt bench sandbox --iterations 500 --python-iterations 20 --json\n\n\
    Both sides run the same 3-call program (search, list, read) on the fixture tools: the sandbox with a\n\
    warm engine, python3 as a fresh process per program. Prints p50, p99 and mean latency of each and their\n\
    ratio (python / sandbox: above 1, the sandbox is faster).")]
pub struct Args {
    /// Programs to run in the sandbox.
    #[arg(long, default_value_t = 2000)]
    pub iterations: usize,
    /// Programs to run in fresh python3 processes (each takes tens of milliseconds).
    #[arg(long, default_value_t = 100)]
    pub python_iterations: usize,
    /// The Python interpreter of the peer.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Both sides and their ratios (python / sandbox: above 1 means the sandbox is faster).
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub program: String,
    pub sandbox: Side,
    pub python_subprocess: Side,
    pub ratio_p50: f64,
    pub ratio_p99: f64,
    pub sandbox_fuel_per_run: u64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.iterations > 0 && args.python_iterations > 0, "iterations must be positive");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (samples, fuel) = runtime.block_on(measure_sandbox(args.iterations))?;
    let sandbox = side("wasm sandbox (fresh instance per program)", samples);
    let python = side("python3 subprocess (fresh process per program)", measure_python(&args.python, args.python_iterations)?);
    let comparison = Comparison {
        program: PROGRAM.to_string(),
        ratio_p50: python.p50_us / sandbox.p50_us,
        ratio_p99: python.p99_us / sandbox.p99_us,
        sandbox,
        python_subprocess: python,
        sandbox_fuel_per_run: fuel,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        println!("{}", agentrt_kernels::path::cpu_line());
        println!("3-call program, per-program cost (same fixture tools on both sides)\n");
        println!("{:<50} {:>8} {:>12} {:>12} {:>12}", "", "runs", "p50 (µs)", "p99 (µs)", "mean (µs)");
        for s in [&comparison.sandbox, &comparison.python_subprocess] {
            println!("{:<50} {:>8} {:>12.1} {:>12.1} {:>12.1}", s.name, s.runs, s.p50_us, s.p99_us, s.mean_us);
        }
        println!("\nsandbox is {:.0}x faster at p50 and {:.0}x faster at p99", comparison.ratio_p50, comparison.ratio_p99);
    }
    Ok(())
}

async fn measure_sandbox(iterations: usize) -> anyhow::Result<(Vec<Duration>, u64)> {
    let sandbox = Sandbox::new(SandboxConfig::default(), Arc::new(FixtureTools::default())).await?;
    // Warm-up: the first runs fault in the pooled memory slots and the interpreter's code.
    for _ in 0..20 {
        let report = sandbox.run(PROGRAM).await;
        anyhow::ensure!(report.is_ok() && report.host_calls.len() == 3, "the benchmark program failed: {:?}", report.result);
    }
    let mut samples = Vec::with_capacity(iterations);
    let mut fuel = 0;
    for _ in 0..iterations {
        let started = Instant::now();
        let report = sandbox.run(PROGRAM).await;
        samples.push(started.elapsed());
        anyhow::ensure!(report.is_ok(), "the benchmark program failed: {:?}", report.result);
        fuel = report.fuel_used;
    }
    Ok((samples, fuel))
}

fn measure_python(python: &str, iterations: usize) -> anyhow::Result<Vec<Duration>> {
    let script = format!("{}\n{PROGRAM}", FixtureTools::default().python_source());
    let mut samples = Vec::with_capacity(iterations);
    for i in 0..iterations + 3 {
        let started = Instant::now();
        let output = Command::new(python).args(["-c", &script]).output().map_err(|e| anyhow::anyhow!("running {python}: {e}"))?;
        let elapsed = started.elapsed();
        anyhow::ensure!(output.status.success(), "the python peer failed: {}", String::from_utf8_lossy(&output.stderr));
        if i >= 3 {
            samples.push(elapsed);
        }
    }
    Ok(samples)
}
