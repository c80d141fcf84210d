use std::path::PathBuf;

/// Why training (or reading a run) failed. Each names what and where.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("config: {0}")]
    Config(String),
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error("{0}")]
    Rollout(#[from] agentrt_rollout::RolloutError),
    #[error("policy: {0}")]
    Policy(#[from] agentrt_policy::PolicyError),
    #[error("tensor: {0}")]
    Tensor(#[from] candle_core::Error),
    #[error("{0}")]
    Run(String),
}

/// Maps an io error to one naming the path.
pub fn io_err(path: &std::path::Path) -> impl Fn(std::io::Error) -> TrainError + '_ {
    move |e| TrainError::Io { path: path.to_path_buf(), reason: e.to_string() }
}
