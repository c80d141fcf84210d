//! GGUF loading: metadata to [`ModelConfig`], tensors dequantized to f32, HF tensor layout restored.
//!
//! llama.cpp's converter permutes the rows of llama's q and k projections so that GGML's interleaved RoPE
//! applies; we undo that permutation here, so that the decoder, the adapters (PEFT names and layouts) and the
//! reference implementation all see the Hugging Face layout and use rotate-half RoPE.

use super::config::{Arch, ModelConfig};
use super::weights::{LayerWeights, ModelWeights};
use crate::error::{io_err, PolicyError, Result};
use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// A parsed GGUF file: its metadata and an open reader for its tensors.
pub struct GgufFile {
    pub path: std::path::PathBuf,
    pub content: Content,
    file: std::fs::File,
}

impl GgufFile {
    /// Opens and parses a GGUF header, checking that every tensor's bytes are present.
    pub fn open(path: &Path) -> Result<GgufFile> {
        let mut file = std::fs::File::open(path).map_err(io_err(path))?;
        let size = file.metadata().map_err(io_err(path))?.len();
        let content = Content::read(&mut file).map_err(|e| PolicyError::Truncated {
            path: path.to_path_buf(),
            what: format!("cannot read the GGUF header ({e})"),
        })?;
        // Check every tensor's extent up front, so a truncated download fails with a clear message rather
        // than in the middle of loading.
        for (name, info) in &content.tensor_infos {
            let elems = info.shape.elem_count();
            let bytes = (elems / info.ggml_dtype.block_size() * info.ggml_dtype.type_size()) as u64;
            let end = content.tensor_data_offset + info.offset + bytes;
            if end > size {
                return Err(PolicyError::Truncated {
                    path: path.to_path_buf(),
                    what: format!("tensor `{name}` ends at byte {end}, but the file has only {size} bytes"),
                });
            }
        }
        Ok(GgufFile { path: path.to_path_buf(), content, file })
    }

    /// A metadata value, if present.
    pub fn meta(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    fn missing(&self, what: impl Into<String>) -> PolicyError {
        PolicyError::Missing { path: self.path.clone(), what: what.into() }
    }

    fn meta_u(&self, key: &str) -> Result<usize> {
        let v = self.meta(key).ok_or_else(|| self.missing(format!("metadata `{key}`")))?;
        v.to_u32().map(|x| x as usize).or_else(|_| v.to_u64().map(|x| x as usize)).map_err(|e| PolicyError::BadModel {
            path: self.path.clone(),
            what: format!("metadata `{key}`: {e}"),
        })
    }

    /// The architecture name (`general.architecture`).
    pub fn architecture(&self) -> Result<String> {
        let v = self.meta("general.architecture").ok_or_else(|| self.missing("metadata `general.architecture`"))?;
        Ok(v.to_string().map_err(|e| PolicyError::BadModel { path: self.path.clone(), what: e.to_string() })?.clone())
    }

    /// The decoder configuration from the metadata.
    pub fn config(&self) -> Result<ModelConfig> {
        let name = self.architecture()?;
        let arch = Arch::parse(&name)
            .ok_or_else(|| PolicyError::UnsupportedArchitecture { path: self.path.clone(), found: name.clone() })?;
        let p = |k: &str| format!("{name}.{k}");
        let hidden = self.meta_u(&p("embedding_length"))?;
        let heads = self.meta_u(&p("attention.head_count"))?;
        let kv_heads = self.meta_u(&p("attention.head_count_kv")).unwrap_or(heads);
        let head_dim = self.meta_u(&p("attention.key_length")).unwrap_or(hidden / heads);
        let eps = self
            .meta(&p("attention.layer_norm_rms_epsilon"))
            .and_then(|v| v.to_f32().ok())
            .unwrap_or(1e-6) as f64;
        let theta = self.meta(&p("rope.freq_base")).and_then(|v| v.to_f32().ok()).unwrap_or(10000.0) as f64;
        let embd = self
            .content
            .tensor_infos
            .get("token_embd.weight")
            .ok_or_else(|| self.missing("tensor `token_embd.weight`"))?;
        let vocab = embd.shape.dims()[0];
        Ok(ModelConfig {
            arch,
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: self.meta_u(&p("feed_forward_length"))?,
            num_layers: self.meta_u(&p("block_count"))?,
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim,
            rms_norm_eps: eps,
            rope_theta: theta,
            max_position_embeddings: self.meta_u(&p("context_length")).unwrap_or(4096),
            tie_word_embeddings: !self.content.tensor_infos.contains_key("output.weight"),
        })
    }

    /// One tensor, dequantized to f32.
    pub fn tensor(&mut self, name: &str, device: &Device) -> Result<Tensor> {
        if !self.content.tensor_infos.contains_key(name) {
            return Err(self.missing(format!("tensor `{name}`")));
        }
        let q = self.content.tensor(&mut self.file, name, device).map_err(|e| PolicyError::Truncated {
            path: self.path.clone(),
            what: format!("tensor `{name}`: {e}"),
        })?;
        Ok(q.dequantize(device)?.to_dtype(DType::F32)?)
    }

    fn opt_tensor(&mut self, name: &str, device: &Device) -> Result<Option<Tensor>> {
        if self.content.tensor_infos.contains_key(name) {
            Ok(Some(self.tensor(name, device)?))
        } else {
            Ok(None)
        }
    }

    /// All weights of the decoder, in HF layout.
    pub fn weights(&mut self, cfg: &ModelConfig, device: &Device) -> Result<ModelWeights> {
        let embed = self.tensor("token_embd.weight", device)?;
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let mut q = self.tensor(&n("attn_q.weight"), device)?;
            let mut k = self.tensor(&n("attn_k.weight"), device)?;
            if cfg.arch == Arch::Llama {
                q = unpermute(&q, cfg.num_heads)?;
                k = unpermute(&k, cfg.num_kv_heads)?;
            }
            layers.push(LayerWeights {
                attn_norm: self.tensor(&n("attn_norm.weight"), device)?,
                q,
                k,
                v: self.tensor(&n("attn_v.weight"), device)?,
                o: self.tensor(&n("attn_output.weight"), device)?,
                q_bias: self.opt_tensor(&n("attn_q.bias"), device)?,
                k_bias: self.opt_tensor(&n("attn_k.bias"), device)?,
                v_bias: self.opt_tensor(&n("attn_v.bias"), device)?,
                q_norm: self.opt_tensor(&n("attn_q_norm.weight"), device)?,
                k_norm: self.opt_tensor(&n("attn_k_norm.weight"), device)?,
                ffn_norm: self.tensor(&n("ffn_norm.weight"), device)?,
                gate: self.tensor(&n("ffn_gate.weight"), device)?,
                up: self.tensor(&n("ffn_up.weight"), device)?,
                down: self.tensor(&n("ffn_down.weight"), device)?,
            });
        }
        let norm = self.tensor("output_norm.weight", device)?;
        let lm_head = self.opt_tensor("output.weight", device)?;
        Ok(ModelWeights { embed, layers, norm, lm_head })
    }

    /// String-array metadata (tokens, merges).
    pub fn meta_strings(&self, key: &str) -> Result<Vec<String>> {
        let v = self.meta(key).ok_or_else(|| self.missing(format!("metadata `{key}`")))?;
        let arr = v.to_vec().map_err(|e| PolicyError::BadModel { path: self.path.clone(), what: format!("{key}: {e}") })?;
        arr.iter()
            .map(|x| {
                x.to_string()
                    .cloned()
                    .map_err(|e| PolicyError::BadModel { path: self.path.clone(), what: format!("{key}: {e}") })
            })
            .collect()
    }

    /// Integer-array metadata (token types).
    pub fn meta_ints(&self, key: &str) -> Option<Vec<i64>> {
        let arr = self.meta(key)?.to_vec().ok()?;
        arr.iter().map(|x| x.to_i32().map(|v| v as i64).or_else(|_| x.to_u32().map(|v| v as i64)).ok()).collect()
    }

    /// A u32 metadata value (token ids).
    pub fn meta_u32(&self, key: &str) -> Option<u32> {
        self.meta(key).and_then(|v| v.to_u32().ok())
    }

    /// A string metadata value.
    pub fn meta_str(&self, key: &str) -> Option<String> {
        self.meta(key).and_then(|v| v.to_string().ok().cloned())
    }

    /// Every metadata key, for diagnostics.
    pub fn meta_keys(&self) -> HashMap<String, String> {
        self.content.metadata.iter().map(|(k, v)| (k.clone(), format!("{:?}", v.value_type()))).collect()
    }
}

/// Undoes llama.cpp's q/k row permutation: GGUF rows are (head, half, pair) interleaved; HF rows are
/// (head, pair, half).
fn unpermute(w: &Tensor, n_head: usize) -> Result<Tensor> {
    let (out, inp) = w.dims2()?;
    let hd = out / n_head;
    Ok(w.reshape((n_head, hd / 2, 2, inp))?.transpose(1, 2)?.contiguous()?.reshape((out, inp))?)
}
