//! `x · Wᵀ` for the few rows of a decoding step, streaming the weight once.
//!
//! Why: with 1-16 rows, a decoding step is bound by reading the weights (540 MB of f32 per token for
//! SmolLM2-135M). The general gemm packs the whole right-hand side before multiplying, so it copies every
//! weight matrix on every step (measured: 57% of sampling's CPU in that packing). Here each weight row is
//! read once and dotted with every input row while it sits in L1 (the kernels, one per instruction set,
//! are `agentrt_kernels::decode`); threads split the weight rows here.

use super::with_f32_slice;
use candle_core::{DType, Tensor};
use rayon::prelude::*;

/// Input rows up to which the streaming kernel is used; above it the gemm's packing pays for itself.
pub use agentrt_kernels::decode::MAX_ROWS;
use agentrt_kernels::decode::PANEL_ROWS;

/// Weight rows per parallel task at most: a task's blocks stay in cache across its input rows.
const TASK_ROWS: usize = 64;

/// Weight rows per task for `n` rows: [`TASK_ROWS`], or fewer so that each thread gets about eight
/// tasks. A decoding step's small matrices (SmolLM2-135M's keys and values: 192 rows, three tasks of
/// 64) left one of two threads idle for a third of the product. Always whole weight panels
/// ([`PANEL_ROWS`]), so a task of a repacked matrix starts and ends on a panel.
fn task_rows(n: usize) -> usize {
    (n / (8 * rayon::current_num_threads())).clamp(PANEL_ROWS, TASK_ROWS) / PANEL_ROWS * PANEL_ROWS
}

/// The frame of both decode kernels: the `n` weight rows (`per_row` items each, f32 or block bytes) are
/// split into tasks of [`task_rows`] rows; `task(first_row, weight_rows, out_rows)` writes one output row
/// of `m` per weight row (`first_row` the task's first) into a transposed `(n×m)` buffer (one contiguous
/// block per task), which lands in `out` `(m×n)` at the end (one input row: the two layouts are one).
pub(super) fn by_weight_rows<T: Sync>(weights: &[T], per_row: usize, (m, n): (usize, usize), out: &mut [f32], task: impl Fn(usize, &[T], &mut [f32]) + Sync) {
    assert_eq!(weights.len(), n * per_row, "weights do not hold {n} rows of {per_row}");
    by_weight_rows_of(&[(weights, per_row)], m, &mut [out], |_, first, wc, oc| task(first, wc, oc));
}

/// [`by_weight_rows`] for several matrices multiplied into the same `m` input rows (a layer's queries,
/// keys and values), all their tasks in one parallel section: `task(i, first_row, weight_rows, out_rows)`
/// for matrix `i`, whose `(m × rows)` product lands in `outs[i]`. One section instead of three saves two of
/// the threads' meetings a layer, and the small matrices' tasks fill the gaps of the large ones. A task
/// lands its own transposed product in its columns of the output while it is in cache (one input row:
/// the two layouts are one, and the task writes the output itself).
pub(super) fn by_weight_rows_of<T: Sync>(mats: &[(&[T], usize)], m: usize, outs: &mut [&mut [f32]], task: impl Fn(usize, usize, &[T], &mut [f32]) + Sync) {
    assert_eq!(mats.len(), outs.len(), "{} matrices and {} outputs", mats.len(), outs.len());
    let ns: Vec<usize> = mats
        .iter()
        .zip(outs.iter())
        .map(|((w, per_row), out)| {
            assert!(*per_row > 0 && w.len().is_multiple_of(*per_row), "weights of {} items are not rows of {per_row}", w.len());
            let n = w.len() / per_row;
            assert_eq!(out.len(), m * n, "output is not {m}x{n}");
            n
        })
        .collect();
    let rows = task_rows(ns.iter().sum());
    let targets: Vec<super::Shared> = outs.iter_mut().map(|o| super::Shared(o.as_mut_ptr())).collect();
    let mut tasks = Vec::new();
    for (i, &(w, per_row)) in mats.iter().enumerate() {
        tasks.extend(w.chunks(rows * per_row).enumerate().map(|(t, wc)| (i, t * rows, wc)));
    }
    tasks.into_par_iter().for_each(|(i, first, wc)| {
        let (task_rows, n, dst) = (wc.len() / mats[i].1, ns[i], targets[i]);
        if m == 1 {
            // SAFETY: this task alone writes outputs `first .. first + task_rows` of matrix `i`'s output
            // of `n` values, inside the buffer.
            return task(i, first, wc, unsafe { std::slice::from_raw_parts_mut(dst.at(first), task_rows) });
        }
        let mut transposed = vec![0f32; task_rows * m];
        task(i, first, wc, &mut transposed);
        for b in 0..m {
            // SAFETY: this task alone writes columns `first .. first + task_rows` of matrix `i`'s (m × n)
            // output, here of row `b < m`, inside the buffer.
            let row = unsafe { std::slice::from_raw_parts_mut(dst.at(b * n + first), task_rows) };
            for (o, v) in row.iter_mut().zip(transposed.chunks_exact(m)) {
                *o = v[b];
            }
        }
    });
}

/// [`by_weight_rows`] for any number of input rows `m`: inside each task of weight rows the inputs go
/// through in runs of at most [`MAX_ROWS`] (`run((start, rows), first_row, weight_rows, out)` writes the task's
/// `(task rows × rows)` transposed product of run `start..start + rows`), so a task's weights are read from
/// memory once and serve every run from the cache (a run after run over the whole matrix read
/// Qwen2.5-Coder-0.5B's 400 MB of blocks 32 times for a 512-token prompt), in one parallel section, and
/// every input row meets the very kernel a decoding step's row does. Each task lands its runs in `out`'s
/// columns itself, from the run's product still in cache: landing the whole transposed product after the
/// parallel section, on one thread, was a fifth of a 512-token prompt's time once AMX tiles ran the products.
pub(super) fn by_weight_rows_in_runs<T: Sync>(
    weights: &[T],
    per_row: usize,
    (m, n): (usize, usize),
    out: &mut [f32],
    run: impl Fn((usize, usize), usize, &[T], &mut [f32]) + Sync,
) {
    if m <= MAX_ROWS {
        return by_weight_rows(weights, per_row, (m, n), out, |first, wc, oc| run((0, m), first, wc, oc));
    }
    assert!(per_row > 0 && weights.len() == n * per_row, "weights of {} items are not {n} rows of {per_row}", weights.len());
    assert_eq!(out.len(), m * n, "output is not {m}x{n}");
    let runs: Vec<(usize, usize)> = (0..m).step_by(MAX_ROWS).map(|s| (s, MAX_ROWS.min(m - s))).collect();
    let rows = task_rows(n);
    let dst = super::Shared(out.as_mut_ptr());
    weights.par_chunks(rows * per_row).enumerate().for_each(|(t, wc)| {
        let (first, task_rows) = (t * rows, wc.len() / per_row);
        let mut scratch = vec![0f32; task_rows * MAX_ROWS];
        for &(s, r) in &runs {
            let scratch = &mut scratch[..task_rows * r];
            run((s, r), first, wc, scratch);
            for b in 0..r {
                // SAFETY: task `t` alone writes columns `first .. first + task_rows` of the (m × n) output,
                // here of row `s + b < m`, inside the buffer.
                let row = unsafe { std::slice::from_raw_parts_mut(dst.at((s + b) * n + first), task_rows) };
                for (o, v) in row.iter_mut().zip(scratch.chunks_exact(r)) {
                    *o = v[b];
                }
            }
        }
    });
}

/// `out (m×n) = x (m×k) · wᵀ` with `w` `(n×k)`, all row-major, on the selected kernel path, for any
/// number of rows ([`by_weight_rows_in_runs`]): each row's product is the same bits whatever rows share
/// the call.
pub fn streamed_a_bt(x: &[f32], w: &[f32], out: &mut [f32], m: usize, n: usize, k: usize) {
    assert_eq!(x.len(), m * k, "input is not {m}x{k}");
    let path = agentrt_kernels::selected();
    by_weight_rows_in_runs(w, k, (m, n), out, |(s, r), _, wc, oc| agentrt_kernels::decode::rows_f32(path, &x[s * k..(s + r) * k], wc, oc, r, k));
}

/// How sampling's products and attention treat the rows of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Batching {
    /// Every row through the same per-row kernels, every sum in a fixed order per row: a sequence's
    /// logits (so its greedy tokens and their log-probs) are the same bits alone, beside any other
    /// sequences, in any chunking of its prompt and after any cached prefix ("Defeating Nondeterminism in
    /// LLM Inference", as vLLM's batch-invariant mode). Its cost is measured in bench/serve_results.md.
    #[default]
    Invariant,
    /// The fastest arithmetic for each shape: a prompt's many rows by the general matrix product, and
    /// decoding sequences that start with the same cached prefix read it once between them (a cascade).
    /// A sequence's logits then change with its batch by float rounding, which greedy decoding can follow
    /// into other tokens.
    Fastest,
}

impl Batching {
    /// The name `FromStr` reads (and `agentrt serve --batching` takes).
    pub fn name(self) -> &'static str {
        match self {
            Batching::Invariant => "invariant",
            Batching::Fastest => "fastest",
        }
    }
}

impl std::str::FromStr for Batching {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "invariant" => Ok(Batching::Invariant),
            "fastest" => Ok(Batching::Fastest),
            other => Err(format!("{other:?}: expected invariant or fastest")),
        }
    }
}

/// `x · wᵀ` for `x: (.., k)` and a frozen `w: (n, k)`, no gradient: the streaming kernel for f32 CPU
/// rows (up to [`MAX_ROWS`] of them, or any number under [`Batching::Invariant`]), candle's matmul
/// otherwise.
pub fn decode_linear(x: &Tensor, w: &Tensor, batching: Batching) -> candle_core::Result<Tensor> {
    let dims = x.dims().to_vec();
    let k = *dims.last().unwrap_or(&0);
    let m = x.elem_count() / k.max(1);
    let (n, wk) = w.dims2()?;
    if wk != k {
        candle_core::bail!("decode-linear: input width {k} does not match the weight ({n}, {wk})");
    }
    let mut out_dims = dims;
    *out_dims.last_mut().expect("a matmul input has at least one dimension") = n;
    let many = m > MAX_ROWS && batching == Batching::Fastest;
    if many || !x.device().is_cpu() || x.dtype() != DType::F32 || w.dtype() != DType::F32 {
        return x.reshape((m, k))?.matmul(&w.t()?)?.reshape(out_dims);
    }
    let x = x.contiguous()?;
    let w = w.contiguous()?;
    let mut out = vec![0f32; m * n];
    with_f32_slice(&x, "decode-linear: input", |xs| with_f32_slice(&w, "decode-linear: weight", |ws| streamed_a_bt(xs, ws, &mut out, m, n, k)))??;
    Tensor::from_vec(out, out_dims, x.device())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn matches_candles_matmul_for_every_row_count() {
        let dev = Device::Cpu;
        // 200 weight rows (several tasks and a partial one), width 150 (a remainder after 64-lane chunks).
        let w = Tensor::randn(0f32, 1.0, (200, 150), &dev).unwrap();
        for (m, batching) in [
            (1, Batching::Fastest),
            (2, Batching::Fastest),
            (7, Batching::Fastest),
            (16, Batching::Fastest),
            (17, Batching::Fastest),
            (40, Batching::Invariant),
        ] {
            let x = Tensor::randn(0f32, 1.0, (1, m, 150), &dev).unwrap();
            let y = decode_linear(&x, &w, batching).unwrap();
            assert_eq!(y.dims(), &[1, m, 200]);
            let y_ref = x.broadcast_matmul(&w.t().unwrap()).unwrap();
            let d = (y - y_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-4, "{m} rows: differs by {d}");
        }
    }

    /// Under [`Batching::Invariant`] a row's product is the same bits in a call of 1, 5 or 40 rows (runs
    /// of [`MAX_ROWS`] and a partial one).
    #[test]
    fn invariant_rows_do_not_depend_on_the_rows_beside_them() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1.0, (70, 96), &dev).unwrap();
        let x = Tensor::randn(0f32, 1.0, (40, 96), &dev).unwrap();
        let all = decode_linear(&x, &w, Batching::Invariant).unwrap().to_vec2::<f32>().unwrap();
        for (from, rows) in [(0, 1), (33, 1), (3, 5), (20, 20)] {
            let some = decode_linear(&x.narrow(0, from, rows).unwrap(), &w, Batching::Invariant).unwrap().to_vec2::<f32>().unwrap();
            for (i, row) in some.iter().enumerate() {
                assert!(row.iter().zip(&all[from + i]).all(|(a, b)| a.to_bits() == b.to_bits()), "row {} alone differs", from + i);
            }
        }
    }
}
