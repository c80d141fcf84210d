//! `agentrt bench train-step`: the update of a training step, by agentrt's learner and by transformers +
//! PEFT, on the same samples.
//!
//! The samples are real: one step of the training config's rollouts (by default 2 questions x 4
//! rollouts of SmolLM2-135M, multi-turn, the real sandbox and index), each with its token ids and the mask
//! of the tokens the model wrote. Each gets an advantage of +1 or -1 (alternating), so that every sample
//! is in the loss on both sides whatever the rewards were. Both sides then run the same update: LoRA on the
//! config's projections, `-A·log p + beta·k3` per model token against the base model, each sample
//! weighted 1 / (samples · its model tokens), gradient clipping and an AdamW step. Ours is the trainer's
//! `Learner` (with the shared-prefix update as configured); theirs is PEFT on transformers
//! (`bench/rollout/peft_peer.py`), the batch right-padded into one forward and backward as TRL does. Both
//! adapters start with B = 0, so the first update's losses must agree: a check that the two sides compute
//! the same thing.

use super::workload::{Workload, WorkloadArgs};
use agentrt_rollout::LocalPolicy;
use agentrt_trainer::{Learner, LossScale, Sample};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Arguments of `agentrt bench train-step`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  bash bench/policy/setup_venv.sh          # once: torch, transformers, peft (~5 GB)\n  \
    agentrt bench train-step                 # one step's samples, the update 3 times on each side\n  \
    agentrt bench train-step --set algorithm.shared_prefix_update=false\n\n\
    The CPU and the kernel path are printed with the numbers.")]
pub struct Args {
    /// Updates each side runs on the samples (the best is compared).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// The peer's script.
    #[arg(long, default_value = "bench/rollout/peft_peer.py")]
    pub peer: PathBuf,
    #[command(flatten)]
    pub workload: WorkloadArgs,
}

/// One side's updates.
#[derive(Debug, Serialize)]
pub struct UpdateSide {
    pub name: String,
    /// Seconds of each update (reference pass, forward, backward, clipping, AdamW).
    pub seconds: Vec<f64>,
    pub best_seconds: f64,
    /// Tokens of the samples per second of the best update.
    pub tokens_per_s: f64,
    /// The first update's loss (before any step: both sides start from B = 0).
    pub first_loss: f64,
}

/// Both sides and the ratio (theirs / ours: above 1 means agentrt is faster).
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub machine: String,
    pub samples: usize,
    pub tokens: usize,
    pub model_tokens: usize,
    pub ours: UpdateSide,
    pub peft: UpdateSide,
    pub peer_versions: serde_json::Value,
    pub ratio: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.repeats > 0, "--repeats must be at least 1");
    let mut workload = Workload::load(&args.workload, &args.peer)?;
    anyhow::ensure!(
        workload.config.model.init_adapter.is_empty() && !workload.config.model.dual_lora,
        "the benchmark runs fresh single adapters (no model.init_adapter, no dual_lora)"
    );
    // One step's samples, as training plays them.
    let batch = workload.step_batch(1);
    let Workload { config, policy, model_path, .. } = workload;
    let config = &config;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let played = runtime.block_on(async {
        let sandbox = Arc::new(args.workload.tools.build_for(&config.env, config.rollout.episode.limits()).await?);
        let environment = agentrt_environments::Environment::build(&config.env, &config.rollout.episode, sandbox.clone())?;
        let local = LocalPolicy::new(&policy, environment.sampling(), config.run.seed);
        let runner = environment.runner(sandbox);
        anyhow::Ok(runner.run(&local, &batch).await?)
    })?;
    let samples: Vec<Sample> = played
        .episodes
        .iter()
        .filter_map(|e| e.conversation.tokens.as_ref())
        .filter(|t| t.model_mask.iter().skip(1).any(|&m| m))
        .enumerate()
        .map(|(i, t)| Sample {
            ids: t.ids.clone(),
            model_mask: t.model_mask.clone(),
            advantage: if i % 2 == 0 { 1.0 } else { -1.0 },
            routed: false,
            sampled_logprobs: vec![],
        })
        .collect();
    anyhow::ensure!(!samples.is_empty(), "the step's episodes hold no model tokens to train on");
    let tokens: usize = samples.iter().map(|s| s.ids.len()).sum();
    let model_tokens = agentrt_trainer::model_tokens(&samples);
    eprintln!("{} samples, {tokens} tokens ({model_tokens} written by the model)", samples.len());

    let a = &config.algorithm;
    let mut learner = Learner::new(policy, agentrt_trainer::learner_config(config))?;
    let mut ours_seconds = Vec::with_capacity(args.repeats);
    let mut ours_loss = None;
    for _ in 0..args.repeats {
        let t = Instant::now();
        let stats = learner.accumulate(&samples, LossScale::PerSample { samples: samples.len() })?;
        learner.step()?;
        ours_seconds.push(t.elapsed().as_secs_f64());
        ours_loss.get_or_insert(stats.loss);
    }

    let mut peer = args.workload.start_peer(&args.peer, &model_path)?;
    let request = serde_json::json!({
        "samples": samples.iter().map(|s| serde_json::json!({"ids": s.ids, "mask": s.model_mask, "advantage": s.advantage})).collect::<Vec<_>>(),
        "rank": config.model.lora_rank,
        "alpha": config.model.lora_alpha,
        "targets": config.model.lora_targets,
        "beta": a.beta,
        "lr": a.lr,
        "max_grad_norm": a.max_grad_norm,
        "repeats": args.repeats,
    });
    let answer = peer.ask(&request)?;
    let peer_versions = peer.versions.clone();
    peer.stop();
    let theirs_seconds: Vec<f64> =
        serde_json::from_value(answer["seconds"].clone()).map_err(|e| anyhow::anyhow!("the PEFT peer's seconds: {e} in {answer}"))?;
    let theirs_loss = answer["loss"].as_f64().ok_or_else(|| anyhow::anyhow!("the PEFT peer gave no loss: {answer}"))?;

    let side = |name: String, seconds: Vec<f64>, first_loss: f64| {
        let best = seconds.iter().copied().fold(f64::INFINITY, f64::min);
        UpdateSide { name, best_seconds: best, tokens_per_s: tokens as f64 / best, seconds, first_loss }
    };
    let ours =
        side(format!("agentrt learner{}", if a.shared_prefix_update { " (shared-prefix update)" } else { "" }), ours_seconds, ours_loss.unwrap_or(f64::NAN));
    let peft = side(
        format!("transformers {} + PEFT {}", peer_versions["transformers"].as_str().unwrap_or("?"), peer_versions["peft"].as_str().unwrap_or("?")),
        theirs_seconds,
        theirs_loss,
    );
    let comparison = Comparison {
        machine: agentrt_kernels::describe(),
        samples: samples.len(),
        tokens,
        model_tokens,
        ratio: peft.best_seconds / ours.best_seconds,
        ours,
        peft,
        peer_versions,
    };
    if args.workload.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
        return Ok(());
    }
    let c = &comparison;
    println!("the update of one training step, same samples, agentrt's learner and transformers + PEFT side by side");
    println!("{}", c.machine);
    println!(
        "samples: {} ({} tokens, {} written by the model); LoRA r={} on {}; beta {}; peer: torch {} with {} threads",
        c.samples,
        c.tokens,
        c.model_tokens,
        config.model.lora_rank,
        serde_json::to_value(&config.model.lora_targets).map(|v| v.to_string()).unwrap_or_default(),
        a.beta,
        c.peer_versions["torch"].as_str().unwrap_or("?"),
        c.peer_versions["threads"]
    );
    println!();
    println!("{:<48} {:>10} {:>10} {:>14}  seconds of each update", "", "best s", "tokens/s", "first loss");
    for s in [&c.ours, &c.peft] {
        let each: Vec<String> = s.seconds.iter().map(|x| format!("{x:.2}")).collect();
        println!("{:<48} {:>10.2} {:>10.0} {:>14.6}  {}", s.name, s.best_seconds, s.tokens_per_s, s.first_loss, each.join(" "));
    }
    println!();
    println!("ratio (transformers + PEFT / agentrt, best update): {:.2}x", c.ratio);
    Ok(())
}
