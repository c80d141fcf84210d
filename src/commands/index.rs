//! `agentrt index`: build the search index behind the wiki tools (once; later runs are no-ops).

use agentrt_search::{build_index, BuildOptions, BuildOutcome, ChunkParams, Progress};
use std::path::PathBuf;

/// Arguments of `agentrt index`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt index                              # the bundled corpus, data/wiki/pages.jsonl\n  \
    agentrt index --pages my_pages.parquet     # a Hugging Face datasets export (id, title, content)\n  \
    agentrt index --index-dir /tmp/idx --force\n\n\
    The index (tantivy BM25 + all-MiniLM-L6-v2 vectors) goes to $AGENTRT_CACHE/index unless --index-dir\n\
    says otherwise. A re-run on the same pages file and model prints \"index is up to date\"; a changed\n\
    corpus, model or format is named and rebuilt. A build killed midway leaves the previous index in use.")]
pub struct Args {
    /// Pages file: JSON Lines (`.jsonl`) or Parquet (`.parquet`) with fields id, title, content.
    #[arg(long, default_value = "data/wiki/pages.jsonl")]
    pub pages: PathBuf,
    /// Where the index lives (default: $AGENTRT_CACHE/index).
    #[arg(long, env = "AGENTRT_INDEX_DIR")]
    pub index_dir: Option<PathBuf>,
    /// Rebuild even if the index is up to date.
    #[arg(long)]
    pub force: bool,
    /// Longest section, in characters, before heading-less text is cut into paragraph groups.
    #[arg(long, default_value_t = ChunkParams::default().max_chars)]
    pub max_section_chars: usize,
    /// Section texts are truncated at this many word pieces before embedding (BM25 sees all of it);
    /// lower builds faster on a small machine.
    #[arg(long, default_value_t = agentrt_search::embedder::SECTION_TOKENS)]
    pub max_tokens: usize,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = args.index_dir.unwrap_or_else(agentrt_search::default_index_dir);
    let opts = BuildOptions {
        chunking: ChunkParams { max_chars: args.max_section_chars, ..ChunkParams::default() },
        force: args.force,
        max_tokens: args.max_tokens,
        ..BuildOptions::default()
    };
    // A spinner with the stage, then a bar while sections are embedded; off a terminal, a line per stage
    // and throttled lines of the embedding.
    let progress = agentrt_progress::Progress::stages("index");
    let mut embedding_started = false;
    // The bundled corpus is found from any folder.
    let pages = agentrt_assets::data_file(&args.pages, "--pages FILE").map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.pages.display()))?;
    let outcome = build_index(&pages, &dir, &opts, &mut |p| match p {
        Progress::Stage(s) => progress.stage(s),
        Progress::Embedding { done, total } => {
            if !embedding_started {
                embedding_started = true;
                progress.count("embedding", "sections", total as u64, 0);
            }
            progress.set_position(done as u64);
        }
    });
    progress.finish_and_clear();
    match outcome? {
        BuildOutcome::UpToDate => println!("index is up to date: {}", dir.display()),
        BuildOutcome::Built { reason, pages, sections, seconds } => {
            println!("built index of {pages} pages, {sections} sections in {seconds:.1}s ({reason}): {}", dir.display())
        }
    }
    Ok(())
}
