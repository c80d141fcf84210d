//! The flags every command that writes a run directory shares (`agentrt train`, `agentrt sft`): the config
//! layers, resuming, the model and warm start, the seed, where the run goes, and progress. Each command adds
//! the flags of its own sections and maps them with [`RunOptions::overrides`].

use agentrt_trainer::RunConfig;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct RunOptions {
    /// A TOML file with any of the keys of `--print-config`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Override any key: `section.key=value` (repeatable).
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    pub set: Vec<String>,
    /// Print the config and exit: the embedded defaults with their comments, or, with --config, --set or
    /// other flags, the config they make (checked, as a run would save it); with --resume, the config the
    /// run would go on with.
    #[arg(long)]
    pub print_config: bool,
    /// Continue a run from where it stopped: the run directory, or nothing for the one this config names
    /// (`--output-dir`/`--run-name`, or the name made from the hyperparameters). Every step leaves what a
    /// resume needs, so a run killed at any instant loses at most the step in flight, and the resumed run
    /// ends with the same adapters, bit for bit, as one never stopped (same machine, kernel path and
    /// thread count; docs/reliability.md). It keeps its saved config; flags and --set may change only its
    /// length and how often it logs, evaluates and saves (anything else is an error).
    // `Option<Option<_>>`: clap's path parser refuses an empty value, so a bare flag has no stand-in value.
    #[arg(long, value_name = "RUN_DIR", num_args = 0..=1)]
    pub resume: Option<Option<PathBuf>>,
    /// `smollm2-135m`, `qwen2.5-coder-0.5b`, a .gguf file or a safetensors directory.
    #[arg(long)]
    pub model: Option<String>,
    /// Start from this adapter (a PEFT directory or a run's checkpoint-N, e.g. from `agentrt sft`) instead
    /// of fresh ones; for `train` it is also the KL reference (base + this adapter, frozen).
    #[arg(long, value_name = "DIR")]
    pub init_adapter: Option<String>,
    /// Seeds the adapters, the data order and sampling (and SFT's validation split).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Where run directories go.
    #[arg(long)]
    pub output_dir: Option<String>,
    /// The run directory's name (default: from the hyperparameters).
    #[arg(long)]
    pub run_name: Option<String>,
    /// No progress bar (off a terminal, no progress lines with the ETA): only the metrics line of each step.
    #[arg(long)]
    pub no_progress: bool,
}

impl RunOptions {
    /// `--set`, then the command's own flags (`(key, value)`, set ones only), then these shared ones, as
    /// `section.key=value` overrides: flags win over `--set`.
    pub fn overrides(&self, own: Vec<(&str, Option<String>)>) -> Vec<String> {
        let shared = [
            ("model.name", self.model.clone()),
            ("model.init_adapter", self.init_adapter.clone()),
            ("run.seed", self.seed.map(|v| v.to_string())),
            ("run.output_dir", self.output_dir.clone()),
            ("run.run_name", self.run_name.clone()),
        ];
        let flags = own.into_iter().chain(shared).filter_map(|(k, v)| v.map(|v| format!("{k}={v}")));
        self.set.iter().cloned().chain(flags).collect()
    }

    /// The config a run goes on with, its run directory, and whether it resumes there; `None` when
    /// `--print-config` printed the config instead (the embedded defaults, commented, when nothing layers
    /// over them). The run directory is `--resume DIR`, or the one the config names (`output_dir/run_name`).
    /// A resumed run goes on with its saved config (data files included: none need be given again), with
    /// what is given now layered over it; only its length and cadences may change.
    pub fn resolve<C: RunConfig>(&self, overrides: &[String]) -> anyhow::Result<Option<(C, PathBuf, bool)>> {
        let file = self.config.as_deref();
        if self.print_config && self.resume.is_none() {
            let text = if file.is_none() && overrides.is_empty() { C::DEFAULTS.to_string() } else { C::from_layers(file, overrides)?.to_toml() };
            print!("{text}");
            return Ok(None);
        }
        let config = C::from_layers(file, overrides)?;
        let (run_dir, resume) = match &self.resume {
            Some(Some(dir)) => (dir.clone(), true),
            Some(None) => (config.run_dir(), true),
            None => (config.run_dir(), false),
        };
        let saved = run_dir.join(agentrt_trainer::run_dir::CONFIG);
        if resume && !saved.is_file() {
            anyhow::bail!(
                "--resume: no run to resume in {} (no {} there){}",
                run_dir.display(),
                agentrt_trainer::run_dir::CONFIG,
                if matches!(self.resume, Some(None)) {
                    "; a bare --resume resumes the run these flags and config name: give the same --output-dir, --run-name and hyperparameters, or --resume RUN_DIR"
                } else {
                    ""
                }
            );
        }
        let config = if resume { C::resumed(&saved, agentrt_trainer::run_dir::has_progress(&run_dir)?, file, overrides)? } else { config };
        if self.print_config {
            print!("{}", config.to_toml());
            return Ok(None);
        }
        Ok(Some((config, run_dir, resume)))
    }
}
