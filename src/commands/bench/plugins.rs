//! `agentrt bench plugins`: what one plug-in tool call costs, per language, with warm instances reused
//! (stateless plug-ins, the default) against a fresh instance per call (what every call cost before
//! reuse, and what a stateful plug-in still costs). Each call goes through `PluginRegistry::call`, the
//! path a program's call takes after the interpreter: JSON arguments in, WIT values across, JSON out.

use super::{side, Side};
use agentrt_runtime::{FixtureTools, InstanceReuse, Limits, Sandbox, SandboxConfig, EXAMPLE_PLUGIN_WASM};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `agentrt bench plugins`.
#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  agentrt bench plugins                                   the Rust example plug-in only
  bench/plugins.sh                                        builds the Python and JavaScript examples, runs all three
  agentrt bench plugins --tool python=text_tools_py.wasm --tool js=text_tools_js.wasm

Every plug-in is called with the same function and arguments (default: word_count on a sentence),
so it must export that function.")]
pub struct Args {
    /// A plug-in to measure, as LABEL=PATH (repeatable). The Rust example (word-stats) is always measured.
    #[arg(long = "tool", value_name = "LABEL=PATH")]
    pub tools: Vec<String>,
    /// The tool every plug-in is called with.
    #[arg(long, default_value = "word_count")]
    pub function: String,
    /// Its arguments, as a JSON array.
    #[arg(long, default_value = r#"["The quick brown fox jumps over the lazy dog."]"#)]
    pub args: String,
    /// Calls per plug-in and mode.
    #[arg(long, default_value_t = 300)]
    pub calls: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// One plug-in measured both ways.
#[derive(Debug, Serialize)]
pub struct PluginCost {
    pub label: String,
    pub path: PathBuf,
    pub reused: Side,
    pub fresh: Side,
    /// fresh p50 / reused p50: above 1 means reuse is faster.
    pub ratio_p50: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.calls > 0, "--calls must be positive");
    let mut plugins = vec![("rust".to_string(), PathBuf::from(EXAMPLE_PLUGIN_WASM))];
    for tool in &args.tools {
        let (label, path) = tool.split_once('=').ok_or_else(|| anyhow::anyhow!("--tool {tool:?}: expected LABEL=PATH"))?;
        anyhow::ensure!(std::path::Path::new(path).is_file(), "--tool {tool:?}: no file {path}");
        plugins.push((label.to_string(), PathBuf::from(path)));
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut costs = Vec::new();
    for (label, path) in plugins {
        let reused = runtime.block_on(measure(&path, InstanceReuse::WhenStateless, &args))?;
        let fresh = runtime.block_on(measure(&path, InstanceReuse::Never, &args))?;
        anyhow::ensure!(reused.1, "{}: the plug-in does not declare itself stateless (metadata.stateless), so there is no reuse to measure", path.display());
        let reused = side("reused", reused.0);
        let fresh = side("fresh", fresh.0);
        costs.push(PluginCost { ratio_p50: fresh.p50_us / reused.p50_us, label, path, reused, fresh });
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&costs)?);
        return Ok(());
    }
    println!("{}", agentrt_kernels::path::cpu_line());
    println!("per-call cost of `{}({})`, {} calls each way\n", args.function, args.args, args.calls);
    println!("{:<10} {:>16} {:>16} {:>16} {:>16} {:>10}", "plug-in", "reused p50 (µs)", "reused p99 (µs)", "fresh p50 (µs)", "fresh p99 (µs)", "fresh/reused");
    for c in &costs {
        println!("{:<10} {:>16.1} {:>16.1} {:>16.1} {:>16.1} {:>9.1}x", c.label, c.reused.p50_us, c.reused.p99_us, c.fresh.p50_us, c.fresh.p99_us, c.ratio_p50);
    }
    Ok(())
}

/// The latency of `calls` calls (after a warm-up), and whether the plug-in reused its instances.
async fn measure(path: &std::path::Path, reuse: InstanceReuse, args: &Args) -> anyhow::Result<(Vec<Duration>, bool)> {
    let config = SandboxConfig { plugins: vec![path.to_path_buf()], plugin_reuse: reuse, ..SandboxConfig::default() };
    let sandbox = Sandbox::new(config, Arc::new(FixtureTools::default())).await?;
    let registry = sandbox.plugins();
    anyhow::ensure!(registry.signature(&args.function).is_some(), "{} has no tool `{}`", path.display(), args.function);
    let limits = Limits::default();
    let call = || registry.call(&args.function, &args.args, limits);
    // Warm-up: the first calls fault in the pooled memory slots and the component's code.
    for _ in 0..10 {
        call().await.map_err(|e| anyhow::anyhow!("{}: {}: {}", path.display(), args.function, e.message))?;
    }
    let mut samples = Vec::with_capacity(args.calls);
    for _ in 0..args.calls {
        let started = Instant::now();
        call().await.map_err(|e| anyhow::anyhow!("{}: {}: {}", path.display(), args.function, e.message))?;
        samples.push(started.elapsed());
    }
    Ok((samples, registry.reuses_instances(&args.function) == Some(true)))
}
