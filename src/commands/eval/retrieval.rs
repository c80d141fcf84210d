//! `agentrt eval retrieval`: recall of the gold page for BM25, vectors and hybrid search, and of the
//! answer's section inside the top hit's page.

use agentrt_progress::Progress;
use agentrt_search::{evaluate, read_questions, QueryEncoder, Recall, WikiIndex};
use std::path::PathBuf;

/// Arguments of `agentrt eval retrieval`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt eval retrieval --split dev\n  \
    agentrt eval retrieval --split train --json\n\n\
    Each question is sent to search_pages as the query; a hit is the question's gold `page` among the\n\
    top k. Fusion variants (reciprocal rank fusion, weighted sums) are listed below the three modes.\n\n\
    Section recall: inside the page hybrid search ranks first, whether the first (or one of the first\n\
    three) sections holds a gold answer, for two rankings of the page's sections: bm25 (the section\n\
    search_pages names) and passages (each section by its best sentence, as search_passages ranks them).\n\
    --articles N lists it per gold page, the N longest pages first.")]
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
    /// List page and section recall for the N longest gold pages (0: none; the JSON report has them all).
    #[arg(long, default_value_t = 0)]
    pub articles: usize,
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
    println!("\nsection recall inside the top hit's page (a gold answer in the first 1 / 3 sections):");
    println!("{:<22} {:>9} {:>9}", "section ranking", "recall@1", "recall@3");
    for r in &report.sections {
        println!("{:<22} {:>9.3} {:>9.3}", r.ranking, r.at1, r.at3);
    }
    if args.articles > 0 {
        println!("\nper gold page, longest first (page recall@1; section recall@1 / @3 per ranking):");
        print!("{:<34} {:>9} {:>8} {:>9} {:>8}", "page", "chars", "sections", "questions", "page@1");
        for r in &report.sections {
            print!(" {:>17}", format!("{} @1/@3", r.ranking));
        }
        println!();
        for a in report.articles.iter().take(args.articles) {
            print!("{:<34} {:>9} {:>8} {:>9} {:>8.3}", a.page, a.characters, a.sections, a.questions, a.page_at1);
            for r in &a.section {
                print!(" {:>17}", format!("{:.3} / {:.3}", r.at1, r.at3));
            }
            println!();
        }
    }
    Ok(())
}
