//! The `agentrt` command line: one subcommand per job, each in `src/commands/<name>.rs` with its own
//! `Args` (clap) and `run`. This file only dispatches.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod commands;
mod inference_options;
mod policy_options;
mod run_options;
mod sandbox_options;

/// A program run by a command failed; its typed error has been printed already. `agentrt` exits with
/// status 1 for it, and with 2 for every other error (bad input, a sandbox that could not be set up).
#[derive(Debug, thiserror::Error)]
#[error("the program failed: {0}")]
pub struct ProgramFailed(pub String);

/// Train small language models, with reinforcement learning, to search and read a corpus through
/// sandboxed WebAssembly tool code.
#[derive(Parser)]
#[command(name = "agentrt", version, about, long_about = None, propagate_version = true)]
#[command(after_help = "Examples:\n  agentrt index && agentrt train                 # build the search index once, then a short RL run\n  \
    agentrt exec examples/programs/search_read.py  # one program in the sandbox, every tool call shown\n  \
    agentrt eval --adapter models/smollm2-135m-wiki-read\n  \
    agentrt COMMAND --help                          # every command's flags and examples")]
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
    /// Evaluate a policy: wiki questions (accuracy, tool use, search quality, failures) or code tasks
    /// (`--env code`: pass@k); `eval retrieval`, `eval compare`.
    Eval(Box<commands::eval::Args>),
    /// Judge one response (offline rule judge or any OpenAI-compatible LLM) and print the verdict as JSON.
    Judge(commands::judge::Args),
    /// Benchmarks that run agentrt and a peer side by side and report the ratio.
    Bench(commands::bench::Args),
    /// Train the policy's LoRA adapters with RL on the wiki task (REINFORCE / RLOO / GRPO, gradient routing).
    Train(commands::train::Args),
    /// Supervised LoRA fine-tuning on conversations (chat JSON Lines or agentrt transcripts), e.g. before RL.
    Sft(commands::sft::Args),
    /// Draw a training run's curves (reward, accuracy, tool calls, KL, loss) as PNG.
    Plot(commands::plot::Args),
    /// Run a grid of training configs and print a summary table.
    Sweep(commands::sweep::Args),
    /// Sample a completion from the policy model (default: SmolLM2-135M-Instruct), optionally with a LoRA adapter.
    Generate(commands::generate::Args),
    /// Serve the model and trained adapters over an OpenAI-compatible API (chat completions, streaming, logprobs, LoRA by name).
    Serve(commands::serve::Args),
    /// Training conversations for fine-tuning: `synth` (played from the training data) or `sample` (rejection sampling of any policy).
    Trajectories(commands::trajectories::Args),
    /// Plug-in tools: `tool new NAME --lang rust|python|js` creates a project ready to build.
    Tool(commands::tool::Args),
    /// Environment packages: `env new NAME` creates one (tasks, prompt, grader) to play with `--env NAME`.
    #[command(subcommand, after_help = commands::env::EXAMPLES)]
    Env(commands::env::EnvCommand),
    /// Show agentrt's cache (models, index, precompiled components); `cache clean` empties the components.
    Cache(commands::cache::Args),
}

fn main() -> ExitCode {
    agentrt_policy::allocator::keep_freed_memory();
    agentrt_policy::threads::fix_thread_count();
    log_to_stderr();
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.is::<ProgramFailed>() => ExitCode::from(1),
        Err(error) => {
            eprintln!("error: {}", causes_once(&error));
            ExitCode::from(2)
        }
    }
}

/// The libraries log through `tracing` and print nothing themselves; this is the one subscriber: info and
/// up to stderr (above any progress bar, never through it), or what `AGENTRT_LOG` asks for (`AGENTRT_LOG=debug`, `AGENTRT_LOG=agentrt_serve=warn`).
fn log_to_stderr() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTRT_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| agentrt_progress::StderrAboveBars)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

/// The error and its causes joined by `: `, each once: many errors put their cause's text into their own
/// message (`{path}: {source}`) and keep it as their source too, and printing the whole chain would say
/// it twice.
fn causes_once(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Bench(args) => commands::bench::run(args),
        Command::Exec(args) => commands::exec::run(args),
        Command::Index(args) => commands::index::run(args),
        Command::Search(args) => commands::search::run(args),
        Command::Eval(args) => commands::eval::run(*args),
        Command::Judge(args) => commands::judge::run(args),
        Command::Generate(args) => commands::generate::run(args),
        Command::Serve(args) => commands::serve::run(args),
        Command::Train(args) => commands::train::run(args),
        Command::Sft(args) => commands::sft::run(args),
        Command::Plot(args) => commands::plot::run(args),
        Command::Sweep(args) => commands::sweep::run(args),
        Command::Trajectories(args) => commands::trajectories::run(args),
        Command::Tool(args) => commands::tool::run(args),
        Command::Env(args) => commands::env::run(args),
        Command::Cache(args) => commands::cache::run(args),
    }
}

#[cfg(test)]
mod tests {
    use super::causes_once;

    #[test]
    fn a_cause_already_in_its_parents_message_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        let policy = agentrt_policy::PolicyError::Io { path: "/tmp/nope.gguf".into(), source: io };
        let error = anyhow::Error::new(policy).context("loading the model");
        assert_eq!(causes_once(&error), "loading the model: /tmp/nope.gguf: No such file or directory (os error 2)");
        let plain = anyhow::anyhow!("outer").context("context");
        assert_eq!(causes_once(&plain), "context: outer");
    }
}
