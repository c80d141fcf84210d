use std::path::PathBuf;

/// Why training (or reading a run) failed. Each names what and where.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A setting is unknown, out of range or inconsistent, or names missing data (the message names the key).
    #[error("config: {0}")]
    Config(String),
    /// A file could not be read or written, or is not what it should be (the message starts with its path).
    #[error(transparent)]
    File(#[from] agentrt_assets::FileError),
    /// Saving or loading the optimizer's state failed.
    #[error("optimizer state {path}")]
    OptimizerState {
        /// The checkpoint's optimizer state file.
        path: PathBuf,
        /// candle's error.
        #[source]
        source: candle_core::Error,
    },
    /// Playing an episode or reading questions failed.
    #[error(transparent)]
    Rollout(#[from] agentrt_rollout::RolloutError),
    /// The model, its adapters or its tokenizer failed (loading, sampling, a forward pass).
    #[error(transparent)]
    Policy(#[from] agentrt_policy::PolicyError),
    /// A tensor operation of the learner failed.
    #[error(transparent)]
    Tensor(#[from] candle_core::Error),
    /// The run cannot go on as asked: an occupied run directory, no adapters to train, a non-finite
    /// gradient norm, metrics it cannot read or plot.
    #[error("{0}")]
    Run(String),
}

/// Maps an io error to one naming the path.
pub fn io_err(path: &std::path::Path) -> impl Fn(std::io::Error) -> TrainError + '_ {
    move |e| agentrt_assets::FileError::io(path)(e).into()
}
