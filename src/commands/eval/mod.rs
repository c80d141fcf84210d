//! `agentrt eval`: a policy on questions, through the same episode loop as training (`agentrt eval
//! --split dev ...`); `agentrt eval retrieval` measures the search index alone; `agentrt eval compare`
//! puts two evaluations side by side.
//!
//! `episode_args.rs` holds the flags of an episode evaluation and what they play (a training config);
//! `wiki.rs` and `code.rs` evaluate the two environments (accuracy; pass@k); `retrieval.rs` and
//! `extraction.rs` are the subcommands that measure one part alone.

mod code;
mod episode_args;
mod extraction;
mod retrieval;
mod wiki;

use episode_args::{played_config, refuse_earlier_results, EpisodeArgs};
use std::path::PathBuf;

/// Arguments of `agentrt eval`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
#[command(after_help = "Examples:\n  agentrt eval --split dev --num-samples 50 --output-dir eval/zero-shot\n  \
    agentrt eval --split dev --num-samples 50 --baseline random --output-dir eval/random\n  \
    agentrt eval --env code --model qwen2.5-coder-0.5b --num-generations 10 --temperature 0.2 --output-dir eval/he\n  \
    agentrt eval --regrade eval/he --set env.code.test_fuel=4000000000 --output-dir eval/he-more-fuel\n  \
    agentrt eval --adapter runs/RUN/checkpoint-10 --output-dir eval/trained\n  \
    agentrt eval --adapter runs/RUN/checkpoint-10 --adapter-scales 1,0 --output-dir eval/retain-only\n  \
    agentrt eval --policy openai:qwen2.5:7b@http://localhost:11434/v1 --output-dir eval/qwen7b\n  \
    agentrt eval compare eval/zero-shot eval/trained\n  \
    agentrt eval table zero-shot=eval/zero-shot trained=eval/trained --out accuracy.png\n  \
    agentrt eval retrieval --split dev\n  \
    agentrt eval extraction --model qwen2.5-coder-0.5b --num-samples 300 --output-dir eval/extract-qwen\n\n\
    An adapter is played as it was trained: its agent.json gives the base model, system prompt,\n\
    demonstration, turns, reply length, observation size and sandbox limits, unless a flag says otherwise.\n\
    With --config (a training config), episodes run exactly as `agentrt train --config` plays them.\n\n\
    OUTPUT_DIR gets results.json (accuracy, avg_tool_calls, answer_f1, search_hit_rate, num_questions and every metric\n\
    with its 95% interval), results.md, results.png and transcripts.jsonl (every turn, program, tool\n\
    output and verdict).")]
pub struct Args {
    #[command(subcommand)]
    pub what: Option<What>,
    #[command(flatten)]
    pub episodes: EpisodeArgs,
}

/// What else to evaluate.
#[derive(clap::Subcommand)]
pub enum What {
    /// Recall@1/5/10 of the gold page for BM25, vectors and hybrid search.
    Retrieval(retrieval::Args),
    /// A model's answers from each question's gold section, no tools: how well it extracts the span.
    Extraction(extraction::Args),
    /// Two evaluation output directories side by side.
    Compare(CompareArgs),
    /// Several evaluations in one markdown table (each metric with its 95% interval, accuracy against the
    /// first row), and their accuracies as a PNG bar chart.
    Table(TableArgs),
}

/// Arguments of `agentrt eval compare`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt eval compare eval/zero-shot eval/trained\n  \
    agentrt eval --split dev --num-samples 200 --output-dir eval/a && agentrt eval --adapter runs/RUN/checkpoint-10 --split dev --num-samples 200 --output-dir eval/b && agentrt eval compare eval/a eval/b\n\n\
    Prints every metric of A and B and the difference B - A (accuracy with Newcombe's interval). When both\n\
    played the same questions (same --split, --num-samples and --seed), also the difference question by\n\
    question: a paired bootstrap 95% interval and McNemar's exact test.")]
pub struct CompareArgs {
    /// The first evaluation (an `agentrt eval` OUTPUT_DIR, holding results.json and transcripts.jsonl): the reference.
    pub a: PathBuf,
    /// The second evaluation, compared with A (differences are B - A).
    pub b: PathBuf,
}

/// Arguments of `agentrt eval table`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt eval table zero-shot=eval/zero-shot trained=eval/trained\n  \
    agentrt eval table base=eval/base sft=eval/sft rl=eval/rl --out accuracy.png\n\n\
    One row per evaluation: accuracy (Wilson interval), the accuracy minus the first row's (Newcombe's\n\
    interval), gold answer printed, extraction, answer F1 and tool calls (bootstrap intervals), search hit\n\
    rate and programs run (of programs written). A row of other questions than the first is named below.")]
pub struct TableArgs {
    /// `LABEL=OUTPUT_DIR` of each evaluation, the reference first.
    #[arg(required = true)]
    pub rows: Vec<String>,
    /// Write the accuracies as a bar chart to this PNG.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        Some(What::Retrieval(a)) => retrieval::run(a),
        Some(What::Extraction(a)) => extraction::run(a),
        Some(What::Table(a)) => {
            let rows = a
                .rows
                .iter()
                .map(|r| r.split_once('=').map(|(l, d)| (l.to_string(), PathBuf::from(d))).ok_or_else(|| anyhow::anyhow!("{r:?}: expected LABEL=OUTPUT_DIR")))
                .collect::<anyhow::Result<Vec<_>>>()?;
            print!("{}", agentrt_eval::table(&rows, a.out.as_deref())?);
            Ok(())
        }
        Some(What::Compare(a)) => {
            print!("{}", agentrt_eval::compare(&a.a, &a.b)?);
            Ok(())
        }
        None => episodes(args.episodes),
    }
}

fn episodes(args: EpisodeArgs) -> anyhow::Result<()> {
    if let Some(from) = &args.regrade {
        let config = played_config(&args, None)?;
        anyhow::ensure!(
            args.env.is_none() || config.env.package().map_err(anyhow::Error::msg)?.grades_with_tests(),
            "--regrade grades the replies of an environment graded by tests (code): drop --env or pass --env code"
        );
        return code::regrade(&args, from, &config);
    }
    refuse_earlier_results(&args)?;
    let loaded = args.policy.load()?;
    let config = played_config(&args, Some(&loaded))?;
    if config.env.package().map_err(anyhow::Error::msg)?.grades_with_tests() {
        return code::run(&args, &loaded, &config);
    }
    wiki::run(&args, &loaded, &config)
}
