//! `agentrt bench`: measurements that put agentrt side by side with a peer, in one run.

pub mod decode;
pub mod peer;
pub mod plugins;
pub mod rl;
pub mod rollout;
pub mod sandbox;
pub mod serve;
pub mod train_step;
pub mod workload;

use serde::Serialize;
use std::time::Duration;

/// Arguments of `agentrt bench`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt bench sandbox                    # the sandbox against fresh python3 processes\n  \
    agentrt bench plugins\n  \
    agentrt bench decode --models smollm2-135m   # needs bash bench/decode/setup_llamacpp.sh once\n  \
    agentrt bench rl --init-adapter models/smollm2-135m-wiki-read   # RL steps, episodes per hour\n\n\
    Each benchmark prints the machine (CPU, features, kernel path) beside its numbers; `--json` where\n\
    offered prints one JSON object. `agentrt bench COMMAND --help` says what each needs.")]
pub struct Args {
    #[command(subcommand)]
    pub what: Bench,
}

/// What to measure.
#[derive(clap::Subcommand)]
pub enum Bench {
    /// Per-program cost of the WASM sandbox against a fresh `python3` subprocess running the same
    /// 3-call program with the tools as plain functions.
    Sandbox(sandbox::Args),
    /// Per-call cost of plug-in tools (Rust, Python, JavaScript, ...), reusing warm instances against
    /// a fresh instance per call.
    Plugins(plugins::Args),
    /// A training step's rollouts (questions x G rollouts, multi-turn, the real sandbox and index) sampled
    /// by agentrt and by transformers' `generate`, side by side: tokens/s and episodes/minute.
    Rollout(rollout::Args),
    /// A few steps of the RL recipe (`bench/learning_rl.toml`), played and trained: episodes per hour and
    /// where each step's time went (sampler, sandbox, judge, the learner's passes), with the CPU and kernels.
    Rl(rl::Args),
    /// The update of a training step (reference pass, forward, backward, AdamW) by agentrt's learner and
    /// by transformers + PEFT, on the same real samples.
    TrainStep(train_step::Args),
    /// Prompt processing and generation (batch 1 and parallel sequences) by agentrt's decoder and by
    /// llama.cpp's own tools, on the same GGUF files and thread count.
    Decode(decode::Args),
    /// `agentrt serve` and llama.cpp's `llama-server` under the same replayed load (1, 8, 32 clients),
    /// on the same GGUF: throughput, time to first token, latency p50/p99.
    Serve(serve::Args),
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        Bench::Sandbox(args) => sandbox::run(args),
        Bench::Plugins(args) => plugins::run(args),
        Bench::Rollout(args) => rollout::run(args),
        Bench::Rl(args) => rl::run(args),
        Bench::TrainStep(args) => train_step::run(args),
        Bench::Decode(args) => decode::run(args),
        Bench::Serve(args) => serve::run(args),
    }
}

/// Latency statistics of one side, in microseconds.
#[derive(Debug, Serialize)]
pub struct Side {
    pub name: String,
    pub runs: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
}

/// The statistics of `samples` (sorted here).
pub fn side(name: &str, mut samples: Vec<Duration>) -> Side {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |q: f64| us(samples[((samples.len() - 1) as f64 * q).round() as usize]);
    Side {
        name: name.to_string(),
        runs: samples.len(),
        p50_us: at(0.50),
        p99_us: at(0.99),
        mean_us: samples.iter().map(|d| us(*d)).sum::<f64>() / samples.len() as f64,
    }
}
