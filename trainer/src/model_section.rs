//! `[model]`, the section `agentrt train` and `agentrt sft` share: the base model and the LoRA adapters a
//! run trains on it, and where they start from (`init_adapter`, which [`crate::warm_start`] loads).

use agentrt_policy::Target;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `[model]`: the base model and the LoRA adapters trained on it (shared by `train` and `sft`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// `smollm2-135m`, `qwen2.5-coder-0.5b`, a .gguf file or a safetensors directory.
    pub name: String,
    /// `cpu` or `cuda:N`: where the model runs and trains.
    pub device: String,
    /// Rank of each fresh LoRA adapter (a warm start's own rank wins).
    pub lora_rank: usize,
    /// LoRA alpha: the adapters' update is scaled by alpha / rank (a warm start's own alpha wins).
    pub lora_alpha: f64,
    /// The projections of each layer that get adapters.
    pub lora_targets: Vec<Target>,
    /// Two adapters per layer (retain, forget) for gradient routing; required by a routing detector.
    pub dual_lora: bool,
    /// Recompute each block in the backward pass instead of keeping its activations (less memory, slower).
    pub recompute_layers: bool,
    /// What the learner's products with the frozen weights are computed in: `f32` (the reference) or
    /// `int8` (faster on CPUs, the gradient within a measured bound of f32's; [`agentrt_policy::fused::frozen_int8`]).
    /// Configs saved before it ran f32.
    #[serde(default)]
    pub learner_products: agentrt_policy::fused::LearnerProducts,
    /// Start from this adapter (a PEFT adapter directory or a run's `checkpoint-N`) instead of fresh ones;
    /// empty: fresh adapters. In RL it is also the KL reference (base + this adapter, frozen).
    #[serde(default)]
    pub init_adapter: String,
}

/// A model's name in a run's name: a named model as it is, a file or directory by its stem.
pub(crate) fn model_stem(model: &str) -> &str {
    Path::new(model).file_stem().and_then(|s| s.to_str()).unwrap_or("model")
}
