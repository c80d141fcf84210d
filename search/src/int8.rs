//! Int8 arithmetic for the BERT encoder and the vector scan: weights quantised once per output channel, activations
//! quantised per row on the fly, products accumulated exactly in i32.
//!
//! Why int8: a query is about 15 word pieces, so each of BERT's linear layers multiplies a skinny matrix
//! by a weight matrix that is read from memory once per query. The cost is the weight bytes, and int8
//! carries a quarter of f32's; AVX-512 VNNI (`vpdpbusd`) does 64 multiply-adds per instruction.
//!
//! `vpdpbusd` multiplies *unsigned* bytes by signed bytes, so an activation `q ∈ [-127, 127]` is stored as
//! `q + 128`; the offset's contribution, `128 · Σ_k w[o][k]`, is subtracted per output channel after the
//! sum. Three kernels compute the same integer sums, so they agree bit for bit (a test checks it): AMX
//! tiles where the CPU and the kernel allow them (`tdpbusd`, 16 × 16 × 64 multiply-adds per
//! instruction), else AVX-512 VNNI, else plain Rust.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// How many outputs one kernel register holds (16 × i32 in a 512-bit register).
const LANES: usize = 16;
/// Output channels per kernel tile: four registers' worth, so each activation broadcast feeds four
/// multiply-adds.
const TILE_OUT: usize = 4 * LANES;
/// Rows per kernel tile: 6 rows × 4 registers = 24 accumulators, leaving room for the 4 weight
/// registers and the broadcast in the 32 registers AVX-512 has.
const TILE_ROWS: usize = 6;

/// A linear layer `y = x Wᵀ + b` with int8 weights.
#[derive(Debug, Clone)]
pub struct Int8Linear {
    in_dim: usize,
    out_dim: usize,
    /// Weights in the kernel's order: for each block of 16 outputs, for each group of 4 inputs, 16 × 4
    /// bytes (output-major inside the group), so one 64-byte load feeds one `vpdpbusd`.
    packed: Vec<i8>,
    /// Per output channel: the weight scale (`w ≈ scale · q`).
    scale: Vec<f32>,
    /// Per output channel: `128 · Σ_k q[o][k]`, the contribution of the activations' +128 offset.
    offset_correction: Vec<i32>,
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
        for r in 0..rows {
            let row = &x[r * dim..(r + 1) * dim];
            let max = crate::lanes::max_abs(row);
            assert!(max.is_finite(), "quantize: row {r} holds a non-finite value");
            let (scale, inv) = scale_for(max);
            for (d, v) in self.data[r * dim..(r + 1) * dim].iter_mut().zip(row) {
                *d = (round_to_int(v * inv) + 128) as u8;
            }
            self.scale[r] = scale;
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

/// Quantise one row symmetrically to i8: returns the scale (`v ≈ scale · code`).
pub fn quantize_i8(v: &[f32], codes: &mut [i8]) -> f32 {
    assert_eq!(v.len(), codes.len(), "quantize_i8: lengths differ");
    let max = crate::lanes::max_abs(v);
    assert!(max.is_finite(), "quantize_i8: a non-finite value");
    let (scale, inv) = scale_for(max);
    for (c, x) in codes.iter_mut().zip(v) {
        *c = round_to_int(x * inv) as i8;
    }
    scale
}

/// `out[r] = Σ_k x[k] · rows[r][k]` for unsigned `x` (a query's codes) and every signed row of `rows`
/// (row width `x.len()`), exact. The scan of the section vectors.
pub fn dots_u8_i8(x: &[u8], rows: &[i8], out: &mut [i32]) {
    let dim = x.len();
    assert!(dim > 0 && rows.len() == out.len() * dim, "dots_u8_i8: {} bytes is not {} rows of {dim}", rows.len(), out.len());
    #[cfg(target_arch = "x86_64")]
    if dim.is_multiple_of(64) && std::arch::is_x86_feature_detected!("avx512vnni") && std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the features are present; the row width is a multiple of 64 and the sizes were checked.
        unsafe { vnni::dots(x, rows, out) };
        return;
    }
    for (o, row) in out.iter_mut().zip(rows.chunks_exact(dim)) {
        *o = x.iter().zip(row).map(|(&a, &b)| a as i32 * b as i32).sum();
    }
}

/// The scale that maps `[-max, max]` onto `[-127, 127]`, and its inverse. A row too small for the
/// inverse to be finite (all zeros, or below ~1e-36) quantises to zeros.
#[inline(always)]
fn scale_for(max: f32) -> (f32, f32) {
    if max > 1e-30 {
        (max / 127.0, 127.0 / max)
    } else {
        (1.0, 0.0)
    }
}

/// Round `v` to the nearest integer (ties to even), for `|v| ≤ 128`: the callers scale every value into
/// [-127, 127] first. Adding 1.5 · 2²³ pushes the fraction out of the mantissa, so no libm `round`
/// call; and the conversion is unchecked because the range is known, so the loop vectorises (a checked
/// `as i32` made quantisation a scalar loop, 0.7 ms of a 3 ms query).
#[inline(always)]
fn round_to_int(v: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0;
    let r = (v + MAGIC) - MAGIC;
    debug_assert!(r.abs() <= 128.0, "round_to_int: {v} is outside the quantisation range");
    // SAFETY: callers pass |v| ≤ 127 (times 1 + a rounding error): finite and well inside i32.
    unsafe { r.to_int_unchecked::<i32>() }
}

impl Int8Linear {
    /// Quantise `weight` (`out_dim × in_dim`, row-major, as PyTorch stores it) and keep `bias`.
    ///
    /// Panics unless `in_dim` is a multiple of 4 and `out_dim` of 64 (the kernel's tile; BERT's 384,
    /// 1,152 and 1,536 all are).
    pub fn new(weight: &[f32], bias: &[f32], out_dim: usize, in_dim: usize) -> Self {
        assert_eq!(weight.len(), out_dim * in_dim, "Int8Linear: weight is not {out_dim} × {in_dim}");
        assert_eq!(bias.len(), out_dim, "Int8Linear: bias has {} values for {out_dim} outputs", bias.len());
        assert!(in_dim.is_multiple_of(4) && out_dim.is_multiple_of(TILE_OUT), "Int8Linear: {out_dim} × {in_dim} does not tile");
        let mut scale = vec![0f32; out_dim];
        let mut offset_correction = vec![0i32; out_dim];
        let mut q = vec![0i8; out_dim * in_dim];
        for o in 0..out_dim {
            let row = &weight[o * in_dim..(o + 1) * in_dim];
            let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(max.is_finite(), "Int8Linear: output channel {o} holds a non-finite weight");
            let s = if max > 0.0 { max / 127.0 } else { 1.0 };
            let mut sum = 0i32;
            for (d, v) in q[o * in_dim..(o + 1) * in_dim].iter_mut().zip(row) {
                *d = (v / s).round() as i8;
                sum += *d as i32;
            }
            scale[o] = s;
            offset_correction[o] = 128 * sum;
        }
        let groups = in_dim / 4;
        let mut packed = vec![0i8; out_dim * in_dim];
        for o in 0..out_dim {
            let (block, lane) = (o / LANES, o % LANES);
            for k in 0..in_dim {
                packed[((block * groups + k / 4) * LANES + lane) * 4 + k % 4] = q[o * in_dim + k];
            }
        }
        Int8Linear { in_dim, out_dim, packed, scale, offset_correction, bias: bias.to_vec() }
    }

    /// Input width.
    pub fn in_dim(&self) -> usize {
        self.in_dim
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.out_dim
    }

    /// `out = x Wᵀ + b` for every row of `x`; `out` is `x.rows() × out_dim`. `sums` is scratch space.
    /// With a [`SecondCore`], a large layer's columns are split between it and this thread.
    #[inline(always)]
    pub fn forward(&self, x: &QuantizedRows, sums: &mut Vec<i32>, out: &mut [f32], second_core: Option<&SecondCore>) {
        assert_eq!(x.dim, self.in_dim, "Int8Linear: input width {} for a layer of {}", x.dim, self.in_dim);
        assert_eq!(out.len(), x.rows * self.out_dim, "Int8Linear: output buffer size");
        sums.clear();
        sums.resize(x.rows * self.out_dim, 0);
        let tiles = self.out_dim / TILE_OUT;
        match second_core {
            Some(core) if tiles >= 2 && self.packed.len() >= SPLIT_BYTES => core.split(self, x, sums, tiles / 2 * TILE_OUT),
            // SAFETY: `sums` holds rows × out_dim values and this thread alone writes it.
            _ => unsafe { self.integer_sums(x, 0..self.out_dim, sums.as_mut_ptr()) },
        }
        for r in 0..x.rows {
            let xs = x.scale[r];
            let (acc, y) = (&sums[r * self.out_dim..(r + 1) * self.out_dim], &mut out[r * self.out_dim..(r + 1) * self.out_dim]);
            // Zipped iterators, not indices: with bounds checks in the loop it does not vectorise.
            for ((((y, &acc), &scale), &correction), &bias) in
                y.iter_mut().zip(acc).zip(&self.scale).zip(&self.offset_correction).zip(&self.bias)
            {
                *y = xs * scale * (acc - correction) as f32 + bias;
            }
        }
    }

    /// Fill the columns `columns` (multiples of 64) of `sums`, a `x.rows() × out_dim` buffer.
    ///
    /// # Safety
    /// `sums` must point to `x.rows() × out_dim` values that no other thread reads or writes in these
    /// columns meanwhile.
    unsafe fn integer_sums(&self, x: &QuantizedRows, columns: Range<usize>, sums: *mut i32) {
        assert!(columns.start.is_multiple_of(TILE_OUT) && columns.end.is_multiple_of(TILE_OUT) && columns.end <= self.out_dim);
        assert!(x.data.len() >= x.rows * self.in_dim);
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        if self.in_dim.is_multiple_of(64) && amx::available() {
            // SAFETY: AMX is present and this process may use it; the shapes were checked.
            unsafe { amx::integer_sums(&x.data, x.rows, self.in_dim, &self.packed, self.out_dim, columns, sums) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512vnni") && std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the features are present; the shapes were checked.
            unsafe { vnni::integer_sums(&x.data, x.rows, self.in_dim, &self.packed, self.out_dim, columns, sums) };
            return;
        }
        // SAFETY: as the caller promised.
        unsafe { portable_integer_sums(&x.data, x.rows, self.in_dim, &self.packed, self.out_dim, columns, sums) };
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
    layer: *const Int8Linear,
    x: *const QuantizedRows,
    sums: *mut i32,
    columns: (usize, usize),
}

// SAFETY: `job` is written only by the encoding thread while `state` is IDLE, and read by the helper
// only after it has moved `state` from POSTED to TAKEN (release/acquire); the pointers in it stay valid
// until the encoding thread has seen the job FINISHED or taken it back.
unsafe impl Sync for SecondCore {}
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
                    (*job.layer).integer_sums(&*job.x, job.columns.0..job.columns.1, job.sums);
                }
                self.state.store(FINISHED, Ordering::Release);
                idle = 0;
            } else {
                idle_wait(&mut idle);
            }
        }
    }

    fn split(&self, layer: &Int8Linear, x: &QuantizedRows, sums: &mut [i32], middle: usize) {
        debug_assert_eq!(self.state.load(Ordering::Relaxed), IDLE);
        let out = sums.as_mut_ptr();
        // SAFETY: the state is IDLE, so the helper does not read the job now.
        unsafe { *self.job.get() = ColumnJob { layer, x, sums: out, columns: (middle, layer.out_dim) } };
        self.state.store(POSTED, Ordering::Release);
        // SAFETY: this thread writes columns [0, middle), the helper (if it takes the job) the rest.
        unsafe { layer.integer_sums(x, 0..middle, out) };
        if self.state.compare_exchange(POSTED, TAKEN, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            // SAFETY: taken back: no one else will touch the job.
            unsafe { layer.integer_sums(x, middle..layer.out_dim, out) };
        } else {
            let mut idle = 0;
            while self.state.load(Ordering::Acquire) != FINISHED {
                idle_wait(&mut idle);
            }
        }
        self.state.store(IDLE, Ordering::Relaxed);
    }
}

/// `sums[r][o] = Σ_k x[r][k] · w[o][k]` over the packed weights, in plain Rust, for `o` in `columns`.
unsafe fn portable_integer_sums(
    x: &[u8],
    rows: usize,
    in_dim: usize,
    packed: &[i8],
    out_dim: usize,
    columns: Range<usize>,
    sums: *mut i32,
) {
    let groups = in_dim / 4;
    for r in 0..rows {
        let xr = &x[r * in_dim..(r + 1) * in_dim];
        for block in columns.start / LANES..columns.end / LANES {
            let mut acc = [0i32; LANES];
            for g in 0..groups {
                let w = &packed[(block * groups + g) * LANES * 4..][..LANES * 4];
                let xq = &xr[g * 4..g * 4 + 4];
                for (lane, a) in acc.iter_mut().enumerate() {
                    for j in 0..4 {
                        *a += xq[j] as i32 * w[lane * 4 + j] as i32;
                    }
                }
            }
            std::ptr::copy_nonoverlapping(acc.as_ptr(), sums.add(r * out_dim + block * LANES), LANES);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::{LANES, TILE_OUT, TILE_ROWS};
    use std::arch::x86_64::*;

    /// The VNNI kernel: tiles of up to 6 rows × 64 outputs, all 24 accumulators in registers.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) unsafe fn integer_sums(
        x: &[u8],
        rows: usize,
        in_dim: usize,
        packed: &[i8],
        out_dim: usize,
        columns: std::ops::Range<usize>,
        sums: *mut i32,
    ) {
        debug_assert!(x.len() >= rows * in_dim);
        debug_assert_eq!(packed.len(), in_dim * out_dim);
        let block_bytes = in_dim * LANES; // one 16-output block: in_dim/4 groups × 64 bytes
        for col in columns.step_by(TILE_OUT) {
            let w = packed.as_ptr().add((col / LANES) * block_bytes);
            let mut r = 0;
            while r < rows {
                let n = (rows - r).min(TILE_ROWS);
                let (xp, sp) = (x.as_ptr().add(r * in_dim), sums.add(r * out_dim + col));
                match n {
                    6 => tile::<6>(xp, in_dim, w, block_bytes, sp, out_dim),
                    5 => tile::<5>(xp, in_dim, w, block_bytes, sp, out_dim),
                    4 => tile::<4>(xp, in_dim, w, block_bytes, sp, out_dim),
                    3 => tile::<3>(xp, in_dim, w, block_bytes, sp, out_dim),
                    2 => tile::<2>(xp, in_dim, w, block_bytes, sp, out_dim),
                    _ => tile::<1>(xp, in_dim, w, block_bytes, sp, out_dim),
                }
                r += n;
            }
        }
    }

    /// One dot product per row; the row width `x.len()` is a multiple of 64.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) unsafe fn dots(x: &[u8], rows: &[i8], out: &mut [i32]) {
        let dim = x.len();
        for (r, o) in out.iter_mut().enumerate() {
            let row = rows.as_ptr().add(r * dim);
            let mut acc = _mm512_setzero_si512();
            for i in (0..dim).step_by(64) {
                let xv = _mm512_loadu_si512(x.as_ptr().add(i) as *const _);
                acc = _mm512_dpbusd_epi32(acc, xv, _mm512_loadu_si512(row.add(i) as *const _));
            }
            *o = _mm512_reduce_add_epi32(acc);
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn tile<const R: usize>(
        x: *const u8,
        in_dim: usize,
        w: *const i8,
        block_bytes: usize,
        sums: *mut i32,
        out_dim: usize,
    ) {
        let mut acc = [[_mm512_setzero_si512(); 4]; R];
        for g in 0..in_dim / 4 {
            let wv = [
                _mm512_loadu_si512(w.add(g * 64) as *const _),
                _mm512_loadu_si512(w.add(block_bytes + g * 64) as *const _),
                _mm512_loadu_si512(w.add(2 * block_bytes + g * 64) as *const _),
                _mm512_loadu_si512(w.add(3 * block_bytes + g * 64) as *const _),
            ];
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let xb = _mm512_set1_epi32((x.add(r * in_dim + g * 4) as *const i32).read_unaligned());
                for j in 0..4 {
                    acc_r[j] = _mm512_dpbusd_epi32(acc_r[j], xb, wv[j]);
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            for (j, a) in acc_r.iter().enumerate() {
                _mm512_storeu_si512(sums.add(r * out_dim + j * LANES) as *mut _, *a);
            }
        }
    }
}

/// Intel AMX: eight tile registers of up to 16 rows × 64 bytes and one multiply that adds a 16 × 64 u8
/// tile times a 64 × 16 i8 tile into a 16 × 16 i32 tile. A query's ≤ 16 rows fill one tile, so a layer
/// is `out/16 × in/64` tile products, each reading one 1 KB block of the packed weights (the packed
/// layout is exactly AMX's "VNNI" layout for the right-hand tile).
///
/// Rust has no stable AMX intrinsics, so the instructions are written with `asm!`; tile registers are
/// named in the templates (they are no register class), and nothing else in the program uses them.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx {
    use super::LANES;
    use std::arch::asm;
    use std::sync::OnceLock;

    /// True when the CPU has AMX-TILE and AMX-INT8 and Linux lets this process use the tile data
    /// (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, asked once).
    pub(super) fn available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            if std::env::var_os("AGENTRT_NO_AMX").is_some() {
                return false;
            }
            if std::arch::x86_64::__cpuid(0).eax < 7 {
                return false;
            }
            let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
            let (tile, int8) = (edx & (1 << 24) != 0, edx & (1 << 25) != 0);
            const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
            const XFEATURE_XTILEDATA: libc::c_long = 18;
            // SAFETY: a plain syscall with integer arguments.
            tile && int8 && unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) } == 0
        })
    }

    /// The 64-byte tile configuration `ldtilecfg` reads.
    #[repr(C, align(64))]
    struct TileConfig([u8; 64]);

    impl TileConfig {
        /// Tiles 0-3: sums (rows × 16 i32); tile 4: activations (rows × 64 u8); tiles 5-6: weights
        /// (16 rows of 16 outputs × 4 inputs).
        fn new(rows: usize) -> Self {
            let mut c = [0u8; 64];
            c[0] = 1; // palette 1
            for (tile, tile_rows) in [(0, rows), (1, rows), (2, rows), (3, rows), (4, rows), (5, 16), (6, 16)] {
                c[16 + 2 * tile..18 + 2 * tile].copy_from_slice(&64u16.to_le_bytes());
                c[48 + tile] = tile_rows as u8;
            }
            TileConfig(c)
        }
    }

    macro_rules! tile_product {
        ($sum:literal, $weights:literal, $w:expr) => {
            asm!(
                concat!("tileloadd ", $weights, ", [{w} + {stride}*1]"),
                concat!("tdpbusd ", $sum, ", tmm4, ", $weights),
                w = in(reg) $w, stride = in(reg) 64usize, options(nostack, readonly),
            )
        };
    }

    macro_rules! store_sums {
        ($sum:literal, $out:expr, $stride:expr) => {
            asm!(concat!("tilestored [{o} + {s}*1], ", $sum), o = in(reg) $out, s = in(reg) $stride, options(nostack))
        };
    }

    /// Same contract as the VNNI kernel: the output columns `columns` (multiples of 64) of `sums`.
    pub(super) unsafe fn integer_sums(
        x: &[u8],
        rows: usize,
        in_dim: usize,
        packed: &[i8],
        out_dim: usize,
        columns: std::ops::Range<usize>,
        sums: *mut i32,
    ) {
        debug_assert!(in_dim.is_multiple_of(64) && out_dim.is_multiple_of(64) && columns.start.is_multiple_of(64) && columns.end <= out_dim);
        debug_assert!(x.len() >= rows * in_dim && packed.len() == in_dim * out_dim);
        let block_bytes = in_dim * LANES; // one 16-output block
        // Columns outside, rows inside: a 64-column slice of the weights (24-96 KB) is read from
        // memory once and reused from the cache by every 16-row tile of a long input.
        let mut configured_rows = 0;
        for col in columns.step_by(64) {
            let w = packed.as_ptr().add((col / LANES) * block_bytes);
            for r0 in (0..rows).step_by(16) {
                let m = (rows - r0).min(16);
                if m != configured_rows {
                    let config = TileConfig::new(m);
                    asm!("ldtilecfg [{0}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
                    configured_rows = m;
                }
                let xp = x.as_ptr().add(r0 * in_dim);
                asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
                for k in (0..in_dim).step_by(64) {
                    asm!("tileloadd tmm4, [{x} + {stride}*1]", x = in(reg) xp.add(k), stride = in(reg) in_dim, options(nostack, readonly));
                    // Block j's 16 groups of 4 inputs starting at input k: 16 rows of 64 bytes.
                    let wk = w.add(k * LANES);
                    // Ask for the weights two steps ahead (4 × 1 KB): the tile loads otherwise wait on
                    // the cache hierarchy one after another.
                    let ahead = k * LANES + 2 * 64 * LANES;
                    if r0 == 0 && ahead < block_bytes {
                        for j in 0..4 {
                            let p = w.add(j * block_bytes + ahead);
                            for line in 0..16 {
                                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.add(line * 64));
                            }
                        }
                    }
                    tile_product!("tmm0", "tmm5", wk);
                    tile_product!("tmm1", "tmm6", wk.add(block_bytes));
                    tile_product!("tmm2", "tmm5", wk.add(2 * block_bytes));
                    tile_product!("tmm3", "tmm6", wk.add(3 * block_bytes));
                }
                let out = sums.add(r0 * out_dim + col);
                let stride = out_dim * 4;
                store_sums!("tmm0", out, stride);
                store_sums!("tmm1", out.add(LANES), stride);
                store_sums!("tmm2", out.add(2 * LANES), stride);
                store_sums!("tmm3", out.add(3 * LANES), stride);
            }
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so the tests need no extra crate.
    fn values(n: usize, seed: u64, amplitude: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amplitude
            })
            .collect()
    }

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
        let lin = Int8Linear::new(&w, &b, out_dim, in_dim);
        let mut out = vec![0f32; rows * out_dim];
        lin.forward(&QuantizedRows::quantize(&x, rows, in_dim), &mut Vec::new(), &mut out, None);
        let want = reference(&x, rows, &w, &b, out_dim, in_dim);
        let err = out.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let size = want.iter().map(|v| v.abs()).fold(0f32, f32::max);
        // Each product carries two 8-bit roundings; over 384 terms the error stays a percent or so.
        assert!(err < 0.02 * size, "max error {err} against outputs up to {size}");
    }

    #[test]
    fn every_row_count_gives_the_portable_kernels_sums_exactly() {
        let (in_dim, out_dim) = (192, 192);
        let w = values(out_dim * in_dim, 5, 1.0);
        let lin = Int8Linear::new(&w, &vec![0.0; out_dim], out_dim, in_dim);
        for rows in (1..=18).chain([33, 40]) {
            let x = QuantizedRows::quantize(&values(rows * in_dim, rows as u64, 3.0), rows, in_dim);
            let mut fast = vec![0i32; rows * out_dim];
            unsafe { lin.integer_sums(&x, 0..out_dim, fast.as_mut_ptr()) };
            let mut portable = vec![0i32; rows * out_dim];
            unsafe { portable_integer_sums(&x.data, rows, in_dim, &lin.packed, out_dim, 0..out_dim, portable.as_mut_ptr()) };
            assert_eq!(fast, portable, "{rows} rows");
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx512vnni") {
                let mut vnni = vec![0i32; rows * out_dim];
                unsafe { vnni::integer_sums(&x.data, rows, in_dim, &lin.packed, out_dim, 0..out_dim, vnni.as_mut_ptr()) };
                assert_eq!(vnni, portable, "VNNI, {rows} rows");
            }
            // And both are the plain definition over unpacked weights.
            let o = out_dim - 1;
            let plain: i32 = (0..in_dim)
                .map(|k| x.data[(rows - 1) * in_dim + k] as i32 * lin.packed[(((o / LANES) * (in_dim / 4) + k / 4) * LANES + o % LANES) * 4 + k % 4] as i32)
                .sum();
            assert_eq!(fast[(rows - 1) * out_dim + o], plain);
        }
    }

    /// With a second core lent, large layers are split between two threads by columns: still the
    /// same outputs, whether or not the helper gets to take its half.
    #[test]
    fn a_layer_split_over_two_threads_gives_the_same_output() {
        let (in_dim, out_dim, rows) = (384, 320, 15);
        let lin = Int8Linear::new(&values(out_dim * in_dim, 21, 1.0), &values(out_dim, 23, 1.0), out_dim, in_dim);
        assert!(lin.packed.len() >= SPLIT_BYTES);
        let x = QuantizedRows::quantize(&values(rows * in_dim, 22, 2.0), rows, in_dim);
        let mut alone = vec![0f32; rows * out_dim];
        lin.forward(&x, &mut Vec::new(), &mut alone, None);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for _ in 0..20 {
            let split = pool.install(|| {
                SecondCore::lend(|core| {
                    assert!(core.is_some());
                    let mut out = vec![0f32; rows * out_dim];
                    let mut sums = Vec::new();
                    for _ in 0..10 {
                        lin.forward(&x, &mut sums, &mut out, core);
                    }
                    out
                })
            });
            assert_eq!(split, alone);
        }
    }

    /// Which kernel the exactness test above exercised on this machine (printed, for the log).
    #[test]
    fn report_the_kernel_in_use() {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        eprintln!("AMX available: {}", amx::available());
        #[cfg(target_arch = "x86_64")]
        eprintln!("AVX-512 VNNI available: {}", std::arch::is_x86_feature_detected!("avx512vnni"));
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
        let lin = Int8Linear::new(&values(out_dim * in_dim, 9, 1.0), &vec![0.25; out_dim], out_dim, in_dim);
        let mut out = vec![0f32; out_dim];
        lin.forward(&QuantizedRows::quantize(&[0.0; 8], 1, in_dim), &mut Vec::new(), &mut out, None);
        assert!(out.iter().all(|v| (v - 0.25).abs() < 1e-6), "{out:?}");
    }

    #[test]
    fn the_row_scan_is_exact() {
        for dim in [384, 100] {
            let x = QuantizedRows::quantize(&values(dim, 11, 1.0), 1, dim);
            let mut rows = vec![0i8; 5 * dim];
            for (r, row) in rows.chunks_exact_mut(dim).enumerate() {
                quantize_i8(&values(dim, 12 + r as u64, 0.3), row);
            }
            let mut got = vec![0i32; 5];
            dots_u8_i8(x.row(0).0, &rows, &mut got);
            let plain: Vec<i32> = rows
                .chunks_exact(dim)
                .map(|row| x.row(0).0.iter().zip(row).map(|(&a, &b)| a as i32 * b as i32).sum())
                .collect();
            assert_eq!(got, plain, "width {dim}");
        }
    }

    #[test]
    #[should_panic(expected = "does not tile")]
    fn a_shape_the_kernel_cannot_tile_is_refused() {
        Int8Linear::new(&[0.0; 6 * 10], &[0.0; 10], 10, 6);
    }
}
