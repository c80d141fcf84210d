//! `agentrt sft`: supervised LoRA fine-tuning on conversations (see `agentrt_trainer::sft`).

use crate::run_options::RunOptions;
use agentrt_trainer::{sft, SftConfig, SftRequest};

/// Arguments of `agentrt sft`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    agentrt sft --data chats.jsonl                   # 3 epochs on the embedded defaults\n  \
    agentrt sft --data trajectories.jsonl            # what `agentrt trajectories synth|sample` writes\n  \
    agentrt sft --data eval/zero-shot/transcripts.jsonl --set data.only_correct=true   # rejection sampling\n  \
    agentrt sft --data a.jsonl --data runs/RUN/transcripts.jsonl --val held-out.jsonl --max-steps 200 --lr 5e-5\n  \
    agentrt sft --data chats.jsonl --set model.dual_lora=true --set routing.detector=contains:HACK\n  \
    agentrt sft --resume runs/smollm2-135m_sft_lr1e-4_b4_s42 --epochs 5\n  \
    agentrt train --init-adapter runs/smollm2-135m_sft_lr1e-4_b4_s42/checkpoint-60   # then RL from it\n  \
    agentrt sft --print-config > sft.toml           # every key, with comments\n\n\
    Input: JSON Lines, one conversation a line, in the common chat form\n  \
    {\"messages\": [{\"role\": \"system\", \"content\": \"...\"}, {\"role\": \"user\", ...}, {\"role\": \"assistant\", ...},\n  \
    {\"role\": \"tool\", ...}, ...]}   (extra fields ignored; \"routed\": true trains only the forget adapter)\n\
    or the transcripts.jsonl that `agentrt eval` and `agentrt train` write, as they are (they get the system\n\
    prompt and demonstration of data.system_prompt / data.demonstration). Each conversation is rendered with\n\
    the model's chat template exactly as a rollout renders it; the loss is -mean log p over the assistant\n\
    replies' tokens and their end-of-turn token (nothing of system, user or tool turns), averaged over the\n\
    conversations of a step. A bad line is an error naming the file and line; conversations longer than\n\
    data.max_seq_tokens are dropped and counted.\n\n\
    The run directory (OUTPUT_DIR/RUN_NAME) gets config.toml, metrics.jsonl (train loss, val loss, tokens,\n\
    lr, grad norm per step), checkpoint-N/ (PEFT adapters, optimizer, data position) and curves.png. Every\n\
    other step leaves resume-N/ (the same files, replacing the one before), so a run killed at any instant\n\
    continues with --resume (bare: the run this config names), losing at most the step in flight.\n\
    Precedence: flags > --set > --config file > embedded defaults.")]
pub struct Args {
    /// A JSON Lines file to train on (repeatable): chat conversations or agentrt transcripts.
    #[arg(long, value_name = "FILE")]
    pub data: Vec<String>,
    /// A separate validation file (default: a seeded slice of the training data, data.val_fraction).
    #[arg(long, value_name = "FILE")]
    pub val: Option<String>,
    /// Passes over the training conversations.
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Optimizer steps (overrides --epochs when above 0).
    #[arg(long)]
    pub max_steps: Option<usize>,
    /// Conversations per micro-batch.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Learning rate (AdamW), after the optional warm-up (sft.warmup_steps).
    #[arg(long)]
    pub lr: Option<f64>,
    #[command(flatten)]
    pub run: RunOptions,
}

impl Args {
    /// The flags as `section.key=value` overrides, after `--set`.
    fn overrides(&self) -> Vec<String> {
        let quote = |s: &str| serde_json::to_string(s).expect("strings serialise");
        self.run.overrides(vec![
            ("data.train", (!self.data.is_empty()).then(|| format!("[{}]", self.data.iter().map(|d| quote(d)).collect::<Vec<_>>().join(", ")))),
            ("data.val", self.val.clone()),
            ("sft.epochs", self.epochs.map(|v| v.to_string())),
            ("sft.max_steps", self.max_steps.map(|v| v.to_string())),
            ("sft.batch_size", self.batch_size.map(|v| v.to_string())),
            ("sft.lr", self.lr.map(|v| format!("{v:e}"))),
        ])
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let overrides = args.overrides();
    let Some((config, run_dir, resume)) = args.run.resolve::<SftConfig>(&overrides)? else { return Ok(()) };
    let summary = sft(SftRequest { config, run_dir, resume, progress: !args.run.no_progress })?;
    let plot = agentrt_trainer::plot::plot_run(&summary.run_dir, None)?;
    println!("run: {}", summary.run_dir.display());
    println!("conversations: {} trained on, {} for validation, {} dropped as too long", summary.train_examples, summary.val_examples, summary.dropped_too_long);
    if let Some(v) = summary.final_val_loss {
        println!("final validation loss: {v:.4}");
    }
    if let Some(c) = &summary.last_checkpoint {
        println!("checkpoint: {}", c.display());
    }
    println!("metrics: {}", summary.run_dir.join(agentrt_trainer::run_dir::METRICS).display());
    println!("curves: {}", plot.display());
    Ok(())
}
