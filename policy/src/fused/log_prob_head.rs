//! The output head fused with log-softmax and the target gather: `lp[i] = (x_i·Wᵀ)[t_i] − logsumexp(x_i·Wᵀ)`,
//! with a hand-written backward.
//!
//! Why: composed from candle ops, the `(N, V)` logits (200 MB for 4 × 256 tokens and SmolLM2's 49,152-token
//! vocabulary) go through a max, a subtraction, an exp, a sum, a gather and the backward of each: a dozen
//! fresh 200 MB allocations and single-threaded passes, and a weight gradient for the frozen head. Here the
//! forward is one gemm and one parallel pass over the rows; the backward turns the kept logits into
//! `g·(onehot − softmax)` in place and is one gemm for `dL/dx` only.

use super::gemm::{matmul_a_b, matmul_a_bt};
use super::with_f32_slice;
use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor, D};
use rayon::prelude::*;
use std::sync::{Arc, Mutex};

/// What the forward keeps for the backward: the logits and each row's log-sum-exp.
struct Kept {
    logits: Vec<f32>,
    lse: Vec<f32>,
}

struct LogProbHead {
    /// `(V, H)`, frozen.
    weight: Tensor,
    /// Whether to keep the logits (only when a backward can follow: they are `N·V` floats).
    keep_logits: bool,
    kept: Mutex<Option<Kept>>,
}

impl LogProbHead {
    fn logits(&self, x: &[f32], n: usize, h: usize) -> candle_core::Result<(Vec<f32>, usize)> {
        let (v, wh) = self.weight.dims2()?;
        if wh != h {
            candle_core::bail!("log-prob-head: hidden states have width {h}, the head's weight is ({v}, {wh})");
        }
        let mut logits = vec![0f32; n * v];
        with_f32_slice(&self.weight, "log-prob-head: the head's weight", |w| matmul_a_bt(x, w, &mut logits, n, v, h))?;
        Ok((logits, v))
    }
}

/// `(log-sum-exp, log p(target))` of one row of logits.
fn row_stats(row: &[f32], target: usize) -> (f32, f32) {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // Summed in f64: a sequential f32 sum over a 49,152-token vocabulary drifted by up to 2.6e-4 in the
    // log-probs against transformers (parity.py), ten times the error of the rest of the forward.
    let s: f64 = row.iter().map(|&z| (z - m).exp() as f64).sum();
    let lse = m + s.ln() as f32;
    (lse, row[target] - lse)
}

impl CustomOp2 for LogProbHead {
    fn name(&self) -> &'static str {
        "log-prob-head"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, h) = l1.shape().dims2()?;
        if l2.shape().dims() != [n] {
            candle_core::bail!("log-prob-head: {n} hidden rows but targets of shape {:?}", l2.shape());
        }
        let (Some((xs, xe)), Some((ts, te))) = (l1.contiguous_offsets(), l2.contiguous_offsets()) else {
            candle_core::bail!("log-prob-head: inputs must be contiguous");
        };
        let (CpuStorage::F32(x), CpuStorage::U32(targets)) = (s1, s2) else {
            candle_core::bail!("log-prob-head: needs f32 hidden states and u32 targets");
        };
        let (x, targets) = (&x[xs..xe], &targets[ts..te]);
        let (logits, v) = self.logits(x, n, h)?;
        if let Some(&bad) = targets.iter().find(|&&t| t as usize >= v) {
            candle_core::bail!("log-prob-head: target token {bad} is outside the vocabulary of {v}");
        }
        let (lse, lp): (Vec<f32>, Vec<f32>) = logits.par_chunks(v).zip(targets.par_iter()).map(|(row, &t)| row_stats(row, t as usize)).unzip();
        if self.keep_logits {
            *self.kept.lock().expect("log-prob-head: poisoned") = Some(Kept { logits, lse });
        }
        Ok((CpuStorage::F32(lp), Shape::from(n)))
    }

    fn bwd(&self, x: &Tensor, targets: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (n, h) = x.dims2()?;
        let g = grad.to_vec1::<f32>()?;
        let targets = targets.to_vec1::<u32>()?;
        // A second backward through the same graph recomputes what the first one consumed.
        let kept = self.kept.lock().expect("log-prob-head: poisoned").take();
        let Kept { mut logits, lse } = match kept {
            Some(k) => k,
            None => {
                let (logits, v) = with_f32_slice(x, "log-prob-head: hidden states", |x| self.logits(x, n, h))??;
                let lse = logits.par_chunks(v).zip(targets.par_iter()).map(|(row, &t)| row_stats(row, t as usize).0).collect();
                Kept { logits, lse }
            }
        };
        let v = logits.len() / n;
        // d lp_i / d z_ij = [j = t_i] − softmax_ij, times the incoming g_i.
        logits.par_chunks_mut(v).enumerate().for_each(|(i, row)| {
            let (gi, li) = (g[i], lse[i]);
            for z in row.iter_mut() {
                *z = -gi * (*z - li).exp();
            }
            row[targets[i] as usize] += gi;
        });
        let mut dx = vec![0f32; n * h];
        with_f32_slice(&self.weight, "log-prob-head: the head's weight", |w| matmul_a_b(&logits, w, &mut dx, n, h, v))?;
        Ok((Some(Tensor::from_vec(dx, (n, h), x.device())?), None))
    }
}

/// `log softmax(x · Wᵀ)[target]` per row: `x: (N, H)` f32, `weight: (V, H)` frozen, `targets: (N,)` u32;
/// returns `(N,)`. Gradients flow to `x` only. Off the CPU it is composed from candle ops.
pub fn head_log_probs(x: &Tensor, weight: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    if !x.device().is_cpu() || x.dtype() != DType::F32 {
        return composed_head_log_probs(x, weight, targets);
    }
    let op = LogProbHead { weight: weight.detach().contiguous()?, keep_logits: x.track_op(), kept: Mutex::new(None) };
    x.contiguous()?.apply_op2_arc(&targets.contiguous()?, Arc::new(Box::new(op)))
}

/// The same function from candle ops (other devices, and the reference in tests).
pub fn composed_head_log_probs(x: &Tensor, weight: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    let logits = x.matmul(&weight.detach().t()?)?;
    // The max is a constant shift for numerical safety; detaching it changes no gradient.
    let m = logits.max_keepdim(D::Minus1)?.detach();
    let lse = logits.broadcast_sub(&m)?.exp()?.sum_keepdim(D::Minus1)?.log()?.broadcast_add(&m)?;
    let picked = logits.gather(&targets.unsqueeze(1)?.contiguous()?, 1)?;
    (picked - lse)?.squeeze(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn values_and_input_gradient_match_the_composed_ops() {
        let dev = Device::Cpu;
        let (n, h, v) = (6, 8, 50);
        let x = Var::randn(0f32, 1.0, (n, h), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, (v, h), &dev).unwrap();
        let targets = Tensor::from_vec(vec![0u32, 49, 7, 7, 13, 22], n, &dev).unwrap();
        let lp = head_log_probs(x.as_tensor(), &w, &targets).unwrap();
        let lp_ref = composed_head_log_probs(x.as_tensor(), &w, &targets).unwrap();
        let diff = (&lp - &lp_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 1e-4, "values differ by {diff}");
        // A weighted loss, so that every row's incoming gradient differs.
        let weights = Tensor::from_vec(vec![1f32, -2.0, 0.5, 0.0, 3.0, 1.5], n, &dev).unwrap();
        let g = (lp * &weights).unwrap().sum_all().unwrap().backward().unwrap();
        let g_ref = (lp_ref * &weights).unwrap().sum_all().unwrap().backward().unwrap();
        let (dx, dx_ref) = (g.get(x.as_tensor()).unwrap(), g_ref.get(x.as_tensor()).unwrap());
        let d = (dx - dx_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(d < 1e-4, "gradients differ by {d}");
        assert!(g.get(&w).is_none(), "the frozen head got a gradient");
    }

    #[test]
    fn a_target_outside_the_vocabulary_is_an_error() {
        let dev = Device::Cpu;
        let x = Tensor::zeros((1, 4), DType::F32, &dev).unwrap();
        let w = Tensor::zeros((10, 4), DType::F32, &dev).unwrap();
        let t = Tensor::from_vec(vec![10u32], 1, &dev).unwrap();
        let err = head_log_probs(&x, &w, &t).unwrap_err().to_string();
        assert!(err.contains("outside the vocabulary"), "{err}");
    }
}
