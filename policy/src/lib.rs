//! The policy: a small decoder LM that writes tool programs, with LoRA adapters trained by RL.
//!
//! Design. A [`Policy`] is a frozen base [`Decoder`](model::Decoder) (llama, qwen2 or qwen3, loaded from a
//! GGUF file — dequantized to f32 — or a safetensors directory), its [`PolicyTokenizer`] (rebuilt from the
//! GGUF's own metadata, so a GGUF alone is enough), the model's own [`ChatTemplate`], and optional
//! [`AdapterSet`] LoRA adapters on q, k, v, o, gate, up, down — one, or two (*retain* and *forget*) with
//! per-sample gradient routing. The decoder has two forwards computing the same function: a fused one over a
//! ragged batch of sequences, each with its own KV cache, for [sampling](Policy::sample) (one decoding loop,
//! [`ContinuousBatch`], that sequences join and leave between steps), which returns the exact token ids and their log-probs so no turn
//! is ever re-tokenised, and a differentiable one for [training](Policy::token_logprobs), built only from ops
//! with a backward: on the CPU mostly our own [`fused`] ops, whose frozen projections compute dL/dx only. Adapters are saved in
//! PEFT's format and can be merged into a full safetensors model. The trainer and the eval harness (root
//! crate) use only this API; nothing here knows about the sandbox or the judge.

pub mod adapter_io;
pub mod allocator;
pub mod chat_template;
pub mod continuous_batch;
pub mod error;
pub mod fused;
pub mod lora;
pub mod model;
pub mod optim;
pub mod prefix_cache;
pub mod sampling;
pub mod threads;
// For tests only: the `testing` feature, which only dev-dependencies turn on.
#[cfg(any(test, feature = "testing"))]
pub mod tiny;
pub mod token_tree;
pub mod tokenizer;

pub use chat_template::{ChatTemplate, Message};
pub use continuous_batch::ContinuousBatch;
pub use error::{PolicyError, Result};
pub use fused::{Batching, DecodeActivations};
pub use lora::{AdapterSet, LoraConfig, LoraFactors, Routing, Target, Which};
pub use model::{Arch, Decoder, ModelConfig, ModelWeights};
pub use optim::{AdamW, AdamWConfig};
pub use prefix_cache::{PrefixCache, TokenCounts};
pub use sampling::{Completion, FinishReason, SamplingParams};
pub use token_tree::TokenTree;
pub use tokenizer::PolicyTokenizer;

pub use candle_core::{backprop::GradStore, Device, Tensor, Var};
/// The random number generators `sample` takes, re-exported so callers need no version match.
pub use rand;

use candle_core::DType;
use std::path::{Path, PathBuf};

/// Where a model comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// SmolLM2-135M-Instruct (GGUF), fetched and checked by `agentrt-assets`.
    Default,
    /// Qwen2.5-Coder-0.5B-Instruct (GGUF), fetched and checked by `agentrt-assets`.
    Larger,
    /// A `.gguf` file or a safetensors directory (`config.json`, `tokenizer.json`, `*.safetensors`).
    Path(PathBuf),
}

/// The default model's name, as every command, config and `agent.json` writes it.
pub const DEFAULT_MODEL_NAME: &str = "smollm2-135m";

impl ModelSource {
    /// `smollm2-135m` (also `default`, `smollm2`), `qwen2.5-coder-0.5b` (also `qwen`, `larger`), or a path.
    pub fn parse(s: &str) -> ModelSource {
        match s {
            "default" | "smollm2-135m" | "smollm2" => ModelSource::Default,
            "qwen2.5-coder-0.5b" | "qwen" | "larger" => ModelSource::Larger,
            p => ModelSource::Path(PathBuf::from(p)),
        }
    }

    /// The file or directory to open, fetching a named asset first.
    pub fn resolve(&self) -> Result<(PathBuf, String)> {
        Ok(match self {
            ModelSource::Default => {
                let a = agentrt_assets::SMOLLM2_135M_INSTRUCT_GGUF;
                (agentrt_assets::fetch(&a)?, a.hub_id.to_string())
            }
            ModelSource::Larger => {
                let a = agentrt_assets::QWEN25_CODER_05B_INSTRUCT_GGUF;
                (agentrt_assets::fetch(&a)?, "Qwen/Qwen2.5-Coder-0.5B-Instruct".to_string())
            }
            ModelSource::Path(p) => (p.clone(), p.display().to_string()),
        })
    }
}

/// Parses `cpu` or `cuda:N` (`cuda` = `cuda:0`).
pub fn parse_device(s: &str) -> Result<Device> {
    match s {
        "cpu" => Ok(Device::Cpu),
        s if s == "cuda" || s.starts_with("cuda:") => {
            let n: usize = s.strip_prefix("cuda:").unwrap_or("0").parse().map_err(|_| PolicyError::Invalid(format!("bad device `{s}`")))?;
            // Without the feature candle says it was built without CUDA; with it, a failure is the driver's.
            let hint = if cfg!(feature = "cuda") {
                "is an NVIDIA driver (CUDA 13.0 or newer) installed, with libcuda.so.1 and the toolkit's libraries on LD_LIBRARY_PATH? README.md, \"On a GPU\""
            } else {
                "this build has no CUDA: build with `cargo build --release --features cuda` (README.md, \"On a GPU\")"
            };
            Device::new_cuda(n).map_err(|e| PolicyError::Invalid(format!("device `{s}`: {} ({hint})", e.to_string().lines().next().unwrap_or_default())))
        }
        other => Err(PolicyError::Invalid(format!("unknown device `{other}`; use cpu or cuda:N"))),
    }
}

/// A loaded model: decoder, tokenizer, chat template and (optionally) adapters.
pub struct Policy {
    /// The frozen base model both forwards run on.
    pub decoder: Decoder,
    /// Turns templated prompts into ids and sampled ids back into text.
    pub tokenizer: PolicyTokenizer,
    /// The model's own chat template, used to build prompts from messages.
    pub template: ChatTemplate,
    /// The trainable LoRA adapters (retain, and forget when dual); `None` runs the base model alone.
    pub adapters: Option<AdapterSet>,
    /// The base model's name (hub id or path), written into saved adapters.
    pub base_name: String,
    /// Recompute each block in the backward instead of keeping its activations (bounds memory; costs about
    /// one extra forward). With it on, take gradients with [`Policy::backward`].
    pub recompute_layers: bool,
    side_grads: model::checkpoint::SideGrads,
}

impl Policy {
    /// Loads a model (GGUF file or safetensors directory) onto `device`.
    pub fn load(source: &ModelSource, device: &Device) -> Result<Policy> {
        Self::load_keeping_f32(source, device, true)
    }

    /// [`Policy::load`] for a model that only samples (generate, serve, eval, trajectories): a GGUF's weights are kept as
    /// its blocks alone, with no f32 copy, so the model takes about its file's size in memory and loads
    /// without dequantising; prompts are multiplied from the blocks too. Training, log-prob scoring and
    /// exports refuse such a model ([`ModelWeights::blocks_only`]). A safetensors model loads as usual.
    pub fn load_for_inference(source: &ModelSource, device: &Device) -> Result<Policy> {
        Self::load_keeping_f32(source, device, false)
    }

    fn load_keeping_f32(source: &ModelSource, device: &Device, keep_f32: bool) -> Result<Policy> {
        let (path, name) = source.resolve()?;
        if path.is_dir() {
            Self::load_safetensors_dir(&path, name, device)
        } else {
            Self::load_gguf(&path, name, device, keep_f32)
        }
    }

    fn load_gguf(path: &Path, name: String, device: &Device, keep_f32: bool) -> Result<Policy> {
        let mut g = model::gguf::GgufFile::open(path)?;
        let cfg = g.config()?;
        let tokenizer = PolicyTokenizer::from_gguf(&g)?;
        let template = match g.meta_str("tokenizer.chat_template") {
            Some(src) => ChatTemplate::new(src, tokenizer.bos_token.clone(), tokenizer.eos_token.clone())?,
            None => ChatTemplate::new(chat_template::CHATML, None, None)?,
        };
        let weights = g.weights(&cfg, device, keep_f32)?;
        Self::from_parts(cfg, weights, tokenizer, template, name, device)
    }

    fn load_safetensors_dir(dir: &Path, name: String, device: &Device) -> Result<Policy> {
        let cfg = model::safetensors::read_config(dir)?;
        let tokenizer = PolicyTokenizer::from_file(&dir.join("tokenizer.json"))?;
        let tc = dir.join("tokenizer_config.json");
        let tc: serde_json::Value = std::fs::read_to_string(&tc).ok().and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default();
        let tok_str = |k: &str| match &tc[k] {
            serde_json::Value::String(s) => Some(s.clone()),
            v => v["content"].as_str().map(str::to_string),
        };
        let template = match tc["chat_template"].as_str() {
            Some(src) => ChatTemplate::new(src, tok_str("bos_token"), tok_str("eos_token"))?,
            None => ChatTemplate::new(chat_template::CHATML, None, None)?,
        };
        let weights = model::safetensors::read_weights(dir, &cfg, device)?;
        Self::from_parts(cfg, weights, tokenizer, template, name, device)
    }

    /// Assembles a policy from its parts, checking that the tokenizer fits the model.
    pub fn from_parts(
        cfg: ModelConfig,
        weights: ModelWeights,
        tokenizer: PolicyTokenizer,
        template: ChatTemplate,
        base_name: String,
        device: &Device,
    ) -> Result<Policy> {
        // The embedding may have more rows than the tokenizer has tokens (Qwen pads its vocabulary), never fewer.
        if tokenizer.vocab_size() > weights.vocab_rows() {
            return Err(PolicyError::VocabMismatch { tokenizer_vocab: tokenizer.vocab_size(), model_vocab: weights.vocab_rows() });
        }
        // The tables the decoder builds are sized by the config: its width must be the weights' own.
        let (_, width) = weights.embed.dims2()?;
        if width != cfg.hidden_size {
            return Err(PolicyError::Invalid(format!("the model's config says hidden_size {}, but its embedding is {width} wide", cfg.hidden_size)));
        }
        let decoder = Decoder::new(cfg, weights, device)?;
        Ok(Policy { decoder, tokenizer, template, adapters: None, base_name, recompute_layers: false, side_grads: Default::default() })
    }

    /// The decoder's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.decoder.cfg
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        self.decoder.device()
    }

    /// The templated prompt for `messages`, ending where the assistant's reply begins, as token ids.
    pub fn chat_prompt(&self, messages: &[Message]) -> Result<Vec<u32>> {
        self.tokenizer.encode(&self.template.render(messages, true)?)
    }

    /// Fresh adapters (PEFT initialisation: the policy is unchanged until they train), drawn from `seed`.
    pub fn init_adapters(&mut self, config: LoraConfig, seed: u64) -> Result<()> {
        self.adapters = Some(AdapterSet::new(config, self.config(), self.device(), seed)?);
        Ok(())
    }

    /// Loads PEFT adapters written by [`Policy::save_adapters`] (or any PEFT LoRA directory).
    pub fn load_adapters(&mut self, dir: &Path) -> Result<()> {
        self.adapters = Some(AdapterSet::load_peft(dir, self.config(), self.device())?);
        Ok(())
    }

    /// Saves the adapters in PEFT's format.
    pub fn save_adapters(&self, dir: &Path) -> Result<()> {
        let a = self.adapters.as_ref().ok_or_else(|| PolicyError::Invalid("no adapters to save".into()))?;
        a.save_peft(dir, &self.base_name)
    }

    /// Inference scales of the retain and forget adapters: `(1, 0)` ablates the forget adapter.
    pub fn set_adapter_scales(&mut self, retain: f64, forget: f64) {
        if let Some(a) = &mut self.adapters {
            a.scales = (retain, forget);
        }
    }

    /// What unflagged samples train when there are two adapters (see [`Routing`]).
    pub fn set_routing(&mut self, routing: Routing) {
        if let Some(a) = &mut self.adapters {
            a.routing = routing;
        }
    }

    /// Every trainable tensor.
    pub fn trainable_vars(&self) -> Vec<Var> {
        self.adapters.as_ref().map(|a| a.vars()).unwrap_or_default()
    }

    /// Samples completions for templated prompts (see [`sampling`]).
    pub fn sample(&self, prompts: &[Vec<u32>], params: &SamplingParams, rng: &mut impl rand::Rng) -> Result<Vec<Completion>> {
        continuous_batch::sample(&self.decoder, &self.tokenizer, self.adapters.as_ref(), prompts, params, rng, None)
    }

    /// [`Policy::sample`], starting each prompt from the longest prefix `prefixes` holds and leaving every
    /// completed sequence there for the next turn. The cache must not outlive a change of the adapters.
    pub fn sample_with_prefixes(
        &self,
        prompts: &[Vec<u32>],
        params: &SamplingParams,
        rng: &mut impl rand::Rng,
        prefixes: &mut PrefixCache,
    ) -> Result<Vec<Completion>> {
        continuous_batch::sample(&self.decoder, &self.tokenizer, self.adapters.as_ref(), prompts, params, rng, Some(prefixes))
    }

    /// Differentiable per-token log-probs: entry `[b, t]` is `log p(seq_b[t+1] | seq_b[..=t])`, shape
    /// `(B, T_max - 1)`, zero past a sequence's end. `routed[b]` routes sample `b`'s gradient to the forget
    /// adapter only (empty slice: nothing routed).
    pub fn token_logprobs(&self, seqs: &[Vec<u32>], routed: &[bool]) -> Result<Tensor> {
        let t = seqs.iter().map(Vec::len).max().unwrap_or(0);
        if t < 2 {
            return Err(PolicyError::Invalid("sequences need at least two tokens".into()));
        }
        if !routed.is_empty() && routed.len() != seqs.len() {
            return Err(PolicyError::Invalid(format!("{} routing flags for {} sequences", routed.len(), seqs.len())));
        }
        let b = seqs.len();
        let mut flat = Vec::with_capacity(b * t);
        let mut valid = Vec::with_capacity(b * (t - 1));
        for s in seqs {
            flat.extend(s);
            flat.extend(std::iter::repeat_n(0u32, t - s.len()));
            valid.extend((1..t).map(|i| if i < s.len() { 1f32 } else { 0f32 }));
        }
        let dev = self.device();
        let tokens = Tensor::from_vec(flat, (b, t), dev)?;
        let routed = if routed.iter().any(|&r| r) { Some(routed) } else { None };
        let side = self.recompute_layers.then_some(&self.side_grads);
        let hidden = self.decoder.hidden_train(&tokens, self.adapters.as_ref(), routed, side)?;
        // Targets are the next tokens; the last position gets a dummy target and is cut off afterwards.
        let targets = Tensor::cat(&[&tokens.narrow(1, 1, t - 1)?, &Tensor::zeros((b, 1), DType::U32, dev)?], 1)?;
        let lp = fused::head_log_probs(&hidden, self.decoder.weights.lm_head(), &targets.flatten_all()?)?;
        let lp = lp.reshape((b, t))?.narrow(1, 0, t - 1)?;
        let valid = Tensor::from_vec(valid, (b, t - 1), dev)?;
        Ok((lp * valid)?)
    }

    /// [`Policy::token_logprobs`] computed only where it is read: the same `(B, T_max - 1)` layout, with
    /// entry `[b, t]` computed where `scored[b][t + 1]` is true (the targets a loss reads: the model's own
    /// tokens) and 0 everywhere else. The sequences are forwarded as their trie ([`TokenTree`]): every
    /// token they share (a prompt, a program and its output that several samples wrote alike) is a row
    /// once, and no row is padding; the output head runs once per distinct (row, target). The values and
    /// gradients are those of the sequences taken one by one. `routed`: every sequence trains only the
    /// forget adapter (a row shared by sequences routed two ways could not be).
    pub fn token_logprobs_tree(&self, seqs: &[Vec<u32>], scored: &[Vec<bool>], routed: bool) -> Result<Tensor> {
        let t = seqs.iter().map(Vec::len).max().unwrap_or(0);
        if seqs.is_empty() || seqs.iter().any(|s| s.len() < 2) {
            return Err(PolicyError::Invalid("token_logprobs_tree: sequences need at least two tokens".into()));
        }
        if scored.len() != seqs.len() || seqs.iter().zip(scored).any(|(s, m)| s.len() != m.len()) {
            return Err(PolicyError::Invalid(format!("token_logprobs_tree: {} masks for {} sequences, or of other lengths", scored.len(), seqs.len())));
        }
        let paths: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
        let tree = TokenTree::build(&paths);
        let c = &self.decoder.cfg;
        let shape = fused::TreeShape::new(tree.spans.clone(), c.num_heads, c.num_kv_heads, c.head_dim)?;
        let flags = routed.then(|| vec![true; tree.len()]);
        let hidden = self.decoder.hidden_train_tree(&tree.tokens, &shape, self.adapters.as_ref(), flags.as_deref())?;
        // The distinct (row, target) pairs the masks read, and where each entry of the layout finds its own.
        let mut unique: std::collections::HashMap<(u32, u32), u32> = std::collections::HashMap::new();
        let (mut rows, mut targets) = (Vec::new(), Vec::new());
        let mut index = Vec::with_capacity(seqs.len() * (t - 1));
        for ((s, m), path) in seqs.iter().zip(scored).zip(&tree.rows) {
            for i in 0..t - 1 {
                let entry = if i + 1 < s.len() && m[i + 1] {
                    let key = (path[i], s[i + 1]);
                    *unique.entry(key).or_insert_with(|| {
                        rows.push(key.0);
                        targets.push(key.1);
                        rows.len() as u32 - 1
                    })
                } else {
                    u32::MAX
                };
                index.push(entry);
            }
        }
        let dev = self.device();
        let n = rows.len();
        // Entry n is the 0 of every unread place.
        let read = if n == 0 {
            Tensor::zeros(1, DType::F32, dev)?
        } else {
            let h = hidden.index_select(&Tensor::from_vec(rows, n, dev)?, 0)?;
            let lp = fused::head_log_probs(&h, self.decoder.weights.lm_head(), &Tensor::from_vec(targets, n, dev)?)?;
            Tensor::cat(&[&lp, &Tensor::zeros(1, DType::F32, dev)?], 0)?
        };
        let index: Vec<u32> = index.into_iter().map(|e| if e == u32::MAX { n as u32 } else { e }).collect();
        Ok(read.index_select(&Tensor::from_vec(index, seqs.len() * (t - 1), dev)?, 0)?.reshape((seqs.len(), t - 1))?)
    }

    /// Differentiable sum of log-probs over the tokens the model wrote: `masks[b][i]` is true when token `i`
    /// of sequence `b` is the model's (false for the prompt and for tool output). Shape `(B,)`.
    pub fn sequence_logprobs(&self, seqs: &[Vec<u32>], masks: &[Vec<bool>], routed: &[bool]) -> Result<Tensor> {
        let lp = self.token_logprobs(seqs, routed)?;
        let w = Self::target_mask(seqs, masks, lp.dim(1)?, self.device())?;
        Ok((lp * w)?.sum(1)?)
    }

    /// The `(B, T-1)` mask over targets from per-token masks over the sequences.
    pub fn target_mask(seqs: &[Vec<u32>], masks: &[Vec<bool>], t1: usize, dev: &Device) -> Result<Tensor> {
        if masks.len() != seqs.len() {
            return Err(PolicyError::Invalid(format!("{} masks for {} sequences", masks.len(), seqs.len())));
        }
        let mut w = Vec::with_capacity(seqs.len() * t1);
        for (s, m) in seqs.iter().zip(masks) {
            if m.len() != s.len() {
                return Err(PolicyError::Invalid(format!("mask of length {} for a sequence of {}", m.len(), s.len())));
            }
            w.extend((1..=t1).map(|i| if i < s.len() && m[i] { 1f32 } else { 0f32 }));
        }
        Ok(Tensor::from_vec(w, (seqs.len(), t1), dev)?)
    }

    /// Gradients of a scalar `loss` built from this policy's log-probs (merges the gradients of recomputed
    /// blocks when [`Policy::recompute_layers`] is on; otherwise the same as `loss.backward()`).
    pub fn backward(&self, loss: &Tensor) -> Result<GradStore> {
        let mut g = loss.backward()?;
        self.side_grads.merge_into(&mut g)?;
        Ok(g)
    }

    /// Bounded-memory backward: runs forward and backward one sequence at a time, with
    /// `loss(b, token_logprobs (1, T_b-1), target_mask (1, T_b-1))` giving a scalar per sequence, and returns
    /// the summed gradients (parameters that got none, e.g. retain weights on routed samples, stay absent).
    pub fn backward_per_sequence(
        &self,
        seqs: &[Vec<u32>],
        masks: &[Vec<bool>],
        routed: &[bool],
        loss: impl Fn(usize, &Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<GradStore> {
        let vars = self.trainable_vars();
        let mut total: Option<GradStore> = None;
        for (i, s) in seqs.iter().enumerate() {
            let r: &[bool] = if routed.is_empty() { &[] } else { &routed[i..=i] };
            let lp = self.token_logprobs(std::slice::from_ref(s), r)?;
            let m = Self::target_mask(std::slice::from_ref(s), std::slice::from_ref(&masks[i]), lp.dim(1)?, self.device())?;
            let g = self.backward(&loss(i, &lp, &m)?)?;
            match &mut total {
                None => total = Some(g),
                Some(t) => {
                    for v in &vars {
                        if let Some(x) = g.get(v.as_tensor()) {
                            let sum = match t.get(v.as_tensor()) {
                                Some(y) => (y + x)?,
                                None => x.clone(),
                            };
                            t.insert(v.as_tensor(), sum);
                        }
                    }
                }
            }
        }
        total.ok_or_else(|| PolicyError::Invalid("no sequences".into()))
    }

    /// Merges the adapters (at their current scales) into the base weights and writes a full safetensors
    /// model directory (`config.json`, `model.safetensors`, `tokenizer.json`).
    pub fn merge_and_export(&self, dir: &Path) -> Result<()> {
        self.decoder.weights.require_f32("exporting a merged model")?;
        let w = match &self.adapters {
            Some(a) => a.merge_into(&self.decoder.weights)?,
            None => self.decoder.weights.clone(),
        };
        adapter_io::export_model(dir, self.config(), &w)?;
        let p = dir.join("tokenizer.json");
        self.tokenizer.inner.save(&p, false).map_err(|e| PolicyError::Tokenizer(format!("{}: {e}", p.display())))?;
        let tc = serde_json::json!({
            "chat_template": self.template.source,
            "bos_token": self.template.bos_token,
            "eos_token": self.template.eos_token,
        });
        let p = dir.join("tokenizer_config.json");
        std::fs::write(&p, tc.to_string()).map_err(error::io_err(&p))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_is_parsed_and_a_missing_cuda_says_what_to_do() {
        assert!(matches!(parse_device("cpu"), Ok(Device::Cpu)));
        let e = parse_device("gpu").unwrap_err().to_string();
        assert!(e.contains("unknown device `gpu`; use cpu or cuda:N"), "{e}");
        let e = parse_device("cuda:x").unwrap_err().to_string();
        assert!(e.contains("bad device `cuda:x`"), "{e}");
        // This build (and CI's) has no CUDA: the error says how to get it.
        if !cfg!(feature = "cuda") {
            let e = parse_device("cuda:0").unwrap_err().to_string();
            assert!(e.contains("device `cuda:0`") && e.contains("--features cuda") && e.contains("On a GPU"), "{e}");
            assert_eq!(e.lines().count(), 1, "one line, no backtrace: {e}");
        }
    }
}
