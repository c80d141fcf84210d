//! Attention of the new positions of a ragged batch of sequences over their KV caches, read in place.
//!
//! Why: in a rollout the cache is long (a system prompt, a demonstration and tool output: about a
//! thousand positions), and its keys and values outweigh the model: 8 rows x 1,000 positions of
//! SmolLM2-135M's are 368 MB a step against 84 MB of Q4_1 weights. Composed from candle ops, each layer's
//! scores went through a general matrix product that packed (copied) every cached key first. Here one
//! task per (sequence, kv group) streams its cached keys once through the decode kernels
//! (`agentrt_kernels::decode::rows_f32`: each key row dotted with the group's few query rows while it sits
//! in L1), and multiplies the probabilities into the values (`agentrt_kernels::decode::add_weighted_rows`:
//! each output row held in registers over all its keys).
//!
//! A sequence's keys and values come in segments (shared prefixes, then its own cache: see
//! [`crate::model::SequenceKv`]), read one after the other as if they were one tensor, so sequences that
//! share a prefix read the same memory instead of copies of it, and decoding sequences that start with the
//! same segment read it once per step between them (a cascade: the shared part's partial softmax is merged
//! into each sequence's own). Sequences are ragged: each has its own number of new positions and of cached
//! ones, and no padding. No backward: sampling only.

use super::decode_linear::Batching;
use super::Shared;
use candle_core::{CpuStorage, DType, Storage, Tensor};
use rayon::prelude::*;

/// Query rows (query heads of a group x new positions) a task streams the keys past at most: a prompt's
/// new positions are cut into chunks of this many rows, so the scores stay in cache and no
/// `(positions, keys)` matrix is ever allocated (fresh pages of tens of MB a layer cost more than the
/// products did, composed from candle ops).
pub const MAX_QUERY_ROWS: usize = 16;

/// One sequence of a ragged batch: its new positions `start..start + new` of the queries, and its keys and
/// values as segments `(1, kv_heads, n, head_dim)` in position order, the last `new` positions being the
/// new ones (already appended).
#[derive(Debug, Clone)]
pub struct CachedSequence {
    /// The first of its new positions in the batch's queries.
    pub start: usize,
    /// How many new positions it has (at least one).
    pub new: usize,
    /// Its cached keys and values, segment by segment.
    pub segments: Vec<(Tensor, Tensor)>,
}

impl CachedSequence {
    fn keys(&self) -> candle_core::Result<usize> {
        self.segments.iter().map(|(k, _)| k.dim(2)).sum()
    }
}

/// The f32 data of a CPU storage.
fn f32_data<'a>(s: &'a Storage, what: &str) -> candle_core::Result<&'a [f32]> {
    match s {
        Storage::Cpu(CpuStorage::F32(v)) => Ok(v),
        _ => candle_core::bail!("cached-attention: {what} must be an f32 CPU tensor"),
    }
}

/// `softmax(scale · q·kᵀ + causal) · v` per sequence, for `q: (heads, N, hd)` (every sequence's new
/// positions, one after the other) and each sequence's segments: new position `i` of a sequence with
/// `L` keys sees keys `..= L - new + i`. Returns `(heads, N, hd)`. Streamed on f32 CPU tensors; the composed
/// candle ops elsewhere.
///
/// Under [`Batching::Invariant`] no cascade is formed, so a row's arithmetic is its own whatever else is
/// decoded beside it: the scores by the decode kernels (a fixed order per row), the softmax's sums and the
/// values' weighted sum key after key (`agentrt_kernels::decode::add_weighted_rows`: the same bits however
/// the keys are split into segments and the positions into chunks, where a general matrix product over each
/// segment sums in blocks that depend on the shapes).
pub fn cached_attention(q: &Tensor, seqs: &[CachedSequence], scale: f64, batching: Batching) -> candle_core::Result<Tensor> {
    let (nh, n, hd) = q.dims3()?;
    let mut covered = 0;
    for s in seqs {
        let keys = s.keys()?;
        if s.start != covered || s.new == 0 || keys < s.new {
            candle_core::bail!("cached-attention: a sequence of {} new positions at {} ({keys} keys) does not follow position {covered}", s.new, s.start);
        }
        for (k, v) in &s.segments {
            let (b, nkv, _, khd) = k.dims4()?;
            if b != 1 || khd != hd || v.dims() != k.dims() || nkv == 0 || !nh.is_multiple_of(nkv) {
                candle_core::bail!("cached-attention: q {:?}, a segment's k {:?} and v {:?} do not fit", q.shape(), k.shape(), v.shape());
            }
        }
        covered += s.new;
    }
    if covered != n {
        candle_core::bail!("cached-attention: sequences cover {covered} of {n} query positions");
    }
    let Some(nkv) = seqs.first().and_then(|s| s.segments.first()).map(|(k, _)| k.dim(1)).transpose()? else {
        return q.zeros_like();
    };
    let rep = nh / nkv;
    let on_cpu_f32 = q.device().is_cpu()
        && q.dtype() == DType::F32
        && seqs.iter().flat_map(|s| &s.segments).all(|(k, v)| k.dtype() == DType::F32 && v.dtype() == DType::F32);
    if !on_cpu_f32 {
        let outs = seqs.iter().map(|s| composed_one(q, s, scale)).collect::<candle_core::Result<Vec<_>>>()?;
        return Tensor::cat(&outs, 1);
    }
    // The tasks read each kv head's positions as rows of hd. A segment of one position may carry any stride
    // for it (a decoding step's values, transposed from token-major, keep the token-major one), and is such
    // rows all the same; any other layout is copied into them here rather than read by a slower path with
    // other arithmetic (which would make a sequence's output depend on how its cache is laid out).
    let rows_contiguous = |x: &Tensor| x.stride()[3] == 1 && (x.dim(2).is_ok_and(|p| p <= 1) || x.stride()[2] == hd);
    let relaid: Vec<CachedSequence>;
    let seqs = if seqs.iter().flat_map(|s| &s.segments).all(|(k, v)| rows_contiguous(k) && rows_contiguous(v)) {
        seqs
    } else {
        let row_major = |x: &Tensor| -> candle_core::Result<Tensor> {
            let x = if rows_contiguous(x) { x.clone() } else { x.contiguous()? };
            if !rows_contiguous(&x) {
                candle_core::bail!("cached-attention: a segment {:?} with strides {:?} could not be laid out as rows", x.dims(), x.stride());
            }
            Ok(x)
        };
        relaid = seqs
            .iter()
            .map(|s| {
                let segments = s.segments.iter().map(|(k, v)| Ok((row_major(k)?, row_major(v)?))).collect::<candle_core::Result<Vec<_>>>()?;
                Ok(CachedSequence { segments, ..s.clone() })
            })
            .collect::<candle_core::Result<_>>()?;
        &relaid[..]
    };
    let q = q.contiguous()?;
    let mut out = vec![0f32; nh * n * hd];
    // Tasks of at most MAX_QUERY_ROWS query rows a group: a prefill's new positions are cut into chunks,
    // and a chunk reads only the keys its last position sees (causality halves a whole prompt's work).
    // Each: (sequence, first new position in the batch, positions, keys seen by its last position).
    let chunk = (MAX_QUERY_ROWS / rep).max(1);
    let mut tasks: Vec<(usize, usize, usize, usize)> = Vec::new();
    for (si, s) in seqs.iter().enumerate() {
        let keys = s.keys()?;
        for from in (0..s.new).step_by(chunk) {
            let c = chunk.min(s.new - from);
            tasks.push((si, s.start + from, c, keys - s.new + from + c));
        }
    }
    // Decoding sequences whose first segment is the same tensor (the system prompt every rollout starts
    // from) read it once between them: a cascade task streams it past all their query rows and leaves each
    // row's partial softmax (max, sum, unnormalised output), which the sequence's own task merges with its
    // other segments'. Each cascade: up to `chunk` sequences, one partial slot each.
    let mut cascades: Vec<Vec<usize>> = Vec::new();
    let mut slot_of: Vec<Option<usize>> = vec![None; seqs.len()];
    {
        let mut by_prefix: Vec<(candle_core::TensorId, Vec<usize>)> = Vec::new();
        let cascading = batching == Batching::Fastest;
        for (si, s) in seqs.iter().enumerate().filter(|(_, s)| cascading && s.new == 1 && s.segments.len() > 1) {
            let id = s.segments[0].0.id();
            match by_prefix.iter_mut().find(|(i, _)| *i == id) {
                Some((_, members)) => members.push(si),
                None => by_prefix.push((id, vec![si])),
            }
        }
        let mut slots = 0;
        for (_, members) in by_prefix.into_iter().filter(|(_, m)| m.len() > 1) {
            for c in members.chunks(chunk) {
                for &si in c {
                    slot_of[si] = Some(slots);
                    slots += 1;
                }
                cascades.push(c.to_vec());
            }
        }
    }
    let slots = slot_of.iter().flatten().count();
    // Per (slot, kv group, head of the group): max, sum, and hd unnormalised outputs.
    let mut partial_max = vec![0f32; slots * nh];
    let mut partial_sum = vec![0f32; slots * nh];
    let mut partial_out = vec![0f32; slots * nh * hd];
    {
        // The storages stay read-locked while the tasks read them in place.
        let (q_store, q_layout) = q.storage_and_layout();
        let qs = &f32_data(&q_store, "q")?[q_layout.start_offset()..];
        let guards: Vec<Vec<_>> = seqs.iter().map(|s| s.segments.iter().map(|(k, v)| (k.storage_and_layout(), v.storage_and_layout())).collect()).collect();
        // Per sequence, per segment: (keys, values, positions, kv-head stride of each).
        type Segment<'a> = (&'a [f32], &'a [f32], usize, usize, usize);
        let mut views: Vec<Vec<Segment>> = Vec::with_capacity(seqs.len());
        for g in &guards {
            let mut segs = Vec::with_capacity(g.len());
            for ((ks, kl), (vs, vl)) in g {
                let (k, v) = (&f32_data(ks, "k")?[kl.start_offset()..], &f32_data(vs, "v")?[vl.start_offset()..]);
                segs.push((k, v, kl.dims()[2], kl.stride()[1], vl.stride()[1]));
            }
            views.push(segs);
        }
        let path = agentrt_kernels::selected();
        // The group's query rows at `t` new positions from `start`, head-major (row h·t + i), into `dst`.
        let gather = |dst: &mut [f32], g: usize, start: usize, t: usize| {
            for h in 0..rep {
                for i in 0..t {
                    let at = ((g * rep + h) * n + start + i) * hd;
                    dst[(h * t + i) * hd..][..hd].copy_from_slice(&qs[at..at + hd]);
                }
            }
        };
        let (pm, ps, po) = (Shared(partial_max.as_mut_ptr()), Shared(partial_sum.as_mut_ptr()), Shared(partial_out.as_mut_ptr()));
        (0..cascades.len() * nkv).into_par_iter().for_each(|task| {
            let (members, g) = (&cascades[task / nkv], task % nkv);
            let rows = members.len() * rep;
            let mut qg = vec![0f32; rows * hd];
            for (j, &si) in members.iter().enumerate() {
                gather(&mut qg[j * rep * hd..(j + 1) * rep * hd], g, seqs[si].start, 1);
            }
            let (ks, vs, m, kst, vst) = views[members[0]][0];
            let mut p = vec![0f32; m * rows];
            agentrt_kernels::decode::rows_f32(path, &qg, &ks[g * kst..g * kst + m * hd], &mut p, rows, hd);
            // Every key of the shared prefix lies before a decoding position: all are seen (as by the last
            // of one new position).
            let (max, sum) = softmax_key_major(&mut p, rows, 1, scale as f32);
            let mut og = vec![0f32; rows * hd];
            agentrt_kernels::decode::add_weighted_rows(path, &mut og, &p, rows, &vs[g * vst..][..m * hd], &vec![m; rows]);
            for (j, &si) in members.iter().enumerate() {
                let at = (slot_of[si].expect("a cascade member has a slot") * nkv + g) * rep;
                // SAFETY: each (slot, group) is written by this task alone, and read only after all end.
                unsafe {
                    std::ptr::copy_nonoverlapping(max[j * rep..].as_ptr(), pm.at(at), rep);
                    std::ptr::copy_nonoverlapping(sum[j * rep..].as_ptr(), ps.at(at), rep);
                    std::ptr::copy_nonoverlapping(og[j * rep * hd..].as_ptr(), po.at(at * hd), rep * hd);
                }
            }
        });
        let dst = Shared(out.as_mut_ptr());
        let (partial_max, partial_sum, partial_out) = (&partial_max, &partial_sum, &partial_out);
        (0..tasks.len() * nkv).into_par_iter().for_each(|task| {
            let ((si, start, t, len), g) = (tasks[task / nkv], task % nkv);
            let rows = rep * t;
            let mut qg = vec![0f32; rows * hd];
            gather(&mut qg, g, start, t);
            // The segments' first `len` keys, in order (without the shared prefix a cascade read).
            let skip = usize::from(slot_of[si].is_some());
            let mut parts = Vec::with_capacity(views[si].len());
            let mut left = len - views[si][..skip].iter().map(|x| x.2).sum::<usize>();
            let len = left;
            for &(ks, vs, m, kst, vst) in &views[si][skip..] {
                if left == 0 {
                    break;
                }
                parts.push((ks, vs, m.min(left), kst, vst));
                left -= m.min(left);
            }
            // Scores, (len, rows): key j's dot with every query row, segment after segment.
            let mut p = vec![0f32; len * rows];
            let mut from = 0;
            for &(ks, _, m, kst, _) in &parts {
                agentrt_kernels::decode::rows_f32(path, &qg, &ks[g * kst..g * kst + m * hd], &mut p[from * rows..(from + m) * rows], rows, hd);
                from += m;
            }
            let (max, sum) = softmax_key_major(&mut p, rows, t, scale as f32);
            let mut og = vec![0f32; rows * hd];
            // Row r (new position r % t) sees the keys before `len - t + r % t + 1`.
            let sees: Vec<usize> = (0..rows).map(|r| len - t + r % t + 1).collect();
            let mut from = 0;
            let mut seen = vec![0; rows];
            for &(_, vs, m, _, vst) in &parts {
                for (here, &s) in seen.iter_mut().zip(&sees) {
                    *here = s.clamp(from, from + m) - from;
                }
                agentrt_kernels::decode::add_weighted_rows(path, &mut og, &p[from * rows..(from + m) * rows], rows, &vs[g * vst..][..m * hd], &seen);
                from += m;
            }
            for (r, o) in og.chunks_exact_mut(hd).enumerate() {
                let (own, inv) = match slot_of[si] {
                    // Merge with the cascade's partial for this row (t is 1: row r is head r).
                    Some(slot) => {
                        let at = (slot * nkv + g) * rep + r;
                        let top = max[r].max(partial_max[at]);
                        let (a, b) = ((partial_max[at] - top).exp(), (max[r] - top).exp());
                        for (x, y) in o.iter_mut().zip(&partial_out[at * hd..(at + 1) * hd]) {
                            *x = *x * b + y * a;
                        }
                        (o, 1.0 / (partial_sum[at] * a + sum[r] * b))
                    }
                    None => (o, 1.0 / sum[r]),
                };
                own.iter_mut().for_each(|x| *x *= inv);
            }
            for h in 0..rep {
                for i in 0..t {
                    let at = ((g * rep + h) * n + start + i) * hd;
                    // SAFETY: this task alone writes the rows of its group's heads at its positions.
                    unsafe { std::ptr::copy_nonoverlapping(og[(h * t + i) * hd..].as_ptr(), dst.at(at), hd) };
                }
            }
        });
        drop(guards);
        drop(q_store);
    }
    Tensor::from_vec(out, (nh, n, hd), q.device())
}

/// The exponentials of a softmax over keys of `p: (len, rows)` (key-major: a key's scores for every query
/// row are contiguous, so the loops run along them), scaled by `scale`, with query row `r` (new position
/// `r % t` of `t`) seeing the first `len - t + r % t + 1` keys; unseen keys get 0. Leaves `p` unnormalised
/// and returns each row's max and sum, so a softmax over other keys can be merged in.
fn softmax_key_major(p: &mut [f32], rows: usize, t: usize, scale: f32) -> (Vec<f32>, Vec<f32>) {
    let len = p.len() / rows;
    let all_see = len - t;
    let mut max = vec![f32::NEG_INFINITY; rows];
    for (j, key) in p.chunks_exact_mut(rows).enumerate() {
        if j < all_see {
            for (m, x) in max.iter_mut().zip(key.iter_mut()) {
                *x *= scale;
                *m = m.max(*x);
            }
        } else {
            for (r, (m, x)) in max.iter_mut().zip(key.iter_mut()).enumerate() {
                if j <= all_see + r % t {
                    *x *= scale;
                    *m = m.max(*x);
                } else {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
    }
    let mut sum = vec![0f32; rows];
    for key in p.chunks_exact_mut(rows) {
        for ((s, m), x) in sum.iter_mut().zip(&max).zip(key.iter_mut()) {
            *x = (*x - m).exp();
            *s += *x;
        }
    }
    (max, sum)
}

/// One sequence's attention from candle ops (the reference, and the path where streaming does not apply):
/// `(heads, new, hd)`.
pub fn composed_one(q: &Tensor, s: &CachedSequence, scale: f64) -> candle_core::Result<Tensor> {
    let (nh, _, hd) = q.dims3()?;
    let ks: Vec<&Tensor> = s.segments.iter().map(|(k, _)| k).collect();
    let vs: Vec<&Tensor> = s.segments.iter().map(|(_, v)| v).collect();
    let (k, v) = (Tensor::cat(&ks, 2)?.squeeze(0)?, Tensor::cat(&vs, 2)?.squeeze(0)?);
    let (nkv, len, t) = (k.dim(0)?, k.dim(1)?, s.new);
    let rep = nh / nkv;
    let mut m = Vec::with_capacity(rep * t * len);
    for _ in 0..rep {
        for i in 0..t {
            m.extend((0..len).map(|j| if j + t <= len + i { 0f32 } else { f32::NEG_INFINITY }));
        }
    }
    let mask = Tensor::from_vec(m, (rep * t, len), q.device())?.to_dtype(q.dtype())?;
    let qg = q.narrow(1, s.start, t)?.contiguous()?.reshape((nkv, rep * t, hd))?;
    let p = candle_nn::ops::softmax_last_dim(&(qg.matmul(&k.t()?)? * scale)?.broadcast_add(&mask)?)?;
    p.matmul(&v.contiguous()?)?.reshape((nh, t, hd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The streaming path against the composed ops, on segments that are views of larger buffers (a cached
    /// prefix, a growable own cache), for sequences of one new position and of several.
    #[test]
    fn streaming_equals_the_composed_ops_on_segmented_caches() {
        let dev = Device::Cpu;
        let (nh, nkv, hd) = (6, 2, 16);
        let buffer = |n: usize, cap: usize| {
            let k = Tensor::randn(0f32, 1.0, (1, nkv, cap, hd), &dev).unwrap();
            let v = Tensor::randn(0f32, 1.0, (1, nkv, cap, hd), &dev).unwrap();
            (k.narrow(2, 0, n).unwrap(), v.narrow(2, 0, n).unwrap())
        };
        // (new positions, segment lengths): one-token decodes, a short prefill, long ones (in chunks).
        let shapes: [(usize, &[usize]); 5] = [(1, &[37]), (3, &[20, 5]), (1, &[64, 9, 1]), (12, &[30, 40]), (70, &[3, 70])];
        let mut seqs = Vec::new();
        let mut start = 0;
        for (new, lens) in shapes {
            seqs.push(CachedSequence { start, new, segments: lens.iter().map(|&n| buffer(n, n + 7)).collect() });
            start += new;
        }
        // Decoding sequences that share their first segment (a cascade reads it once for them).
        let prefix = buffer(50, 60);
        for own in [3, 1, 8] {
            seqs.push(CachedSequence { start, new: 1, segments: vec![prefix.clone(), buffer(own, own + 2)] });
            start += 1;
        }
        let q = Tensor::randn(0f32, 1.0, (nh, start, hd), &dev).unwrap();
        for batching in [Batching::Invariant, Batching::Fastest] {
            let got = cached_attention(&q, &seqs, 0.25, batching).unwrap();
            for s in &seqs {
                let want = composed_one(&q, s, 0.25).unwrap();
                let d = (got.narrow(1, s.start, s.new).unwrap() - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                assert!(d < 1e-5, "{batching:?}: {} new positions over {} segments: differs by {d}", s.new, s.segments.len());
            }
        }
    }

    /// Under [`Batching::Invariant`], a position's attention is the same bits whether its sequence's
    /// prompt is read whole, or after a cached prefix in another chunking, or the position is decoded
    /// beside other sequences that start with the same cached prefix.
    #[test]
    fn invariant_attention_does_not_depend_on_segments_chunks_or_neighbours() {
        let dev = Device::Cpu;
        let (nh, nkv, hd, len, cut) = (6, 2, 16, 40, 25);
        let k = Tensor::randn(0f32, 1.0, (1, nkv, len, hd), &dev).unwrap();
        let v = Tensor::randn(0f32, 1.0, (1, nkv, len, hd), &dev).unwrap();
        let q = Tensor::randn(0f32, 1.0, (nh, len, hd), &dev).unwrap();
        let bits = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
        let whole = cached_attention(&q, &[CachedSequence { start: 0, new: len, segments: vec![(k.clone(), v.clone())] }], 0.25, Batching::Invariant).unwrap();
        // The prefix as its own segment (as the prefix cache hands it), the rest read as new positions.
        // A view of a buffer with room to grow, as a sequence's own cache leaves it to the prefix cache.
        let roomy = |t: &Tensor| Tensor::cat(&[t.clone(), Tensor::randn(0f32, 1.0, (1, nkv, 30, hd), &dev).unwrap()], 2).unwrap().narrow(2, 0, cut).unwrap();
        let prefix = (roomy(&k), roomy(&v));
        let own =
            |from: usize, to: usize| (k.narrow(2, from, to - from).unwrap().contiguous().unwrap(), v.narrow(2, from, to - from).unwrap().contiguous().unwrap());
        let rest = cached_attention(
            &q.narrow(1, cut, len - cut).unwrap(),
            &[CachedSequence { start: 0, new: len - cut, segments: vec![prefix.clone(), own(cut, len)] }],
            0.25,
            Batching::Invariant,
        )
        .unwrap();
        assert_eq!(bits(&rest), bits(&whole.narrow(1, cut, len - cut).unwrap()), "after a cached prefix");
        // The last position decoded beside two sequences with the same first segment (a cascade's case).
        let mut qs = vec![q.narrow(1, len - 1, 1).unwrap()];
        let mut seqs = vec![CachedSequence { start: 0, new: 1, segments: vec![prefix.clone(), own(cut, len)] }];
        for (i, own_len) in [3, 9].into_iter().enumerate() {
            qs.push(Tensor::randn(0f32, 1.0, (nh, 1, hd), &dev).unwrap());
            seqs.push(CachedSequence { start: i + 1, new: 1, segments: vec![prefix.clone(), own(cut, cut + own_len)] });
        }
        let beside = cached_attention(&Tensor::cat(&qs, 1).unwrap(), &seqs, 0.25, Batching::Invariant).unwrap();
        assert_eq!(bits(&beside.narrow(1, 0, 1).unwrap()), bits(&whole.narrow(1, len - 1, 1).unwrap()), "decoded beside others");
        // The last position as a decoding step appends it: its own segment of one position, its values
        // transposed from token-major `(1, kv, hd)` (a stride of kv·hd on the dimension of one position).
        let token_major = |t: &Tensor| {
            t.narrow(2, len - 1, 1).unwrap().squeeze(0).unwrap().transpose(0, 1).unwrap().contiguous().unwrap().transpose(0, 1).unwrap().unsqueeze(0).unwrap()
        };
        let last = (token_major(&k), token_major(&v));
        assert_ne!(last.1.stride()[2], hd, "the test's one-position segment has the odd stride");
        let before = (k.narrow(2, 0, len - 1).unwrap(), v.narrow(2, 0, len - 1).unwrap());
        let decoded = cached_attention(
            &q.narrow(1, len - 1, 1).unwrap(),
            &[CachedSequence { start: 0, new: 1, segments: vec![before, last] }],
            0.25,
            Batching::Invariant,
        )
        .unwrap();
        assert_eq!(bits(&decoded), bits(&whole.narrow(1, len - 1, 1).unwrap()), "a decoding step's own one-position segment");
    }

    #[test]
    fn sequences_that_do_not_tile_the_queries_are_refused() {
        let dev = Device::Cpu;
        let kv = Tensor::zeros((1, 1, 4, 8), DType::F32, &dev).unwrap();
        let q = Tensor::zeros((2, 3, 8), DType::F32, &dev).unwrap();
        let seq = |start, new| CachedSequence { start, new, segments: vec![(kv.clone(), kv.clone())] };
        assert!(cached_attention(&q, &[seq(0, 1), seq(2, 1)], 1.0, Batching::Invariant).unwrap_err().to_string().contains("does not follow"));
        assert!(cached_attention(&q, &[seq(0, 1)], 1.0, Batching::Invariant).unwrap_err().to_string().contains("cover 1 of 3"));
        assert!(cached_attention(&q, &[seq(0, 3)], 1.0, Batching::Invariant).is_ok());
    }
}
