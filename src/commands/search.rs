//! `agentrt search`: query the index the way the `search_pages` tool does.

use agentrt_search::{QueryEncoder, SearchMode, WikiIndex};
use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `agentrt search`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt search \"When did the 1973 oil crisis begin?\"\n  \
    agentrt search \"largest planet\" --k 5 --mode bm25 --json\n  \
    agentrt search --queries questions.txt --timings     # one query a line; prints latency p50/p99\n\n\
    Build the index first with `agentrt index` (`agentrt index --pages FILE` for your own corpus, then
    --index-dir where it went). Each hit is what `search_pages` gives a program: page_id, title, score and
    section_id (the page's section that matches the query best, for read_section); --json prints
    [{page_id, title, score, section_id}, ...] and --sections lists each hit's sections as view_sections does.")]
pub struct Args {
    /// The query (a natural-language question works best).
    #[arg(required_unless_present = "queries")]
    pub query: Option<String>,
    /// How many pages to return.
    #[arg(long, short, default_value_t = 10)]
    pub k: usize,
    /// Ranking: hybrid (default), bm25 or vector.
    #[arg(long, default_value = "hybrid")]
    pub mode: SearchMode,
    /// What embeds the query: distilled (default; 3 layers distilled from all-MiniLM-L6-v2 for queries,
    /// half the work) or full (the 6-layer model that embedded the sections).
    #[arg(long, env = "AGENTRT_QUERY_ENCODER", default_value_t = QueryEncoder::default())]
    pub query_encoder: QueryEncoder,
    /// Print a JSON array of {page_id, title, score, section_id}.
    #[arg(long)]
    pub json: bool,
    /// Also list each hit's sections (what view_sections returns).
    #[arg(long)]
    pub sections: bool,
    /// Run every line of this file as a query.
    #[arg(long, conflicts_with = "query")]
    pub queries: Option<PathBuf>,
    /// Print search latency (p50, p99, mean) instead of hits; with --json, as a JSON object.
    #[arg(long)]
    pub timings: bool,
    /// Where the index lives (default: $AGENTRT_CACHE/index).
    #[arg(long, env = "AGENTRT_INDEX_DIR")]
    pub index_dir: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = args.index_dir.clone().unwrap_or_else(agentrt_search::default_index_dir);
    let t = Instant::now();
    let index = WikiIndex::open_with(&dir, args.query_encoder)?;
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let queries: Vec<String> = match (&args.query, &args.queries) {
        (Some(q), _) => vec![q.clone()],
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading {}", f.display()))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect(),
        (None, None) => anyhow::bail!("give a query or --queries FILE"),
    };
    if args.timings {
        let t = Instant::now();
        index.warm_up()?;
        let load_ms = t.elapsed().as_secs_f64() * 1e3;
        // Warm-up queries (not timed) that are not among the measured ones.
        for q in queries.iter().take(5) {
            index.search_pages_with(&format!("{q} warm up"), args.k, args.mode)?;
        }
        let mut lat = Vec::with_capacity(queries.len());
        for q in &queries {
            let t = Instant::now();
            index.search_pages_with(q, args.k, args.mode)?;
            lat.push(t.elapsed().as_secs_f64() * 1e3);
        }
        lat.sort_by(f64::total_cmp);
        let pct = |p: f64| lat[((p / 100.0) * (lat.len() - 1) as f64).round() as usize];
        let mean = lat.iter().sum::<f64>() / lat.len() as f64;
        if args.json {
            println!(
                "{}",
                serde_json::json!({"stack": "agentrt", "mode": format!("{:?}", args.mode).to_lowercase(), "query_encoder": args.query_encoder.to_string(),
                    "queries": lat.len(), "open_ms": open_ms, "model_load_ms": load_ms,
                    "p50_ms": pct(50.0), "p99_ms": pct(99.0), "mean_ms": mean, "kernels": agentrt_kernels::describe()})
            );
        } else {
            println!("{}", agentrt_kernels::describe());
            println!(
                "{} queries ({:?}): p50 {:.2} ms, p99 {:.2} ms, mean {:.2} ms (open {:.0} ms, model load {:.0} ms)",
                lat.len(),
                args.mode,
                pct(50.0),
                pct(99.0),
                mean,
                open_ms,
                load_ms
            );
        }
        return Ok(());
    }
    for q in &queries {
        let hits = index.search_pages_with(q, args.k, args.mode)?;
        if args.json {
            println!("{}", serde_json::to_string(&hits)?);
            continue;
        }
        if queries.len() > 1 {
            println!("# {q}");
        }
        if hits.is_empty() {
            println!("no hits for {q:?} (no indexed section holds any of its words, and the index has no vectors to rank by)");
        }
        for (i, h) in hits.iter().enumerate() {
            println!("{:>3}. {:<40} {:<40} {:.4}  {}", i + 1, h.page_id, h.title, h.score, h.section_id);
            if args.sections {
                for s in index.view_sections(&h.page_id)? {
                    println!("       {}  {}", s.section_id, s.title);
                }
            }
        }
    }
    Ok(())
}
