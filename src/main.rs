//! The `agentrt` command line: one subcommand per job, each in `src/commands/<name>.rs` with its own
//! `Args` (clap) and `run`. This file only dispatches.

use clap::{Parser, Subcommand};

mod commands;

/// Train small language models, with reinforcement learning, to search and read a corpus through
/// sandboxed WebAssembly tool code.
#[derive(Parser)]
#[command(name = "agentrt", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a Python program (.py) or a guest component (.wasm) in the sandbox and show every host call.
    Exec(commands::exec::Args),
    /// Build the search index behind the wiki tools (BM25 + MiniLM vectors); a no-op when up to date.
    Index(commands::index::Args),
    /// Search the index as the search_pages tool does and print the hits.
    Search(commands::search::Args),
    /// Evaluations; `agentrt eval retrieval` prints recall@k of BM25, vectors and hybrid search.
    Eval(commands::eval::Args),
    /// Judge one response (offline rule judge or any OpenAI-compatible LLM) and print the verdict as JSON.
    Judge(commands::judge::Args),
    /// Sample a completion from the policy model (default: SmolLM2-135M-Instruct), optionally with a LoRA adapter.
    Generate(commands::generate::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Exec(args) => commands::exec::run(args),
        Command::Index(args) => commands::index::run(args),
        Command::Search(args) => commands::search::run(args),
        Command::Eval(args) => commands::eval::run(args),
        Command::Judge(args) => commands::judge::run(args),
        Command::Generate(args) => commands::generate::run(args),
    }
}
