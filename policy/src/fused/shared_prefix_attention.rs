//! Causal attention over a shared prefix and the segments that continue it, as one op with its backward.
//!
//! Why: the G samples of a training group start with the same prompt (system prompt, demonstration,
//! question). Forwarding each sample whole computes that prompt's activations G times, in the policy's
//! pass and in the KL reference's. Here the rows are `[prefix | segment 0 | segment 1 | …]`: the prefix is
//! attended causally by itself, and each segment's row `j` sees every prefix row and its own rows `0..=j`,
//! as if it were the sequence `prefix ++ segment`. Everything else in a decoder block works row by row,
//! so it runs once on the prefix; the prefix's keys and values collect the gradient of every segment that
//! reads them, which is exactly the sum the G separate backward passes would have made.
//!
//! One task per (unit, kv group), a unit being the prefix or one segment. A task gathers its keys and
//! values (the prefix's, then its own) into one block, so the products are plain strided matrix products;
//! in the backward each task returns its keys' and values' gradients and they are added in a fixed order
//! afterwards (the prefix rows are shared by every task, so no task writes them directly).

use super::attention::{composed_causal_attention, AttentionShape, GroupedHeads};
use super::causal_softmax::{softmax_row, softmax_row_backward};
use super::contiguous_f32;
use super::gemm::matmul_strided;
use super::Shared;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

/// The rows of one call: a prefix and the segments that continue it.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedPrefixShape {
    /// Rows of the shared prefix (the first rows); may be 0 (then every segment is its own sequence).
    pub prefix: usize,
    /// Rows of each segment, in order after the prefix.
    pub segments: Vec<usize>,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention).
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
}

impl GroupedHeads for SharedPrefixShape {
    fn head_counts(&self) -> (usize, usize, usize) {
        (self.heads, self.kv_heads, self.head_dim)
    }
}

impl SharedPrefixShape {
    /// All rows: the prefix's and every segment's.
    pub fn rows(&self) -> usize {
        self.prefix + self.segments.iter().sum::<usize>()
    }

    /// Each row's position in its sequence `prefix ++ segment`: `0..prefix`, then `prefix..prefix + len`
    /// for every segment (the RoPE angles of the rows).
    pub fn positions(&self) -> Vec<u32> {
        let mut p: Vec<u32> = (0..self.prefix as u32).collect();
        for &len in &self.segments {
            p.extend(self.prefix as u32..(self.prefix + len) as u32);
        }
        p
    }

    /// Unit `u`: 0 is the prefix, `1 + b` segment `b`. Returns (first row, rows) of its queries.
    fn unit(&self, u: usize) -> (usize, usize) {
        if u == 0 {
            return (0, self.prefix);
        }
        let start = self.prefix + self.segments[..u - 1].iter().sum::<usize>();
        (start, self.segments[u - 1])
    }

    /// Keys unit `u`'s queries read: the prefix's only for the prefix, the prefix's then its own for a segment.
    fn keys(&self, u: usize) -> usize {
        if u == 0 {
            self.prefix
        } else {
            self.prefix + self.segments[u - 1]
        }
    }

    /// Keys query `i` of unit `u` may see.
    fn seen(&self, u: usize, i: usize) -> usize {
        if u == 0 {
            i + 1
        } else {
            self.prefix + i + 1
        }
    }
}

struct SharedPrefixAttention {
    shape: SharedPrefixShape,
}

impl SharedPrefixAttention {
    /// The keys (or values) unit `u` reads, group `g`, gathered into a contiguous `(keys, hd)` block.
    fn gather(&self, x: &[f32], u: usize, g: usize) -> Vec<f32> {
        let s = &self.shape;
        let (hd, w) = (s.head_dim, s.kv_width());
        let (start, len) = s.unit(u);
        let rows = (0..s.prefix).chain(if u == 0 { 0..0 } else { start..start + len });
        let mut out = Vec::with_capacity(s.keys(u) * hd);
        for r in rows {
            out.extend_from_slice(&x[r * w + g * hd..r * w + (g + 1) * hd]);
        }
        out
    }

    /// `p ← softmax(scale · q_h · kᵀ + mask)` for the queries of unit `u`, `p: (len, keys)`.
    fn probabilities(&self, q: &[f32], kcat: &[f32], u: usize, h: usize, p: &mut [f32]) {
        let s = &self.shape;
        let (start, len) = s.unit(u);
        let nk = s.keys(u);
        // SAFETY: the queries of head h span rows start..start+len of q at column h·hd; kcat is (nk, hd); p is (len, nk).
        unsafe {
            matmul_strided(
                (len, nk, s.head_dim),
                p.as_mut_ptr(),
                nk,
                false,
                q[start * s.q_width() + h * s.head_dim..].as_ptr(),
                (1, s.q_width()),
                kcat.as_ptr(),
                (s.head_dim, 1),
            );
        }
        for (i, row) in p.chunks_mut(nk).enumerate() {
            softmax_row(row, s.seen(u, i), s.scale());
        }
    }

    fn units(&self) -> usize {
        1 + self.shape.segments.len()
    }
}

impl CustomOp3 for SharedPrefixAttention {
    fn name(&self) -> &'static str {
        "shared-prefix-attention"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let s = &self.shape;
        let rows = s.rows();
        if l1.shape().dims() != [rows, s.q_width()] || l2.shape().dims() != [rows, s.kv_width()] || l3.shape().dims() != [rows, s.kv_width()] {
            candle_core::bail!("shared-prefix-attention: q {:?}, k {:?}, v {:?} do not fit {s:?}", l1.shape(), l2.shape(), l3.shape());
        }
        let (q, k, v) = (contiguous_f32(s1, l1, self.name())?, contiguous_f32(s2, l2, self.name())?, contiguous_f32(s3, l3, self.name())?);
        let (hd, rep) = (s.head_dim, s.heads / s.kv_heads);
        let mut out = vec![0f32; rows * s.q_width()];
        let dst = Shared(out.as_mut_ptr());
        (0..self.units() * s.kv_heads).into_par_iter().for_each(|task| {
            let (u, g) = (task / s.kv_heads, task % s.kv_heads);
            let (start, len) = s.unit(u);
            let nk = s.keys(u);
            if len == 0 {
                return;
            }
            let (kcat, vcat) = (self.gather(k, u, g), self.gather(v, u, g));
            let mut p = vec![0f32; len * nk];
            for h in g * rep..(g + 1) * rep {
                self.probabilities(q, &kcat, u, h, &mut p);
                // SAFETY: this task alone writes head h of unit u's rows of out.
                unsafe {
                    let d = dst.at(start * s.q_width() + h * hd);
                    matmul_strided((len, hd, nk), d, s.q_width(), false, p.as_ptr(), (1, nk), vcat.as_ptr(), (1, hd));
                }
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((rows, s.q_width()))))
    }

    fn bwd(&self, q: &Tensor, k: &Tensor, v: &Tensor, _out: &Tensor, grad: &Tensor) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let s = &self.shape;
        let (hd, rep) = (s.head_dim, s.heads / s.kv_heads);
        let (qs, ks, vs) = (q.flatten_all()?.to_vec1::<f32>()?, k.flatten_all()?.to_vec1::<f32>()?, v.flatten_all()?.to_vec1::<f32>()?);
        let dout = grad.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let mut dq = vec![0f32; qs.len()];
        let dq_p = Shared(dq.as_mut_ptr());
        // Each task's key and value gradients, (keys, hd) in its gathered order.
        let parts: Vec<(usize, usize, Vec<f32>, Vec<f32>)> = (0..self.units() * s.kv_heads)
            .into_par_iter()
            .map(|task| {
                let (u, g) = (task / s.kv_heads, task % s.kv_heads);
                let (start, len) = s.unit(u);
                let nk = s.keys(u);
                let (mut dk, mut dv) = (vec![0f32; nk * hd], vec![0f32; nk * hd]);
                if len == 0 {
                    return (u, g, dk, dv);
                }
                let (kcat, vcat) = (self.gather(&ks, u, g), self.gather(&vs, u, g));
                let (mut p, mut ds) = (vec![0f32; len * nk], vec![0f32; len * nk]);
                for h in g * rep..(g + 1) * rep {
                    let q0 = start * s.q_width() + h * hd;
                    self.probabilities(&qs, &kcat, u, h, &mut p);
                    // SAFETY: (all four products) the operands lie inside their buffers at the offsets and
                    // strides given; this task alone writes head h of unit u's rows of dq, and its own dk, dv.
                    unsafe {
                        // dP = dO_h · Vᵀ
                        matmul_strided((len, nk, hd), ds.as_mut_ptr(), nk, false, dout[q0..].as_ptr(), (1, s.q_width()), vcat.as_ptr(), (hd, 1));
                        for (i, (dr, pr)) in ds.chunks_mut(nk).zip(p.chunks(nk)).enumerate() {
                            softmax_row_backward(dr, pr, s.seen(u, i), s.scale());
                        }
                        // dQ_h = dS · K
                        matmul_strided((len, hd, nk), dq_p.at(q0), s.q_width(), false, ds.as_ptr(), (1, nk), kcat.as_ptr(), (1, hd));
                        // dK += dSᵀ · Q_h
                        matmul_strided((nk, hd, len), dk.as_mut_ptr(), hd, true, ds.as_ptr(), (nk, 1), qs[q0..].as_ptr(), (1, s.q_width()));
                        // dV += Pᵀ · dO_h
                        matmul_strided((nk, hd, len), dv.as_mut_ptr(), hd, true, p.as_ptr(), (nk, 1), dout[q0..].as_ptr(), (1, s.q_width()));
                    }
                }
                (u, g, dk, dv)
            })
            .collect();
        // Scatter in task order: the prefix rows sum what every unit gave them, always in the same order.
        let w = s.kv_width();
        let (mut dk, mut dv) = (vec![0f32; ks.len()], vec![0f32; vs.len()]);
        for (u, g, pk, pv) in parts {
            let (start, len) = s.unit(u);
            let rows = (0..s.prefix).chain(if u == 0 { 0..0 } else { start..start + len });
            for (i, r) in rows.enumerate() {
                let (dst, src) = (r * w + g * hd, i * hd);
                for j in 0..hd {
                    dk[dst + j] += pk[src + j];
                    dv[dst + j] += pv[src + j];
                }
            }
        }
        let dev = q.device();
        Ok((Some(Tensor::from_vec(dq, q.shape(), dev)?), Some(Tensor::from_vec(dk, k.shape(), dev)?), Some(Tensor::from_vec(dv, v.shape(), dev)?)))
    }
}

/// Attention of `q: (rows, heads·hd)` over `k`, `v: (rows, kv_heads·hd)` (RoPE applied at
/// [`SharedPrefixShape::positions`]) for rows laid out as `shape` says; returns `(rows, heads·hd)`,
/// differentiable in all three. Off the CPU it is composed from candle ops
/// ([`composed_shared_prefix_attention`]).
pub fn shared_prefix_attention(q: &Tensor, k: &Tensor, v: &Tensor, shape: &SharedPrefixShape) -> candle_core::Result<Tensor> {
    if shape.kv_heads == 0 || !shape.heads.is_multiple_of(shape.kv_heads) {
        candle_core::bail!("shared-prefix-attention: {} query heads do not group over {} kv heads", shape.heads, shape.kv_heads);
    }
    if !q.device().is_cpu() || q.dtype() != DType::F32 {
        return composed_shared_prefix_attention(q, k, v, shape);
    }
    let op = SharedPrefixAttention { shape: shape.clone() };
    q.contiguous()?.apply_op3_arc(&k.contiguous()?, &v.contiguous()?, Arc::new(Box::new(op)))
}

/// The same function as separate sequences: the prefix alone, then each `prefix ++ segment` attended
/// whole and its segment's rows kept (the reference the op is tested against, and the path off the CPU).
pub fn composed_shared_prefix_attention(q: &Tensor, k: &Tensor, v: &Tensor, s: &SharedPrefixShape) -> candle_core::Result<Tensor> {
    let one = |seq: usize| AttentionShape { batch: 1, seq, heads: s.heads, kv_heads: s.kv_heads, head_dim: s.head_dim };
    let mut parts = Vec::with_capacity(1 + s.segments.len());
    if s.prefix > 0 {
        parts.push(composed_causal_attention(&q.narrow(0, 0, s.prefix)?, &k.narrow(0, 0, s.prefix)?, &v.narrow(0, 0, s.prefix)?, one(s.prefix))?);
    }
    let mut start = s.prefix;
    for &len in &s.segments {
        if len == 0 {
            continue;
        }
        let idx: Vec<u32> = (0..s.prefix as u32).chain(start as u32..(start + len) as u32).collect();
        let idx = Tensor::from_vec(idx, s.prefix + len, q.device())?;
        let whole = composed_causal_attention(&q.index_select(&idx, 0)?, &k.index_select(&idx, 0)?, &v.index_select(&idx, 0)?, one(s.prefix + len))?;
        parts.push(whole.narrow(0, s.prefix, len)?);
        start += len;
    }
    Tensor::cat(&parts, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// The op against the same attention computed sequence by sequence (each segment with the prefix in
    /// front): values, and the gradients of q, k and v, whose prefix rows sum over every segment.
    #[test]
    fn equals_attending_each_prefixed_segment_whole() {
        let dev = Device::Cpu;
        for (prefix, segments) in [(5usize, vec![3usize, 7, 1]), (0, vec![4, 2]), (6, vec![]), (4, vec![0, 3])] {
            let shape = SharedPrefixShape { prefix, segments, heads: 6, kv_heads: 2, head_dim: 8 };
            let rows = shape.rows();
            let q = Var::randn(0f32, 1.0, (rows, 48), &dev).unwrap();
            let k = Var::randn(0f32, 1.0, (rows, 16), &dev).unwrap();
            let v = Var::randn(0f32, 1.0, (rows, 16), &dev).unwrap();
            let probe = Tensor::randn(0f32, 1.0, (rows, 48), &dev).unwrap();
            let y = shared_prefix_attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), &shape).unwrap();
            let y_ref = composed_shared_prefix_attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), &shape).unwrap();
            let d = (&y - &y_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-5, "{shape:?}: values differ by {d}");
            let g = (y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
            let g_ref = (y_ref * &probe).unwrap().sum_all().unwrap().backward().unwrap();
            for (name, x) in [("q", &q), ("k", &k), ("v", &v)] {
                let d = (g.get(x.as_tensor()).unwrap() - g_ref.get(x.as_tensor()).unwrap()).unwrap();
                let d = d.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                assert!(d < 1e-4, "{shape:?}: gradients of {name} differ by {d}");
            }
        }
    }

    #[test]
    fn positions_restart_after_the_prefix_in_every_segment() {
        let shape = SharedPrefixShape { prefix: 3, segments: vec![2, 1], heads: 2, kv_heads: 1, head_dim: 4 };
        assert_eq!(shape.positions(), vec![0, 1, 2, 3, 4, 3]);
        assert_eq!(shape.rows(), 6);
    }
}
