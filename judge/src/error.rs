//! Failures to judge. A negative or unparsable verdict is not an error; these are.

use std::path::PathBuf;
use std::time::Duration;

/// Why a judge could not produce a verdict; every endpoint error names the endpoint URL.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    /// The spec string given to `--judge` is not one of the accepted forms.
    #[error(
        "invalid judge spec {spec:?}: {reason}\n\
         accepted forms:\n  \
         rule                      offline SQuAD exact match / token F1 (F1 threshold {default_threshold})\n  \
         rule:THRESHOLD            same, with an F1 threshold in (0, 1], e.g. rule:0.5\n  \
         openai:MODEL@BASE_URL     an OpenAI-compatible server, e.g. openai:qwen2.5:7b@http://localhost:11434/v1\n  \
         openai:MODEL              OpenAI itself (https://api.openai.com/v1); key from AGENTRT_JUDGE_API_KEY or OPENAI_API_KEY",
        default_threshold = crate::DEFAULT_F1_THRESHOLD
    )]
    InvalidSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The input cannot be judged (e.g. no gold answers).
    #[error("cannot judge this input: {0}")]
    InvalidInput(String),

    /// Every attempt ran past the per-request timeout.
    #[error(
        "judge endpoint {endpoint} did not answer within {timeout:?} ({attempts} attempt(s)); \
         is the server up and the model loaded? raise the timeout for slow local models"
    )]
    Timeout {
        /// The chat-completions URL.
        endpoint: String,
        /// The per-attempt timeout.
        timeout: Duration,
        /// How many requests were sent.
        attempts: u32,
    },

    /// The endpoint could not be reached (refused, DNS, TLS, reset) on every attempt.
    #[error("could not reach judge endpoint {endpoint} ({attempts} attempt(s)): {message}")]
    Connection {
        /// The chat-completions URL.
        endpoint: String,
        /// The transport error, with its causes.
        message: String,
        /// How many requests were sent.
        attempts: u32,
    },

    /// The endpoint answered with an HTTP error status (4xx at once, 5xx after the last retry).
    #[error("judge endpoint {endpoint} answered HTTP {status} ({attempts} attempt(s)): {body}{hint}")]
    Http {
        /// The chat-completions URL.
        endpoint: String,
        /// The HTTP status code.
        status: u16,
        /// The start of the response body (servers put the reason there).
        body: String,
        /// How many requests were sent.
        attempts: u32,
        /// A suggestion for common statuses, or empty.
        hint: String,
    },

    /// The endpoint answered 200 but not with a chat completion we can read.
    #[error("judge endpoint {endpoint} sent a reply that is not a chat completion: {message}")]
    BadResponse {
        /// The chat-completions URL.
        endpoint: String,
        /// What was wrong, with the start of the body.
        message: String,
    },

    /// The on-disk verdict cache could not be read or written.
    #[error("judge cache {}: {source}", .path.display())]
    Cache {
        /// The file or directory involved.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// The HTTP client could not be built (e.g. the TLS backend failed to initialise).
    #[error("could not set up the HTTP client for {endpoint}: {message}")]
    Client {
        /// The chat-completions URL.
        endpoint: String,
        /// What failed.
        message: String,
    },
}

impl JudgeError {
    /// True for failures that another attempt might not repeat (timeouts, connection errors, 5xx).
    pub fn is_transient(&self) -> bool {
        match self {
            JudgeError::Timeout { .. } | JudgeError::Connection { .. } => true,
            JudgeError::Http { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

/// A hint for the HTTP statuses users hit most.
pub(crate) fn http_hint(status: u16) -> String {
    match status {
        401 | 403 => " (check the API key: set AGENTRT_JUDGE_API_KEY or OPENAI_API_KEY; 4xx is not retried)".into(),
        404 => " (check the base URL, which usually ends in /v1, and the model name; 4xx is not retried)".into(),
        429 => " (rate limited or out of quota: lower the judge concurrency; 4xx is not retried)".into(),
        400..=499 => " (client errors are not retried)".into(),
        _ => String::new(),
    }
}
