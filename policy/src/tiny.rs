//! Tiny random models (byte tokenizer, ChatML, random weights; no download): the trainer's toy tasks
//! (`agentrt_trainer::toy`, the routing example) train them, and tests and examples use them.

use crate::chat_template::{ChatTemplate, CHATML};
use crate::error::Result;
use crate::model::{Arch, ModelConfig, ModelWeights};
use crate::tokenizer::PolicyTokenizer;
use crate::Policy;
use candle_core::Device;
use std::path::{Path, PathBuf};

/// The special tokens of the tiny models (ids 256, 257, 258).
pub const SPECIALS: &[&str] = &["<|im_start|>", "<|im_end|>", "<|endoftext|>"];

/// The configuration of the tiny test models: byte vocabulary plus [`SPECIALS`].
pub fn tiny_config(arch: Arch) -> ModelConfig {
    ModelConfig { vocab_size: 256 + SPECIALS.len(), ..ModelConfig::tiny(arch) }
}

/// A tiny random-weight policy with a byte-level tokenizer and a ChatML template.
pub fn tiny_policy(arch: Arch, seed: u64) -> Result<Policy> {
    tiny_policy_with(tiny_config(arch), seed)
}

/// A tiny policy of configuration `cfg` (vocabulary: bytes plus [`SPECIALS`]) with random weights.
pub fn tiny_policy_with(cfg: ModelConfig, seed: u64) -> Result<Policy> {
    let w = ModelWeights::random(&cfg, seed, &Device::Cpu)?;
    tiny_policy_from(cfg, w)
}

/// A tiny policy of configuration `cfg` with the given weights (e.g. random ones, rescaled).
pub fn tiny_policy_from(cfg: ModelConfig, w: ModelWeights) -> Result<Policy> {
    let arch = cfg.arch;
    let dev = Device::Cpu;
    let tok = PolicyTokenizer::bytes_only(SPECIALS)?;
    Policy::from_parts(cfg, w, tok, ChatTemplate::new(CHATML, None, None)?, format!("tiny-{arch:?}"), &dev)
}

/// A tiny Llama-shaped policy (seed 11, 4,096 positions: room for a system prompt and a whole episode)
/// exported as the safetensors directory `dir/tiny-model`, which `--model` and `model.name` load: for
/// tests that run the CLI or the trainer end to end.
pub fn tiny_model_dir(dir: &Path) -> Result<PathBuf> {
    let cfg = ModelConfig { max_position_embeddings: 4096, ..tiny_config(Arch::Llama) };
    let policy = tiny_policy_with(cfg, 11)?;
    let out = dir.join("tiny-model");
    policy.merge_and_export(&out)?;
    Ok(out)
}
