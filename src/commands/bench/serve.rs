//! `agentrt bench serve`: `agentrt serve` beside llama.cpp's `llama-server` under the same load, on the same
//! GGUF file and the same machine, in one run.
//!
//! Each server runs alone (started, measured, stopped; then the other). The load is a fixed mix replayed by
//! closed-loop clients: `--concurrency` clients each send their next request when the last one ends, from
//! one shared list, until `max(--min-requests, 4 x clients)` requests are answered. Three requests in four
//! are short (a question from the bundled dev split, `--short-max-tokens`), every fourth is long (the
//! question after the first `--long-prompt-chars` of its gold page, `--long-max-tokens`). Every request is
//! greedy and streamed with `stream_options.include_usage`, so both servers are timed the same way: time to
//! first token (the first chunk with text), latency (the last byte), and throughput (completion tokens, as
//! each server counts them, over the wall time of the level). Both servers get as many slots as the largest
//! concurrency and the same thread count.

use agentrt_policy::ModelSource;
use anyhow::Context;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `agentrt bench serve`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  bash bench/decode/setup_llamacpp.sh       # once: llama.cpp's tools, llama-server among them\n  \
    agentrt bench serve --out bench/serve_results.md\n  \
    agentrt bench serve --models qwen2.5-coder-0.5b --concurrency 8 --min-requests 8\n\n\
    The CPU, the kernel path and the thread count are printed with the numbers. Run it alone on the machine.")]
pub struct Args {
    /// Models: `smollm2-135m`, `qwen2.5-coder-0.5b` or `.gguf` files.
    #[arg(long, value_delimiter = ',', default_value = "smollm2-135m")]
    pub models: Vec<String>,
    /// Concurrent clients, one load level each.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub concurrency: Vec<usize>,
    /// Requests per level at least (a level sends 4 per client when that is more).
    #[arg(long, default_value_t = 16)]
    pub min_requests: usize,
    /// `max_tokens` of a short request.
    #[arg(long, default_value_t = 64)]
    pub short_max_tokens: usize,
    /// `max_tokens` of a long request.
    #[arg(long, default_value_t = 128)]
    pub long_max_tokens: usize,
    /// Characters of the gold page read before a long request's question (about 4 per token).
    #[arg(long, default_value_t = 2400)]
    pub long_prompt_chars: usize,
    /// The questions (dev split) and their pages.
    #[arg(long, default_value = agentrt_search::DEFAULT_QUESTIONS_FILE)]
    pub questions: PathBuf,
    #[arg(long, default_value = "data/wiki/pages.jsonl")]
    pub pages: PathBuf,
    /// Where `llama-server` is.
    #[arg(long, default_value = "bench/decode/llama.cpp-build/bin")]
    pub llama_bin: PathBuf,
    /// agentrt serve's `--batching` modes, each run beside the same llama-server levels: `invariant` (the
    /// default) and `fastest` together measure what batch-invariant decoding costs.
    #[arg(long, value_delimiter = ',', default_value = "invariant")]
    pub batching: Vec<agentrt_policy::Batching>,
    /// The markdown table is written here too.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One request of the mix.
#[derive(Clone)]
struct Request {
    prompt: String,
    max_tokens: usize,
}

/// One server's numbers at one load level.
#[derive(Clone)]
struct Level {
    clients: usize,
    requests: usize,
    completion_tokens: usize,
    wall: Duration,
    ttft: Vec<Duration>,
    latency: Vec<Duration>,
}

impl Level {
    fn throughput(&self) -> f64 {
        self.completion_tokens as f64 / self.wall.as_secs_f64()
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(!args.concurrency.is_empty() && !args.concurrency.contains(&0), "--concurrency takes positive client counts");
    let server_bin = args.llama_bin.join("llama-server");
    anyhow::ensure!(
        server_bin.exists(),
        "{}: no llama-server there; run `bash bench/decode/setup_llamacpp.sh` first (about 15 minutes), or pass --llama-bin",
        args.llama_bin.display()
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let threads = agentrt_policy::threads::fix_thread_count();
    let machine = agentrt_kernels::describe();
    println!("{machine}; {threads} threads for each server");
    let mix = workload(&args)?;
    let slots = args.concurrency.iter().copied().max().unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut rows = Vec::new();
    for name in &args.models {
        let (gguf, _) = ModelSource::parse(name).resolve().with_context(|| format!("model {name}"))?;
        let context = 2 * (args.long_prompt_chars / 3 + args.long_max_tokens + 256);
        let mut sides = Vec::new();
        let agentrt_sides = args.batching.iter().map(|b| Some(*b));
        for batching in std::iter::once(None).chain(agentrt_sides) {
            let side = match batching {
                None => "llama-server".to_string(),
                Some(b) => format!("agentrt {}", b.name()),
            };
            eprintln!("{name}: starting {side}");
            let server = match batching {
                None => Server::llama(&server_bin, &gguf, threads, slots, context)?,
                Some(b) => Server::agentrt(name, slots, b)?,
            };
            let mut levels = Vec::new();
            for &clients in &args.concurrency {
                let n = args.min_requests.max(4 * clients);
                let level = runtime.block_on(replay(&server.url, &server.model, &mix, clients, n)).with_context(|| format!("{side} at {clients} clients"))?;
                println!(
                    "{name:<20} {side:<14} {clients:>3} clients  {:>7.1} tok/s  ttft p50 {:>6.0} ms  latency p50 {:>6.0} / p99 {:>6.0} ms",
                    level.throughput(),
                    ms(&level.ttft, 0.5),
                    ms(&level.latency, 0.5),
                    ms(&level.latency, 0.99)
                );
                levels.push(level);
            }
            drop(server);
            sides.push(levels);
        }
        let llama = sides.remove(0);
        for (b, levels) in args.batching.iter().zip(sides) {
            rows.push(Row { model: name.clone(), batching: *b, llama: llama.clone(), agentrt: levels });
        }
    }
    let table = markdown(&args, &machine, threads, slots, &rows);
    print!("{table}");
    if let Some(out) = &args.out {
        agentrt_assets::write_atomic(out, table.as_bytes()).with_context(|| format!("writing {}", out.display()))?;
        println!("written to {}", out.display());
    }
    Ok(())
}

/// The mix: three short requests, then a long one, over the dev questions in file order.
fn workload(args: &Args) -> anyhow::Result<Vec<Request>> {
    let questions = agentrt_rollout::read_questions(&args.questions, Some("dev"))?;
    let corpus = agentrt_search::ingest::read_pages(&args.pages)?;
    let pages: std::collections::HashMap<&str, &str> = corpus.pages.iter().map(|p| (p.id.as_str(), p.content.as_str())).collect();
    let mut mix = Vec::new();
    for q in questions.iter().take(256) {
        let long = mix.len() % 4 == 3;
        let page = q.page.as_deref().and_then(|p| pages.get(p));
        let request = match page {
            Some(text) if long => Request {
                prompt: format!("{}\n\nAnswer from the text above: {}", text.chars().take(args.long_prompt_chars).collect::<String>(), q.question),
                max_tokens: args.long_max_tokens,
            },
            _ if long => continue,
            _ => Request { prompt: q.question.clone(), max_tokens: args.short_max_tokens },
        };
        mix.push(request);
    }
    anyhow::ensure!(mix.len() >= 16, "{}: too few dev questions with pages for the mix", args.questions.display());
    Ok(mix)
}

/// One model's levels on llama-server and on agentrt serve under one `--batching`.
struct Row {
    model: String,
    batching: agentrt_policy::Batching,
    llama: Vec<Level>,
    agentrt: Vec<Level>,
}

/// A server process, stopped when dropped.
struct Server {
    child: Child,
    url: String,
    /// The `model` its requests name.
    model: String,
}

impl Server {
    fn agentrt(model: &str, slots: usize, batching: agentrt_policy::Batching) -> anyhow::Result<Server> {
        let exe = std::env::current_exe().context("finding the agentrt binary")?;
        let mut child = Command::new(exe)
            .args(["serve", "--model", model, "--port", "0", "--served-model-name", "bench", "--max-num-seqs", &slots.to_string()])
            .args(["--batching", batching.name()])
            .env("AGENTRT_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting agentrt serve")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout")).read_line(&mut line)?;
        let url = line.trim().to_string();
        let server = Server { child, url, model: "bench".into() };
        anyhow::ensure!(server.url.starts_with("http://"), "agentrt serve printed {line:?} where its URL was expected");
        server.wait_healthy()?;
        Ok(server)
    }

    fn llama(bin: &Path, gguf: &Path, threads: usize, slots: usize, context: usize) -> anyhow::Result<Server> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(bin)
            .arg("-m")
            .arg(gguf)
            .args(["--host", "127.0.0.1", "--port", &port.to_string(), "-t", &threads.to_string(), "-tb", &threads.to_string()])
            .args(["-np", &slots.to_string(), "-c", &(slots * context).to_string(), "--log-disable"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting llama-server")?;
        let server = Server { child, url: format!("http://127.0.0.1:{port}/v1"), model: "bench".into() };
        server.wait_healthy()?;
        Ok(server)
    }

    /// Polls `/health` until it answers 200 (llama-server answers 503 while it loads).
    fn wait_healthy(&self) -> anyhow::Result<()> {
        let health = self.url.replace("/v1", "/health");
        let started = Instant::now();
        loop {
            if http_status(&health).is_ok_and(|status| status == 200) {
                return Ok(());
            }
            anyhow::ensure!(started.elapsed() < Duration::from_secs(120), "{health} did not answer 200 within 2 minutes");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking `GET` of `url` over a bare HTTP/1.1 connection: the status code.
fn http_status(url: &str) -> anyhow::Result<u16> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").context("an http:// URL")?;
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let mut stream = std::net::TcpStream::connect(host)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    let status = std::str::from_utf8(&head[9..12])?.parse()?;
    Ok(status)
}

/// `clients` closed-loop clients answering `n` requests of `mix` (in order, wrapping) against `url`.
async fn replay(url: &str, model: &str, mix: &[Request], clients: usize, n: usize) -> anyhow::Result<Level> {
    // A fresh connection per request: llama-server closes idle ones, and a reused closed connection fails.
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build()?;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (client, next, url, model, mix) = (client.clone(), next.clone(), url.to_string(), model.to_string(), mix.to_vec());
            tokio::spawn(async move {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return Ok::<_, anyhow::Error>(out);
                    }
                    out.push(one_request(&client, &url, &model, &mix[i % mix.len()], i as u64).await.with_context(|| format!("request {i}"))?);
                }
            })
        })
        .collect();
    let mut level = Level { clients, requests: n, completion_tokens: 0, wall: Duration::ZERO, ttft: Vec::new(), latency: Vec::new() };
    for t in tasks {
        for (ttft, latency, tokens) in t.await?? {
            level.ttft.push(ttft);
            level.latency.push(latency);
            level.completion_tokens += tokens;
        }
    }
    level.wall = started.elapsed();
    Ok(level)
}

/// One streamed request: time to first text, total time, completion tokens (the server's own count).
async fn one_request(client: &reqwest::Client, url: &str, model: &str, r: &Request, seed: u64) -> anyhow::Result<(Duration, Duration, usize)> {
    let body = serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": r.prompt}],
        "temperature": 0,
        "max_tokens": r.max_tokens,
        "seed": seed,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let sent = Instant::now();
    let mut response = client.post(format!("{url}/chat/completions")).json(&body).send().await?;
    anyhow::ensure!(response.status().is_success(), "{url}: {} {}", response.status(), response.text().await.unwrap_or_default());
    let (mut first, mut tokens, mut buffer) = (None, None, String::new());
    while let Some(chunk) = response.chunk().await? {
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find('\n') {
            let line: String = buffer.drain(..=end).collect();
            let Some(data) = line.trim().strip_prefix("data:").map(str::trim) else { continue };
            if data == "[DONE]" {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(data).with_context(|| format!("{url} streamed {data:?}"))?;
            if first.is_none() && v["choices"][0]["delta"]["content"].as_str().is_some_and(|t| !t.is_empty()) {
                first = Some(sent.elapsed());
            }
            if let Some(t) = v["usage"]["completion_tokens"].as_u64() {
                tokens = Some(t as usize);
            }
        }
    }
    let latency = sent.elapsed();
    let tokens = tokens.with_context(|| format!("{url}: the stream carried no usage (stream_options.include_usage)"))?;
    Ok((first.unwrap_or(latency), latency, tokens))
}

/// The `q` quantile of `samples`, in milliseconds.
fn ms(samples: &[Duration], q: f64) -> f64 {
    let mut s = samples.to_vec();
    s.sort();
    s.get(((s.len().max(1) - 1) as f64 * q).round() as usize).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

fn markdown(args: &Args, machine: &str, threads: usize, slots: usize, rows: &[Row]) -> String {
    let mut s = String::from("# Serving under load: agentrt serve beside llama-server\n\n");
    s += &format!(
        "`agentrt bench serve` ({machine}; {threads} threads and {slots} slots for each server, each alone on the machine). \
         llama.cpp: `llama-server` built by bench/decode/setup_llamacpp.sh, on the same GGUF. The load: closed-loop clients \
         replaying one mix (three short requests, {} tokens at most, then a long one: {} characters of a page and {} tokens), \
         greedy, streamed. Throughput is completion tokens per second over the level's wall time; the ratio is agentrt over \
         llama-server (above 1: agentrt is faster). `batching` is agentrt serve's `--batching`.\n\n",
        args.short_max_tokens, args.long_prompt_chars, args.long_max_tokens
    );
    s += "| model | batching | clients | requests | llama-server tok/s | agentrt tok/s | ratio | TTFT p50 / p99 ms (llama / agentrt) | latency p50 / p99 ms (llama / agentrt) |\n";
    s += "|---|---|---:|---:|---:|---:|---:|---|---|\n";
    for row in rows {
        for (l, o) in row.llama.iter().zip(&row.agentrt) {
            s += &format!(
                "| {} | {} | {} | {} | {:.1} | {:.1} | {:.2}x | {:.0} / {:.0} vs {:.0} / {:.0} | {:.0} / {:.0} vs {:.0} / {:.0} |\n",
                row.model,
                row.batching.name(),
                l.clients,
                l.requests,
                l.throughput(),
                o.throughput(),
                o.throughput() / l.throughput(),
                ms(&l.ttft, 0.5),
                ms(&l.ttft, 0.99),
                ms(&o.ttft, 0.5),
                ms(&o.ttft, 0.99),
                ms(&l.latency, 0.5),
                ms(&l.latency, 0.99),
                ms(&o.latency, 0.5),
                ms(&o.latency, 0.99),
            );
        }
    }
    s
}
