//! `agentrt plot RUN`: a run's curves as PNG.

use std::path::PathBuf;

/// Arguments of `agentrt plot`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt plot runs/smollm2-135m_lr1e-4_g4_beta0.02_s42\n\n\
    Draws reward, accuracy, tool calls, KL, loss and seconds per step from RUN/metrics.jsonl (and the\n\
    routing evaluation, when the run has one) into RUN/curves.png; for an `agentrt sft` run, train and\n\
    validation loss, learning rate, gradient norm and tokens per step.")]
pub struct Args {
    /// The run directory.
    pub run: PathBuf,
    /// Write here instead of RUN/curves.png.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let p = agentrt_trainer::plot::plot_run(&args.run, args.out.as_deref())?;
    println!("{}", p.display());
    Ok(())
}
