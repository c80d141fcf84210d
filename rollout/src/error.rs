use std::path::PathBuf;

/// Why an episode batch could not run. A program that fails is not an error (it is an observation);
/// these are failures of the machinery or of the input.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// A questions file could not be read or has a bad row (`agentrt_search::questions` reads them; its
    /// message names the file, the line and the field).
    #[error(transparent)]
    Questions(#[from] agentrt_search::SearchError),
    /// A row of a tasks file is unusable: malformed JSON, no entry point, a repeated id...
    #[error("{path}:{line}: {reason}")]
    BadTask {
        /// The tasks file.
        path: PathBuf,
        /// The 1-based JSONL line of the task.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A file could not be read or written, or is not what it should be (the message starts with its path).
    #[error(transparent)]
    File(#[from] agentrt_assets::FileError),
    /// The local model failed to build a prompt, tokenise or sample.
    #[error(transparent)]
    Policy(#[from] agentrt_policy::PolicyError),
    /// The judge failed to grade an answer (transport, cache, bad input).
    #[error(transparent)]
    Judge(#[from] agentrt_judge::JudgeError),
    /// An OpenAI-compatible policy server could not be reached or gave an unusable reply.
    #[error("policy endpoint {endpoint}: {message}")]
    Endpoint {
        /// The server's base URL.
        endpoint: String,
        /// What went wrong (transport error, HTTP status, malformed body).
        message: String,
    },
    /// The chat template fails to render, or renders in a way that cannot extend a conversation's tokens.
    #[error("chat template: {0}")]
    Template(String),
    /// A bad argument or setting, a policy or grader breaking its contract (wrong count, no token trace...), a failed task.
    #[error("{0}")]
    Invalid(String),
}
