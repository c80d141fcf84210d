//! Compiles the root crate's `agentrt index` and `agentrt search` modules against this crate alone, so they can be checked (and run) without building the sandbox and the policy:
//! `cargo run --release -p agentrt-search --example cli -- search "largest planet"`.

#[path = "../../src/commands/index.rs"]
mod index;
#[path = "../../src/commands/search.rs"]
mod search;

use clap::{Parser, Subcommand};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Index(index::Args),
    Search(search::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Index(a) => index::run(a),
        Command::Search(a) => search::run(a),
    }
}
