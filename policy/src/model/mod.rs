//! Decoder models: configuration, weights (GGUF or safetensors), the forward passes.

pub mod checkpoint;
pub mod config;
pub mod decoder;
pub mod gguf;
pub mod kv_cache;
pub mod projection;
pub mod safetensors;
pub mod weights;

pub use config::{Arch, ModelConfig};
pub use decoder::Decoder;
pub use kv_cache::{SequenceKv, SharedKv};
pub use projection::Target;
pub use weights::{LayerWeights, ModelWeights};

/// The architectures this crate can run, by their GGUF / HF names.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["llama", "qwen2", "qwen3"];
