//! Embed one query many times and report the latency of each encoder: the int8 encoder and
//! candle's f32 BERT, on the same text.
//!
//! cargo run --release -p agentrt-search --example embed_query -- "Which planet has a Great Red Spot?" [REPEATS]

use agentrt_search::Embedder;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let text = args.first().cloned().unwrap_or_else(|| "Which planet in the solar system has a Great Red Spot?".into());
    let repeats: usize = args.get(1).map(|r| r.parse()).transpose()?.unwrap_or(500);
    let embedder = Embedder::minilm()?;
    let fast = embedder.embed_one(&text)?;
    let exact = embedder.embed_one_f32(&text)?;
    let cosine: f32 = fast.iter().zip(&exact).map(|(a, b)| a * b).sum();
    println!("{text:?}: cosine(int8, f32) = {cosine:.5}");
    let t = Instant::now();
    for _ in 0..repeats {
        embedder.tokenize(&text)?;
    }
    println!("tokenizer            mean {:.3} ms ({} word pieces)", t.elapsed().as_secs_f64() * 1e3 / repeats as f64, embedder.tokenize(&text)?.len());
    for (name, f32_path) in [("int8 encoder", false), ("candle f32 BERT", true)] {
        let n = if f32_path { repeats / 10 + 1 } else { repeats };
        let mut lat = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            if f32_path {
                embedder.embed_one_f32(&text)?;
            } else {
                embedder.embed_one(&text)?;
            }
            lat.push(t.elapsed().as_secs_f64() * 1e3);
        }
        lat.sort_by(f64::total_cmp);
        println!("{name:<20} p50 {:.3} ms, min {:.3} ms over {n} runs", lat[n / 2], lat[0]);
    }
    Ok(())
}
