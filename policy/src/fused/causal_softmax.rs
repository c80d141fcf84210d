//! The attention weights of causal self-attention, `softmax(scale · S + causal mask)` over the last
//! dimension: the row kernels (and their backward) that the fused attention runs per query row, and the
//! same function composed from candle ops as the reference it is tested against.
//!
//! Rows are laid out as the decoder folds grouped-query heads: `(B, kv, rep·T, T)`, so the query position
//! of row `r` is `r mod T`, and it may see keys `0..=r mod T`.

use candle_core::{Tensor, D};

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

/// `softmax(scale · scores + causal mask)` over the last dimension of `scores: (.., rep·T, T)` laid out as
/// described above, from candle ops: the reference the fused attention is tested against.
pub fn composed_causal_softmax(scores: &Tensor, scale: f64) -> candle_core::Result<Tensor> {
    let t = scores.dim(D::Minus1)?;
    let rows = scores.dim(D::Minus2)?;
    let mask: Vec<f32> = (0..rows).flat_map(|r| (0..t).map(move |j| if j <= r % t { 0f32 } else { f32::NEG_INFINITY })).collect();
    let mask = Tensor::from_vec(mask, (rows, t), scores.device())?;
    let x = (scores * scale)?.broadcast_add(&mask)?;
    // The max is a constant shift for numerical safety; detaching it changes no gradient.
    let m = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&m)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}
