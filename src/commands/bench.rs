//! `agentrt bench`: measurements that put agentrt side by side with a peer, in one run.

pub mod sandbox;

/// Arguments of `agentrt bench`.
#[derive(clap::Args)]
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
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        Bench::Sandbox(args) => sandbox::run(args),
    }
}
