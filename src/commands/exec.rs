//! `agentrt exec`: run a program through exactly the sandbox the trainer uses.

/// Arguments of `agentrt exec`.
#[derive(clap::Args)]
pub struct Args {
    /// The program: a `.py` file (Python subset) or a `.wasm` guest component.
    pub program: std::path::PathBuf,
}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}
