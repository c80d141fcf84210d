//! The policy's error type: every failure names what was found and what was expected.

use std::path::PathBuf;

/// Why a policy operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// Reading or writing a model, tokenizer or adapter file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The model's architecture is not llama, qwen2 or qwen3.
    #[error("unsupported architecture `{found}` in {path}; supported: {}", crate::model::SUPPORTED_ARCHITECTURES.join(", "))]
    UnsupportedArchitecture {
        /// The GGUF file or `config.json` that names it.
        path: PathBuf,
        /// The architecture (or `model_type`) found there.
        found: String,
    },
    /// A GGUF or safetensors file cannot be parsed or ends before its tensors do (e.g. a cut-off download).
    #[error("{path} is truncated or corrupt: {what}")]
    Truncated {
        /// The damaged file.
        path: PathBuf,
        /// What could not be read.
        what: String,
    },
    /// A model lacks a metadata key, a tensor or its weight files.
    #[error("{path}: missing {what}")]
    Missing {
        /// The file or directory searched.
        path: PathBuf,
        /// What was expected there.
        what: String,
    },
    /// A model file holds a value of the wrong type or a malformed `config.json`.
    #[error("{path}: {what}")]
    BadModel {
        /// The offending file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// The tokenizer has more tokens than the model's embedding has rows.
    #[error("the tokenizer does not fit the model: tokenizer has {tokenizer_vocab} tokens, the model's embedding has {model_vocab} rows")]
    VocabMismatch {
        /// Tokens the tokenizer knows.
        tokenizer_vocab: usize,
        /// Rows of the model's embedding.
        model_vocab: usize,
    },
    /// The tokenizer cannot be loaded, rebuilt from GGUF metadata, or fails to encode or decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template fails to parse or to render (including the template's own `raise_exception`).
    #[error("chat template: {0}")]
    ChatTemplate(String),
    /// A PEFT adapter directory cannot be read or written, or does not fit the model.
    #[error("adapter {path}: {what}")]
    Adapter {
        /// The adapter directory or file.
        path: PathBuf,
        /// What went wrong.
        what: String,
    },
    /// The adapter directory asked for is not there (a mistyped path, a run not yet saved).
    #[error("adapter directory {path} does not exist")]
    AdapterMissing {
        /// The directory asked for.
        path: PathBuf,
    },
    /// Fetching or checking a named model asset failed.
    #[error("model asset: {0}")]
    Asset(#[from] agentrt_assets::AssetError),
    /// A caller passed a bad argument (device name, mismatched masks, empty batch, no adapters to save...).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A tensor operation failed (shape mismatch, device error...).
    #[error("tensor op: {0}")]
    Candle(#[from] candle_core::Error),
}

/// Result with [`PolicyError`].
pub type Result<T> = std::result::Result<T, PolicyError>;

pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> PolicyError + '_ {
    move |source| PolicyError::Io { path: path.to_path_buf(), source }
}
