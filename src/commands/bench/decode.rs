//! `agentrt bench decode`: how fast agentrt's decoder processes a prompt and generates tokens, beside
//! llama.cpp on the same GGUF file and the same number of threads, in one run.
//!
//! Both sides run the model's forward alone, as llama.cpp's own tools do: `llama-bench` for a prompt of
//! `--prompt-tokens` random tokens and `--gen-tokens` generated at batch 1, `llama-batched-bench` for
//! `--parallel` sequences generating together after a prompt of `--parallel-prompt-tokens` each. Ours
//! is [`Decoder::forward_rows`] of the model as `agentrt generate` and `serve` load it (its GGUF blocks, no f32
//! copy: [`Policy::load_for_inference`]) on the same shapes (a fresh cache for the prompt, then one token per
//! sequence and step, each the argmax of its logits), best of `--repeats`. Tokens per second; the ratio is
//! ours over theirs (above 1: agentrt is faster).

use agentrt_policy::model::SequenceKv;
use agentrt_policy::rand::{Rng, SeedableRng};
use agentrt_policy::{DecodeActivations, Decoder, ModelSource, Policy};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Arguments of `agentrt bench decode`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  bash bench/decode/setup_llamacpp.sh      # once: llama.cpp's tools from PyPI's llama-cpp-python sources\n  \
    agentrt bench decode                     # both default models, written to bench/decode_results.md\n  \
    agentrt bench decode --models smollm2-135m --parallel 1,8 --out /tmp/decode.md\n  \
    AGENTRT_KERNELS=avx2 agentrt bench decode   # the AVX2 path on an AVX-512 machine\n\n\
    The CPU, the kernel path and both sides' thread counts are printed with the numbers.")]
pub struct Args {
    /// Models: `smollm2-135m`, `qwen2.5-coder-0.5b` or `.gguf` files.
    #[arg(long, value_delimiter = ',', default_value = "smollm2-135m,qwen2.5-coder-0.5b")]
    pub models: Vec<String>,
    /// Tokens of the prompt-processing test.
    #[arg(long, default_value_t = 512)]
    pub prompt_tokens: usize,
    /// Tokens each sequence generates.
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// Sequences generating together, one test each (1 is batch-1 decoding).
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    pub parallel: Vec<usize>,
    /// Prompt tokens of each parallel sequence before it generates (llama-batched-bench's `-npp`).
    #[arg(long, default_value_t = 128)]
    pub parallel_prompt_tokens: usize,
    /// What agentrt's decoding multiplies the GGUF blocks with (see `agentrt generate --help`).
    #[arg(long, default_value = "int8")]
    pub decode_activations: DecodeActivations,
    /// Runs of each test per side (the best counts).
    #[arg(long, default_value_t = 2)]
    pub repeats: usize,
    /// Where `llama-bench` and `llama-batched-bench` are.
    #[arg(long, default_value = "bench/decode/llama.cpp-build/bin")]
    pub llama_bin: PathBuf,
    /// The markdown table is written here too.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One test: tokens per second on each side.
struct Row {
    model: String,
    test: String,
    theirs: f64,
    ours: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.repeats > 0 && args.gen_tokens > 0 && args.prompt_tokens > 0, "--repeats, --gen-tokens and --prompt-tokens must be positive");
    anyhow::ensure!(!args.parallel.is_empty() && !args.parallel.contains(&0), "--parallel takes positive sequence counts");
    for tool in ["llama-bench", "llama-batched-bench"] {
        anyhow::ensure!(
            args.llama_bin.join(tool).exists(),
            "{}: no {tool} there; run `bash bench/decode/setup_llamacpp.sh` first (about 10 minutes), or pass --llama-bin",
            args.llama_bin.display()
        );
    }
    let threads = agentrt_policy::threads::fix_thread_count();
    let machine = agentrt_kernels::describe();
    println!("{machine}; {threads} threads on both sides; agentrt's activations: {:?}", args.decode_activations);
    let mut rows = Vec::new();
    let mut loads = Vec::new();
    for name in &args.models {
        let (path, _) = ModelSource::parse(name).resolve().with_context(|| format!("model {name}"))?;
        eprintln!("{name}: llama.cpp ({})", path.display());
        let theirs = llama_cpp(&args, &path, threads)?;
        eprintln!("{name}: agentrt");
        let started = Instant::now();
        let mut policy = Policy::load_for_inference(&ModelSource::parse(name), &agentrt_policy::Device::Cpu).with_context(|| format!("loading {name}"))?;
        loads.push((name.clone(), started.elapsed().as_secs_f64()));
        if policy.decoder.set_decode_activations(args.decode_activations) != args.decode_activations {
            anyhow::bail!("--decode-activations int8: {name} has no GGUF blocks (int8 activations multiply a GGUF's blocks)");
        }
        let ours = agentrt_policy::threads::in_pool(|| ours(&args, &policy.decoder))?;
        for ((test, t), (_, o)) in theirs.into_iter().zip(ours) {
            println!("{name:<20} {test:<28} llama.cpp {t:>8.1} tok/s   agentrt {o:>8.1} tok/s   {:>5.2}x", o / t);
            rows.push(Row { model: name.clone(), test, theirs: t, ours: o });
        }
    }
    let table = markdown(&args, &machine, threads, &rows, &loads);
    if let Some(out) = &args.out {
        agentrt_assets::write_atomic(out, table.as_bytes()).with_context(|| format!("writing {}", out.display()))?;
        println!("written to {}", out.display());
    }
    Ok(())
}

/// The tests in order: prompt processing, then generation at each parallel count.
fn test_names(args: &Args) -> Vec<String> {
    let mut names = vec![format!("prompt {} tokens", args.prompt_tokens)];
    for &n in &args.parallel {
        names.push(if n == 1 { format!("generate {} at batch 1", args.gen_tokens) } else { format!("generate {} x {n} sequences", args.gen_tokens) });
    }
    names
}

/// llama.cpp's numbers from its own tools, in [`test_names`]' order.
fn llama_cpp(args: &Args, model: &Path, threads: usize) -> anyhow::Result<Vec<(String, f64)>> {
    let run = |tool: &str, extra: &[String]| -> anyhow::Result<Vec<serde_json::Value>> {
        let mut cmd = Command::new(args.llama_bin.join(tool));
        cmd.arg("-m").arg(model).args(["-t", &threads.to_string()]).args(extra);
        let out = cmd.output().with_context(|| format!("running {tool}"))?;
        anyhow::ensure!(out.status.success(), "{tool} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or(""));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).with_context(|| format!("{tool} wrote {l:?}")))
            .collect()
    };
    let bench = run(
        "llama-bench",
        &["-p".into(), args.prompt_tokens.to_string(), "-n".into(), "0".into(), "-r".into(), args.repeats.to_string(), "-o".into(), "jsonl".into()],
    )?;
    let pp = bench.first().and_then(|v| v["avg_ts"].as_f64()).context("llama-bench wrote no prompt-processing line")?;
    let list: Vec<String> = args.parallel.iter().map(usize::to_string).collect();
    let ctx = args.parallel.iter().max().copied().unwrap_or(1) * (args.parallel_prompt_tokens + args.gen_tokens) + 64;
    let mut best = vec![0f64; args.parallel.len()];
    for _ in 0..args.repeats {
        let lines = run(
            "llama-batched-bench",
            &[
                "-c".into(),
                ctx.to_string(),
                "-b".into(),
                "2048".into(),
                "-ub".into(),
                "512".into(),
                "-npp".into(),
                args.parallel_prompt_tokens.to_string(),
                "-ntg".into(),
                args.gen_tokens.to_string(),
                "-npl".into(),
                list.join(","),
                "--output-format".into(),
                "jsonl".into(),
            ],
        )?;
        anyhow::ensure!(lines.len() == args.parallel.len(), "llama-batched-bench wrote {} lines for {} parallel counts", lines.len(), args.parallel.len());
        for (b, line) in best.iter_mut().zip(&lines) {
            *b = b.max(line["speed_tg"].as_f64().context("llama-batched-bench: no speed_tg")?);
        }
    }
    Ok(test_names(args).into_iter().zip(std::iter::once(pp).chain(best)).collect())
}

/// Ours on the same shapes, in [`test_names`]' order.
fn ours(args: &Args, decoder: &Decoder) -> anyhow::Result<Vec<(String, f64)>> {
    let vocab = decoder.cfg.vocab_size as u32;
    let mut rng = agentrt_policy::rand::rngs::StdRng::seed_from_u64(0);
    let mut random = |n: usize| -> Vec<u32> { (0..n).map(|_| rng.random_range(0..vocab)).collect() };
    let mut speeds = Vec::new();
    let prompt = random(args.prompt_tokens);
    let mut best = 0f64;
    for _ in 0..args.repeats {
        let mut kv = [SequenceKv::default()];
        let started = Instant::now();
        decoder.forward_rows(&prompt, &[prompt.len()], &mut kv, None)?;
        best = best.max(prompt.len() as f64 / started.elapsed().as_secs_f64());
    }
    speeds.push(best);
    for &n in &args.parallel {
        let mut best = 0f64;
        for _ in 0..args.repeats {
            let mut kv: Vec<SequenceKv> = (0..n).map(|_| SequenceKv::default()).collect();
            let prompts = random(n * args.parallel_prompt_tokens);
            let mut next = argmax_rows(&decoder.forward_rows(&prompts, &vec![args.parallel_prompt_tokens; n], &mut kv, None)?)?;
            let started = Instant::now();
            for _ in 0..args.gen_tokens {
                next = argmax_rows(&decoder.forward_rows(&next, &vec![1; n], &mut kv, None)?)?;
            }
            best = best.max((n * args.gen_tokens) as f64 / started.elapsed().as_secs_f64());
        }
        speeds.push(best);
    }
    Ok(test_names(args).into_iter().zip(speeds).collect())
}

/// The most likely next token of each row of `(rows, V)` logits.
fn argmax_rows(logits: &agentrt_policy::Tensor) -> anyhow::Result<Vec<u32>> {
    Ok(logits
        .to_vec2::<f32>()?
        .iter()
        .map(|row| row.iter().enumerate().fold((0, f32::NEG_INFINITY), |best, (i, &v)| if v > best.1 { (i, v) } else { best }).0 as u32)
        .collect())
}

fn markdown(args: &Args, machine: &str, threads: usize, rows: &[Row], loads: &[(String, f64)]) -> String {
    let mut s = String::from("# Decoding: agentrt beside llama.cpp\n\n");
    s += &format!(
        "`agentrt bench decode` ({machine}; {threads} threads on both sides; agentrt's activations: {:?}; best of {} runs). \
         llama.cpp: `llama-bench` and `llama-batched-bench` built by bench/decode/setup_llamacpp.sh. Tokens per second; \
         the ratio is agentrt over llama.cpp.\n\n",
        args.decode_activations, args.repeats
    );
    s += "| model | test | llama.cpp tok/s | agentrt tok/s | ratio |\n|---|---|---:|---:|---:|\n";
    for r in rows {
        s += &format!("| {} | {} | {:.1} | {:.1} | {:.2}x |\n", r.model, r.test, r.theirs, r.ours, r.ours / r.theirs);
    }
    s += "\nagentrt's load time (GGUF to a ready decoder): ";
    s += &loads.iter().map(|(m, t)| format!("{m} {t:.2} s")).collect::<Vec<_>>().join(", ");
    s += "\n";
    s
}
