//! A frozen projection with its LoRA delta as one op: `y = x·Wᵀ + bias + ((x·Aᵀ) ⊙ S)·Bᵀ`, whose backward
//! gives `dL/dx`, `dL/dA` and `dL/dB` and never the frozen weight's gradient.
//!
//! Why: candle's matmul backward computes both operands' gradients, so a frozen `W` still costs an `xᵀ·dY`
//! product per projection and its buffer (about 40% of a LoRA step's CPU, and 5 GB at 0.5B). Composed from
//! candle ops, the LoRA delta is also two matmuls, a scale, an add and their backward passes, each a fresh
//! tensor. Here the forward is three gemm calls writing into one buffer and the backward five.
//!
//! `A: (R, in)` and `B: (out, R)` are the LoRA factors as [`crate::lora::AdapterSet::factors`] stacks them
//! (one adapter, or retain and forget side by side, some copies detached); `S` scales the `R` columns of
//! `x·Aᵀ`, the same for every row or one set per row (per-sample routing). Gradients reach the factors
//! through candle's graph, so detached copies receive none.

use super::frozen_int8::FrozenInt8;
use super::gemm::{matmul, Read};
use super::with_f32_slice;
use crate::lora::LoraFactors;
use candle_core::{CpuStorage, CustomOp1, CustomOp3, DType, Layout, Shape, Tensor};
use std::sync::Arc;

/// The frozen part: `(out, in)` weight and optional bias, and the weight's 8-bit copy when the learner
/// multiplies by it in 8 bits.
struct Frozen {
    weight: Tensor,
    bias: Option<Vec<f32>>,
    int8: Option<Arc<FrozenInt8>>,
}

impl Frozen {
    /// `y = x·Wᵀ + bias` for `x: (n, in)`.
    fn forward(&self, x: &[f32], n: usize, k: usize, op: &str) -> candle_core::Result<(Vec<f32>, usize)> {
        let (out, wk) = self.weight.dims2()?;
        if wk != k {
            candle_core::bail!("{op}: input width {k} does not match the weight ({out}, {wk})");
        }
        let mut y = match &self.int8 {
            Some(q) => with_f32_slice(&self.weight, op, |w| q.forward(x, n, w))?,
            None => {
                let mut y = vec![0f32; n * out];
                with_f32_slice(&self.weight, op, |w| matmul(x, Read::AsIs, w, Read::Transposed, &mut y, (n, out, k), false))?;
                y
            }
        };
        if let Some(bias) = &self.bias {
            for row in y.chunks_mut(out) {
                row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
            }
        }
        Ok((y, out))
    }

    /// `dx = dY·W`.
    fn input_grad(&self, dy: &[f32], n: usize, op: &str) -> candle_core::Result<Vec<f32>> {
        let (out, k) = self.weight.dims2()?;
        if let Some(q) = &self.int8 {
            return with_f32_slice(&self.weight, op, |w| q.input_grad(dy, n, w));
        }
        let mut dx = vec![0f32; n * k];
        with_f32_slice(&self.weight, op, |w| matmul(dy, Read::AsIs, w, Read::AsIs, &mut dx, (n, k, out), false))?;
        Ok(dx)
    }
}

fn rows_and_width(l: &Layout, op: &str) -> candle_core::Result<(usize, usize)> {
    match l.shape().dims() {
        [n, k] => Ok((*n, *k)),
        d => candle_core::bail!("{op}: expected a matrix, got shape {d:?}"),
    }
}

fn data<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> candle_core::Result<&'a [f32]> {
    super::contiguous_f32(s, l, op)
}

impl CustomOp1 for Frozen {
    fn name(&self) -> &'static str {
        "frozen-projection"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, k) = rows_and_width(l, self.name())?;
        let (y, out) = self.forward(data(s, l, self.name())?, n, k, self.name())?;
        Ok((CpuStorage::F32(y), Shape::from((n, out))))
    }

    fn bwd(&self, x: &Tensor, _y: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let n = x.dim(0)?;
        let dy = grad.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let dx = self.input_grad(&dy, n, self.name())?;
        Ok(Some(Tensor::from_vec(dx, x.shape(), x.device())?))
    }
}

/// The frozen part plus the LoRA factors' column scales.
struct WithLora {
    frozen: Frozen,
    /// `R` scales (every row alike) or `n·R` (one set per row).
    scales: Vec<f32>,
}

impl WithLora {
    /// `h ⊙ S` in place, `h: (n, R)`.
    fn scale(&self, h: &mut [f32], r: usize) {
        if self.scales.len() == r {
            for row in h.chunks_mut(r) {
                row.iter_mut().zip(&self.scales).for_each(|(v, s)| *v *= s);
            }
        } else {
            h.iter_mut().zip(&self.scales).for_each(|(v, s)| *v *= s);
        }
    }

    fn check(&self, n: usize, k: usize, (r, ak): (usize, usize), (out, br): (usize, usize)) -> candle_core::Result<()> {
        let (wout, wk) = self.frozen.weight.dims2()?;
        if ak != k || br != r || out != wout || wk != k {
            candle_core::bail!("lora-projection: x (n, {k}), A ({r}, {ak}), B ({out}, {br}) and W ({wout}, {wk}) do not fit");
        }
        if self.scales.len() != r && self.scales.len() != n * r {
            candle_core::bail!("lora-projection: {} scales for {n} rows of rank {r}", self.scales.len());
        }
        Ok(())
    }
}

impl CustomOp3 for WithLora {
    fn name(&self) -> &'static str {
        "lora-projection"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let op = self.name();
        let ((n, k), (r, ak), (out, br)) = (rows_and_width(l1, op)?, rows_and_width(l2, op)?, rows_and_width(l3, op)?);
        self.check(n, k, (r, ak), (out, br))?;
        let (x, a, b) = (data(s1, l1, op)?, data(s2, l2, op)?, data(s3, l3, op)?);
        let (mut y, _) = self.frozen.forward(x, n, k, op)?;
        let mut h = vec![0f32; n * r];
        matmul(x, Read::AsIs, a, Read::Transposed, &mut h, (n, r, k), false);
        self.scale(&mut h, r);
        matmul(&h, Read::AsIs, b, Read::Transposed, &mut y, (n, out, r), true);
        Ok((CpuStorage::F32(y), Shape::from((n, out))))
    }

    fn bwd(&self, x: &Tensor, a: &Tensor, b: &Tensor, _y: &Tensor, grad: &Tensor) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let ((n, k), (r, _), (out, _)) = (x.dims2()?, a.dims2()?, b.dims2()?);
        let dy = grad.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let (xs, as_, bs) = (x.flatten_all()?.to_vec1::<f32>()?, a.flatten_all()?.to_vec1::<f32>()?, b.flatten_all()?.to_vec1::<f32>()?);
        // g = (dY·B) ⊙ S, the gradient at the scaled rank-R activations.
        let mut g = vec![0f32; n * r];
        matmul(&dy, Read::AsIs, &bs, Read::AsIs, &mut g, (n, r, out), false);
        self.scale(&mut g, r);
        let mut dx = self.frozen.input_grad(&dy, n, self.name())?;
        matmul(&g, Read::AsIs, &as_, Read::AsIs, &mut dx, (n, k, r), true);
        let mut da = vec![0f32; r * k];
        matmul(&g, Read::Transposed, &xs, Read::AsIs, &mut da, (r, k, n), false);
        // The scaled activations again (n·R, cheaper to recompute than to keep).
        let mut h = vec![0f32; n * r];
        matmul(&xs, Read::AsIs, &as_, Read::Transposed, &mut h, (n, r, k), false);
        self.scale(&mut h, r);
        let mut db = vec![0f32; out * r];
        matmul(&dy, Read::Transposed, &h, Read::AsIs, &mut db, (out, r, n), false);
        let dev = x.device();
        Ok((Some(Tensor::from_vec(dx, (n, k), dev)?), Some(Tensor::from_vec(da, (r, k), dev)?), Some(Tensor::from_vec(db, (out, r), dev)?)))
    }
}

/// `x·Wᵀ + bias` plus the LoRA delta of `lora`, for `x: (.., in)` and a frozen `W: (out, in)`; gradients
/// reach `x` and the factors, never `W`. With `int8` (the same `W` rounded), the products with `W` are
/// 8-bit ones. Off the CPU it is composed from candle ops.
pub fn projection(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    lora: Option<&LoraFactors>,
    int8: Option<&Arc<FrozenInt8>>,
) -> candle_core::Result<Tensor> {
    if !x.device().is_cpu() || x.dtype() != DType::F32 {
        return composed_projection(x, weight, bias, lora);
    }
    let dims = x.dims().to_vec();
    let k = *dims.last().unwrap_or(&0);
    let x2 = x.reshape((x.elem_count() / k.max(1), k))?.contiguous()?;
    let frozen = Frozen {
        weight: weight.detach().contiguous()?,
        bias: bias.map(|b| b.detach().to_dtype(DType::F32)?.to_vec1::<f32>()).transpose()?,
        int8: int8.cloned(),
    };
    let y = match lora {
        None => x2.apply_op1_arc(Arc::new(Box::new(frozen)))?,
        Some(f) => {
            let scales = f.scales.flatten_all()?.to_vec1::<f32>()?;
            let op = WithLora { frozen, scales };
            x2.apply_op3_arc(&f.a.contiguous()?, &f.b.contiguous()?, Arc::new(Box::new(op)))?
        }
    };
    let mut out_dims = dims;
    *out_dims.last_mut().expect("a projection input has at least one dimension") = weight.dim(0)?;
    y.reshape(out_dims)
}

/// The same function from candle ops (the weight detached, so that it gets no gradient).
pub fn composed_projection(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>, lora: Option<&LoraFactors>) -> candle_core::Result<Tensor> {
    let y = x.broadcast_matmul(&weight.detach().t()?)?;
    let y = match bias {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    };
    match lora {
        Some(f) => y + f.apply(x)?,
        None => Ok(y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap()
    }

    #[test]
    fn values_and_gradients_match_the_composed_ops() {
        let dev = Device::Cpu;
        let (n, k, out, r) = (6, 10, 7, 4);
        let x = Var::randn(0f32, 1.0, (2, 3, k), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, (out, k), &dev).unwrap();
        let bias = Tensor::randn(0f32, 1.0, out, &dev).unwrap();
        let a = Var::randn(0f32, 1.0, (r, k), &dev).unwrap();
        let b = Var::randn(0f32, 1.0, (out, r), &dev).unwrap();
        let probe = Tensor::randn(0f32, 1.0, (2, 3, out), &dev).unwrap();
        let per_col = Tensor::from_vec(vec![0.5f32, 2.0, 0.0, 1.0], (1, r), &dev).unwrap();
        let per_row = Tensor::randn(0f32, 1.0, (n, r), &dev).unwrap();
        for scales in [per_col, per_row] {
            for with_bias in [None, Some(&bias)] {
                let f = LoraFactors { a: a.as_tensor().clone(), b: b.as_tensor().clone(), scales: scales.clone() };
                let y = projection(x.as_tensor(), &w, with_bias, Some(&f), None).unwrap();
                let y_ref = composed_projection(x.as_tensor(), &w, with_bias, Some(&f)).unwrap();
                assert!(max_diff(&y, &y_ref) < 1e-4, "values differ by {}", max_diff(&y, &y_ref));
                let g = (y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
                let g_ref = (y_ref * &probe).unwrap().sum_all().unwrap().backward().unwrap();
                for v in [&x, &a, &b] {
                    let d = max_diff(g.get(v.as_tensor()).unwrap(), g_ref.get(v.as_tensor()).unwrap());
                    assert!(d < 1e-4, "gradients differ by {d}");
                }
                assert!(g.get(&w).is_none(), "the frozen weight got a gradient");
            }
        }
        // Without LoRA: the frozen part alone.
        let y = projection(x.as_tensor(), &w, Some(&bias), None, None).unwrap();
        let y_ref = composed_projection(x.as_tensor(), &w, Some(&bias), None).unwrap();
        assert!(max_diff(&y, &y_ref) < 1e-4);
        let g = (y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        let g_ref = (y_ref * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        assert!(max_diff(g.get(x.as_tensor()).unwrap(), g_ref.get(x.as_tensor()).unwrap()) < 1e-4);
        assert!(g.get(&w).is_none());
    }
}

/// Inference: `y + ((x·Aᵀ) ⊙ S)·Bᵀ`, the LoRA delta of `f` added to a projection's output `y`, row by row
/// over plain slices. Why: in decoding, each of the ~200 adapted sites of a step applied the delta as four
/// candle ops (two matmuls, a scale, an add), each allocating its output; with a few rows per step that
/// overhead, not the arithmetic, doubled the time of sampling with an adapter. Then, as two products by the
/// streaming decode kernel, the second (rank-long dot products, one per output and row, each a parallel
/// section of its own) made a step of 32 adapted rows slower than 32 rows without an adapter by 2.2x. Here
/// `x·Aᵀ` is the decode kernel's (`rank` dot products of the input's width per row), and `·Bᵀ` is `rank`
/// scaled rows of `Bᵀ` added to each output row, in rank order (`decode::add_weighted_rows`, attention's
/// values step: the output row in registers over the rank): every row's delta is the same bits
/// whatever rows share the call (batch invariance), and a long prompt's rows are split over threads in
/// runs. `x: (.., in)`, `y: (.., out)` with the same rows; CPU f32 only (the caller keeps the candle ops
/// elsewhere).
pub fn add_lora_delta(y: &Tensor, x: &Tensor, f: &LoraFactors) -> candle_core::Result<Tensor> {
    use rayon::prelude::*;
    let op = "add_lora_delta";
    let k = x.dim(candle_core::D::Minus1)?;
    let n = x.elem_count() / k.max(1);
    let (r, ka) = f.a.dims2()?;
    let (out, rb) = f.b.dims2()?;
    if ka != k || rb != r || y.elem_count() != n * out {
        candle_core::bail!("{op}: x {:?}, y {:?}, A ({r}, {ka}), B ({out}, {rb}) do not fit", x.dims(), y.dims());
    }
    let scales: Vec<f32> = f.scales.flatten_all()?.to_vec1()?;
    let per_row = match scales.len() {
        l if l == r => false,
        l if l == n * r => true,
        l => candle_core::bail!("{op}: {l} scales for {n} rows of rank {r}"),
    };
    let (x, a) = (x.contiguous()?, f.a.contiguous()?);
    // Bᵀ: rank rows of the output's width, each added to an output row scaled by that row's h. Transposed
    // here in tiles, not by candle's strided copy, which cost a few per cent of a sampling step (every
    // adapted site transposes its B at every step: 168 sites for Qwen2.5-Coder-0.5B).
    let b = f.b.contiguous()?;
    let bt = with_f32_slice(&b, op, |b| transposed(b, out, r))?;
    let mut outv: Vec<f32> = y.flatten_all()?.to_vec1()?;
    let path = agentrt_kernels::selected();
    const RUN: usize = agentrt_kernels::decode::MAX_ROWS;
    with_f32_slice(&x, op, |xs| {
        with_f32_slice(&a, op, |a| {
            // One run of up to RUN rows starting at row `first`: its h (transposed by the kernel), then its
            // output rows.
            let run = |first: usize, outs: &mut [f32]| {
                let rows = outs.len() / out;
                let mut h = vec![0f32; r * rows];
                agentrt_kernels::decode::rows_f32(path, &xs[first * k..(first + rows) * k], a, &mut h, rows, k);
                // h is rank-major (`h[j·rows + i]`), as attention's weights are key-major: the rows of Bᵀ
                // play the values, added to each output row in rank order by the same kernel.
                for (j, hj) in h.chunks_exact_mut(rows).enumerate() {
                    for (i, x) in hj.iter_mut().enumerate() {
                        *x *= if per_row { scales[(first + i) * r + j] } else { scales[j] };
                    }
                }
                agentrt_kernels::decode::add_weighted_rows(path, outs, &h, rows, &bt, &vec![r; rows]);
            };
            if n <= 4 * RUN {
                for (c, outs) in outv.chunks_mut(RUN * out).enumerate() {
                    run(c * RUN, outs);
                }
            } else {
                outv.par_chunks_mut(RUN * out).enumerate().for_each(|(c, outs)| run(c * RUN, outs));
            }
        })
    })??;
    Tensor::from_vec(outv, y.shape(), y.device())
}

/// `m: (rows, cols)` row-major, transposed to `(cols, rows)`, a tile of rows at a time so that the reads of
/// a tile stay in the first-level cache while each column's run of the tile is written out.
fn transposed(m: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const TILE: usize = 64;
    assert_eq!(m.len(), rows * cols, "a ({rows}, {cols}) matrix has {} values", m.len());
    let mut t = vec![0f32; rows * cols];
    if t.is_empty() {
        return t;
    }
    for first in (0..rows).step_by(TILE) {
        let tile = &m[first * cols..(first + TILE).min(rows) * cols];
        for (j, column) in t.chunks_exact_mut(rows).enumerate() {
            for (out, row) in column[first..first + tile.len() / cols].iter_mut().zip(tile.chunks_exact(cols)) {
                *out = row[j];
            }
        }
    }
    t
}

#[cfg(test)]
mod lora_delta_tests {
    use super::*;
    use candle_core::Device;

    /// The tiled transpose equals candle's, for shapes under, at and past a tile.
    #[test]
    fn transposed_matches_candles_transpose() {
        for (rows, cols) in [(1, 1), (3, 5), (64, 16), (130, 7), (200, 1)] {
            let m: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let want: Vec<f32> =
                Tensor::from_vec(m.clone(), (rows, cols), &Device::Cpu).unwrap().t().unwrap().contiguous().unwrap().flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(transposed(&m, rows, cols), want, "({rows}, {cols})");
        }
    }

    /// The one-pass delta equals the candle-op form, with every row alike and per-row scales.
    #[test]
    fn add_lora_delta_matches_the_candle_ops() {
        let dev = Device::Cpu;
        let (n, k, r, out) = (3, 10, 4, 7);
        let t = |len: usize, seed: f32, dims: &[usize]| {
            Tensor::from_vec((0..len).map(|i| ((i as f32 + seed) * 0.37).sin()).collect::<Vec<f32>>(), dims, &dev).unwrap()
        };
        let x = t(n * k, 1.0, &[1, n, k]);
        let y = t(n * out, 2.0, &[1, n, out]);
        for scales in [t(r, 3.0, &[1, r]), t(n * r, 4.0, &[n, r])] {
            let f = LoraFactors { a: t(r * k, 5.0, &[r, k]), b: t(out * r, 6.0, &[out, r]), scales };
            let want: Vec<f32> = (&y + f.apply(&x).unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let got = add_lora_delta(&y, &x, &f).unwrap();
            assert_eq!(got.dims(), y.dims());
            for (g, w) in got.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().zip(&want) {
                assert!((g - w).abs() < 1e-5, "{g} vs {w}");
            }
        }
    }

    /// A row's delta is the same bits alone and among 70 rows (several runs, split over threads).
    #[test]
    fn a_rows_delta_does_not_depend_on_its_batch() {
        let dev = Device::Cpu;
        let (n, k, r, out) = (70, 24, 8, 40);
        let t = |len: usize, seed: f32, dims: &[usize]| {
            Tensor::from_vec((0..len).map(|i| ((i as f32 + seed) * 0.37).sin()).collect::<Vec<f32>>(), dims, &dev).unwrap()
        };
        let (x, y) = (t(n * k, 1.0, &[n, k]), t(n * out, 2.0, &[n, out]));
        let f = LoraFactors { a: t(r * k, 5.0, &[r, k]), b: t(out * r, 6.0, &[out, r]), scales: t(r, 3.0, &[1, r]) };
        let all: Vec<f32> = add_lora_delta(&y, &x, &f).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        for i in [0, 17, 69] {
            let one: Vec<f32> = add_lora_delta(&y.narrow(0, i, 1).unwrap(), &x.narrow(0, i, 1).unwrap(), &f).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(one, all[i * out..(i + 1) * out], "row {i}");
        }
    }
}
