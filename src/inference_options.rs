//! The model that `generate` and `serve` load for inference: which one, where it runs, and how decoding
//! multiplies its quantised blocks. One set of flags and one loader, so the two commands load alike.

use agentrt_environments::AgentSettings;
use agentrt_policy::{DecodeActivations, ModelSource, Policy};
use anyhow::Context;
use std::path::Path;

#[derive(clap::Args)]
pub struct InferenceOptions {
    /// `smollm2-135m` (SmolLM2-135M-Instruct, GGUF), `qwen2.5-coder-0.5b`, a `.gguf` file, or a safetensors
    /// directory (config.json, tokenizer.json, *.safetensors). Named models are fetched and checked once.
    /// Default: the (first) adapter's own base model (its `agent.json`), else `smollm2-135m`.
    #[arg(long)]
    pub model: Option<String>,
    /// `cpu` or `cuda:N` (CUDA needs a build with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// What decoding multiplies the model's GGUF blocks with: `int8` (activations rounded to 8 bits per
    /// 32 values, integer dot products, as llama.cpp decodes) or `f32` (the training forward's products:
    /// what `agentrt train` and `agentrt eval` sample with, log-probs the trainer's to float rounding).
    #[arg(long, default_value = "int8")]
    pub decode_activations: DecodeActivations,
}

/// A model loaded for inference.
pub struct LoadedModel {
    /// The model.
    pub policy: Policy,
    /// Its name: `--model`, or the one the adapter's settings named.
    pub name: String,
    /// How the adapter it was chosen for was trained to play (its `agent.json`), when it has one.
    pub trained: Option<AgentSettings>,
}

impl InferenceOptions {
    /// Loads `--model`, else the base model that `adapter`'s `agent.json` names, else the default, on
    /// `--device`, decoding as `--decode-activations` says. The adapter itself is not loaded.
    pub fn load(&self, adapter: Option<&Path>) -> anyhow::Result<LoadedModel> {
        let device = agentrt_policy::parse_device(&self.device)?;
        let trained = match adapter {
            Some(dir) => AgentSettings::read(dir)?,
            None => None,
        };
        let name = AgentSettings::base_model(self.model.as_deref(), trained.as_ref());
        let mut policy = Policy::load_for_inference(&ModelSource::parse(&name), &device).with_context(|| format!("loading model `{name}`"))?;
        if policy.decoder.set_decode_activations(self.decode_activations) != self.decode_activations {
            // The default asks for int8; a model without GGUF blocks has nothing to multiply that way.
            tracing::info!("decoding `{name}` with f32 activations: it has no GGUF blocks to multiply with 8-bit activations");
        }
        Ok(LoadedModel { policy, name, trained })
    }
}
