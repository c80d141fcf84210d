//! `agentrt train`: RL in an environment, the wiki's or code's (see the `agentrt-trainer` crate).

use crate::run_options::RunOptions;
use crate::sandbox_options::ToolOptions;
use agentrt_trainer::{train, TrainConfig, TrainRequest};
use std::sync::Arc;

/// Arguments of `agentrt train`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt train                                   # a short real run on the embedded defaults\n  \
    agentrt train --max-steps 2 --num-rollouts 2 --output-dir /tmp/runs\n  \
    agentrt train --config my.toml --lr 1e-5 --beta 0.02 --set rollout.max_turns=4\n  \
    agentrt train --set model.dual_lora=true --set routing.detector=tool:read_section --set routing.eval_routing_steps=5\n  \
    agentrt train --init-adapter runs/RUN_SFT/checkpoint-60   # RL from an `agentrt sft` adapter\n  \
    agentrt train --resume runs/smollm2-135m_lr1e-4_g4_beta0.02_s42 --max-steps 20\n  \
    agentrt train --max-steps 4 --resume            # resume the run these flags name, wherever it stopped\n  \
    agentrt train --print-config > my.toml          # every key, with comments\n  \
    agentrt train --env code --model qwen2.5-coder-0.5b --max-steps 2   # HumanEval's train split, tests as reward\n\n\
    The run directory (OUTPUT_DIR/RUN_NAME, named from the hyperparameters) gets config.toml, metrics.jsonl\n\
    (one line per step), transcripts.jsonl, checkpoint-N/ (PEFT adapters, optimizer, data position) and, at\n\
    the end, curves.png. Every other step leaves resume-N/ (the same files, replacing the one before), so a\n\
    run killed at any instant continues with --resume (bare: the run this config names), losing at most the\n\
    step in flight. Two runs of one config and seed on one machine, kernel path and thread count end with\n\
    the same adapters bit for bit, resumed or not (docs/reliability.md).\n\
    Precedence: flags > --set > --config file > embedded defaults.")]
pub struct Args {
    /// Training steps (each: `--batch-size` questions x `--num-rollouts` episodes, then the update). Sets
    /// `run.max_steps`; with --resume, how far the run goes.
    #[arg(long)]
    pub max_steps: Option<usize>,
    /// Rollouts per question (the group size).
    #[arg(long)]
    pub num_rollouts: Option<usize>,
    /// Questions per step.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// AdamW's learning rate for the LoRA adapters (`algorithm.lr`).
    #[arg(long)]
    pub lr: Option<f64>,
    /// KL penalty to the base model.
    #[arg(long)]
    pub beta: Option<f64>,
    /// Replies per episode at most, the answer included (`rollout.max_turns`).
    #[arg(long)]
    pub max_turns: Option<usize>,
    /// `reinforce`, `rloo` or `grpo`.
    #[arg(long)]
    pub advantage: Option<String>,
    /// `rule`, `rule:0.5` or `openai:MODEL@BASE_URL`.
    #[arg(long)]
    pub judge: Option<String>,
    /// `local` or `openai:MODEL@BASE_URL`.
    #[arg(long)]
    pub sampler: Option<String>,
    /// The environment: `wiki` (search and read the corpus), `code` (write a function; its tests in the
    /// sandbox are the reward), or the folder of an environment package (its `environment.toml`: tasks,
    /// prompt, grader; `agentrt env new`, docs/environments.md). Sets `env.name`; `[env.wiki]` or
    /// `[env.code]` configures a built-in one.
    #[arg(long, value_name = "NAME|DIR")]
    pub env: Option<String>,
    #[command(flatten)]
    pub run: RunOptions,
    #[command(flatten)]
    pub tools: ToolOptions,
}

impl Args {
    /// The flags as `section.key=value` overrides, after `--set`.
    fn overrides(&self) -> Vec<String> {
        self.run.overrides(vec![
            ("run.max_steps", self.max_steps.map(|v| v.to_string())),
            ("rollout.num_rollouts", self.num_rollouts.map(|v| v.to_string())),
            ("rollout.batch_size", self.batch_size.map(|v| v.to_string())),
            ("algorithm.lr", self.lr.map(|v| format!("{v:e}"))),
            ("algorithm.beta", self.beta.map(|v| v.to_string())),
            ("rollout.max_turns", self.max_turns.map(|v| v.to_string())),
            ("algorithm.advantage", self.advantage.clone()),
            ("env.wiki.judge", self.judge.clone()),
            ("rollout.sampler", self.sampler.clone()),
            ("env.name", self.env.clone()),
        ])
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let overrides = args.overrides();
    let Some((config, run_dir, resume)) = args.run.resolve::<TrainConfig>(&overrides)? else { return Ok(()) };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let summary = runtime.block_on(async {
        let sandbox = Arc::new(args.tools.build_for(&config.env, config.rollout.episode.limits()).await?);
        anyhow::Ok(train(TrainRequest { config, run_dir, resume, progress: !args.run.no_progress }, sandbox).await?)
    })?;
    let plot = agentrt_trainer::plot::plot_run(&summary.run_dir, None)?;
    println!("run: {}", summary.run_dir.display());
    if let Some(c) = &summary.last_checkpoint {
        println!("checkpoint: {}", c.display());
    }
    println!("metrics: {}", summary.run_dir.join(agentrt_trainer::run_dir::METRICS).display());
    println!("curves: {}", plot.display());
    if summary.steps_run > 0 && summary.run_steps_updated == 0 {
        anyhow::bail!(
            "the run trained nothing: in each of its {} steps every group had equal rewards (optimizer_steps 0 in metrics.jsonl), \
             so the adapters are as they started. More rollouts per question (--num-rollouts), more questions per step \
             (--batch-size), a higher rollout.temperature, partial credit (algorithm.f1_weight, algorithm.program_bonus) \
             or --advantage reinforce give the groups a signal",
            summary.run_steps
        );
    }
    Ok(())
}
