//! The frozen base weights of a decoder, in Hugging Face layout (`(out, in)` matrices), f32.

use super::config::ModelConfig;
use crate::error::{PolicyError, Result};
use crate::fused::PackedRows;
use crate::model::Target;
use candle_core::{DType, Device, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

/// The weights of one decoder block.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// RMSNorm weight before attention.
    pub attn_norm: Tensor,
    /// Query projection, `(heads·hd, hidden)`.
    pub q: Tensor,
    /// Key projection, `(kv_heads·hd, hidden)`.
    pub k: Tensor,
    /// Value projection, `(kv_heads·hd, hidden)`.
    pub v: Tensor,
    /// Attention output projection, `(hidden, heads·hd)`.
    pub o: Tensor,
    /// Query bias (Qwen2 only).
    pub q_bias: Option<Tensor>,
    /// Key bias (Qwen2 only).
    pub k_bias: Option<Tensor>,
    /// Value bias (Qwen2 only).
    pub v_bias: Option<Tensor>,
    /// Per-head RMSNorm weight on queries before RoPE (Qwen3 only).
    pub q_norm: Option<Tensor>,
    /// Per-head RMSNorm weight on keys before RoPE (Qwen3 only).
    pub k_norm: Option<Tensor>,
    /// RMSNorm weight before the MLP.
    pub ffn_norm: Tensor,
    /// SwiGLU gate projection, `(intermediate, hidden)`.
    pub gate: Tensor,
    /// MLP up projection, `(intermediate, hidden)`.
    pub up: Tensor,
    /// MLP down projection, `(hidden, intermediate)`.
    pub down: Tensor,
}

impl LayerWeights {
    /// The frozen weight of one projection.
    pub fn projection(&self, target: Target) -> &Tensor {
        match target {
            Target::Q => &self.q,
            Target::K => &self.k,
            Target::V => &self.v,
            Target::O => &self.o,
            Target::Gate => &self.gate,
            Target::Up => &self.up,
            Target::Down => &self.down,
        }
    }
}

/// All weights of a decoder.
#[derive(Debug, Clone)]
pub struct ModelWeights {
    /// Token embedding, `(vocab, hidden)`; also the output projection when tied.
    pub embed: Tensor,
    /// The decoder blocks, in order.
    pub layers: Vec<LayerWeights>,
    /// Final RMSNorm weight, before the output projection.
    pub norm: Tensor,
    /// `None` when the output projection is tied to the embedding.
    pub lm_head: Option<Tensor>,
    /// The same projections in their GGUF block format, for decoding steps (GGUF files only; `None` once
    /// the f32 weights are changed, e.g. by merging adapters).
    pub packed: Option<Arc<PackedWeights>>,
    /// Whether the weights kept as blocks have no f32 copy ([`crate::Policy::load_for_inference`]): their
    /// f32 tensors are empty `(0, in)` placeholders, sampling reads the blocks for every row count, and
    /// what needs the f32 weights (the training forward, log-prob scoring, exports) refuses to run.
    pub blocks_only: bool,
}

/// Projections kept in GGUF block format (see [`crate::fused::packed_rows`]).
#[derive(Debug, Default)]
pub struct PackedWeights {
    /// By `(layer, projection)`, in HF row order.
    pub sites: BTreeMap<(usize, Target), PackedRows>,
    /// The output projection (the embedding's blocks when tied).
    pub lm_head: Option<PackedRows>,
    /// The embedding's blocks, kept when its f32 copy is not (token rows are unpacked from them).
    pub embed: Option<PackedRows>,
}

/// `n` draws from a normal distribution (Box-Muller, to avoid pulling in rand_distr), for seeded test
/// weights: candle's `Tensor::randn` draws from an unseeded generator.
pub(crate) fn normal_values(rng: &mut impl rand::Rng, n: usize, mean: f32, std: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u1: f32 = rng.random::<f32>().max(1e-7);
            let u2: f32 = rng.random::<f32>();
            mean + std * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
        })
        .collect()
}

impl ModelWeights {
    /// Random weights for tests (normal, std 0.02 for matrices; ones plus noise for norms).
    pub fn random(cfg: &ModelConfig, seed: u64, device: &Device) -> Result<ModelWeights> {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut t = |shape: &[usize], std: f32, mean: f32| -> Result<Tensor> {
            Ok(Tensor::from_vec(normal_values(&mut rng, shape.iter().product(), mean, std), shape, device)?)
        };
        let (h, i, hd) = (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim);
        let (nq, nk) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
        let mut layers = Vec::new();
        for _ in 0..cfg.num_layers {
            layers.push(LayerWeights {
                attn_norm: t(&[h], 0.1, 1.0)?,
                q: t(&[nq, h], 0.1, 0.0)?,
                k: t(&[nk, h], 0.1, 0.0)?,
                v: t(&[nk, h], 0.1, 0.0)?,
                o: t(&[h, nq], 0.1, 0.0)?,
                q_bias: if cfg.arch.qkv_bias() { Some(t(&[nq], 0.1, 0.0)?) } else { None },
                k_bias: if cfg.arch.qkv_bias() { Some(t(&[nk], 0.1, 0.0)?) } else { None },
                v_bias: if cfg.arch.qkv_bias() { Some(t(&[nk], 0.1, 0.0)?) } else { None },
                q_norm: if cfg.arch.qk_norm() { Some(t(&[hd], 0.1, 1.0)?) } else { None },
                k_norm: if cfg.arch.qk_norm() { Some(t(&[hd], 0.1, 1.0)?) } else { None },
                ffn_norm: t(&[h], 0.1, 1.0)?,
                gate: t(&[i, h], 0.1, 0.0)?,
                up: t(&[i, h], 0.1, 0.0)?,
                down: t(&[h, i], 0.1, 0.0)?,
            });
        }
        Ok(ModelWeights {
            embed: t(&[cfg.vocab_size, h], 0.5, 0.0)?,
            layers,
            norm: t(&[h], 0.1, 1.0)?,
            lm_head: if cfg.tie_word_embeddings { None } else { Some(t(&[cfg.vocab_size, h], 0.1, 0.0)?) },
            packed: None,
            blocks_only: false,
        })
    }

    /// An error naming `what` when the f32 weights were not made ([`ModelWeights::blocks_only`]).
    pub fn require_f32(&self, what: &str) -> candle_core::Result<()> {
        if self.blocks_only {
            candle_core::bail!("{what} needs the model's f32 weights, and this model was loaded for inference only (its GGUF blocks, no f32 copies): load it with Policy::load");
        }
        Ok(())
    }

    /// Rows of the embedding (the model's vocabulary, padding included).
    pub fn vocab_rows(&self) -> usize {
        match self.packed.as_ref().and_then(|p| p.embed.as_ref()) {
            Some(b) if self.blocks_only => b.rows,
            _ => self.embed.dims().first().copied().unwrap_or(0),
        }
    }

    /// The embeddings of `tokens`, `(tokens, hidden)`: from the f32 table, or unpacked from its blocks.
    pub fn embed_rows(&self, tokens: &[u32], device: &Device) -> candle_core::Result<Tensor> {
        match self.packed.as_ref().and_then(|p| p.embed.as_ref()) {
            Some(b) if self.blocks_only => Tensor::from_vec(b.select_rows(tokens)?, (tokens.len(), b.cols), device),
            _ => self.embed.index_select(&Tensor::from_slice(tokens, tokens.len(), device)?, 0),
        }
    }

    /// The output projection (the embedding when tied).
    pub fn lm_head(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    /// The weights under Hugging Face names (`model.layers.0.self_attn.q_proj.weight`, ...).
    pub fn to_hf_tensors(&self) -> HashMap<String, Tensor> {
        let mut m = HashMap::new();
        m.insert("model.embed_tokens.weight".to_string(), self.embed.clone());
        m.insert("model.norm.weight".to_string(), self.norm.clone());
        if let Some(h) = &self.lm_head {
            m.insert("lm_head.weight".to_string(), h.clone());
        }
        for (i, l) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            let mut put = |k: &str, t: &Tensor| {
                m.insert(format!("{p}.{k}"), t.clone());
            };
            put("input_layernorm.weight", &l.attn_norm);
            put("post_attention_layernorm.weight", &l.ffn_norm);
            put("self_attn.q_proj.weight", &l.q);
            put("self_attn.k_proj.weight", &l.k);
            put("self_attn.v_proj.weight", &l.v);
            put("self_attn.o_proj.weight", &l.o);
            put("mlp.gate_proj.weight", &l.gate);
            put("mlp.up_proj.weight", &l.up);
            put("mlp.down_proj.weight", &l.down);
            for (k, t) in [
                ("self_attn.q_proj.bias", &l.q_bias),
                ("self_attn.k_proj.bias", &l.k_bias),
                ("self_attn.v_proj.bias", &l.v_bias),
                ("self_attn.q_norm.weight", &l.q_norm),
                ("self_attn.k_norm.weight", &l.k_norm),
            ] {
                if let Some(t) = t {
                    put(k, t);
                }
            }
        }
        m
    }

    /// Reads weights from Hugging Face tensors (safetensors files of a model directory).
    pub fn from_hf_tensors(cfg: &ModelConfig, mut m: HashMap<String, Tensor>, path: &Path) -> Result<ModelWeights> {
        let mut take = |k: &str| -> Result<Tensor> {
            let t = m.remove(k).ok_or_else(|| PolicyError::Missing { path: path.to_path_buf(), what: format!("tensor `{k}`") })?;
            Ok(t.to_dtype(DType::F32)?)
        };
        let embed = take("model.embed_tokens.weight")?;
        let norm = take("model.norm.weight")?;
        let mut layers = Vec::new();
        for i in 0..cfg.num_layers {
            let p = format!("model.layers.{i}");
            let mut g = |k: &str| take(&format!("{p}.{k}"));
            let attn_norm = g("input_layernorm.weight")?;
            let ffn_norm = g("post_attention_layernorm.weight")?;
            let (q, k, v, o) = (g("self_attn.q_proj.weight")?, g("self_attn.k_proj.weight")?, g("self_attn.v_proj.weight")?, g("self_attn.o_proj.weight")?);
            let (gate, up, down) = (g("mlp.gate_proj.weight")?, g("mlp.up_proj.weight")?, g("mlp.down_proj.weight")?);
            let (q_bias, k_bias, v_bias) = if cfg.arch.qkv_bias() {
                (Some(g("self_attn.q_proj.bias")?), Some(g("self_attn.k_proj.bias")?), Some(g("self_attn.v_proj.bias")?))
            } else {
                (None, None, None)
            };
            let (q_norm, k_norm) = if cfg.arch.qk_norm() { (Some(g("self_attn.q_norm.weight")?), Some(g("self_attn.k_norm.weight")?)) } else { (None, None) };
            layers.push(LayerWeights { attn_norm, q, k, v, o, q_bias, k_bias, v_bias, q_norm, k_norm, ffn_norm, gate, up, down });
        }
        let lm_head = if cfg.tie_word_embeddings { None } else { take("lm_head.weight").ok() };
        Ok(ModelWeights { embed, layers, norm, lm_head, packed: None, blocks_only: false })
    }
}
