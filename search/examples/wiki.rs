//! The search index without the rest of agentrt (no sandbox, no policy): a small driver for the
//! library, handy while the root binary is being built. `agentrt index|search|eval retrieval` are the
//! real commands; this example mirrors the parts the benchmark needs.
//!
//! cargo run --release -p agentrt-search --example wiki -- index  [--pages F] [--index-dir D]
//! cargo run --release -p agentrt-search --example wiki -- search --queries F [--index-dir D]   # timings, JSON
//! cargo run --release -p agentrt-search --example wiki -- eval   [--split dev] [--index-dir D]
//! (search and eval take --query-encoder distilled|full)
//! cargo run --release -p agentrt-search --example wiki -- stages --queries F [--index-dir D]  # where a query's time goes

use agentrt_search::*;
use std::path::PathBuf;
use std::time::Instant;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = arg(&args, "--index-dir").map(PathBuf::from).unwrap_or_else(default_index_dir);
    let query_encoder: QueryEncoder = arg(&args, "--query-encoder").map(|q| q.parse()).transpose()?.unwrap_or_default();
    match args.first().map(String::as_str) {
        Some("index") => {
            let pages = PathBuf::from(arg(&args, "--pages").unwrap_or_else(|| "data/wiki/pages.jsonl".into()));
            let mut opts = BuildOptions { force: args.iter().any(|a| a == "--force"), ..BuildOptions::default() };
            if let Some(t) = arg(&args, "--max-tokens") {
                opts.max_tokens = t.parse()?;
            }
            let mut last = Instant::now();
            let out = build_index(&pages, &dir, &opts, &mut |p| match p {
                Progress::Stage(s) => eprintln!("{s}"),
                Progress::Embedding { done, total } => {
                    if last.elapsed().as_secs() >= 10 || done == total {
                        last = Instant::now();
                        eprintln!("embedding {done}/{total}");
                    }
                }
            })?;
            match out {
                BuildOutcome::UpToDate => println!("index is up to date: {}", dir.display()),
                BuildOutcome::Built { reason, pages, sections, seconds } => {
                    println!("built index of {pages} pages, {sections} sections in {seconds:.1}s ({reason})")
                }
            }
        }
        Some("search") => {
            let t = Instant::now();
            let index = WikiIndex::open_with(&dir, query_encoder)?;
            let open_ms = t.elapsed().as_secs_f64() * 1e3;
            let mode: SearchMode = arg(&args, "--mode").unwrap_or_else(|| "hybrid".into()).parse()?;
            let file = arg(&args, "--queries").ok_or("--queries FILE")?;
            let queries: Vec<String> = std::fs::read_to_string(file)?.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect();
            index.warm_up()?;
            for q in queries.iter().take(5) {
                index.search_pages_with(&format!("{q} warm up"), 10, mode)?;
            }
            let mut lat = Vec::new();
            for q in &queries {
                let t = Instant::now();
                index.search_pages_with(q, 10, mode)?;
                lat.push(t.elapsed().as_secs_f64() * 1e3);
            }
            lat.sort_by(f64::total_cmp);
            let pct = |p: f64| lat[((p / 100.0) * (lat.len() - 1) as f64).round() as usize];
            let mean = lat.iter().sum::<f64>() / lat.len() as f64;
            println!(
                "{}",
                serde_json::json!({"stack": "agentrt", "queries": lat.len(), "open_ms": open_ms,
                    "p50_ms": pct(50.0), "p99_ms": pct(99.0), "mean_ms": mean, "query_encoder": query_encoder.to_string(), "kernels": agentrt_kernels::describe()})
            );
        }
        Some("stages") => {
            // The hybrid search_pages path, stage by stage: embed the query (tokenizer + int8 encoder;
            // candle's f32 BERT beside it for comparison), rank sections by vector and by BM25, fuse.
            let index = WikiIndex::open(&dir)?;
            let file = arg(&args, "--queries").ok_or("--queries FILE")?;
            let queries: Vec<String> = std::fs::read_to_string(file)?.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect();
            index.warm_up()?;
            let embedder = match arg(&args, "--model-dir") {
                Some(d) => Embedder::load(std::path::Path::new(&d))?,
                None => Embedder::minilm()?,
            };
            let mut stages: Vec<(&str, Vec<f64>)> =
                ["embed (int8, full)", "embed (candle f32)", "embed query (int8, distilled)", "vector ranking", "bm25 ranking", "search_pages (hybrid)"]
                    .into_iter()
                    .map(|s| (s, Vec::new()))
                    .collect();
            let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
            // candle's pass in its own loop: its 90 MB of f32 weights would push the int8 weights out of
            // the cache between stages, which the real search path never does.
            for q in &queries {
                let t = Instant::now();
                embedder.embed_one_f32(q)?;
                stages[1].1.push(ms(t));
            }
            for q in &queries {
                let t = Instant::now();
                embedder.embed_one(q)?;
                stages[0].1.push(ms(t));
                let t = Instant::now();
                let v = embedder.embed_query(q)?;
                stages[2].1.push(ms(t));
                let t = Instant::now();
                index.vector_pages(&v);
                stages[3].1.push(ms(t));
                let t = Instant::now();
                index.bm25_pages(q)?;
                stages[4].1.push(ms(t));
                index.clear_query_cache();
                let t = Instant::now();
                index.search_pages(q, 10)?;
                stages[5].1.push(ms(t));
            }
            println!("{} queries, ms                  p50      p99     mean", queries.len());
            for (name, mut lat) in stages {
                lat.sort_by(f64::total_cmp);
                let pct = |p: f64| lat[((p / 100.0) * (lat.len() - 1) as f64).round() as usize];
                println!("{name:<30} {:>8.3} {:>8.3} {:>8.3}", pct(50.0), pct(99.0), lat.iter().sum::<f64>() / lat.len() as f64);
            }
        }
        Some("eval") => {
            let index = WikiIndex::open_with(&dir, query_encoder)?;
            let split = arg(&args, "--split").unwrap_or_else(|| "dev".into());
            let qs = read_questions(std::path::Path::new(agentrt_search::DEFAULT_QUESTIONS_FILE), Some(&split))?;
            let r = evaluate(&index, &qs, &mut |_| {})?;
            println!("{} {split} questions, {query_encoder} query encoder", r.questions);
            for x in r.modes.iter().chain(&r.fusions) {
                println!("{:<22} {:>6.3} {:>6.3} {:>6.3}", x.mode, x.at1, x.at5, x.at10);
            }
        }
        _ => return Err("usage: wiki index|search|stages|eval [--index-dir D] ...".into()),
    }
    Ok(())
}
