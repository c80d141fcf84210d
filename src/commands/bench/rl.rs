//! `agentrt bench rl`: a few steps of the RL recipe, played and trained for real, and where each step's
//! time went.
//!
//! It is `agentrt train` with the recipe of `bench/learning_rl.toml` (4 questions x 8 rollouts, 3 turns,
//! GRPO with two mini-batches), with what keeps the steps comparable from run to run fixed: no dynamic
//! sampling (every step plays the same number of episodes) and no held-out evaluation. The steps' own
//! metrics (`metrics.jsonl`) are then read back and printed as one table: the sampler's forward and its
//! tokens, the sandbox, the judge, and the learner's reference pass, forward, backward and optimizer. The
//! first step pays for loading and warming up, so episodes per hour count the steps after it. `--report`
//! prints the same table for a run already played (by `agentrt train`, by this command, or by an older
//! binary: a before/after pair reads both sides one way).

use crate::sandbox_options::ToolOptions;
use agentrt_trainer::{train, RunConfig, StepMetrics, TrainConfig, TrainRequest};
use std::path::PathBuf;
use std::sync::Arc;

/// The recipe the steps play unless `--config` names another.
const RL_RECIPE: &str = include_str!("../../../bench/learning_rl.toml");

/// Arguments of `agentrt bench rl`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt bench rl --init-adapter models/smollm2-135m-wiki-read     # the shipped agent, as it was trained to play\n  \
    agentrt bench rl --model qwen2.5-coder-0.5b --set algorithm.f1_weight=0.5\n  \
    agentrt bench rl --steps 5 --set rollout.sampler_activations=f32   # the sampler in f32, as the learner\n  \
    agentrt bench rl --report runs/RUN        # the table of a run already played (config.toml, metrics.jsonl)\n\n\
    Episodes per hour count the steps after the first (which loads and warms up). The run (config.toml,\n\
    metrics.jsonl, transcripts) is kept with --output-dir; otherwise it is written to a temporary folder.")]
pub struct Args {
    /// Steps to play and train.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(2..))]
    pub steps: u64,
    /// The model (`smollm2-135m`, `qwen2.5-coder-0.5b` or a `.gguf`); default: the recipe's.
    #[arg(long)]
    pub model: Option<String>,
    /// An adapter to start from (an `agentrt sft` or `train` checkpoint, or `shipped`); its agent.json's
    /// prompt, turns and reply length are played unless the config or `--set` say otherwise.
    #[arg(long, value_name = "DIR")]
    pub init_adapter: Option<String>,
    /// A config file in place of the RL recipe (`bench/learning_rl.toml`, embedded).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Any config key, as in `agentrt train` (`--set rollout.num_rollouts=4`).
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    pub set: Vec<String>,
    /// Where the run is written (kept); default: a temporary folder, removed after.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Print the steps as one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Play nothing: the table of the run in this directory (its config.toml and metrics.jsonl, at least
    /// two steps), as `agentrt train` or an older binary wrote it.
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["model", "init_adapter", "config", "set", "output_dir"])]
    pub report: Option<PathBuf>,
    #[command(flatten)]
    pub tools: ToolOptions,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(run_dir) = &args.report {
        let config = <TrainConfig as RunConfig>::read(&run_dir.join(agentrt_trainer::run_dir::CONFIG))?;
        let steps = StepMetrics::read(&run_dir.join(agentrt_trainer::run_dir::METRICS))?;
        anyhow::ensure!(steps.len() >= 2, "{}: {} steps' metrics; the table counts the steps after the first", run_dir.display(), steps.len());
        // The run's metrics do not say what machine played it; the table must not claim this one did.
        let machine = "machine not recorded in the run".to_string();
        return print_report(&Report::of(machine, &config, &steps), args.json);
    }
    let scratch = tempfile::tempdir()?;
    let config_file = match &args.config {
        Some(path) => path.clone(),
        None => {
            let path = scratch.path().join("learning_rl.toml");
            std::fs::write(&path, RL_RECIPE)?;
            path
        }
    };
    let output_dir = args.output_dir.clone().unwrap_or_else(|| scratch.path().join("runs"));
    let mut overrides = args.set.clone();
    overrides.extend(args.model.as_ref().map(|m| format!("model.name={m}")));
    overrides.extend(args.init_adapter.as_ref().map(|a| format!("model.init_adapter={a}")));
    // What makes the steps comparable: the same episodes each step, nothing but the steps themselves.
    overrides.extend([
        format!("run.max_steps={}", args.steps),
        format!("run.save_steps={}", args.steps),
        "run.eval_steps=0".to_string(),
        "algorithm.dynamic_sampling=false".to_string(),
        format!("run.output_dir={}", output_dir.display()),
        "run.run_name=bench-rl".to_string(),
    ]);
    let config = TrainConfig::from_layers(Some(&config_file), &overrides)?;
    let run_dir = config.run_dir();
    anyhow::ensure!(
        !run_dir.join(agentrt_trainer::run_dir::METRICS).exists(),
        "{} already holds a run: give another --output-dir (the benchmark does not resume)",
        run_dir.display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let summary = runtime.block_on(async {
        let sandbox = Arc::new(args.tools.build_for(&config.env, config.rollout.episode.limits()).await?);
        anyhow::Ok(train(TrainRequest { config: config.clone(), run_dir, resume: false, progress: false }, sandbox).await?)
    })?;
    let steps = StepMetrics::read(&summary.run_dir.join(agentrt_trainer::run_dir::METRICS))?;
    anyhow::ensure!(steps.len() == args.steps as usize, "the run wrote {} steps' metrics of {}", steps.len(), args.steps);
    print_report(&Report::of(agentrt_kernels::describe(), &config, &steps), args.json)?;
    if args.output_dir.is_some() {
        eprintln!("run: {}", summary.run_dir.display());
    }
    Ok(())
}

fn print_report(report: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

/// The steps, and what they add up to.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub machine: String,
    pub model: String,
    pub init_adapter: String,
    pub sampler_activations: String,
    pub steps: Vec<StepMetrics>,
    /// Episodes per hour over the steps after the first.
    pub episodes_per_hour: f64,
    /// Tokens the sampler read and wrote per second of its forward passes, over the steps after the first
    /// (none when the metrics do not time the forward passes: a binary from before they were timed).
    pub sampler_tokens_per_s: Option<f64>,
    /// Tokens per sampler forward step, on average: how many sequences decode together (none when the
    /// metrics do not count the steps).
    pub tokens_per_sampler_step: Option<f64>,
    /// Tokens the sampler wrote per second of the generate phase (sandbox, search and judge included) and
    /// of its forward passes, over the steps after the first: what compares with `agentrt bench decode`.
    pub sampled_tokens_per_s: f64,
    pub sampled_tokens_per_forward_s: Option<f64>,
}

impl Report {
    pub fn of(machine: String, config: &TrainConfig, steps: &[StepMetrics]) -> Report {
        let later = &steps[1.min(steps.len())..];
        let episodes: usize = later.iter().map(|s| s.episodes).sum();
        let seconds: f64 = later.iter().map(|s| s.seconds.step).sum();
        let sampler_tokens: usize = later.iter().map(|s| s.tokens_sampled.unwrap_or(0) + s.tokens_prefilled.unwrap_or(0)).sum();
        let forward: f64 = later.iter().map(|s| s.seconds.generate_forward).sum();
        let sampler_steps: usize = later.iter().map(|s| s.sampler_steps.unwrap_or(0)).sum();
        let sampled: usize = later.iter().map(|s| s.tokens_sampled.unwrap_or(0)).sum();
        let generate: f64 = later.iter().map(|s| s.seconds.generate).sum();
        let per_forward_s = |tokens: usize| (forward > 0.0).then(|| tokens as f64 / forward);
        Report {
            machine,
            model: config.model.name.clone(),
            init_adapter: config.model.init_adapter.clone(),
            sampler_activations: format!("{:?}", config.rollout.sampler_activations),
            steps: steps.to_vec(),
            episodes_per_hour: episodes as f64 * 3600.0 / seconds.max(f64::MIN_POSITIVE),
            sampler_tokens_per_s: per_forward_s(sampler_tokens),
            tokens_per_sampler_step: (sampler_steps > 0).then(|| sampler_tokens as f64 / sampler_steps as f64),
            sampled_tokens_per_s: sampled as f64 / generate.max(f64::MIN_POSITIVE),
            sampled_tokens_per_forward_s: per_forward_s(sampled),
        }
    }

    /// The markdown table, one row a step, and the totals.
    pub fn table(&self) -> String {
        let mut s = format!(
            "agentrt bench rl ({}; {} from {}; sampler activations {})\n\n",
            self.machine,
            self.model,
            if self.init_adapter.is_empty() { "fresh adapters" } else { &self.init_adapter },
            self.sampler_activations
        );
        s += "| step | episodes | generate s | sampler forward s | tokens prefilled / sampled | sandbox s | judge s | update s | reference / forward / backward / optimizer s | learner rows / tokens | step s |\n";
        s += "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
        for m in &self.steps {
            let t = &m.seconds;
            s += &format!(
                "| {} | {} | {:.1} | {:.1} | {} / {} | {:.2} | {:.2} | {:.1} | {:.1} / {:.1} / {:.1} / {:.2} | {} / {} | {:.1} |\n",
                m.step,
                m.episodes,
                t.generate,
                t.generate_forward,
                m.tokens_prefilled.unwrap_or(0),
                m.tokens_sampled.unwrap_or(0),
                t.tools,
                t.judge,
                t.update,
                t.update_reference,
                t.update_forward,
                t.update_backward,
                t.update_optimizer,
                m.update_rows,
                m.update_tokens,
                t.step
            );
        }
        s += &format!(
            "\nepisodes per hour (steps after the first): {:.0}\nsampler: {} tokens/s of its forward passes, {} tokens a forward step\n\
             sampled: {:.1} tokens/s of the generate phase, {} of the forward passes\n",
            self.episodes_per_hour,
            rate(self.sampler_tokens_per_s),
            rate(self.tokens_per_sampler_step),
            self.sampled_tokens_per_s,
            rate(self.sampled_tokens_per_forward_s)
        );
        s
    }
}

/// A rate or mean to one decimal, or "-" where the metrics cannot give it.
fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_string(), |r| format!("{r:.1}"))
}
