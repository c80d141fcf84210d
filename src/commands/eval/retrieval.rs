//! `agentrt eval retrieval`: recall of the gold page for BM25, vectors and hybrid search.

use agentrt_progress::Progress;
use agentrt_search::{evaluate, read_questions, QueryEncoder, Recall, WikiIndex};
use std::path::PathBuf;

/// Arguments of `agentrt eval retrieval`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt eval retrieval --split dev\n  \
    agentrt eval retrieval --split train --json\n\n\
    Each question is sent to search_pages as the query; a hit is the question's gold `page` among the\n\
    top k. Fusion variants (reciprocal rank fusion, weighted sums) are listed below the three modes.")]
pub struct Args {
    /// Which questions: train, dev, or all.
    #[arg(long, default_value = "dev")]
    pub split: String,
    /// Questions file (JSON Lines with question, page, split).
    #[arg(long, default_value = agentrt_search::DEFAULT_QUESTIONS_FILE)]
    pub questions: PathBuf,
    /// Use at most this many questions.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// What embeds the questions: distilled (the default, as search_pages does) or full.
    #[arg(long, env = "AGENTRT_QUERY_ENCODER", default_value_t = QueryEncoder::default())]
    pub query_encoder: QueryEncoder,
    /// Where the index lives (default: $AGENTRT_CACHE/index).
    #[arg(long, env = "AGENTRT_INDEX_DIR")]
    pub index_dir: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = args.index_dir.unwrap_or_else(agentrt_search::default_index_dir);
    let index = WikiIndex::open_with(&dir, args.query_encoder)?;
    let split = if args.split == "all" { None } else { Some(args.split.as_str()) };
    let mut qs = read_questions(&args.questions, split)?;
    if let Some(n) = args.limit {
        qs.truncate(n);
    }
    anyhow::ensure!(!qs.is_empty(), "no questions of split {:?} in {}", args.split, args.questions.display());
    let progress = Progress::new("retrieval", "questions", qs.len() as u64, 0);
    let report = evaluate(&index, &qs, &mut |d| progress.set_position(d as u64))?;
    progress.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("retrieval on {} {} questions (gold = the question's page; {} query encoder)\n", report.questions, args.split, args.query_encoder);
    let table = |rows: &[Recall]| {
        println!("{:<22} {:>9} {:>9} {:>9}", "mode", "recall@1", "recall@5", "recall@10");
        for r in rows {
            println!("{:<22} {:>9.3} {:>9.3} {:>9.3}", r.mode, r.at1, r.at5, r.at10);
        }
    };
    table(report.modes.as_slice());
    println!("\nfusion variants (hybrid = {:?}):", agentrt_search::Fusion::DEFAULT);
    table(report.fusions.as_slice());
    Ok(())
}
