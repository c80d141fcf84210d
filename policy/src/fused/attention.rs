//! Causal grouped-query attention on token-major rows, as one op with its backward.
//!
//! Why: the projections produce `(B·T, heads·hd)`; composed attention transposes q, k and v to
//! `(B, heads, T, hd)` (three copies), multiplies in batches, transposes back (a fourth copy), and its
//! backward copies again for every transposed operand. Here each `(T, hd)` head is read in place through
//! strides; one task per (sequence, kv head) computes the scores, the causal softmax and the product for
//! the `rep` query heads of its group, so the k/v gradients of a group accumulate without sharing. The
//! backward recomputes the probabilities (`T²` per head, cheaper than keeping them).

use super::causal_softmax::{softmax_row, softmax_row_backward};
use super::contiguous_f32;
use super::gemm::matmul_strided;
use super::Shared;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

/// Shapes of one call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    /// Sequences in the batch (`B`).
    pub batch: usize,
    /// Tokens per sequence (`T`); the rows are `B·T`, token-major.
    pub seq: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads; each serves `heads / kv_heads` query heads (grouped-query attention).
    pub kv_heads: usize,
    /// Width of one head (`hd`).
    pub head_dim: usize,
}

/// The widths that follow from a grouped-query attention's heads, for every shape of call.
pub(crate) trait GroupedHeads {
    /// (query heads, key/value heads, width of one head).
    fn head_counts(&self) -> (usize, usize, usize);

    /// Width of a row of queries (and of the output).
    fn q_width(&self) -> usize {
        let (heads, _, head_dim) = self.head_counts();
        heads * head_dim
    }

    /// Width of a row of keys or values.
    fn kv_width(&self) -> usize {
        let (_, kv_heads, head_dim) = self.head_counts();
        kv_heads * head_dim
    }

    /// The scores' scale, `1 / √hd`.
    fn scale(&self) -> f32 {
        1.0 / (self.head_counts().2 as f32).sqrt()
    }
}

impl GroupedHeads for AttentionShape {
    fn head_counts(&self) -> (usize, usize, usize) {
        (self.heads, self.kv_heads, self.head_dim)
    }
}

struct CausalAttention {
    shape: AttentionShape,
}

impl CausalAttention {
    /// `p ← softmax(scale · q_h · k_gᵀ + causal)` for head `h` of sequence `bi`, `p: (T, T)`.
    fn probabilities(&self, q: &[f32], k: &[f32], bi: usize, h: usize, p: &mut [f32]) {
        let s = self.shape;
        let (t, hd, rep) = (s.seq, s.head_dim, s.heads / s.kv_heads);
        let g = h / rep;
        let q0 = bi * t * s.q_width() + h * hd;
        let k0 = bi * t * s.kv_width() + g * hd;
        // SAFETY: head h of sequence bi spans rows bi·T.. of width hd inside q and k; p is (T, T).
        unsafe {
            matmul_strided((t, t, hd), p.as_mut_ptr(), t, false, q[q0..].as_ptr(), (1, s.q_width()), k[k0..].as_ptr(), (s.kv_width(), 1));
        }
        for (i, row) in p.chunks_mut(t).enumerate() {
            softmax_row(row, i + 1, s.scale());
        }
    }
}

impl CustomOp3 for CausalAttention {
    fn name(&self) -> &'static str {
        "causal-attention"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let s = self.shape;
        let rows = s.batch * s.seq;
        if l1.shape().dims() != [rows, s.q_width()] || l2.shape().dims() != [rows, s.kv_width()] || l3.shape().dims() != [rows, s.kv_width()] {
            candle_core::bail!("causal-attention: q {:?}, k {:?}, v {:?} do not fit {s:?}", l1.shape(), l2.shape(), l3.shape());
        }
        let (q, k, v) = (contiguous_f32(s1, l1, self.name())?, contiguous_f32(s2, l2, self.name())?, contiguous_f32(s3, l3, self.name())?);
        let (t, hd, rep) = (s.seq, s.head_dim, s.heads / s.kv_heads);
        let mut out = vec![0f32; rows * s.q_width()];
        let dst = Shared(out.as_mut_ptr());
        (0..s.batch * s.kv_heads).into_par_iter().for_each(|task| {
            let (bi, g) = (task / s.kv_heads, task % s.kv_heads);
            let mut p = vec![0f32; t * t];
            let v0 = bi * t * s.kv_width() + g * hd;
            for h in g * rep..(g + 1) * rep {
                self.probabilities(q, k, bi, h, &mut p);
                // SAFETY: this task alone writes head h of sequence bi, rows bi·T.., columns h·hd.. of out.
                unsafe {
                    matmul_strided(
                        (t, hd, t),
                        dst.at(bi * t * s.q_width() + h * hd),
                        s.q_width(),
                        false,
                        p.as_ptr(),
                        (1, t),
                        v[v0..].as_ptr(),
                        (1, s.kv_width()),
                    );
                }
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((rows, s.q_width()))))
    }

    fn bwd(&self, q: &Tensor, k: &Tensor, v: &Tensor, _out: &Tensor, grad: &Tensor) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let s = self.shape;
        let (t, hd, rep) = (s.seq, s.head_dim, s.heads / s.kv_heads);
        let (qs, ks, vs) = (q.flatten_all()?.to_vec1::<f32>()?, k.flatten_all()?.to_vec1::<f32>()?, v.flatten_all()?.to_vec1::<f32>()?);
        let dout = grad.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let (mut dq, mut dk, mut dv) = (vec![0f32; qs.len()], vec![0f32; ks.len()], vec![0f32; vs.len()]);
        let (dq_p, dk_p, dv_p) = (Shared(dq.as_mut_ptr()), Shared(dk.as_mut_ptr()), Shared(dv.as_mut_ptr()));
        (0..s.batch * s.kv_heads).into_par_iter().for_each(|task| {
            let (bi, g) = (task / s.kv_heads, task % s.kv_heads);
            let (mut p, mut ds) = (vec![0f32; t * t], vec![0f32; t * t]);
            let kv0 = bi * t * s.kv_width() + g * hd;
            for h in g * rep..(g + 1) * rep {
                let q0 = bi * t * s.q_width() + h * hd;
                self.probabilities(&qs, &ks, bi, h, &mut p);
                // SAFETY: (all four products) head h / group g of sequence bi lies inside its buffer at the
                // offsets and strides given; this task alone writes head h of dq and group g of dk, dv.
                unsafe {
                    // dP = dO_h · V_gᵀ
                    matmul_strided((t, t, hd), ds.as_mut_ptr(), t, false, dout[q0..].as_ptr(), (1, s.q_width()), vs[kv0..].as_ptr(), (s.kv_width(), 1));
                    for (i, (dr, pr)) in ds.chunks_mut(t).zip(p.chunks(t)).enumerate() {
                        softmax_row_backward(dr, pr, i + 1, s.scale());
                    }
                    // dQ_h = dS · K_g
                    matmul_strided((t, hd, t), dq_p.at(q0), s.q_width(), false, ds.as_ptr(), (1, t), ks[kv0..].as_ptr(), (1, s.kv_width()));
                    // dK_g += dSᵀ · Q_h
                    matmul_strided((t, hd, t), dk_p.at(kv0), s.kv_width(), true, ds.as_ptr(), (t, 1), qs[q0..].as_ptr(), (1, s.q_width()));
                    // dV_g += Pᵀ · dO_h
                    matmul_strided((t, hd, t), dv_p.at(kv0), s.kv_width(), true, p.as_ptr(), (t, 1), dout[q0..].as_ptr(), (1, s.q_width()));
                }
            }
        });
        let dev = q.device();
        Ok((Some(Tensor::from_vec(dq, q.shape(), dev)?), Some(Tensor::from_vec(dk, k.shape(), dev)?), Some(Tensor::from_vec(dv, v.shape(), dev)?)))
    }
}

/// Causal attention of `q: (B·T, heads·hd)` over `k`, `v: (B·T, kv_heads·hd)` (RoPE applied), returning
/// `(B·T, heads·hd)`; differentiable in all three. Off the CPU it is composed from candle ops.
pub fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, shape: AttentionShape) -> candle_core::Result<Tensor> {
    if shape.kv_heads == 0 || !shape.heads.is_multiple_of(shape.kv_heads) {
        candle_core::bail!("causal-attention: {} query heads do not group over {} kv heads", shape.heads, shape.kv_heads);
    }
    if !q.device().is_cpu() || q.dtype() != DType::F32 {
        return composed_causal_attention(q, k, v, shape);
    }
    let op = CausalAttention { shape };
    q.contiguous()?.apply_op3_arc(&k.contiguous()?, &v.contiguous()?, Arc::new(Box::new(op)))
}

/// The same function from candle ops: heads transposed out, grouped query heads folded into rows.
pub fn composed_causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, s: AttentionShape) -> candle_core::Result<Tensor> {
    let (b, t, hd) = (s.batch, s.seq, s.head_dim);
    let rep = s.heads / s.kv_heads;
    let q = q.reshape((b, t, s.heads, hd))?.transpose(1, 2)?.contiguous()?.reshape((b, s.kv_heads, rep * t, hd))?;
    let k = k.reshape((b, t, s.kv_heads, hd))?.transpose(1, 2)?.contiguous()?;
    let v = v.reshape((b, t, s.kv_heads, hd))?.transpose(1, 2)?.contiguous()?;
    let p = super::causal_softmax::composed_causal_softmax(&q.matmul(&k.t()?)?, s.scale() as f64)?;
    p.matmul(&v)?.reshape((b, s.heads, t, hd))?.transpose(1, 2)?.reshape((b * t, s.heads * hd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn values_and_gradients_match_the_composed_ops() {
        let dev = Device::Cpu;
        let shape = AttentionShape { batch: 2, seq: 7, heads: 6, kv_heads: 2, head_dim: 8 };
        let rows = 14;
        let q = Var::randn(0f32, 1.0, (rows, 48), &dev).unwrap();
        let k = Var::randn(0f32, 1.0, (rows, 16), &dev).unwrap();
        let v = Var::randn(0f32, 1.0, (rows, 16), &dev).unwrap();
        let probe = Tensor::randn(0f32, 1.0, (rows, 48), &dev).unwrap();
        let y = causal_attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), shape).unwrap();
        let y_ref = composed_causal_attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), shape).unwrap();
        let d = (&y - &y_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(d < 1e-5, "values differ by {d}");
        let g = (y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        let g_ref = (y_ref * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        for x in [&q, &k, &v] {
            let d = (g.get(x.as_tensor()).unwrap() - g_ref.get(x.as_tensor()).unwrap()).unwrap();
            let d = d.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-4, "gradients differ by {d}");
        }
    }
}
