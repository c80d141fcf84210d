//! The keys and values of one sequence being sampled: shared read-only segments, then its own cache.
//!
//! Sequences that start alike share the keys and values of what they have in common instead of copying
//! them: the G rollouts of a question all read the system prompt, the demonstration and the question from
//! the same tensors (a [`SharedKv`] segment), and each appends what it samples to a cache of its own. That
//! is copy-on-write at the granularity that matters here: a shared segment is never written again, and a
//! sequence forked from another ([`SequenceKv::fork`]) first freezes what it wrote into a segment both read.
//!
//! Each sequence is a row of its own (no padding, no batch-wide length), so a batch can take a new sequence
//! in, or let one go, between any two decoding steps without touching the others: continuous batching.

use candle_core::Tensor;
use std::sync::Arc;

/// Keys and values of consecutive positions, per decoder block, `(1, kv_heads, n, head_dim)` each; read-only.
#[derive(Debug, Clone)]
pub struct SharedKv {
    layers: Arc<Vec<(Tensor, Tensor)>>,
    len: usize,
}

impl SharedKv {
    /// Wraps `(keys, values)` per block, all `(1, kv_heads, n, head_dim)` with one `n` (views are kept as
    /// they are, not copied: a segment may be the front of a cached prefix).
    pub fn new(layers: Vec<(Tensor, Tensor)>) -> candle_core::Result<SharedKv> {
        let len = layers.first().map(|(k, _)| k.dim(2)).transpose()?.unwrap_or(0);
        for (k, v) in &layers {
            if k.dim(0)? != 1 || k.dim(2)? != len || v.dims() != k.dims() {
                candle_core::bail!("a shared segment's layers differ: keys {:?}, values {:?}, {len} positions", k.shape(), v.shape());
            }
        }
        Ok(SharedKv { layers: Arc::new(layers), len })
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first `len` positions (views of the same storage).
    pub fn narrow(&self, len: usize) -> candle_core::Result<SharedKv> {
        if len > self.len {
            candle_core::bail!("{len} positions asked of a shared segment of {}", self.len);
        }
        if len == self.len {
            return Ok(self.clone());
        }
        SharedKv::new(self.layers.iter().map(|(k, v)| Ok((k.narrow(2, 0, len)?, v.narrow(2, 0, len)?))).collect::<candle_core::Result<_>>()?)
    }

    /// Bytes of keys and values the segment covers (its storage may be larger: see [`SequenceKv::into_segments`]).
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|(k, v)| (k.elem_count() + v.elem_count()) * k.dtype().size_in_bytes()).sum()
    }
}

/// One block's own cache: `(1, kv, capacity, hd)` buffers with room to grow, so a decoding step writes its
/// one new position in place instead of copying the cache into a longer tensor.
#[derive(Debug)]
struct OwnLayer {
    k: Tensor,
    v: Tensor,
    len: usize,
}

impl OwnLayer {
    fn append(&mut self, k: &Tensor, v: &Tensor) -> candle_core::Result<()> {
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
        Ok(())
    }

    fn view(&self) -> candle_core::Result<(Tensor, Tensor)> {
        Ok((self.k.narrow(2, 0, self.len)?, self.v.narrow(2, 0, self.len)?))
    }
}

/// A sequence's keys and values: shared segments, then its own growing cache. Not `Clone`: two sequences
/// writing one own cache would write over each other; [`SequenceKv::fork`] is the way to share.
#[derive(Debug, Default)]
pub struct SequenceKv {
    shared: Vec<SharedKv>,
    own: Vec<Option<OwnLayer>>,
}

impl SequenceKv {
    /// A sequence that starts from the positions of `segments`, in order (none: from nothing).
    pub fn starting_from(segments: Vec<SharedKv>) -> SequenceKv {
        SequenceKv { shared: segments.into_iter().filter(|s| !s.is_empty()).collect(), own: Vec::new() }
    }

    /// Positions cached: the shared segments' and its own.
    pub fn len(&self) -> usize {
        self.shared.iter().map(SharedKv::len).sum::<usize>() + self.own_len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn own_len(&self) -> usize {
        self.own.first().and_then(|l| l.as_ref()).map_or(0, |l| l.len)
    }

    /// Writes block `layer`'s keys and values of the new positions, `(1, kv, t, hd)`, after those cached.
    pub(crate) fn append(&mut self, layer: usize, num_layers: usize, k: &Tensor, v: &Tensor) -> candle_core::Result<()> {
        if self.own.len() != num_layers {
            if self.own_len() > 0 {
                candle_core::bail!("a sequence cache of {} blocks used with a model of {num_layers}", self.own.len());
            }
            self.own = (0..num_layers).map(|_| None).collect();
        }
        match &mut self.own[layer] {
            Some(l) => l.append(k, v),
            slot @ None => {
                *slot = Some(OwnLayer { k: k.contiguous()?, v: v.contiguous()?, len: k.dim(2)? });
                Ok(())
            }
        }
    }

    /// Block `layer`'s keys and values in the order of the positions: each shared segment, then the own
    /// cache; views, nothing copied.
    pub(crate) fn segments(&self, layer: usize) -> candle_core::Result<Vec<(Tensor, Tensor)>> {
        let mut out: Vec<(Tensor, Tensor)> = self.shared.iter().map(|s| s.layers[layer].clone()).collect();
        if let Some(Some(own)) = self.own.get(layer) {
            if own.len > 0 {
                out.push(own.view()?);
            }
        }
        Ok(out)
    }

    /// A second sequence with the same positions: what this one wrote becomes a shared segment that both
    /// read (and neither writes), and each appends to a new cache of its own from here.
    pub fn fork(&mut self) -> candle_core::Result<SequenceKv> {
        if self.own_len() > 0 {
            let layers = std::mem::take(&mut self.own)
                .into_iter()
                .enumerate()
                .map(|(li, l)| l.ok_or_else(|| candle_core::Error::Msg(format!("block {li} of a used cache is empty")))?.view())
                .collect::<candle_core::Result<Vec<_>>>()?;
            self.shared.push(SharedKv::new(layers)?);
        }
        self.own.clear();
        Ok(SequenceKv { shared: self.shared.clone(), own: Vec::new() })
    }

    /// The sequence's first `len` positions as shared segments, nothing copied: what it wrote becomes a
    /// read-only segment (which keeps its whole buffer alive, growth room included), so a cached prefix
    /// and every sequence that later starts from it read the same memory.
    pub fn into_segments(mut self, len: usize) -> candle_core::Result<Vec<SharedKv>> {
        if len > self.len() {
            candle_core::bail!("{len} positions asked of a sequence cache of {}", self.len());
        }
        self.fork()?;
        first_positions(&self.shared, len)
    }
}

/// The segments that hold the first `len` positions of `segments`, the last one narrowed (views, nothing
/// copied).
pub(crate) fn first_positions(segments: &[SharedKv], len: usize) -> candle_core::Result<Vec<SharedKv>> {
    let mut out = Vec::with_capacity(segments.len());
    let mut left = len;
    for s in segments {
        if left == 0 {
            break;
        }
        let n = s.len().min(left);
        out.push(s.narrow(n)?);
        left -= n;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn positions(from: usize, n: usize) -> Tensor {
        Tensor::arange(from as u32, (from + n) as u32, &Device::Cpu).unwrap().to_dtype(DType::F32).unwrap().reshape((1, 1, n, 1)).unwrap()
    }

    fn values(kv: &SequenceKv) -> Vec<f32> {
        kv.segments(0).unwrap().iter().flat_map(|(k, _)| k.flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect()
    }

    #[test]
    fn forks_share_what_was_written_and_write_apart_from_there() {
        let prefix = SharedKv::new(vec![(positions(0, 3), positions(0, 3))]).unwrap();
        let mut a = SequenceKv::starting_from(vec![prefix]);
        a.append(0, 1, &positions(3, 2), &positions(3, 2)).unwrap();
        let mut b = a.fork().unwrap();
        a.append(0, 1, &positions(5, 1), &positions(5, 1)).unwrap();
        b.append(0, 1, &positions(50, 2), &positions(50, 2)).unwrap();
        assert_eq!(values(&a), [0., 1., 2., 3., 4., 5.]);
        assert_eq!(values(&b), [0., 1., 2., 3., 4., 50., 51.]);
        assert_eq!(a.segments(0).unwrap().len(), 3, "the prefix, the frozen part, a's own");
        let kept = b.into_segments(4).unwrap();
        assert_eq!(kept.iter().map(SharedKv::len).collect::<Vec<_>>(), [3, 1], "the prefix, then 1 of the frozen part's 2");
        let again = SequenceKv::starting_from(kept);
        assert_eq!(values(&again), [0., 1., 2., 3.]);
        assert!(again.into_segments(5).is_err());
    }

    #[test]
    fn an_own_cache_grows_past_its_first_capacity() {
        let mut a = SequenceKv::starting_from(vec![]);
        for i in 0..300 {
            a.append(0, 1, &positions(i, 1), &positions(i, 1)).unwrap();
        }
        assert_eq!(values(&a), (0..300).map(|i| i as f32).collect::<Vec<_>>());
    }
}
