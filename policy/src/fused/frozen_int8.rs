//! The learner's products with the frozen base weights in 8 bits: `y = x·Wᵀ` in the forward and
//! `dx = dY·W` in the backward, each an exact i32 sum of 8-bit codes ([`agentrt_kernels::int8`]) scaled back
//! to f32. The LoRA factors, their gradients, attention and the head stay f32. Opt-in
//! (`model.learner_products = "int8"`); f32 is the default.
//!
//! Why: `perf` put two thirds of a Qwen2.5-Coder-0.5B SFT step in the f32 gemm's micro-kernel, nearly all of
//! it these two products. On a 2-core AVX2 EPYC, alone, at 1,024 × 896 × 4,864 the int8 kernel multiplies
//! at 111 GMAC/s with weights to ±64 against the f32 gemm's 42 (2.6x; `examples/int8_learner_speed.rs`).
//!
//! What is rounded, and why this way: `W` once per output channel (forward) and once per input channel
//! (backward: `Wᵀ` is a matrix of its own in the kernel's layout), to ±[`WEIGHT_REACH`], the AVX2
//! kernel's fast form; each row of `x` or `dY` per call, to ±127, except the [`OUTLIERS`] columns with the
//! largest magnitudes, which are multiplied in f32 (LLM.int8()'s outlier features, in spirit). Measured on
//! four real SFT conversations of Qwen2.5-Coder-0.5B with a trained adapter (AMD EPYC, AVX2): the LoRA
//! gradient's cosine to the f32 path is 0.980 (0.968 without the outlier columns, 0.9965 with the backward
//! alone in 8 bits: the forward's rounding is what moves it), its norm within 0.6%, the summed loss within
//! 0.3%; the step (4 sequences, every token scored) 79.8 → 56.3 s.

use super::gemm::{matmul, Read};
use agentrt_kernels::int8::{quantize, Int8Kernel, Int8Weights, WeightReach, GROUP_IN, TILE_OUT};
use rayon::prelude::*;

/// How far the weights are rounded: ±64 ([`WeightReach::Narrow`]) lets the AVX2 kernel multiply the
/// activation codes by the weights directly (`vpmaddubsw` without the sign dance).
pub const WEIGHT_REACH: WeightReach = WeightReach::Narrow;

/// Rows quantised and multiplied together: their codes (`ROWS × in` bytes) stay in the L2 cache while every
/// output block passes over them.
const ROWS: usize = 64;

/// Which arithmetic the learner's products with the frozen weights use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LearnerProducts {
    /// f32, as the weights are stored (the reference).
    #[default]
    F32,
    /// 8-bit codes, exact integer sums, f32 scales ([`FrozenInt8`]).
    Int8,
}

/// One frozen `(out, in)` weight in both layouts the learner multiplies by.
#[derive(Debug)]
pub struct FrozenInt8 {
    out_dim: usize,
    in_dim: usize,
    /// `W`, rows = output channels.
    forward: Int8Weights,
    forward_scale: Vec<f32>,
    /// `Wᵀ`, rows = input channels.
    backward: Int8Weights,
    backward_scale: Vec<f32>,
}

/// Rounds each of `rows` rows of width `dim` to ±[`WEIGHT_REACH`] with its own scale (`v ≈ scale · q`);
/// `None` if a weight is not finite.
fn quantize_weight_rows(w: &[f32], rows: usize, dim: usize) -> Option<(Vec<i8>, Vec<f32>)> {
    let mut q = vec![0i8; rows * dim];
    let mut scales = vec![0f32; rows];
    q.par_chunks_mut(dim).zip(scales.par_iter_mut()).zip(w.par_chunks(dim)).try_for_each(|((q, s), row)| {
        *s = quantize::weight_values(row, WEIGHT_REACH, q)?;
        Some(())
    })?;
    Some((q, scales))
}

impl FrozenInt8 {
    /// Both layouts of `w` (`out_dim × in_dim`, row-major); `None` when the shape does not tile for the
    /// kernels (both dimensions must be multiples of 64), or a weight is not finite.
    pub fn new(w: &[f32], out_dim: usize, in_dim: usize) -> Option<FrozenInt8> {
        assert_eq!(w.len(), out_dim * in_dim, "FrozenInt8: {} weights is not {out_dim} × {in_dim}", w.len());
        let tiles = |d: usize| d > 0 && d.is_multiple_of(TILE_OUT) && d.is_multiple_of(GROUP_IN);
        if !tiles(out_dim) || !tiles(in_dim) {
            return None;
        }
        let (q, forward_scale) = quantize_weight_rows(w, out_dim, in_dim)?;
        let forward = Int8Weights::new(&q, out_dim, in_dim);
        let mut wt = vec![0f32; in_dim * out_dim];
        for (o, row) in w.chunks_exact(in_dim).enumerate() {
            for (i, v) in row.iter().enumerate() {
                wt[i * out_dim + o] = *v;
            }
        }
        let (q, backward_scale) = quantize_weight_rows(&wt, in_dim, out_dim)?;
        let backward = Int8Weights::new(&q, in_dim, out_dim);
        Some(FrozenInt8 { out_dim, in_dim, forward, forward_scale, backward, backward_scale })
    }

    /// `x·Wᵀ` for `x: (n, in)`: `(n, out)`; `w` is the f32 weight the outlier columns of `x` multiply.
    pub fn forward(&self, x: &[f32], n: usize, w: &[f32]) -> Vec<f32> {
        let k = self.in_dim;
        assert_eq!(w.len(), self.out_dim * k, "FrozenInt8::forward: the f32 weight is not {} × {k}", self.out_dim);
        let m = self.out_dim;
        product(&self.forward, &self.forward_scale, x, n, k, m, |a, picked, y| {
            // y += a[:, picked] · W[:, picked]ᵀ, both gathered.
            let (rows, c) = (a.len() / k, picked.len());
            let gather = |src: &[f32], width: usize| -> Vec<f32> { src.chunks_exact(width).flat_map(|r| picked.iter().map(move |&j| r[j])).collect() };
            matmul(&gather(a, k), Read::AsIs, &gather(w, k), Read::Transposed, y, (rows, m, c), true);
        })
    }

    /// `dY·W` for `dY: (n, out)`: `(n, in)`; `w` is the f32 weight the outlier columns of `dY` multiply.
    pub fn input_grad(&self, dy: &[f32], n: usize, w: &[f32]) -> Vec<f32> {
        let k = self.in_dim;
        assert_eq!(w.len(), self.out_dim * k, "FrozenInt8::input_grad: the f32 weight is not {} × {k}", self.out_dim);
        let m = self.out_dim;
        product(&self.backward, &self.backward_scale, dy, n, m, k, |a, picked, y| {
            // y += dY[:, picked] · W[picked, :].
            let (rows, c) = (a.len() / m, picked.len());
            let a_picked: Vec<f32> = a.chunks_exact(m).flat_map(|r| picked.iter().map(move |&o| r[o])).collect();
            let w_picked: Vec<f32> = picked.iter().flat_map(|&o| w[o * k..(o + 1) * k].iter().copied()).collect();
            matmul(&a_picked, Read::AsIs, &w_picked, Read::AsIs, y, (rows, k, c), true);
        })
    }
}

/// Input columns of a product multiplied in f32 rather than 8 bits.
const OUTLIERS: usize = 16;

/// `a · Wᵀ` for `a: (n, k)` and a quantised `W: (m, k)` with per-row scales: `(n, m)`. Rows of `a` are
/// quantised to ±127 in runs of [`ROWS`], each run multiplied on one thread. The [`OUTLIERS`] columns of
/// `a` with the largest magnitudes are left out of the 8-bit product, and `outliers(a, columns, y)` adds
/// their share in f32 (one small gemm), so that a few large features do not set every row's scale (as
/// LLM.int8() keeps its outlier features in 16 bits).
fn product(w: &Int8Weights, w_scale: &[f32], a: &[f32], n: usize, k: usize, m: usize, outliers: impl Fn(&[f32], &[usize], &mut [f32])) -> Vec<f32> {
    assert_eq!(a.len(), n * k, "int8 product: {} values is not {n} × {k}", a.len());
    let count = OUTLIERS.min(k);
    let kernel = Int8Kernel::selected();
    // The outlier columns: the largest magnitudes over all rows.
    let mut column_max = vec![0f32; k];
    for row in a.chunks_exact(k) {
        column_max.iter_mut().zip(row).for_each(|(m, v)| *m = m.max(v.abs()));
    }
    let mut order: Vec<usize> = (0..k).collect();
    if count > 0 {
        order.select_nth_unstable_by(count - 1, |&i, &j| column_max[j].total_cmp(&column_max[i]));
    }
    let picked = &order[..count];
    let mut y = vec![0f32; n * m];
    y.par_chunks_mut(ROWS * m).zip(a.par_chunks(ROWS * k)).for_each(|(y, a)| {
        let rows = a.len() / k;
        let mut codes = vec![0u8; rows * k];
        let mut scales = vec![0f32; rows];
        let mut rest = vec![0f32; k];
        for ((c, s), row) in codes.chunks_exact_mut(k).zip(scales.iter_mut()).zip(a.chunks_exact(k)) {
            rest.copy_from_slice(row);
            for &j in picked {
                rest[j] = 0.0;
            }
            *s = quantize::activation_codes(&rest, c).expect("int8 product: a non-finite activation or gradient");
        }
        let mut sums = vec![0i32; rows * m];
        w.signed_sums_with(kernel, &codes, rows, &mut sums);
        for ((y, sums), s) in y.chunks_exact_mut(m).zip(sums.chunks_exact(m)).zip(&scales) {
            for ((y, &acc), ws) in y.iter_mut().zip(sums).zip(w_scale) {
                *y = acc as f32 * s * ws;
            }
        }
    });
    if count > 0 {
        outliers(a, picked, &mut y);
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    use agentrt_kernels::test_data::values;

    fn cosine(a: &[f32], b: &[f32]) -> f64 {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
        let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        dot / (na * nb)
    }

    /// Both products agree with f32 to a cosine above 0.999 on random data (70 rows: a partial run).
    #[test]
    fn both_products_follow_the_f32_ones() {
        let (n, k, m) = (70, 128, 192);
        let (x, w, dy) = (values(n * k, 1, 1.0), values(m * k, 2, 0.05), values(n * m, 3, 0.01));
        let q = FrozenInt8::new(&w, m, k).unwrap();
        let mut want = vec![0f32; n * m];
        matmul(&x, Read::AsIs, &w, Read::Transposed, &mut want, (n, m, k), false);
        let c = cosine(&q.forward(&x, n, &w), &want);
        assert!(c > 0.999, "forward cosine {c}");
        let mut want = vec![0f32; n * k];
        matmul(&dy, Read::AsIs, &w, Read::AsIs, &mut want, (n, k, m), false);
        let c = cosine(&q.input_grad(&dy, n, &w), &want);
        assert!(c > 0.999, "input gradient cosine {c}");
        // Shapes that do not tile are refused (the caller keeps f32 for them).
        assert!(FrozenInt8::new(&w[..m * 96], m, 96).is_none());
    }
}
