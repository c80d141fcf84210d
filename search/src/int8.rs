//! Int8 linear layers for the BERT encoder: weights quantised once per output channel, activations
//! quantised per row on the fly, products accumulated exactly in i32 by `agentrt-kernels`
//! ([`agentrt_kernels::int8`]: AMX, AVX-512 VNNI, AVX2, NEON or plain Rust, all giving the same sums).
//!
//! Why int8: a query is about 15 word pieces, so each of BERT's linear layers multiplies a skinny matrix
//! by a weight matrix that is read from memory once per query. The cost is the weight bytes, and int8
//! carries a quarter of f32's. Activations are stored as codes `q + 128` (the unsigned operand VNNI and
//! AMX want); the kernels return the signed sums `Σ q · w`.
//!
//! Weights are quantised to ±64 ([`NARROW_MAX`]), not ±127: AVX2's `vpmaddubsw` can then multiply the
//! unsigned codes by the weights directly (255 · 64 twice still fits its i16), which made the AVX2
//! kernel 1.7x faster than the sign-adjusting form that 8-bit weights need (`kernel_speed`). The
//! seventh bit bought little: the mean cosine to candle's f32 vectors went from 0.9977 to 0.9966 on the
//! test's 64 texts (worst 0.9937 to 0.9920), and hybrid recall@10 was unchanged (bench/search_results.md).
//! The section encoder goes one bit further, to ±32 ([`PAIRED_MAX`]): two `vpmaddubsw` results then add
//! in i16 before they are widened, 1.16x the narrow kernel's rate on AVX2, and neither train nor dev
//! recall moved (bench/search_results.md, "the index in about a minute"). The query encoder keeps ±64.

use agentrt_kernels::int8::{quantize, Int8Kernel, Int8Weights, WeightReach, TILE_OUT};
#[cfg(doc)]
use agentrt_kernels::int8::{NARROW_MAX, PAIRED_MAX};
use std::cell::UnsafeCell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// A linear layer `y = x Wᵀ + b` with int8 weights.
#[derive(Debug, Clone)]
pub struct Int8Linear {
    /// The int8 weights in the kernels' layout.
    weights: Int8Weights,
    /// Per output channel: the weight scale (`w ≈ scale · q`).
    scale: Vec<f32>,
    bias: Vec<f32>,
}

/// Rows of activations quantised for [`Int8Linear::forward`]: `x[r] ≈ scale[r] · (data[r] - 128)`.
#[derive(Debug, Clone, Default)]
pub struct QuantizedRows {
    rows: usize,
    dim: usize,
    data: Vec<u8>,
    scale: Vec<f32>,
}

impl QuantizedRows {
    /// Quantise `rows × dim` row-major values, each row with its own symmetric scale.
    pub fn quantize(x: &[f32], rows: usize, dim: usize) -> Self {
        let mut q = QuantizedRows::default();
        q.requantize(x, rows, dim);
        q
    }

    /// As [`QuantizedRows::quantize`], reusing this buffer.
    #[inline(always)]
    pub fn requantize(&mut self, x: &[f32], rows: usize, dim: usize) {
        assert_eq!(x.len(), rows * dim, "quantize: {} values is not {rows} rows × {dim}", x.len());
        self.rows = rows;
        self.dim = dim;
        self.data.resize(rows * dim, 0);
        self.scale.resize(rows, 0.0);
        for (r, ((codes, scale), row)) in self.data.chunks_exact_mut(dim).zip(&mut self.scale).zip(x.chunks_exact(dim)).enumerate() {
            *scale = quantize::activation_codes(row, codes).unwrap_or_else(|| panic!("quantize: row {r} holds a non-finite value"));
        }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row `r`: its codes (`q + 128`) and its scale.
    pub fn row(&self, r: usize) -> (&[u8], f32) {
        (&self.data[r * self.dim..(r + 1) * self.dim], self.scale[r])
    }
}

impl Int8Linear {
    /// Quantise `weight` (`out_dim × in_dim`, row-major, as PyTorch stores it) per output channel to
    /// `reach` (±[`PAIRED_MAX`] or ±[`NARROW_MAX`]; see the module's notes), and keep `bias`.
    ///
    /// Panics unless `in_dim` is a multiple of 4 and `out_dim` of 64 (the kernel's tile; BERT's 384,
    /// 1,152 and 1,536 all are).
    pub fn new(weight: &[f32], bias: &[f32], out_dim: usize, in_dim: usize, reach: WeightReach) -> Self {
        assert_eq!(weight.len(), out_dim * in_dim, "Int8Linear: weight is not {out_dim} × {in_dim}");
        assert_eq!(bias.len(), out_dim, "Int8Linear: bias has {} values for {out_dim} outputs", bias.len());
        assert!(in_dim.is_multiple_of(4) && out_dim.is_multiple_of(TILE_OUT), "Int8Linear: {out_dim} × {in_dim} does not tile");
        let mut scale = vec![0f32; out_dim];
        let mut q = vec![0i8; out_dim * in_dim];
        for (o, ((q, s), row)) in q.chunks_exact_mut(in_dim).zip(&mut scale).zip(weight.chunks_exact(in_dim)).enumerate() {
            *s = quantize::weight_values(row, reach, q).unwrap_or_else(|| panic!("Int8Linear: output channel {o} holds a non-finite weight"));
        }
        Int8Linear { weights: Int8Weights::new(&q, out_dim, in_dim), scale, bias: bias.to_vec() }
    }

    /// Input width.
    pub fn in_dim(&self) -> usize {
        self.weights.in_dim()
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.weights.out_dim()
    }

    /// `out = x Wᵀ + b` for every row of `x`; `out` is `x.rows() × out_dim`. `sums` is scratch space.
    /// With a [`SecondCore`], a large layer's columns are split between it and this thread.
    #[inline(always)]
    pub fn forward(&self, kernel: Int8Kernel, x: &QuantizedRows, sums: &mut Vec<i32>, out: &mut [f32], second_core: Option<&SecondCore>) {
        self.forward_rows(kernel, x, sums, out, second_core, |_| ())
    }

    /// [`Int8Linear::forward`] with `then` applied to every output (an activation), row by row while
    /// the row is in the cache rather than in a pass of its own.
    #[inline(always)]
    pub fn forward_then(
        &self,
        kernel: Int8Kernel,
        x: &QuantizedRows,
        sums: &mut Vec<i32>,
        out: &mut [f32],
        second_core: Option<&SecondCore>,
        then: impl Fn(f32) -> f32,
    ) {
        self.forward_rows(kernel, x, sums, out, second_core, |row| {
            // Sixteen at a time (two or one vector registers): an activation is a long chain of
            // dependent steps, and two chains side by side keep the units busy where one waited.
            let mut chunks = row.chunks_exact_mut(16);
            for chunk in chunks.by_ref() {
                let mut v: [f32; 16] = (&*chunk).try_into().expect("sixteen");
                #[allow(clippy::needless_range_loop)] // the iterator form was slower, by a little
                for l in 0..16 {
                    v[l] = then(v[l]);
                }
                chunk.copy_from_slice(&v);
            }
            for v in chunks.into_remainder() {
                *v = then(*v);
            }
        })
    }

    /// The product, then `each_row` on every output row once it is written.
    #[inline(always)]
    fn forward_rows(
        &self,
        kernel: Int8Kernel,
        x: &QuantizedRows,
        sums: &mut Vec<i32>,
        out: &mut [f32],
        second_core: Option<&SecondCore>,
        each_row: impl Fn(&mut [f32]),
    ) {
        let (in_dim, out_dim) = (self.in_dim(), self.out_dim());
        assert_eq!(x.dim, in_dim, "Int8Linear: input width {} for a layer of {in_dim}", x.dim);
        assert_eq!(out.len(), x.rows * out_dim, "Int8Linear: output buffer size");
        // Not zeroed: every kernel writes each sum of its columns.
        sums.resize(x.rows * out_dim, 0);
        let tiles = out_dim / TILE_OUT;
        match second_core {
            Some(core) if tiles >= 2 && self.weights.bytes() >= SPLIT_BYTES => core.split(kernel, self, x, sums, tiles / 2 * TILE_OUT),
            // SAFETY: `sums` holds rows × out_dim values and this thread alone writes it.
            _ => unsafe { self.signed_sums(kernel, x, 0..out_dim, sums.as_mut_ptr()) },
        }
        for r in 0..x.rows {
            let xs = x.scale[r];
            let (acc, y) = (&sums[r * out_dim..(r + 1) * out_dim], &mut out[r * out_dim..(r + 1) * out_dim]);
            // Zipped iterators, not indices: with bounds checks in the loop it does not vectorise.
            for (((y, &acc), &scale), &bias) in y.iter_mut().zip(acc).zip(&self.scale).zip(&self.bias) {
                *y = xs * scale * acc as f32 + bias;
            }
            each_row(y);
        }
    }

    /// Fill the columns `columns` (multiples of 64) of `sums`, a `x.rows() × out_dim` buffer, with the
    /// signed integer sums, on `kernel`.
    ///
    /// # Safety
    /// `sums` must point to `x.rows() × out_dim` values that no other thread reads or writes in these
    /// columns meanwhile; `kernel` must run on this CPU.
    unsafe fn signed_sums(&self, kernel: Int8Kernel, x: &QuantizedRows, columns: Range<usize>, sums: *mut i32) {
        // SAFETY: as the caller promised.
        unsafe { self.weights.signed_sums(kernel, &x.data, x.rows, columns, sums) }
    }
}

/// Layers with at least this many weight bytes are worth splitting over two cores.
const SPLIT_BYTES: usize = 64 * 1024;

const IDLE: u32 = 0;
const POSTED: u32 = 1;
const TAKEN: u32 = 2;
const FINISHED: u32 = 3;

/// A second core lent to one encoding: it spins beside the encoding thread and takes the second half of
/// the columns of each large layer.
///
/// Why not `rayon::join` per layer: a layer takes 10-40 µs and the gaps between layers are as long, so
/// rayon's idle worker had gone back to sleep by the next layer, and the split bought little (1.50 →
/// 1.40 ms a query). The encoding thread never waits for the helper to show up: if it has not taken
/// the posted half by the time the first half is done, the encoding thread takes it back and does it.
pub struct SecondCore {
    done: AtomicBool,
    state: AtomicU32,
    job: UnsafeCell<ColumnJob>,
}

#[derive(Clone, Copy)]
struct ColumnJob {
    kernel: Int8Kernel,
    layer: *const Int8Linear,
    x: *const QuantizedRows,
    sums: *mut i32,
    columns: (usize, usize),
}

// SAFETY: `job` is written only by the encoding thread while `state` is IDLE, and read by the helper
// only after it has moved `state` from POSTED to TAKEN (release/acquire); the pointers in it stay valid
// until the encoding thread has seen the job FINISHED or taken it back.
unsafe impl Sync for SecondCore {}
// SAFETY: as for Sync: the hand-over protocol above is the only access, from whichever thread holds it.
unsafe impl Send for SecondCore {}

/// Spin briefly, then yield the core at every turn: on a machine busy with other work (a policy
/// training beside the searches), a pure spin took the core from the threads that had work, and a
/// query then took three times as long.
fn idle_wait(turns: &mut u32) {
    *turns += 1;
    if *turns < 256 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

impl SecondCore {
    /// Run `f` with a second core serving its split layers when rayon has two threads; else `f(None)`.
    pub fn lend<R: Send>(f: impl FnOnce(Option<&SecondCore>) -> R + Send) -> R {
        if rayon::current_num_threads() < 2 {
            return f(None);
        }
        let core = SecondCore {
            done: AtomicBool::new(false),
            state: AtomicU32::new(IDLE),
            job: UnsafeCell::new(ColumnJob {
                kernel: Int8Kernel::Generic,
                layer: std::ptr::null(),
                x: std::ptr::null(),
                sums: std::ptr::null_mut(),
                columns: (0, 0),
            }),
        };
        rayon::scope(|scope| {
            scope.spawn(|_| core.serve());
            let result = f(Some(&core));
            core.done.store(true, Ordering::Release);
            result
        })
    }

    fn serve(&self) {
        let mut idle = 0u32;
        while !self.done.load(Ordering::Acquire) {
            if self.state.compare_exchange(POSTED, TAKEN, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                // SAFETY: see the `Sync` impl: the job is ours until we publish FINISHED.
                unsafe {
                    let job = *self.job.get();
                    (*job.layer).signed_sums(job.kernel, &*job.x, job.columns.0..job.columns.1, job.sums);
                }
                self.state.store(FINISHED, Ordering::Release);
                idle = 0;
            } else {
                idle_wait(&mut idle);
            }
        }
    }

    fn split(&self, kernel: Int8Kernel, layer: &Int8Linear, x: &QuantizedRows, sums: &mut [i32], middle: usize) {
        debug_assert_eq!(self.state.load(Ordering::Relaxed), IDLE);
        let out = sums.as_mut_ptr();
        // SAFETY: the state is IDLE, so the helper does not read the job now.
        unsafe { *self.job.get() = ColumnJob { kernel, layer, x, sums: out, columns: (middle, layer.out_dim()) } };
        self.state.store(POSTED, Ordering::Release);
        // SAFETY: this thread writes columns [0, middle), the helper (if it takes the job) the rest.
        unsafe { layer.signed_sums(kernel, x, 0..middle, out) };
        if self.state.compare_exchange(POSTED, TAKEN, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            // SAFETY: taken back: no one else will touch the job.
            unsafe { layer.signed_sums(kernel, x, middle..layer.out_dim(), out) };
        } else {
            let mut idle = 0;
            while self.state.load(Ordering::Acquire) != FINISHED {
                idle_wait(&mut idle);
            }
        }
        self.state.store(IDLE, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use agentrt_kernels::test_data::values;

    fn reference(x: &[f32], rows: usize, w: &[f32], b: &[f32], out_dim: usize, in_dim: usize) -> Vec<f32> {
        let mut y = vec![0f32; rows * out_dim];
        for r in 0..rows {
            for o in 0..out_dim {
                let s: f64 = (0..in_dim).map(|k| x[r * in_dim + k] as f64 * w[o * in_dim + k] as f64).sum();
                y[r * out_dim + o] = s as f32 + b[o];
            }
        }
        y
    }

    #[test]
    fn int8_product_is_close_to_the_f32_product() {
        let (rows, in_dim, out_dim) = (13, 384, 128);
        let x = values(rows * in_dim, 1, 2.0);
        let w = values(out_dim * in_dim, 2, 0.1);
        let b = values(out_dim, 3, 0.5);
        let want = reference(&x, rows, &w, &b, out_dim, in_dim);
        let size = want.iter().map(|v| v.abs()).fold(0f32, f32::max);
        // Each product carries an 8-bit rounding of the input and a 7- or 6-bit one of the weight; over
        // 384 terms the error stays within a percent or two of the largest output.
        for (reach, bound) in [(WeightReach::Narrow, 0.02), (WeightReach::Paired, 0.03)] {
            let lin = Int8Linear::new(&w, &b, out_dim, in_dim, reach);
            let mut out = vec![0f32; rows * out_dim];
            lin.forward(Int8Kernel::selected(), &QuantizedRows::quantize(&x, rows, in_dim), &mut Vec::new(), &mut out, None);
            let err = out.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(err < bound * size, "{reach:?}: max error {err} against outputs up to {size}");
        }
    }

    /// With a second core lent, large layers are split between two threads by columns: still the
    /// same outputs, whether or not the helper gets to take its half.
    #[test]
    fn a_layer_split_over_two_threads_gives_the_same_output() {
        let (in_dim, out_dim, rows) = (384, 320, 15);
        let lin = Int8Linear::new(&values(out_dim * in_dim, 21, 1.0), &values(out_dim, 23, 1.0), out_dim, in_dim, WeightReach::Narrow);
        assert!(lin.weights.bytes() >= SPLIT_BYTES);
        let x = QuantizedRows::quantize(&values(rows * in_dim, 22, 2.0), rows, in_dim);
        let mut alone = vec![0f32; rows * out_dim];
        lin.forward(Int8Kernel::selected(), &x, &mut Vec::new(), &mut alone, None);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for _ in 0..20 {
            let split = pool.install(|| {
                SecondCore::lend(|core| {
                    assert!(core.is_some());
                    let mut out = vec![0f32; rows * out_dim];
                    let mut sums = Vec::new();
                    for _ in 0..10 {
                        lin.forward(Int8Kernel::selected(), &x, &mut sums, &mut out, core);
                    }
                    out
                })
            });
            assert_eq!(split, alone);
        }
    }

    #[test]
    fn tiny_and_huge_rows_quantise_without_overflow() {
        let q = QuantizedRows::quantize(&[1e-40, -1e-39, 0.0, 3e38, -3e38, 1.0], 2, 3);
        assert_eq!(q.row(0).0, &[128, 128, 128]);
        assert_eq!(q.row(1).0, &[255, 1, 128]);
    }

    #[test]
    fn a_zero_row_quantises_to_zero_output_plus_bias() {
        let (in_dim, out_dim) = (8, 64);
        let lin = Int8Linear::new(&values(out_dim * in_dim, 9, 1.0), &vec![0.25; out_dim], out_dim, in_dim, WeightReach::Narrow);
        let mut out = vec![0f32; out_dim];
        lin.forward(Int8Kernel::selected(), &QuantizedRows::quantize(&[0.0; 8], 1, in_dim), &mut Vec::new(), &mut out, None);
        assert!(out.iter().all(|v| (v - 0.25).abs() < 1e-6), "{out:?}");
    }

    #[test]
    #[should_panic(expected = "does not tile")]
    fn a_shape_the_kernel_cannot_tile_is_refused() {
        Int8Linear::new(&[0.0; 6 * 10], &[0.0; 10], 10, 6, WeightReach::Narrow);
    }
}
