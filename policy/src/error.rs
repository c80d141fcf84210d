//! The policy's error type: every failure names what was found and what was expected.

use std::path::PathBuf;

/// Why a policy operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("unsupported architecture `{found}` in {path}; supported: {}", crate::model::SUPPORTED_ARCHITECTURES.join(", "))]
    UnsupportedArchitecture { path: PathBuf, found: String },
    #[error("{path} is truncated or corrupt: {what}")]
    Truncated { path: PathBuf, what: String },
    #[error("{path}: missing {what}")]
    Missing { path: PathBuf, what: String },
    #[error("{path}: {what}")]
    BadModel { path: PathBuf, what: String },
    #[error("the tokenizer does not fit the model: tokenizer has {tokenizer_vocab} tokens, the model's embedding has {model_vocab} rows")]
    VocabMismatch { tokenizer_vocab: usize, model_vocab: usize },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    ChatTemplate(String),
    #[error("adapter {path}: {what}")]
    Adapter { path: PathBuf, what: String },
    #[error("model asset: {0}")]
    Asset(#[from] agentrt_assets::AssetError),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("tensor op: {0}")]
    Candle(#[from] candle_core::Error),
}

/// Result with [`PolicyError`].
pub type Result<T> = std::result::Result<T, PolicyError>;

pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> PolicyError + '_ {
    move |source| PolicyError::Io { path: path.to_path_buf(), source }
}
