//! The attention weights of causal self-attention, `softmax(scale · S + causal mask)` over the last
//! dimension, as one op with its backward (composed: a scale, a mask add, max, subtract, exp, sum and divide,
//! each a single-threaded pass over `(B, heads, T, T)`, and the backward of each).
//!
//! Rows are laid out as the decoder folds grouped-query heads: `(B, kv, rep·T, T)`, so the query position
//! of row `r` is `r mod T`, and it may see keys `0..=r mod T`.

use super::contiguous_f32;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor, D};
use rayon::prelude::*;
use std::sync::Arc;

struct CausalSoftmax {
    scale: f32,
}

/// Rows per parallel task.
const ROWS: usize = 64;

/// `row ← softmax(scale · row[..seen])`, zero from `seen` on (the keys a query may not see).
pub(super) fn softmax_row(row: &mut [f32], seen: usize, scale: f32) {
    let m = row[..seen].iter().copied().fold(f32::NEG_INFINITY, f32::max) * scale;
    let mut sum = 0f32;
    for v in &mut row[..seen] {
        *v = (*v * scale - m).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    row[..seen].iter_mut().for_each(|v| *v *= inv);
    row[seen..].fill(0.0);
}

/// `grad ← scale · p ⊙ (grad − Σ grad ⊙ p)` over `..seen`, zero from `seen` on: the gradient at the scores
/// from the gradient at the probabilities `p`.
pub(super) fn softmax_row_backward(grad: &mut [f32], p: &[f32], seen: usize, scale: f32) {
    let dot: f32 = p[..seen].iter().zip(&grad[..seen]).map(|(&a, &b)| a * b).sum();
    for (g, &a) in grad[..seen].iter_mut().zip(&p[..seen]) {
        *g = scale * a * (*g - dot);
    }
    grad[seen..].fill(0.0);
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "causal-softmax"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let t = *l.shape().dims().last().unwrap_or(&0);
        let x = contiguous_f32(s, l, "causal-softmax")?;
        if t == 0 || x.len() % (t * t) != 0 {
            candle_core::bail!("causal-softmax: scores {:?} are not blocks of (T, T) rows", l.shape());
        }
        let mut p = vec![0f32; x.len()];
        p.par_chunks_mut(t * ROWS).zip(x.par_chunks(t * ROWS)).enumerate().for_each(|(c, (pc, xc))| {
            for (i, (pr, xr)) in pc.chunks_mut(t).zip(xc.chunks(t)).enumerate() {
                pr.copy_from_slice(xr);
                softmax_row(pr, (c * ROWS + i) % t + 1, self.scale);
            }
        });
        Ok((CpuStorage::F32(p), l.shape().clone()))
    }

    fn bwd(&self, _x: &Tensor, p: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let t = p.dim(D::Minus1)?;
        let ps = p.flatten_all()?.to_vec1::<f32>()?;
        let gs = grad.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let mut dx = vec![0f32; ps.len()];
        // dS = scale · P ⊙ (dP − Σ dP ⊙ P); masked entries have P = 0 and get 0.
        dx.par_chunks_mut(t * ROWS).zip(ps.par_chunks(t * ROWS)).zip(gs.par_chunks(t * ROWS)).enumerate().for_each(
            |(c, ((dc, pc), gc))| {
                for (i, ((dr, pr), gr)) in dc.chunks_mut(t).zip(pc.chunks(t)).zip(gc.chunks(t)).enumerate() {
                    dr.copy_from_slice(gr);
                    softmax_row_backward(dr, pr, (c * ROWS + i) % t + 1, self.scale);
                }
            },
        );
        Ok(Some(Tensor::from_vec(dx, p.shape(), p.device())?))
    }
}

/// `softmax(scale · scores + causal mask)` over the last dimension of `scores: (.., rep·T, T)` laid out as
/// described above; differentiable. Off the CPU it is composed from candle ops.
pub fn causal_softmax(scores: &Tensor, scale: f64) -> candle_core::Result<Tensor> {
    if !scores.device().is_cpu() || scores.dtype() != DType::F32 {
        return composed_causal_softmax(scores, scale);
    }
    scores.contiguous()?.apply_op1_arc(Arc::new(Box::new(CausalSoftmax { scale: scale as f32 })))
}

/// The same function from candle ops.
pub fn composed_causal_softmax(scores: &Tensor, scale: f64) -> candle_core::Result<Tensor> {
    let t = scores.dim(D::Minus1)?;
    let rows = scores.dim(D::Minus2)?;
    let mask: Vec<f32> =
        (0..rows).flat_map(|r| (0..t).map(move |j| if j <= r % t { 0f32 } else { f32::NEG_INFINITY })).collect();
    let mask = Tensor::from_vec(mask, (rows, t), scores.device())?;
    let x = (scores * scale)?.broadcast_add(&mask)?;
    // The max is a constant shift for numerical safety; detaching it changes no gradient.
    let m = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&m)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn values_and_input_gradient_match_the_composed_ops() {
        let dev = Device::Cpu;
        // B = 2, kv = 3, rep = 2, T = 70 (more rows than one parallel task).
        let s = Var::randn(0f32, 3.0, (2, 3, 140, 70), &dev).unwrap();
        let probe = Tensor::randn(0f32, 1.0, (2, 3, 140, 70), &dev).unwrap();
        let p = causal_softmax(s.as_tensor(), 0.125).unwrap();
        let p_ref = composed_causal_softmax(s.as_tensor(), 0.125).unwrap();
        let diff = (&p - &p_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 1e-6, "values differ by {diff}");
        let g = (p * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        let g_ref = (p_ref * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        let d = (g.get(s.as_tensor()).unwrap() - g_ref.get(s.as_tensor()).unwrap()).unwrap();
        let d = d.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(d < 1e-5, "gradients differ by {d}");
    }
}
