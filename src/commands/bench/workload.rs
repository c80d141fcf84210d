//! What the training benchmarks (`bench rollout`, `bench train-step`) start from: a training config, its
//! policy loaded as training loads it (fresh adapters, the config's routing), the GGUF file the peer loads
//! the same weights from, and the questions in the order training takes them.

use super::peer::Peer;
use crate::sandbox_options::ToolOptions;
use agentrt_policy::{ModelSource, Policy};
use agentrt_rollout::Question;
use agentrt_trainer::run_dir::DataOrder;
use agentrt_trainer::{RunConfig, TrainConfig};
use std::path::{Path, PathBuf};

/// The options both training benchmarks take.
#[derive(clap::Args)]
pub struct WorkloadArgs {
    /// A training config (TOML, as `agentrt train --config`): its [model], [rollout], [env] and
    /// [algorithm] define the workload. Default: the embedded one.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override a key of that config: `--set rollout.num_rollouts=8`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// The peer's Python, with torch, transformers and PEFT (`bash bench/policy/setup_venv.sh` makes it).
    #[arg(long, default_value = super::peer::DEFAULT_PYTHON)]
    pub python: PathBuf,
    /// Threads the peer's torch may use (default: this machine's cores, as ours uses).
    #[arg(long)]
    pub peer_threads: Option<usize>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub tools: ToolOptions,
}

impl WorkloadArgs {
    /// The peer process running `script` on `model` (the workload's model path).
    pub(super) fn start_peer(&self, script: &Path, model: &Path) -> anyhow::Result<Peer> {
        let threads = self.peer_threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
        Peer::start(&self.python, script, model, threads)
    }
}

/// A loaded workload.
pub struct Workload {
    pub config: TrainConfig,
    /// The model with fresh adapters, as a training run starts.
    pub policy: Policy,
    /// The GGUF file both sides load.
    pub model_path: PathBuf,
    questions: Vec<Question>,
    order: DataOrder,
}

impl Workload {
    /// Checks the peer (`script` run by `args.python`), reads the config, prints the CPU and kernel path,
    /// and loads the model and the questions.
    pub fn load(args: &WorkloadArgs, script: &Path) -> anyhow::Result<Workload> {
        super::peer::check(&args.python, script)?;
        let config = TrainConfig::from_layers(args.config.as_deref(), &args.set)?;
        eprintln!("{}", agentrt_kernels::describe());
        let source = ModelSource::parse(&config.model.name);
        let (model_path, _) = source.resolve()?;
        anyhow::ensure!(model_path.extension().is_some_and(|e| e == "gguf"), "{}: the peer loads GGUF files only", model_path.display());
        let mut policy = Policy::load(&source, &agentrt_policy::parse_device(&config.model.device)?)?;
        agentrt_trainer::warm_start::start_adapters(&mut policy, &config.model, config.run.seed)?;
        policy.set_routing(config.routing.unflagged);
        let questions = config.env.read_questions(&config.env.package().map_err(anyhow::Error::msg)?.splits.train)?;
        let order = DataOrder::new(questions.len(), config.run.seed);
        Ok(Workload { config, policy, model_path, questions, order })
    }

    /// Step `step`'s episodes (from 1), as training plays them: `rollout.batch_size` questions in
    /// training's order, each `rollout.num_rollouts` times.
    pub fn step_batch(&mut self, step: usize) -> Vec<Question> {
        let r = &self.config.rollout;
        let first = (step - 1) * r.batch_size;
        (first..first + r.batch_size).flat_map(|i| std::iter::repeat_n(self.questions[self.order.at(i)].clone(), r.num_rollouts)).collect()
    }

    /// The first question, for a warm-up.
    pub fn first_question(&self) -> &Question {
        &self.questions[0]
    }
}
