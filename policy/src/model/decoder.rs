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
use super::weights::{LayerWeights, ModelWeights};
use crate::fused;
use crate::lora::{AdapterSet, Target};
use candle_core::{DType, Device, Tensor, Var};
use std::ops::Range;

/// A decoder: configuration, frozen weights and RoPE tables.
#[derive(Debug, Clone)]
pub struct Decoder {
    /// The model's shapes and constants.
    pub cfg: ModelConfig,
    /// The frozen base weights; adapters are applied on top, never merged in.
    pub weights: ModelWeights,
    /// `(max_pos, hd/2)`, for the fused rope.
    cos: Tensor,
    sin: Tensor,
}

/// Which forward a block runs.
#[derive(Clone, Copy)]
enum Pass<'a> {
    /// The fused forward of sampling (no backward).
    Sample,
    /// The differentiable forward over right-padded sequences from position 0.
    Train,
    /// The differentiable forward over a shared prefix and the segments that continue it.
    TrainShared(&'a SharedRows),
}

/// The rows of a shared-prefix training forward: their layout and each row's RoPE tables.
struct SharedRows {
    shape: fused::SharedPrefixShape,
    /// `(rows, hd/2)`: each row's angles at its position in `prefix ++ segment`.
    cos: Tensor,
    sin: Tensor,
}

/// The keys and values seen so far, per layer, `(B, kv, T, hd)`, in buffers with room to grow: a decoding
/// step writes its one new position in place instead of copying the whole cache into a longer tensor (30
/// layers' keys and values of 8 rows x 900 positions are ~330 MB a step that way). Not `Clone`: two caches
/// sharing a buffer would write over each other.
#[derive(Debug, Default)]
pub struct KvCache {
    layers: Vec<Option<LayerCache>>,
}

#[derive(Debug)]
struct LayerCache {
    /// `(B, kv, capacity, hd)`; positions `len..` are not written yet.
    k: Tensor,
    v: Tensor,
    len: usize,
}

impl LayerCache {
    /// Writes `k, v: (B, kv, t, hd)` after the cached positions; returns views of everything cached.
    fn append(&mut self, k: &Tensor, v: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let t = k.dim(2)?;
        let need = self.len + t;
        if need > self.k.dim(2)? {
            // Grow by half (at least 128 positions), so a long reply reallocates a handful of times.
            let cap = need.max(self.k.dim(2)? * 3 / 2).max(self.len + 128);
            let grow = |old: &Tensor| -> candle_core::Result<Tensor> {
                let (b, h, _, d) = old.dims4()?;
                let new = Tensor::zeros((b, h, cap, d), old.dtype(), old.device())?;
                if self.len > 0 {
                    new.slice_set(&old.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
                }
                Ok(new)
            };
            self.k = grow(&self.k)?;
            self.v = grow(&self.v)?;
        }
        self.k.slice_set(&k.contiguous()?, 2, self.len)?;
        self.v.slice_set(&v.contiguous()?, 2, self.len)?;
        self.len = need;
        Ok((self.k.narrow(2, 0, need)?, self.v.narrow(2, 0, need)?))
    }
}

impl KvCache {
    /// A cache holding `(keys, values)` per decoder block, `(B, kv, T, hd)` each, all of one length.
    pub fn from_layers(layers: Vec<(Tensor, Tensor)>) -> candle_core::Result<KvCache> {
        let len = layers.first().map(|(k, _)| k.dim(2)).transpose()?.unwrap_or(0);
        let mut out = Vec::with_capacity(layers.len());
        for (k, v) in layers {
            if k.dim(2)? != len || v.dims() != k.dims() {
                candle_core::bail!("cached layers of different shapes: keys {:?}, values {:?}, {len} positions", k.shape(), v.shape());
            }
            out.push(Some(LayerCache { k: k.contiguous()?, v: v.contiguous()?, len }));
        }
        Ok(KvCache { layers: out })
    }

    /// Decoder blocks the cache has room for (0 before the first forward).
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Cached length.
    pub fn len(&self) -> usize {
        self.layers.first().and_then(|l| l.as_ref()).map_or(0, |l| l.len)
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Block `layer`'s cached keys and values, `(B, kv, len, hd)` views (`None` before its first step).
    pub fn layer(&self, layer: usize) -> candle_core::Result<Option<(Tensor, Tensor)>> {
        match self.layers.get(layer).and_then(|l| l.as_ref()) {
            Some(l) => Ok(Some((l.k.narrow(2, 0, l.len)?, l.v.narrow(2, 0, l.len)?))),
            None => Ok(None),
        }
    }

    /// Keeps only the given batch rows, in that order (finished sequences leave the batch; a row may be
    /// repeated, to start several sequences from one prefill).
    pub fn select_rows(&mut self, rows: &Tensor) -> candle_core::Result<()> {
        for l in self.layers.iter_mut().flatten() {
            l.k = l.k.index_select(rows, 0)?;
            l.v = l.v.index_select(rows, 0)?;
        }
        Ok(())
    }
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
        Ok(Decoder { cos: freqs.cos()?, sin: freqs.sin()?, cfg, weights })
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
    ) -> candle_core::Result<Tensor> {
        if train {
            let lora = adapters.map(|a| a.factors((layer, target), x.dim(0)?, routed)).transpose()?.flatten();
            return fused::projection(x, w, b, lora.as_ref());
        }
        let blocks = self.weights.packed.as_ref().and_then(|p| p.sites.get(&(layer, target)));
        let y = match blocks.map(|p| fused::packed_linear(x, p)).transpose()?.flatten() {
            Some(y) => y,
            None => fused::decode_linear(x, w)?,
        };
        let y = match b {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
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

    /// One block. `x: (B·T, H)`; `rope`: the new tokens' cos and sin tables, `(T, hd/2)` or per row
    /// `(B, T, hd/2)`, and `mask`: additive, broadcastable to `(B, kv, rep·T, T_total)`, both for the fused path
    /// only (training attention is causal from position 0 by construction); `cache`: this layer's cache
    /// (sampling only).
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        li: usize,
        l: &LayerWeights,
        x: &Tensor,
        (b, t): (usize, usize),
        rope: Option<(&Tensor, &Tensor)>,
        mask: Option<&Tensor>,
        adapters: Option<&AdapterSet>,
        routed: Option<&[bool]>,
        cache: Option<&mut Option<LayerCache>>,
        pass: Pass<'_>,
    ) -> candle_core::Result<Tensor> {
        let train = !matches!(pass, Pass::Sample);
        let c = &self.cfg;
        let (nh, nkv, hd) = (c.num_heads, c.num_kv_heads, c.head_dim);
        let rep = nh / nkv;
        let h = self.rms(x, &l.attn_norm, train)?;
        let q = self.proj(&h, li, Target::Q, &l.q, l.q_bias.as_ref(), adapters, routed, train)?;
        let k = self.proj(&h, li, Target::K, &l.k, l.k_bias.as_ref(), adapters, routed, train)?;
        let v = self.proj(&h, li, Target::V, &l.v, l.v_bias.as_ref(), adapters, routed, train)?;
        let att = if train {
            self.attention_train(l, &q, &k, &v, (b, t), pass)?
        } else {
            let mut q = q.reshape((b, t, nh, hd))?.transpose(1, 2)?.contiguous()?;
            let mut k = k.reshape((b, t, nkv, hd))?.transpose(1, 2)?.contiguous()?;
            let v = v.reshape((b, t, nkv, hd))?.transpose(1, 2)?.contiguous()?;
            if let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm) {
                q = self.rms(&q, qn, false)?;
                k = self.rms(&k, kn, false)?;
            }
            let Some((cos, sin)) = rope else { candle_core::bail!("the fused attention needs its rope tables") };
            let q = candle_nn::rotary_emb::rope(&q, cos, sin)?;
            let k = candle_nn::rotary_emb::rope(&k, cos, sin)?;
            let (k, v) = match cache {
                Some(slot) => match slot {
                    Some(l) => l.append(&k, &v)?,
                    None => {
                        *slot = Some(LayerCache { k: k.clone(), v: v.clone(), len: t });
                        (k, v)
                    }
                },
                None => (k, v),
            };
            let scale = 1.0 / (hd as f64).sqrt();
            let Some(mask) = mask else { candle_core::bail!("the fused attention needs its additive mask") };
            let att = if mask.dims() == [b, 1, rep * t, k.dim(2)?] {
                // A cached forward's per-row mask: the cache is read in place.
                fused::cached_attention(&q, &k, &v, mask, scale)?
            } else {
                // Fold the query heads of a group into rows: (B, kv, rep·T, hd).
                let qg = q.reshape((b, nkv, rep * t, hd))?;
                let p = candle_nn::ops::softmax_last_dim(&(qg.matmul(&k.t()?)? * scale)?.broadcast_add(mask)?)?;
                p.matmul(&v)?.reshape((b, nh, t, hd))?
            };
            att.transpose(1, 2)?.reshape((b * t, nh * hd))?
        };
        let o = self.proj(&att, li, Target::O, &l.o, None, adapters, routed, train)?;
        let x = (x + o)?;
        let h = self.rms(&x, &l.ffn_norm, train)?;
        let g = self.proj(&h, li, Target::Gate, &l.gate, None, adapters, routed, train)?;
        let u = self.proj(&h, li, Target::Up, &l.up, None, adapters, routed, train)?;
        let a = if train { fused::silu_mul(&g, &u)? } else { (g.silu()? * u)? };
        let d = self.proj(&a, li, Target::Down, &l.down, None, adapters, routed, train)?;
        x + d
    }

    /// Training attention on the token-major projections `(rows, heads·hd)`: causal over right-padded
    /// sequences from position 0 (`Pass::Train`, no mask needed), or over a shared prefix and its segments
    /// (`Pass::TrainShared`, each row at its own position).
    fn attention_train(&self, l: &LayerWeights, q: &Tensor, k: &Tensor, v: &Tensor, (b, t): (usize, usize), pass: Pass<'_>) -> candle_core::Result<Tensor> {
        let c = &self.cfg;
        let (nh, nkv, hd) = (c.num_heads, c.num_kv_heads, c.head_dim);
        let rows = b * t;
        let mut q = q.reshape((rows, nh, hd))?;
        let mut k = k.reshape((rows, nkv, hd))?;
        if let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm) {
            q = fused::rms_norm(&q, qn, c.rms_norm_eps)?;
            k = fused::rms_norm(&k, kn, c.rms_norm_eps)?;
        }
        let (cos, sin) = match pass {
            Pass::TrainShared(s) => (s.cos.clone(), s.sin.clone()),
            _ => (self.cos.narrow(0, 0, t)?, self.sin.narrow(0, 0, t)?),
        };
        let q = fused::rope_token_major(&q, &cos, &sin)?.reshape((rows, nh * hd))?;
        let k = fused::rope_token_major(&k, &cos, &sin)?.reshape((rows, nkv * hd))?;
        match pass {
            Pass::TrainShared(s) => fused::shared_prefix_attention(&q, &k, v, &s.shape),
            _ => fused::causal_attention(&q, &k, v, fused::AttentionShape { batch: b, seq: t, heads: nh, kv_heads: nkv, head_dim: hd }),
        }
    }

    /// Causal additive mask for the fused whole-sequence forward, `(rep·T, T)`.
    fn causal_mask(&self, t: usize) -> candle_core::Result<Tensor> {
        let rep = self.cfg.num_heads / self.cfg.num_kv_heads;
        let mut m = Vec::with_capacity(rep * t * t);
        for _ in 0..rep {
            for i in 0..t {
                m.extend((0..t).map(|j| if j <= i { 0f32 } else { f32::NEG_INFINITY }));
            }
        }
        Tensor::from_vec(m, (rep * t, t), self.device())
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
        self.block(li, &self.weights.layers[li], x, bt, None, None, adapters, routed, None, Pass::Train)
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
        let (b, t) = tokens.dims2()?;
        let rows: Option<Vec<bool>> = routed.map(|r| r.iter().flat_map(|&x| std::iter::repeat_n(x, t)).collect());
        let mut x = self.weights.embed.index_select(&tokens.flatten_all()?, 0)?;
        let checkpoint = checkpoint.filter(|_| self.device().is_cpu());
        for (li, l) in self.weights.layers.iter().enumerate() {
            let Some(side) = checkpoint else {
                x = self.block(li, l, &x, (b, t), None, None, adapters, rows.as_deref(), None, Pass::Train)?;
                continue;
            };
            // The values, computed with a graph that is dropped at once (detach keeps only the storage).
            let y = self.block_train(li, &x, (b, t), adapters, rows.as_deref())?.detach();
            let op = super::checkpoint::BlockCheckpoint {
                decoder: self.clone(),
                layer: li,
                bt: (b, t),
                adapters: adapters.cloned(),
                routed: rows.clone(),
                side: side.clone(),
            };
            // The first block's input is the (untracked) embedding: mark it so that the op is recorded.
            let xin = if x.track_op() { x.clone() } else { Var::from_tensor(&x)?.as_tensor().clone() };
            x = xin.apply_op2_arc(&y, std::sync::Arc::new(Box::new(op)))?;
        }
        fused::rms_norm(&x, &self.weights.norm, self.cfg.rms_norm_eps)
    }

    /// The differentiable forward over a shared prefix and the segments that continue it: `tokens` are the
    /// rows `[prefix | segment 0 | segment 1 | …]` as `shape` lays them out, each segment attending to the
    /// prefix and to itself as if it were the sequence `prefix ++ segment`. `routed`: every row's routing.
    /// Returns the normed hidden states `(rows, H)`. The prefix runs once, and its keys and values gather
    /// the gradient of every segment (see [`fused::shared_prefix_attention`]).
    pub fn hidden_train_shared(
        &self,
        tokens: &[u32],
        shape: &fused::SharedPrefixShape,
        adapters: Option<&AdapterSet>,
        routed: Option<&[bool]>,
    ) -> candle_core::Result<Tensor> {
        let rows = shape.rows();
        if tokens.len() != rows || routed.is_some_and(|r| r.len() != rows) || rows == 0 {
            candle_core::bail!("hidden_train_shared: {} tokens and {:?} routing flags for a layout of {rows} rows", tokens.len(), routed.map(<[bool]>::len));
        }
        let dev = self.device();
        let positions = Tensor::from_vec(shape.positions(), rows, dev)?;
        let layout = SharedRows { shape: shape.clone(), cos: self.cos.index_select(&positions, 0)?, sin: self.sin.index_select(&positions, 0)? };
        let mut x = self.weights.embed.index_select(&Tensor::from_slice(tokens, rows, dev)?, 0)?;
        for (li, l) in self.weights.layers.iter().enumerate() {
            x = self.block(li, l, &x, (1, rows), None, None, adapters, routed, None, Pass::TrainShared(&layout))?;
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
        fused::projection(&x, self.weights.lm_head(), None, None)?.reshape((b, t, ()))
    }

    /// The differentiable forward: logits `(B, T, V)` (see [`Decoder::hidden_train`]).
    pub fn forward_train(&self, tokens: &Tensor, adapters: Option<&AdapterSet>, routed: Option<&[bool]>) -> candle_core::Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        let x = self.hidden_train(tokens, adapters, routed, None)?;
        fused::projection(&x, self.weights.lm_head(), None, None)?.reshape((b, t, ()))
    }

    /// The fused forward with a KV cache: `tokens: (B, T_new)` fill cache slots `cache.len()..+T_new`. Slots
    /// `holes[b]` of row `b` are padding: masked out as keys, and skipped when counting positions, so a
    /// row's tokens sit at positions 0, 1, 2, … whatever its layout (left padding is a hole at the start; a
    /// row assembled from a shared prefix and its own tokens has the hole between them). Returns the logits
    /// of the last slot, `(B, V)`.
    pub fn forward_cached(&self, tokens: &Tensor, holes: &[Range<usize>], cache: &mut KvCache, adapters: Option<&AdapterSet>) -> candle_core::Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        if holes.len() != b {
            candle_core::bail!("{} row layouts for a batch of {b}", holes.len());
        }
        let offset = cache.len();
        if cache.layers.len() != self.cfg.num_layers {
            cache.layers = (0..self.cfg.num_layers).map(|_| None).collect();
        }
        let rep = self.cfg.num_heads / self.cfg.num_kv_heads;
        let tk = offset + t;
        // Row i (query slot offset+i) may see key j when j <= offset+i and j is not padding; a padding
        // query sees itself, so that no row is all -inf (a NaN there would poison later layers' keys).
        let mut m = Vec::with_capacity(b * rep * t * tk);
        let mut positions = Vec::with_capacity(b * t);
        for hole in holes {
            if hole.end > tk || hole.start > hole.end {
                candle_core::bail!("padding slots {hole:?} outside the {tk} slots of this forward");
            }
            for _ in 0..rep {
                for i in 0..t {
                    let qi = offset + i;
                    m.extend((0..tk).map(|j| if j <= qi && (!hole.contains(&j) || j == qi) { 0f32 } else { f32::NEG_INFINITY }));
                }
            }
            positions.extend((offset..tk).map(|j| if j >= hole.end { j - hole.len() } else { j.min(hole.start) } as u32));
        }
        let mask = Tensor::from_vec(m, (b, 1, rep * t, tk), self.device())?;
        let positions = Tensor::from_vec(positions, b * t, self.device())?;
        let half = self.cfg.head_dim / 2;
        let cos = self.cos.index_select(&positions, 0)?.reshape((b, t, half))?;
        let sin = self.sin.index_select(&positions, 0)?.reshape((b, t, half))?;
        let mut x = self.weights.embed.index_select(&tokens.flatten_all()?, 0)?;
        for (li, l) in self.weights.layers.iter().enumerate() {
            x = self.block(li, l, &x, (b, t), Some((&cos, &sin)), Some(&mask), adapters, None, Some(&mut cache.layers[li]), Pass::Sample)?;
        }
        let x = x.reshape((b, t, ()))?.narrow(1, t - 1, 1)?.squeeze(1)?.contiguous()?;
        let x = candle_nn::ops::rms_norm(&x, &self.weights.norm, self.cfg.rms_norm_eps as f32)?;
        let blocks = self.weights.packed.as_ref().and_then(|p| p.lm_head.as_ref());
        match blocks.map(|p| fused::packed_linear(&x, p)).transpose()?.flatten() {
            Some(logits) => Ok(logits),
            None => fused::decode_linear(&x, self.weights.lm_head()),
        }
    }

    /// The fused path over a whole sequence without cache reuse, logits `(B, T, V)` (tests compare it with
    /// [`Decoder::forward_train`]).
    pub fn forward_fused_all(&self, tokens: &Tensor, adapters: Option<&AdapterSet>) -> candle_core::Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        let mask = self.causal_mask(t)?;
        let (cos, sin) = (self.cos.narrow(0, 0, t)?, self.sin.narrow(0, 0, t)?);
        let mut x = self.weights.embed.index_select(&tokens.flatten_all()?, 0)?;
        for (li, l) in self.weights.layers.iter().enumerate() {
            x = self.block(li, l, &x, (b, t), Some((&cos, &sin)), Some(&mask), adapters, None, None, Pass::Sample)?;
        }
        let x = candle_nn::ops::rms_norm(&x, &self.weights.norm, self.cfg.rms_norm_eps as f32)?;
        x.matmul(&self.weights.lm_head().t()?)?.reshape((b, t, ()))
    }
}
