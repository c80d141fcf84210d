//! The decoder forward, twice: a differentiable one for training and a fused one with a KV cache for
//! sampling. Both compute the same function (a test checks the logits agree).
//!
//! The training path uses only ops that have a backward: candle 0.11's fused `rms_norm`, `softmax_last_dim`
//! and `rope` have none, and gradients would silently stop there. RMSNorm, RoPE, causal attention and the
//! SwiGLU gate are our own fused ops with hand-written backward passes ([`crate::fused`]), and so is each frozen
//! projection with its LoRA delta ([`crate::fused::projection`]), which skips the frozen weight's gradient.
//!
//! Grouped-query attention without copying k/v: in sampling, the `rep` query heads that share a kv head are
//! folded into the row dimension, `(B, kv, rep·T, hd) · (B, kv, hd, T)`, so one matmul serves the whole
//! group; in training, [`fused::causal_attention`] reads each head in place from the token-major rows.

use super::config::ModelConfig;
use super::kv_cache::SequenceKv;
use super::weights::{LayerWeights, ModelWeights};
use crate::fused;
use crate::lora::{AdapterSet, Target};
use candle_core::{DType, Device, Tensor, Var};

/// Each frozen projection's 8-bit copy for the learner (`None`: its shape does not tile; it stays f32).
type FrozenInt8Sites = std::collections::BTreeMap<(usize, Target), Option<std::sync::Arc<fused::FrozenInt8>>>;

/// A decoder: configuration, frozen weights and RoPE tables.
#[derive(Debug, Clone)]
pub struct Decoder {
    /// The model's shapes and constants.
    pub cfg: ModelConfig,
    /// The frozen base weights; adapters are applied on top, never merged in.
    pub weights: ModelWeights,
    /// What sampling's projections multiply their kept blocks with (training reads the f32 weights).
    pub decode_activations: fused::DecodeActivations,
    /// Whether sampling's arithmetic for a sequence is the same whatever shares its step (the default), or
    /// the fastest for each step's shape ([`fused::Batching`]).
    pub batching: fused::Batching,
    /// What the learner's products with the frozen weights are computed in ([`fused::LearnerProducts`]).
    pub learner_products: fused::LearnerProducts,
    /// The frozen projections' 8-bit copies, made at the first training forward with
    /// [`fused::LearnerProducts::Int8`] (`None` for a shape the kernels do not tile: it stays f32).
    learner_int8: std::sync::Arc<std::sync::OnceLock<FrozenInt8Sites>>,
    /// `(max_pos, hd/2)`, for the fused rope.
    cos: Tensor,
    sin: Tensor,
}

/// Which forward a block runs.
enum Pass<'a> {
    /// The fused forward of sampling (no backward) over a ragged batch of sequences and their caches.
    Sample(SampleRows<'a>),
    /// The differentiable forward over right-padded sequences from position 0.
    Train,
    /// The differentiable forward over a tree of token spans, each continuing its parent.
    TrainTree(&'a TreeRows),
}

/// The sequences of a sampling forward: where each one's new tokens sit among the batch's, their RoPE
/// tables, and the caches they extend.
struct SampleRows<'a> {
    /// `(start, new)` per sequence: its new tokens are rows `start..start + new` of the batch.
    spans: Vec<(usize, usize)>,
    /// `(N, hd/2)`: each new token's angles at its position in its own sequence.
    cos: Tensor,
    sin: Tensor,
    kv: &'a mut [SequenceKv],
    /// With rows of several adapters: which rows read which (`None`: every row reads the forward's own).
    adapter_spans: Option<Vec<AdapterSpan<'a>>>,
}

/// Whether two choices of adapters are the same model (the same set, not an equal one).
fn same_adapters(a: Option<&AdapterSet>, b: Option<&AdapterSet>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => std::ptr::eq(a, b),
        _ => false,
    }
}

/// Rows `start..start + rows` of a sampling forward, and the adapters they read.
#[derive(Debug, Clone, Copy)]
struct AdapterSpan<'a> {
    start: usize,
    rows: usize,
    adapters: Option<&'a AdapterSet>,
}

/// The rows of a tree training forward: their layout and each row's RoPE tables.
struct TreeRows {
    shape: fused::TreeShape,
    /// `(rows, hd/2)`: each row's angles at its position on its path from the root.
    cos: Tensor,
    sin: Tensor,
}

impl Decoder {
    /// Builds a decoder over `weights`.
    pub fn new(cfg: ModelConfig, weights: ModelWeights, device: &Device) -> candle_core::Result<Decoder> {
        let hd = cfg.head_dim;
        let max_pos = cfg.max_position_embeddings.max(1);
        let inv: Vec<f32> = (0..hd / 2).map(|i| 1.0 / (cfg.rope_theta.powf(2.0 * i as f64 / hd as f64)) as f32).collect();
        let inv = Tensor::from_vec(inv, (1, hd / 2), device)?;
        let pos = Tensor::arange(0u32, max_pos as u32, device)?.to_dtype(DType::F32)?.reshape((max_pos, 1))?;
        let freqs = pos.broadcast_mul(&inv)?;
        Ok(Decoder {
            cos: freqs.cos()?,
            sin: freqs.sin()?,
            cfg,
            weights,
            decode_activations: Default::default(),
            batching: Default::default(),
            learner_products: Default::default(),
            learner_int8: Default::default(),
        })
    }

    /// Sets what sampling multiplies the frozen weights with and returns what it will multiply with:
    /// 8-bit activations multiply a GGUF's blocks, so over f32 weights alone (a safetensors model) sampling
    /// stays [`fused::DecodeActivations::F32`]. Callers compare the two and say so, or refuse.
    pub fn set_decode_activations(&mut self, wanted: fused::DecodeActivations) -> fused::DecodeActivations {
        self.decode_activations = if self.weights.packed.is_some() { wanted } else { fused::DecodeActivations::F32 };
        self.decode_activations
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        self.weights.embed.device()
    }

    /// One projection: frozen weight and bias, plus the LoRA delta of `(layer, target)` under `routed`.
    #[allow(clippy::too_many_arguments)] // the site, its weights and the pass's mode are all needed here
    fn proj(
        &self,
        x: &Tensor,
        layer: usize,
        target: Target,
        w: &Tensor,
        b: Option<&Tensor>,
        adapters: Option<&AdapterSet>,
        routed: Option<&[bool]>,
        train: bool,
        spans: Option<&[AdapterSpan<'_>]>,
    ) -> candle_core::Result<Tensor> {
        if train {
            let lora = adapters.map(|a| a.factors((layer, target), x.dim(0)?, routed)).transpose()?.flatten();
            return fused::projection(x, w, b, lora.as_ref(), self.frozen_int8(layer, target)?);
        }
        let blocks = self.weights.packed.as_ref().and_then(|p| p.sites.get(&(layer, target)));
        let y = self.frozen_linear(x, blocks, w)?;
        self.finish_sample_proj(y, x, layer, target, b, adapters, routed, spans)
    }

    /// The 8-bit copy of a frozen projection the learner multiplies by, when it runs in 8 bits (all are
    /// made at the first call).
    fn frozen_int8(&self, layer: usize, target: Target) -> candle_core::Result<Option<&std::sync::Arc<fused::FrozenInt8>>> {
        if self.learner_products != fused::LearnerProducts::Int8 {
            return Ok(None);
        }
        if self.learner_int8.get().is_none() {
            let mut all = std::collections::BTreeMap::new();
            for (li, l) in self.weights.layers.iter().enumerate() {
                for t in Target::ALL {
                    let w = l.projection(t);
                    let (out, k) = w.dims2()?;
                    let values = w.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                    all.insert((li, t), fused::FrozenInt8::new(&values, out, k).map(std::sync::Arc::new));
                }
            }
            let _ = self.learner_int8.set(all);
        }
        Ok(self.learner_int8.get().and_then(|m| m.get(&(layer, target))).and_then(|q| q.as_ref()))
    }

    /// [`Decoder::proj`] of one input through several sites of a layer (its queries, keys and values; its
    /// gate and up). In sampling, the frozen products run together in one parallel section when all have
    /// blocks and the rows are a decoding step's few; otherwise, and in training, one by one.
    #[allow(clippy::too_many_arguments)]
    fn projs<const N: usize>(
        &self,
        x: &Tensor,
        layer: usize,
        sites: [(Target, &Tensor, Option<&Tensor>); N],
        adapters: Option<&AdapterSet>,
        routed: Option<&[bool]>,
        train: bool,
        spans: Option<&[AdapterSpan<'_>]>,
    ) -> candle_core::Result<[Tensor; N]> {
        let packed = self.weights.packed.as_ref();
        let blocks: Option<Vec<&fused::PackedRows>> = sites.iter().map(|(target, _, _)| packed.and_then(|p| p.sites.get(&(layer, *target)))).collect();
        let rows = x.elem_count() / x.dim(candle_core::D::Minus1)?.max(1);
        let together = match blocks {
            Some(mats) if !train && rows <= fused::MAX_ROWS && x.device().is_cpu() && x.dtype() == candle_core::DType::F32 => {
                Some(fused::packed_linear_each(x, &mats, self.decode_activations)?)
            }
            _ => None,
        };
        let mut together = together.map(Vec::into_iter);
        let mut out = Vec::with_capacity(N);
        for (target, w, b) in sites {
            out.push(match together.as_mut().and_then(Iterator::next) {
                Some(y) => self.finish_sample_proj(y, x, layer, target, b, adapters, routed, spans)?,
                None => self.proj(x, layer, target, w, b, adapters, routed, train, spans)?,
            });
        }
        Ok(out.try_into().unwrap_or_else(|_| unreachable!("one projection per site")))
    }

    /// A sampling projection after its frozen product `y`: the bias, then the LoRA delta of each span's
    /// adapters.
    #[allow(clippy::too_many_arguments)]
    fn finish_sample_proj(
        &self,
        y: Tensor,
        x: &Tensor,
        layer: usize,
        target: Target,
        b: Option<&Tensor>,
        adapters: Option<&AdapterSet>,
        routed: Option<&[bool]>,
        spans: Option<&[AdapterSpan<'_>]>,
    ) -> candle_core::Result<Tensor> {
        let y = match b {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        let Some(spans) = spans else { return Self::add_delta(y, x, layer, target, adapters, routed) };
        // Rows of several adapters in one batch (a server's requests): the frozen product once for all
        // rows, then each span's own delta, as S-LoRA batches many adapters.
        let pieces = spans
            .iter()
            .map(|s| Self::add_delta(y.narrow(0, s.start, s.rows)?, &x.narrow(0, s.start, s.rows)?, layer, target, s.adapters, None))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Tensor::cat(&pieces, 0)
    }

    /// `y` plus the LoRA delta of `(layer, target)` for `x`'s rows (`y` itself when the site has none).
    fn add_delta(y: Tensor, x: &Tensor, layer: usize, target: Target, adapters: Option<&AdapterSet>, routed: Option<&[bool]>) -> candle_core::Result<Tensor> {
        let rows = x.elem_count() / x.dim(candle_core::D::Minus1)?.max(1);
        match adapters.map(|a| a.factors((layer, target), rows, routed)).transpose()?.flatten() {
            Some(f) if y.device().is_cpu() => fused::add_lora_delta(&y, x, &f),
            Some(f) => y + f.apply(x)?,
            None => Ok(y),
        }
    }

    fn rms(&self, x: &Tensor, w: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        if train {
            fused::rms_norm(x, w, self.cfg.rms_norm_eps)
        } else {
            candle_nn::ops::rms_norm(x, w, self.cfg.rms_norm_eps as f32)
        }
    }

    /// One block on `x: (B·T, H)` (a sampling pass's `B` is 1 and its `T` every new token of the batch).
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        li: usize,
        l: &LayerWeights,
        x: &Tensor,
        (b, t): (usize, usize),
        adapters: Option<&AdapterSet>,
        routed: Option<&[bool]>,
        pass: &mut Pass<'_>,
    ) -> candle_core::Result<Tensor> {
        let train = !matches!(pass, Pass::Sample(_));
        let spans = match pass {
            Pass::Sample(rows) => rows.adapter_spans.clone(),
            _ => None,
        };
        let spans = spans.as_deref();
        let h = self.rms(x, &l.attn_norm, train)?;
        let qkv = [(Target::Q, &l.q, l.q_bias.as_ref()), (Target::K, &l.k, l.k_bias.as_ref()), (Target::V, &l.v, l.v_bias.as_ref())];
        let [q, k, v] = self.projs(&h, li, qkv, adapters, routed, train, spans)?;
        let att = match pass {
            Pass::Sample(rows) => self.attention_sample(li, l, &q, &k, &v, rows)?,
            Pass::Train => self.attention_train(l, &q, &k, &v, (b, t), None)?,
            Pass::TrainTree(s) => self.attention_train(l, &q, &k, &v, (b, t), Some(s))?,
        };
        let o = self.proj(&att, li, Target::O, &l.o, None, adapters, routed, train, spans)?;
        let x = (x + o)?;
        let h = self.rms(&x, &l.ffn_norm, train)?;
        let [g, u] = self.projs(&h, li, [(Target::Gate, &l.gate, None), (Target::Up, &l.up, None)], adapters, routed, train, spans)?;
        let a = if train { fused::silu_mul(&g, &u)? } else { (g.silu()? * u)? };
        let d = self.proj(&a, li, Target::Down, &l.down, None, adapters, routed, train, spans)?;
        x + d
    }

    /// Training attention on the token-major projections `(rows, heads·hd)`: causal over right-padded
    /// sequences from position 0 (`Pass::Train`, no mask needed), or over a tree of spans
    /// (`Pass::TrainTree`, each row at its own position).
    fn attention_train(
        &self,
        l: &LayerWeights,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        (b, t): (usize, usize),
        tree: Option<&TreeRows>,
    ) -> candle_core::Result<Tensor> {
        let c = &self.cfg;
        let (nh, nkv, hd) = (c.num_heads, c.num_kv_heads, c.head_dim);
        let rows = b * t;
        let mut q = q.reshape((rows, nh, hd))?;
        let mut k = k.reshape((rows, nkv, hd))?;
        if let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm) {
            q = fused::rms_norm(&q, qn, c.rms_norm_eps)?;
            k = fused::rms_norm(&k, kn, c.rms_norm_eps)?;
        }
        let (cos, sin) = match tree {
            Some(s) => (s.cos.clone(), s.sin.clone()),
            None => (self.cos.narrow(0, 0, t)?, self.sin.narrow(0, 0, t)?),
        };
        let q = fused::rope_token_major(&q, &cos, &sin)?.reshape((rows, nh * hd))?;
        let k = fused::rope_token_major(&k, &cos, &sin)?.reshape((rows, nkv * hd))?;
        match tree {
            Some(s) => fused::tree_attention(&q, &k, v, &s.shape),
            None => fused::causal_attention(&q, &k, v, fused::AttentionShape { batch: b, seq: t, heads: nh, kv_heads: nkv, head_dim: hd }),
        }
    }

    /// One differentiable block on `x: (B·T, H)` (used by the checkpointed forward's recomputation).
    pub(crate) fn block_train(
        &self,
        li: usize,
        x: &Tensor,
        bt: (usize, usize),
        adapters: Option<&AdapterSet>,
        routed: Option<&[bool]>,
    ) -> candle_core::Result<Tensor> {
        self.block(li, &self.weights.layers[li], x, bt, adapters, routed, &mut Pass::Train)
    }

    /// The differentiable forward up to the final norm: `tokens: (B, T)` u32, right-padded; `routed`:
    /// per-sample routing (len B). Returns the normed hidden states `(B·T, H)`; gradients reach the adapters'
    /// `Var`s only. With `checkpoint`, per-layer recomputation: only each block's input is kept alive between
    /// forward and backward, and after `backward()` the side gradients must be merged
    /// ([`super::checkpoint::SideGrads::merge_into`]); CPU only (elsewhere it is the plain forward).
    pub fn hidden_train(
        &self,
        tokens: &Tensor,
        adapters: Option<&AdapterSet>,
        routed: Option<&[bool]>,
        checkpoint: Option<&super::checkpoint::SideGrads>,
    ) -> candle_core::Result<Tensor> {
        self.weights.require_f32("the training forward")?;
        let (b, t) = tokens.dims2()?;
        let rows: Option<Vec<bool>> = routed.map(|r| r.iter().flat_map(|&x| std::iter::repeat_n(x, t)).collect());
        let mut x = self.weights.embed.index_select(&tokens.flatten_all()?, 0)?;
        let checkpoint = checkpoint.filter(|_| self.device().is_cpu());
        for (li, l) in self.weights.layers.iter().enumerate() {
            let Some(side) = checkpoint else {
                x = self.block(li, l, &x, (b, t), adapters, rows.as_deref(), &mut Pass::Train)?;
                continue;
            };
            // The values, computed with a graph that is dropped at once (detach keeps only the storage).
            let y = self.block_train(li, &x, (b, t), adapters, rows.as_deref())?.detach();
            let (decoder, owned_adapters, routed) = (self.clone(), adapters.cloned(), rows.clone());
            let op = super::checkpoint::BlockCheckpoint {
                recompute: Box::new(move |x| decoder.block_train(li, x, (b, t), owned_adapters.as_ref(), routed.as_deref())),
                adapters: adapters.cloned(),
                side: side.clone(),
            };
            // The first block's input is the (untracked) embedding: mark it so that the op is recorded.
            let xin = if x.track_op() { x.clone() } else { Var::from_tensor(&x)?.as_tensor().clone() };
            x = xin.apply_op2_arc(&y, std::sync::Arc::new(Box::new(op)))?;
        }
        fused::rms_norm(&x, &self.weights.norm, self.cfg.rms_norm_eps)
    }

    /// The differentiable forward over a tree of token spans: `tokens` are the rows of every span in order,
    /// as `shape` lays them out, each span attending to its ancestors and to itself as if its path from the
    /// root were one sequence. `routed`: every row's routing. Returns the normed hidden states `(rows, H)`.
    /// A shared span runs once, and its keys and values gather the gradient of every span below it (see
    /// [`fused::tree_attention`]).
    pub fn hidden_train_tree(
        &self,
        tokens: &[u32],
        shape: &fused::TreeShape,
        adapters: Option<&AdapterSet>,
        routed: Option<&[bool]>,
    ) -> candle_core::Result<Tensor> {
        self.weights.require_f32("the training forward")?;
        let rows = shape.rows();
        if tokens.len() != rows || routed.is_some_and(|r| r.len() != rows) || rows == 0 {
            candle_core::bail!("hidden_train_tree: {} tokens and {:?} routing flags for a layout of {rows} rows", tokens.len(), routed.map(<[bool]>::len));
        }
        let dev = self.device();
        let positions = Tensor::from_vec(shape.positions(), rows, dev)?;
        let layout = TreeRows { shape: shape.clone(), cos: self.cos.index_select(&positions, 0)?, sin: self.sin.index_select(&positions, 0)? };
        let mut x = self.weights.embed.index_select(&Tensor::from_slice(tokens, rows, dev)?, 0)?;
        let mut pass = Pass::TrainTree(&layout);
        for (li, l) in self.weights.layers.iter().enumerate() {
            x = self.block(li, l, &x, (1, rows), adapters, routed, &mut pass)?;
        }
        fused::rms_norm(&x, &self.weights.norm, self.cfg.rms_norm_eps)
    }

    /// [`Decoder::forward_train`] with per-layer recomputation (see [`Decoder::hidden_train`]).
    pub fn forward_train_checkpointed(
        &self,
        tokens: &Tensor,
        adapters: Option<&AdapterSet>,
        routed: Option<&[bool]>,
        side: &super::checkpoint::SideGrads,
    ) -> candle_core::Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        let x = self.hidden_train(tokens, adapters, routed, Some(side))?;
        fused::projection(&x, self.weights.lm_head(), None, None, None)?.reshape((b, t, ()))
    }

    /// The differentiable forward: logits `(B, T, V)` (see [`Decoder::hidden_train`]).
    pub fn forward_train(&self, tokens: &Tensor, adapters: Option<&AdapterSet>, routed: Option<&[bool]>) -> candle_core::Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        let x = self.hidden_train(tokens, adapters, routed, None)?;
        fused::projection(&x, self.weights.lm_head(), None, None, None)?.reshape((b, t, ()))
    }

    /// The fused forward of sampling over a ragged batch: sequence `i` reads its `news[i]` new tokens (the
    /// next of `tokens`, which holds every sequence's in turn) after the positions `kv[i]` holds, and appends
    /// their keys and values there. A token's position is its place in its own sequence; nothing is padded.
    /// Returns the normed hidden state of every new token, `(N, H)`.
    pub fn hidden_rows(&self, tokens: &[u32], news: &[usize], kv: &mut [SequenceKv], adapters: Option<&AdapterSet>) -> candle_core::Result<Tensor> {
        self.hidden_rows_each(tokens, news, kv, &vec![adapters; news.len()])
    }

    /// [`Decoder::hidden_rows`] where sequence `i` reads `adapters[i]`: the frozen weights are multiplied once
    /// for every row, and each run of sequences with the same adapters adds its own LoRA delta.
    pub fn hidden_rows_each(&self, tokens: &[u32], news: &[usize], kv: &mut [SequenceKv], adapters: &[Option<&AdapterSet>]) -> candle_core::Result<Tensor> {
        let n: usize = news.iter().sum();
        if news.len() != kv.len() || tokens.len() != n || news.contains(&0) || adapters.len() != news.len() {
            candle_core::bail!(
                "a sampling forward of {} tokens for new-token counts {news:?}, {} caches and {} adapter choices",
                tokens.len(),
                kv.len(),
                adapters.len()
            );
        }
        let mut adapter_spans: Vec<AdapterSpan> = Vec::new();
        let mut start = 0;
        for (&new, &a) in news.iter().zip(adapters) {
            match adapter_spans.last_mut() {
                Some(last) if same_adapters(last.adapters, a) => last.rows += new,
                _ => adapter_spans.push(AdapterSpan { start, rows: new, adapters: a }),
            }
            start += new;
        }
        let (adapters, adapter_spans) = match adapter_spans.as_slice() {
            [] => (None, None),
            [one] => (one.adapters, None),
            _ => (None, Some(adapter_spans)),
        };
        let mut spans = Vec::with_capacity(news.len());
        let mut positions = Vec::with_capacity(n);
        for (&new, cache) in news.iter().zip(kv.iter()) {
            let from = cache.len();
            if from + new > self.cfg.max_position_embeddings {
                candle_core::bail!("a sequence of {} positions passes the model's context ({})", from + new, self.cfg.max_position_embeddings);
            }
            spans.push((positions.len(), new));
            positions.extend((from..from + new).map(|p| p as u32));
        }
        let dev = self.device();
        let positions = Tensor::from_vec(positions, n, dev)?;
        let rows = SampleRows { spans, cos: self.cos.index_select(&positions, 0)?, sin: self.sin.index_select(&positions, 0)?, kv, adapter_spans };
        let mut pass = Pass::Sample(rows);
        let mut x = self.weights.embed_rows(tokens, dev)?;
        for (li, l) in self.weights.layers.iter().enumerate() {
            x = self.block(li, l, &x, (1, n), adapters, None, &mut pass)?;
        }
        candle_nn::ops::rms_norm(&x, &self.weights.norm, self.cfg.rms_norm_eps as f32)
    }

    /// [`Decoder::hidden_rows`], then the logits of each sequence's last new token, `(sequences, V)`.
    pub fn forward_rows(&self, tokens: &[u32], news: &[usize], kv: &mut [SequenceKv], adapters: Option<&AdapterSet>) -> candle_core::Result<Tensor> {
        self.forward_rows_each(tokens, news, kv, &vec![adapters; news.len()])
    }

    /// [`Decoder::forward_rows`] where sequence `i` reads `adapters[i]` (see [`Decoder::hidden_rows_each`]).
    pub fn forward_rows_each(&self, tokens: &[u32], news: &[usize], kv: &mut [SequenceKv], adapters: &[Option<&AdapterSet>]) -> candle_core::Result<Tensor> {
        let h = self.hidden_rows_each(tokens, news, kv, adapters)?;
        let last: Vec<u32> = news
            .iter()
            .scan(0usize, |end, &n| {
                *end += n;
                Some(*end as u32 - 1)
            })
            .collect();
        let x = h.index_select(&Tensor::from_vec(last, news.len(), self.device())?, 0)?;
        let blocks = self.weights.packed.as_ref().and_then(|p| p.lm_head.as_ref());
        self.frozen_linear(&x, blocks, self.weights.lm_head())
    }

    /// `x · Wᵀ` of a frozen weight in sampling: from its blocks when kept (few rows, or any number when
    /// there is no f32 copy or the batching is invariant: then every row meets a decoding step's kernel),
    /// else from the f32 weight.
    fn frozen_linear(&self, x: &Tensor, blocks: Option<&fused::PackedRows>, w: &Tensor) -> candle_core::Result<Tensor> {
        let invariant = self.batching == fused::Batching::Invariant;
        match blocks {
            Some(b) if self.weights.blocks_only || (invariant && x.device().is_cpu() && x.dtype() == DType::F32) => {
                fused::packed_linear_rows(x, b, self.decode_activations, self.batching)
            }
            Some(b) => match fused::packed_linear(x, b, self.decode_activations)? {
                Some(y) => Ok(y),
                None => fused::decode_linear(x, w, self.batching),
            },
            None => fused::decode_linear(x, w, self.batching),
        }
    }

    /// The sampling forward over whole sequences from an empty cache, logits `(B, T, V)` (tests compare it
    /// with [`Decoder::forward_train`]).
    pub fn forward_fused_all(&self, tokens: &Tensor, adapters: Option<&AdapterSet>) -> candle_core::Result<Tensor> {
        self.weights.require_f32("the whole-sequence sampling forward")?;
        let (b, t) = tokens.dims2()?;
        let mut kv: Vec<SequenceKv> = (0..b).map(|_| SequenceKv::default()).collect();
        let x = self.hidden_rows(&tokens.flatten_all()?.to_vec1::<u32>()?, &vec![t; b], &mut kv, adapters)?;
        x.matmul(&self.weights.lm_head().t()?)?.reshape((b, t, ()))
    }

    /// Sampling attention: the new tokens' queries, keys and values `(N, ·)`, normed and rotated at their
    /// positions; keys and values appended to their sequences' caches, then each sequence's new queries over
    /// its whole cache ([`fused::cached_attention`]). Returns `(N, heads·hd)`.
    #[allow(clippy::too_many_arguments)]
    fn attention_sample(&self, li: usize, l: &LayerWeights, q: &Tensor, k: &Tensor, v: &Tensor, rows: &mut SampleRows<'_>) -> candle_core::Result<Tensor> {
        let c = &self.cfg;
        let (nh, nkv, hd) = (c.num_heads, c.num_kv_heads, c.head_dim);
        let n = q.dim(0)?;
        let mut q = q.reshape((n, nh, hd))?.transpose(0, 1)?.contiguous()?;
        let mut k = k.reshape((n, nkv, hd))?.transpose(0, 1)?.contiguous()?;
        let v = v.reshape((n, nkv, hd))?.transpose(0, 1)?.contiguous()?;
        if let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm) {
            q = self.rms(&q, qn, false)?;
            k = self.rms(&k, kn, false)?;
        }
        let q = candle_nn::rotary_emb::rope(&q.unsqueeze(0)?, &rows.cos, &rows.sin)?.squeeze(0)?;
        let k = candle_nn::rotary_emb::rope(&k.unsqueeze(0)?, &rows.cos, &rows.sin)?;
        let v = v.unsqueeze(0)?;
        let mut seqs = Vec::with_capacity(rows.spans.len());
        for (&(start, new), cache) in rows.spans.iter().zip(rows.kv.iter_mut()) {
            cache.append(li, c.num_layers, &k.narrow(2, start, new)?, &v.narrow(2, start, new)?)?;
            seqs.push(fused::CachedSequence { start, new, segments: cache.segments(li)? });
        }
        let att = fused::cached_attention(&q, &seqs, 1.0 / (hd as f64).sqrt(), self.batching)?;
        att.transpose(0, 1)?.reshape((n, nh * hd))
    }
}
