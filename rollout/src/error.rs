use std::path::PathBuf;

/// Why an episode batch could not run. A program that fails is not an error (it is an observation);
/// these are failures of the machinery or of the input.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("{path}:{line}: {reason}")]
    BadQuestion { path: PathBuf, line: usize, reason: String },
    /// Reading or writing a file failed (the io error is the source).
    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file was read but is not what it should be.
    #[error("{path}: {reason}")]
    Malformed { path: PathBuf, reason: String },
    #[error(transparent)]
    Policy(#[from] agentrt_policy::PolicyError),
    #[error(transparent)]
    Judge(#[from] agentrt_judge::JudgeError),
    #[error("policy endpoint {endpoint}: {message}")]
    Endpoint { endpoint: String, message: String },
    #[error("chat template: {0}")]
    Template(String),
    #[error("{0}")]
    Invalid(String),
}
