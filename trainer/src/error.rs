use std::path::PathBuf;

/// Why training (or reading a run) failed. Each names what and where.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("config: {0}")]
    Config(String),
    /// Reading or writing a file failed (the io error is the source).
    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file was read but is not what it should be (a corrupt state, a bad line).
    #[error("{path}: {reason}")]
    Malformed { path: PathBuf, reason: String },
    /// Saving or loading the optimizer's state failed.
    #[error("optimizer state {path}")]
    OptimizerState {
        path: PathBuf,
        #[source]
        source: candle_core::Error,
    },
    #[error(transparent)]
    Rollout(#[from] agentrt_rollout::RolloutError),
    #[error(transparent)]
    Policy(#[from] agentrt_policy::PolicyError),
    #[error(transparent)]
    Tensor(#[from] candle_core::Error),
    #[error("{0}")]
    Run(String),
}

/// Maps an io error to one naming the path.
pub fn io_err(path: &std::path::Path) -> impl Fn(std::io::Error) -> TrainError + '_ {
    move |e| TrainError::Io { path: path.to_path_buf(), source: e }
}
