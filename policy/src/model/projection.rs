//! The seven projections of a decoder layer, by the names PEFT's `target_modules` and the HF checkpoints
//! give them: what a weight file's tensors are loaded as, and what a LoRA pair may attach to.

use crate::model::ModelConfig;
use serde::{Deserialize, Serialize};

/// One projection of a layer (what LoRA may attach to); the names are PEFT's `target_modules`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Target {
    /// The attention query projection.
    #[serde(rename = "q_proj")]
    Q,
    /// The attention key projection.
    #[serde(rename = "k_proj")]
    K,
    /// The attention value projection.
    #[serde(rename = "v_proj")]
    V,
    /// The attention output projection.
    #[serde(rename = "o_proj")]
    O,
    /// The MLP's SwiGLU gate projection.
    #[serde(rename = "gate_proj")]
    Gate,
    /// The MLP's up projection.
    #[serde(rename = "up_proj")]
    Up,
    /// The MLP's down projection, back to the hidden size.
    #[serde(rename = "down_proj")]
    Down,
}

impl Target {
    /// All seven projections.
    pub const ALL: [Target; 7] = [Target::Q, Target::K, Target::V, Target::O, Target::Gate, Target::Up, Target::Down];

    /// PEFT's module name (`q_proj`, ...).
    pub fn peft_name(self) -> &'static str {
        match self {
            Target::Q => "q_proj",
            Target::K => "k_proj",
            Target::V => "v_proj",
            Target::O => "o_proj",
            Target::Gate => "gate_proj",
            Target::Up => "up_proj",
            Target::Down => "down_proj",
        }
    }

    /// The HF module path under a layer (`self_attn.q_proj`, `mlp.up_proj`).
    pub fn hf_path(self) -> &'static str {
        match self {
            Target::Q => "self_attn.q_proj",
            Target::K => "self_attn.k_proj",
            Target::V => "self_attn.v_proj",
            Target::O => "self_attn.o_proj",
            Target::Gate => "mlp.gate_proj",
            Target::Up => "mlp.up_proj",
            Target::Down => "mlp.down_proj",
        }
    }

    /// Parses a PEFT module name.
    pub fn from_peft(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.peft_name() == name)
    }

    /// `(in, out)` of this projection in a model.
    pub fn dims(self, cfg: &ModelConfig) -> (usize, usize) {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        let (q, kv) = (cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim);
        match self {
            Target::Q => (h, q),
            Target::K | Target::V => (h, kv),
            Target::O => (q, h),
            Target::Gate | Target::Up => (h, i),
            Target::Down => (i, h),
        }
    }
}
