//! The decoder's hyper-parameters, read from GGUF metadata or a Hugging Face `config.json`.

use serde::{Deserialize, Serialize};

/// Which decoder family: they differ only in q/k/v biases (qwen2) and q/k RMS norms (qwen3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Llama (SmolLM2): no q/k/v biases, no q/k norms.
    Llama,
    /// Qwen2 (Qwen2.5-Coder): biases on q, k and v.
    Qwen2,
    /// Qwen3: per-head RMS norms on q and k.
    Qwen3,
}

impl Arch {
    /// Parses a GGUF `general.architecture` or a HF `model_type`.
    pub fn parse(name: &str) -> Option<Arch> {
        match name {
            "llama" | "LlamaForCausalLM" => Some(Arch::Llama),
            "qwen2" | "Qwen2ForCausalLM" => Some(Arch::Qwen2),
            "qwen3" | "Qwen3ForCausalLM" => Some(Arch::Qwen3),
            _ => None,
        }
    }

    /// The name HF uses as `model_type`.
    pub fn hf_name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }

    /// Qwen2 carries biases on q, k and v.
    pub fn qkv_bias(self) -> bool {
        self == Arch::Qwen2
    }

    /// Qwen3 RMS-normalises q and k per head before RoPE.
    pub fn qk_norm(self) -> bool {
        self == Arch::Qwen3
    }
}

/// The shapes and constants of one decoder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// The decoder family, which decides biases and q/k norms.
    pub arch: Arch,
    /// Rows of the embedding (may exceed the tokenizer's vocabulary).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP's gate and up projections.
    pub intermediate_size: usize,
    /// Number of decoder blocks (HF `num_hidden_layers`).
    pub num_layers: usize,
    /// Number of query heads (HF `num_attention_heads`).
    pub num_heads: usize,
    /// Number of key/value heads, fewer than query heads under grouped-query attention.
    pub num_kv_heads: usize,
    /// Width of one attention head.
    pub head_dim: usize,
    /// Epsilon added to the mean square in every RMSNorm.
    pub rms_norm_eps: f64,
    /// RoPE base frequency.
    pub rope_theta: f64,
    /// Longest sequence (prompt plus completion) the RoPE tables cover.
    pub max_position_embeddings: usize,
    /// Whether the output projection reuses the embedding matrix.
    pub tie_word_embeddings: bool,
}

/// The most positions a model file may ask for: the decoder builds its RoPE tables for all of them when it
/// loads (2^20: more than any supported model has; Qwen2.5-1M has 1,010,000).
pub const MAX_POSITIONS: usize = 1 << 20;

/// The most entries a RoPE table (`max_position_embeddings × head_dim / 2`, two of them, f32) may hold:
/// 256 MiB each. Real models are far below (Llama 3.1: 131,072 positions × 64 = 2^23); a header whose
/// width and context multiply past it is lying, and would have the decoder allocate gigabytes before any
/// weight is checked (found by the GGUF fuzz target).
pub const MAX_ROPE_ENTRIES: usize = 1 << 26;

impl ModelConfig {
    /// Checks what a model file says against what the decoder needs, so that a file with a lying number
    /// is refused when it is read rather than failing (or allocating without bound) later: at least one
    /// of each dimension, an even head width, query heads a multiple of key/value heads, at most
    /// [`MAX_POSITIONS`] positions, and a finite, positive RoPE base and non-negative epsilon. The error
    /// names the field and its value.
    pub fn check(&self) -> std::result::Result<(), String> {
        let at_least_one = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_layers", self.num_layers),
            ("num_heads", self.num_heads),
            ("num_kv_heads", self.num_kv_heads),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        if let Some((name, _)) = at_least_one.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} is 0"));
        }
        if self.head_dim < 2 || !self.head_dim.is_multiple_of(2) {
            return Err(format!("head_dim is {}: expected an even width of at least 2", self.head_dim));
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(format!("num_heads {} is not a multiple of num_kv_heads {}", self.num_heads, self.num_kv_heads));
        }
        if self.max_position_embeddings > MAX_POSITIONS {
            return Err(format!("max_position_embeddings is {}: at most {MAX_POSITIONS} are supported", self.max_position_embeddings));
        }
        let rope_entries = self.max_position_embeddings.saturating_mul(self.head_dim / 2);
        if rope_entries > MAX_ROPE_ENTRIES {
            return Err(format!(
                "max_position_embeddings {} × head_dim {} / 2 is {rope_entries} RoPE entries: at most {MAX_ROPE_ENTRIES} are supported",
                self.max_position_embeddings, self.head_dim
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(format!("rope_theta is {}: expected a positive number", self.rope_theta));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps >= 0.0) {
            return Err(format!("rms_norm_eps is {}: expected a non-negative number", self.rms_norm_eps));
        }
        Ok(())
    }

    /// A small random-weight configuration for tests.
    pub fn tiny(arch: Arch) -> ModelConfig {
        ModelConfig {
            arch,
            vocab_size: 64,
            hidden_size: 32,
            intermediate_size: 48,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 8,
            rms_norm_eps: 1e-5,
            rope_theta: 10000.0,
            max_position_embeddings: 256,
            tie_word_embeddings: true,
        }
    }

    /// The `config.json` a Hugging Face model directory carries (used by merge-and-export).
    pub fn to_hf_json(&self) -> serde_json::Value {
        let archs = match self.arch {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
        };
        serde_json::json!({
            "architectures": [archs],
            "model_type": self.arch.hf_name(),
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": "silu",
            "attention_bias": self.arch.qkv_bias(),
            "torch_dtype": "float32",
        })
    }

    /// Reads a HF `config.json`.
    pub fn from_hf_json(v: &serde_json::Value) -> std::result::Result<ModelConfig, String> {
        let model_type = v["model_type"].as_str().unwrap_or_default().to_string();
        let arch = Arch::parse(&model_type).ok_or(model_type)?;
        let get = |k: &str| v[k].as_u64().map(|x| x as usize);
        let hidden = get("hidden_size").unwrap_or(0);
        let heads = get("num_attention_heads").unwrap_or(1);
        Ok(ModelConfig {
            arch,
            vocab_size: get("vocab_size").unwrap_or(0),
            hidden_size: hidden,
            intermediate_size: get("intermediate_size").unwrap_or(0),
            num_layers: get("num_hidden_layers").unwrap_or(0),
            num_heads: heads,
            num_kv_heads: get("num_key_value_heads").unwrap_or(heads),
            head_dim: get("head_dim").unwrap_or(hidden / heads.max(1)),
            rms_norm_eps: v["rms_norm_eps"].as_f64().unwrap_or(1e-6),
            rope_theta: v["rope_theta"].as_f64().unwrap_or(10000.0),
            max_position_embeddings: get("max_position_embeddings").unwrap_or(4096),
            tie_word_embeddings: v["tie_word_embeddings"].as_bool().unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header whose width and context would size RoPE tables of gigabytes is refused before anything is
    /// allocated, naming both keys (the GGUF fuzz target's finding: `embedding_length` 150,994,976 over 2
    /// heads, 128 positions: 4.8 billion entries).
    #[test]
    fn rope_tables_past_the_cap_are_refused_naming_the_keys() {
        let lying = ModelConfig {
            hidden_size: 150_994_976,
            num_heads: 2,
            num_kv_heads: 1,
            head_dim: 75_497_488,
            max_position_embeddings: 128,
            ..ModelConfig::tiny(Arch::Qwen2)
        };
        let e = lying.check().unwrap_err();
        assert!(e.contains("max_position_embeddings 128") && e.contains("head_dim 75497488") && e.contains("RoPE"), "{e}");
        let real = ModelConfig { max_position_embeddings: 131_072, head_dim: 128, ..ModelConfig::tiny(Arch::Llama) };
        assert_eq!(real.check(), Ok(()), "Llama 3.1's context and head width fit");
    }
}
