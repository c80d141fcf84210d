//! The products of a decoding step: `x · Wᵀ` for a few input rows (one per sequence being sampled) and a
//! frozen weight matrix, from f32 rows or from the GGUF's own blocks (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K).
//!
//! A decoding step is bound by reading the weights, so each weight row (or block) is read once and
//! multiplied into every input row while it sits in L1. The callers split the weight rows into tasks
//! over threads; a task is one call here, writing one output row of `m` per weight row (the transposed
//! product, contiguous per task). Beside them, the other half of attention over a KV cache:
//! [`add_weighted_rows`], the softmax's weights times the cached value rows.
//!
//! `generic.rs` is the reference: loops with 64 or 32 independent partial sums per row, added in a fixed
//! order, multiplies and adds kept apart, written so that the compiler vectorises them. Compiled for the
//! build target it is the generic path (and the NEON one: on aarch64 the compiler runs these loops on
//! NEON's 128-bit lanes), which agrees with it bit for bit. `avx2.rs` and `avx512.rs` are written with
//! intrinsics around fused multiply-adds (the autovectorised loops ran at half the speed on AVX2, and the
//! block kernel at 0.58x the AVX2 path on AVX-512) and agree to rounding: within `1e-5 · Σ|x·w|`.

mod generic;
mod panels;

/// Input rows whose accumulators share one pass over the weights in the intrinsics paths: as many as
/// stay in registers beside a weight chunk (or an unpacked block) reused across them.
#[cfg(target_arch = "x86_64")]
const GROUP: usize = 8;

/// `by_group_size!(rows, f::<_, F>(args))` calls `f::<rows, F>(args)` for `rows` from 1 to [`GROUP`]: one
/// instance of `f` per group size, so that a group's accumulators are an array of registers;
/// `by_group_size!(up_to_16: rows, ..)` goes on to 16 (AVX-512's 32 registers). (Defined before the
/// modules that use it, which see it by textual scope.)
#[cfg(target_arch = "x86_64")]
macro_rules! by_group_size {
    (up_to_16: $rows:expr, $f:ident::<_ $(, $generic:ident)*>($($arg:expr),* $(,)?)) => {
        match $rows {
            16 => $f::<16 $(, $generic)*>($($arg),*),
            15 => $f::<15 $(, $generic)*>($($arg),*),
            14 => $f::<14 $(, $generic)*>($($arg),*),
            13 => $f::<13 $(, $generic)*>($($arg),*),
            12 => $f::<12 $(, $generic)*>($($arg),*),
            11 => $f::<11 $(, $generic)*>($($arg),*),
            10 => $f::<10 $(, $generic)*>($($arg),*),
            9 => $f::<9 $(, $generic)*>($($arg),*),
            rows => by_group_size!(rows, $f::<_ $(, $generic)*>($($arg),*)),
        }
    };
    ($rows:expr, $f:ident::<_ $(, $generic:ident)*>($($arg:expr),* $(,)?)) => {
        match $rows {
            8 => $f::<8 $(, $generic)*>($($arg),*),
            7 => $f::<7 $(, $generic)*>($($arg),*),
            6 => $f::<6 $(, $generic)*>($($arg),*),
            5 => $f::<5 $(, $generic)*>($($arg),*),
            4 => $f::<4 $(, $generic)*>($($arg),*),
            3 => $f::<3 $(, $generic)*>($($arg),*),
            2 => $f::<2 $(, $generic)*>($($arg),*),
            _ => $f::<1 $(, $generic)*>($($arg),*),
        }
    };
}

/// The f32 kernels' frame, written once for the x86 paths, which differ only in register width:
/// `rows_f32` (dense rows: each chunk of `$lanes` weights reused across a group of input rows whose
/// accumulators stay in registers) and `rows_blocks` (block rows: each unpacked sub-block reused likewise,
/// from the path's own `unpack`, since unpacking is where the instruction sets differ) and
/// `add_weighted_rows` (attention's values step: each output row held in `$regs` registers over all its
/// keys). A path gives its target features, its width, its register budget and the intrinsics the frame
/// needs.
#[cfg(target_arch = "x86_64")]
macro_rules! f32_row_kernels {
    (features: $features:literal, lanes: $lanes:literal, regs: $regs:literal, zero: $zero:path, load: $load:path, store: $store:path,
     splat: $splat:path, fma: $fma:path, sum: $sum:path) => {
        /// # Safety
        /// The CPU must have this path's features; sizes as `super::rows_f32` checks them.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn rows_f32(x: &[f32], w_rows: &[f32], out_rows: &mut [f32], m: usize, k: usize) {
            let full = k / $lanes * $lanes;
            for (o, wr) in out_rows.chunks_mut(m).zip(w_rows.chunks(k)) {
                for b0 in (0..m).step_by(GROUP) {
                    by_group_size!((m - b0).min(GROUP), f32_group::<_>(x, wr, o, b0, k, full));
                }
            }
        }

        /// Input rows `b0 .. b0 + G` against one weight row.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn f32_group<const G: usize>(x: &[f32], wr: &[f32], o: &mut [f32], b0: usize, k: usize, full: usize) {
            let mut acc = [$zero(); G];
            let (wp, xp) = (wr.as_ptr(), x.as_ptr().add(b0 * k));
            let mut i = 0;
            while i < full {
                let w = $load(wp.add(i));
                for (b, a) in acc.iter_mut().enumerate() {
                    *a = $fma(w, $load(xp.add(b * k + i)), *a);
                }
                i += $lanes;
            }
            for (b, a) in acc.iter().enumerate() {
                let mut s = $sum(*a);
                for j in full..k {
                    s += wr[j] * x[(b0 + b) * k + j];
                }
                o[b0 + b] = s;
            }
        }

        /// # Safety
        /// As [`rows_f32`]; sizes as `super::rows_blocks` checks them.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn rows_blocks(format: BlockFormat, x: &[f32], rows: &[u8], out_rows: &mut [f32], m: usize, k: usize) {
            by_format!(format, rows_blocks_of(x, rows, out_rows, m, k))
        }

        /// Input rows `b0 .. b0 + G` against one row of blocks: each sub-block unpacked once (the path's
        /// `unpack`, `BLOCK / $lanes` registers) and multiplied into every row's accumulator, register
        /// after register.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn block_group<const G: usize, const F: u8>(x: &[f32], row: &[u8], o: &mut [f32], b0: usize, k: usize) {
            let format = BlockFormat::from_id(F);
            let mut acc = [$zero(); G];
            let xp = x.as_ptr().add(b0 * k);
            let (bw, subs) = (format.block_weights(), format.block_weights() / BLOCK);
            for (bi, block) in row.chunks_exact(format.block_bytes()).enumerate() {
                for s in 0..subs {
                    let w = unpack::<F>(block.as_ptr(), s);
                    for (b, a) in acc.iter_mut().enumerate() {
                        let xb = xp.add(b * k + bi * bw + s * BLOCK);
                        let mut v = *a;
                        for (r, w) in w.iter().enumerate() {
                            v = $fma(*w, $load(xb.add(r * $lanes)), v);
                        }
                        *a = v;
                    }
                }
            }
            for (b, a) in acc.iter().enumerate() {
                o[b0 + b] = $sum(*a);
            }
        }

        /// # Safety
        /// As [`rows_f32`]; sizes as `super::add_weighted_rows` checks them.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn add_weighted_rows(out: &mut [f32], p: &[f32], rows: usize, v: &[f32], seen: &[usize]) {
            let hd = out.len() / rows;
            let block = $regs * $lanes;
            for ((r, o), &seen) in out.chunks_exact_mut(hd).enumerate().zip(seen) {
                let (op, vp) = (o.as_mut_ptr(), v.as_ptr());
                let mut c = 0;
                while c + block <= hd {
                    weighted_block::<$regs>(op.add(c), p, rows, r, vp.add(c), hd, seen);
                    c += block;
                }
                while c + $lanes <= hd {
                    weighted_block::<1>(op.add(c), p, rows, r, vp.add(c), hd, seen);
                    c += $lanes;
                }
                for i in c..hd {
                    for j in 0..seen {
                        o[i] = p[j * rows + r].mul_add(v[j * hd + i], o[i]);
                    }
                }
            }
        }

        /// `R` registers of one output row (at `o`) plus the weighted value columns at `v`, key after key:
        /// the row stays in registers over all its keys, where the reference's loop reads and writes it
        /// once a key.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn weighted_block<const R: usize>(o: *mut f32, p: &[f32], rows: usize, r: usize, v: *const f32, hd: usize, seen: usize) {
            let mut acc = [$zero(); R];
            for (i, a) in acc.iter_mut().enumerate() {
                *a = $load(o.add(i * $lanes));
            }
            for j in 0..seen {
                let w = $splat(p[j * rows + r]);
                let vj = v.add(j * hd);
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = $fma(w, $load(vj.add(i * $lanes)), *a);
                }
            }
            for (i, a) in acc.iter().enumerate() {
                $store(o.add(i * $lanes), *a);
            }
        }

        #[target_feature(enable = $features)]
        unsafe fn rows_blocks_of<const F: u8>(x: &[f32], rows: &[u8], out_rows: &mut [f32], m: usize, k: usize) {
            let format = BlockFormat::from_id(F);
            for (o, row) in out_rows.chunks_mut(m).zip(rows.chunks(format.row_bytes(k))) {
                for b0 in (0..m).step_by(GROUP) {
                    by_group_size!((m - b0).min(GROUP), block_group::<_, F>(x, row, o, b0, k));
                }
            }
        }
    };
}
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

pub use generic::{unpack_block, unpack_sub, BlockFormat, Q8Rows, BLOCK};
pub use panels::{PanelCodes, Panels, PANEL_ROWS};

use crate::path::KernelPath;

/// The most input rows a task takes (above it a general matrix product's packing pays for itself).
pub const MAX_ROWS: usize = 16;

/// `out_rows[j][b] = Σ_k x[b][k] · w_rows[j][k]` for the `m` rows of `x` (`m × k`) and every weight row
/// of `w_rows` (rows of `k`), on the kernels of `path`.
///
/// # Panics
/// When the sizes disagree, or `path` cannot run on this CPU.
pub fn rows_f32(path: KernelPath, x: &[f32], w_rows: &[f32], out_rows: &mut [f32], m: usize, k: usize) {
    assert!(k > 0 && x.len() == m * k, "decode rows_f32: input of {} values is not {m} × {k}", x.len());
    assert!(
        w_rows.len().is_multiple_of(k) && out_rows.len() == w_rows.len() / k * m,
        "decode rows_f32: {} weights and {} outputs for width {k}, {m} rows",
        w_rows.len(),
        out_rows.len()
    );
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512 => {
            assert_supported(path);
            // SAFETY: the CPU has the features (checked).
            unsafe { avx512::rows_f32(x, w_rows, out_rows, m, k) }
        }
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 => {
            assert_supported(path);
            // SAFETY: as above.
            unsafe { avx2::rows_f32(x, w_rows, out_rows, m, k) }
        }
        _ => generic::rows_f32(x, w_rows, out_rows, m, k),
    }
}

/// The values step of attention: `out[r] += Σ_{j < seen[r]} p[j·rows + r] · v[j]` for the `rows` output rows
/// of `hd = out.len() / rows` values, `v` the value rows (`keys × hd`) and `p` their weights key-major
/// (`keys × rows`: a key's weight for every row contiguous, as a softmax over keys leaves them). Each row's
/// sum is taken key after key, in order, lane by lane (a multiply then an add on the reference, one fused
/// multiply-add on the intrinsics paths, whose rows stay in registers over all the keys), so that a row's
/// result depends on nothing but its own weights and the keys' order: a caller may split the keys into
/// segments (call after call on the same `out`) or the rows into chunks and get the same bits.
///
/// # Panics
/// When the sizes disagree, a row sees more keys than `v` holds, or `path` cannot run on this CPU.
pub fn add_weighted_rows(path: KernelPath, out: &mut [f32], p: &[f32], rows: usize, v: &[f32], seen: &[usize]) {
    assert!(rows > 0 && !out.is_empty() && out.len().is_multiple_of(rows), "decode add_weighted_rows: {} outputs are not {rows} rows", out.len());
    let hd = out.len() / rows;
    assert!(v.len().is_multiple_of(hd), "decode add_weighted_rows: {} values are not rows of {hd}", v.len());
    let keys = v.len() / hd;
    assert!(
        p.len() == keys * rows && seen.len() == rows && seen.iter().all(|&s| s <= keys),
        "decode add_weighted_rows: {} weights and {} row lengths (longest {:?}) for {keys} keys x {rows} rows",
        p.len(),
        seen.len(),
        seen.iter().max()
    );
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512 => {
            assert_supported(path);
            // SAFETY: the CPU has the features (checked).
            unsafe { avx512::add_weighted_rows(out, p, rows, v, seen) }
        }
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 => {
            assert_supported(path);
            // SAFETY: as above.
            unsafe { avx2::add_weighted_rows(out, p, rows, v, seen) }
        }
        _ => generic::add_weighted_rows(out, p, rows, v, seen),
    }
}

/// As [`rows_f32`], with the weights as rows of `format` blocks (`k / format.block_weights()` a row),
/// unpacked in registers with the formula the GGUF loader uses for its f32 copy (`q · d + m`, `q · d`, ...),
/// so the products use the very same weight values.
///
/// # Panics
/// When the sizes disagree, `m` exceeds [`MAX_ROWS`], or `path` cannot run on this CPU.
pub fn rows_blocks(path: KernelPath, format: BlockFormat, x: &[f32], rows: &[u8], out_rows: &mut [f32], m: usize, k: usize) {
    let bw = format.block_weights();
    assert!(k > 0 && k.is_multiple_of(bw) && x.len() == m * k, "decode rows_blocks: input of {} values is not {m} × {k} (k a multiple of {bw})", x.len());
    check_block_rows("rows_blocks", format, rows, out_rows, m, k);
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512 => {
            assert_supported(path);
            // SAFETY: the CPU has the features (checked).
            unsafe { avx512::rows_blocks(format, x, rows, out_rows, m, k) }
        }
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 => {
            assert_supported(path);
            // SAFETY: as above.
            unsafe { avx2::rows_blocks(format, x, rows, out_rows, m, k) }
        }
        _ => generic::rows_blocks(format, x, rows, out_rows, m, k),
    }
}

/// As [`rows_blocks`], with the input rows quantised to 8 bits ([`Q8Rows`]) and each sub-block's
/// weights multiplied into them by integer dot products (AVX2's `maddubs`; on the AVX-512 path VNNI's
/// `vpdpbusd` for two rows or more where the CPU has it, with the AVX2 kernel's bits, else the AVX2 kernel),
/// as llama.cpp decodes: a fraction of the instructions per weight, at the price of rounding
/// the activations to 8 bits per 32 values (the tests bound the gap to the f32 products).
///
/// # Panics
/// When the sizes disagree, `x.m` exceeds [`MAX_ROWS`], or `path` cannot run on this CPU.
pub fn rows_blocks_q8(path: KernelPath, format: BlockFormat, x: &Q8Rows, rows: &[u8], out_rows: &mut [f32]) {
    let (m, k, bw) = (x.m, x.k, format.block_weights());
    assert!(
        k > 0 && k.is_multiple_of(bw) && x.q.len() == m * k && x.scale.len() == m * k / BLOCK && x.scaled_sum_by_run.len() == x.scale.len(),
        "decode rows_blocks_q8: quantised input is not {m} × {k} (k a multiple of {bw})"
    );
    check_block_rows("rows_blocks_q8", format, rows, out_rows, m, k);
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512 if m > 1 && crate::path::has_feature("avx512vnni") => {
            assert_supported(path);
            // SAFETY: the CPU has the path's features (checked) and VNNI.
            unsafe { avx512::rows_blocks_q8(format, x, rows, out_rows) }
        }
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512 | KernelPath::Avx2 => {
            assert_supported(path);
            // SAFETY: the CPU has the features (checked; the AVX-512 path needs AVX2, FMA and F16C too).
            unsafe { avx2::rows_blocks_q8(format, x, rows, out_rows) }
        }
        _ => generic::rows_blocks_q8(format, x, rows, out_rows),
    }
}

/// Input rows from which the AVX-512 path multiplies panels on AMX tiles where they are usable: below it
/// the tiles' fixed cost a block (the codes widened to a buffer and loaded as a tile, the sums stored,
/// whatever the rows) outweighs the float work they save. `kernels/examples/repacked_rows.rs` on a Xeon
/// with AMX: VNNI ahead at 8 rows (Q5_0 131 against 119 GMAC/s), tiles at 12 (155 against 134) and 16.
pub const AMX_FROM_ROWS: usize = 12;

/// The kernel a panels product runs on. All give the same bits (module `panels`), so which one a row
/// count takes is a matter of speed alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PanelKernel {
    /// The plain reference (`panels.rs`): the definition the others are held to.
    Reference,
    /// AVX2's `vpmaddubsw` on the codes' magnitudes (the AVX2 path, and AVX-512 without VNNI).
    Maddubs,
    /// AVX-512 VNNI's `vpdpbusd`, eight per block and input row.
    Vnni,
    /// AMX's `tdpbssd`, one per block for up to 16 input rows (`amx.rs`).
    Amx,
}

impl PanelKernel {
    /// The kernel `path` runs `m` input rows on: AMX tiles from [`AMX_FROM_ROWS`] rows where usable
    /// ([`crate::path::amx_usable`]), else VNNI where present, else `maddubs`; the reference off x86-64.
    pub fn for_rows(path: KernelPath, m: usize) -> PanelKernel {
        match path {
            KernelPath::Avx512 if m >= AMX_FROM_ROWS && crate::path::amx_usable() => PanelKernel::Amx,
            KernelPath::Avx512 if crate::path::has_feature("avx512vnni") => PanelKernel::Vnni,
            KernelPath::Avx512 | KernelPath::Avx2 => PanelKernel::Maddubs,
            KernelPath::Generic | KernelPath::Neon => PanelKernel::Reference,
        }
    }

    /// Every kernel this machine can run (what the tests compare).
    pub fn supported() -> Vec<PanelKernel> {
        let mut kernels = vec![PanelKernel::Reference];
        for path in KernelPath::supported() {
            for m in [1, MAX_ROWS] {
                let kernel = PanelKernel::for_rows(path, m);
                if !kernels.contains(&kernel) {
                    kernels.push(kernel);
                }
            }
        }
        kernels
    }

    /// The name logs and tests print.
    pub fn name(self) -> &'static str {
        match self {
            PanelKernel::Reference => "reference",
            PanelKernel::Maddubs => "avx2-maddubs",
            PanelKernel::Vnni => "avx512-vnni",
            PanelKernel::Amx => "amx",
        }
    }

    /// True when this CPU runs the kernel.
    fn runs_here(self) -> bool {
        match self {
            PanelKernel::Reference => true,
            PanelKernel::Maddubs => KernelPath::Avx2.is_supported(),
            PanelKernel::Vnni => KernelPath::Avx512.is_supported() && crate::path::has_feature("avx512vnni"),
            PanelKernel::Amx => KernelPath::Avx512.is_supported() && crate::path::amx_usable(),
        }
    }
}

/// As [`rows_blocks_q8`], for weights repacked as [`Panels`]: the products of the panels from `first`
/// (`out_rows.len() / (PANEL_ROWS · x.m)` of them), `out_rows[j][b]` for their weight rows `j` and input
/// rows `b`, in the arithmetic the panels' module documents: every block summed exactly in integers for 16
/// weight rows at once, then one rounding per block and output, so every kernel gives the same bits and a
/// row's product does not depend on the rows beside it. The kernel is [`PanelKernel::for_rows`]'s.
///
/// # Panics
/// When the sizes disagree, `x.m` is 0 or exceeds [`MAX_ROWS`], or `path` cannot run on this CPU.
pub fn panels_q8(path: KernelPath, panels: &Panels, first: usize, x: &Q8Rows, out_rows: &mut [f32]) {
    assert!(path.is_supported(), "decode: the {path} path on a CPU without it");
    panels_q8_on(PanelKernel::for_rows(path, x.m), panels, first, x, out_rows)
}

/// [`panels_q8`] on a named kernel (tests and benchmarks compare them).
///
/// # Panics
/// As [`panels_q8`], and when this CPU cannot run `kernel`.
pub fn panels_q8_on(kernel: PanelKernel, panels: &Panels, first: usize, x: &Q8Rows, out_rows: &mut [f32]) {
    let (m, k) = (x.m, x.k);
    assert!(
        (1..=MAX_ROWS).contains(&m) && k == panels.cols() && x.q.len() == m * k && x.scale.len() == m * k / BLOCK && x.scaled_sum_by_run.len() == x.scale.len(),
        "decode panels_q8: quantised input of {m} rows of {k} for panels of {} inputs (1 to {MAX_ROWS} rows)",
        panels.cols()
    );
    assert!(
        out_rows.len().is_multiple_of(PANEL_ROWS * m) && (first + out_rows.len() / (PANEL_ROWS * m)) * PANEL_ROWS <= panels.rows(),
        "decode panels_q8: {} outputs of {m} rows from panel {first} exceed the {} weight rows",
        out_rows.len(),
        panels.rows()
    );
    assert!(kernel.runs_here(), "decode panels_q8: the {} kernel on a CPU that cannot run it", kernel.name());
    match kernel {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        // SAFETY: the CPU has the AVX-512 path's features and AMX is usable (checked).
        PanelKernel::Amx => unsafe { amx::panels_q8(panels, first, x, out_rows) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has the path's features and VNNI (checked); `q_plus_128` is `x.q` plus 128.
        PanelKernel::Vnni => unsafe { avx512::panels_q8(panels, first, x, x.q_plus_128(), out_rows) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2, FMA and F16C (checked).
        PanelKernel::Maddubs => unsafe { avx2::panels_q8(panels, first, x, out_rows) },
        PanelKernel::Reference => panels::panels_q8(panels, first, x, out_rows),
        #[allow(unreachable_patterns)]
        other => panic!("decode panels_q8: the {} kernel is not built for {}", other.name(), std::env::consts::ARCH),
    }
}

/// Panics unless `m` is at most [`MAX_ROWS`] and `rows` is whole rows of `k` weights in `format` with `m`
/// outputs each in `out_rows`; `op` names the caller.
fn check_block_rows(op: &str, format: BlockFormat, rows: &[u8], out_rows: &[f32], m: usize, k: usize) {
    assert!(m <= MAX_ROWS, "decode {op}: {m} input rows, at most {MAX_ROWS}");
    let row_bytes = format.row_bytes(k);
    assert!(
        rows.len().is_multiple_of(row_bytes) && out_rows.len() == rows.len() / row_bytes * m,
        "decode {op}: {} bytes and {} outputs for {format:?} rows of {k}, {m} input rows",
        rows.len(),
        out_rows.len()
    );
}

/// Panics unless this CPU has the features of `path`: what makes calling its kernels safe.
#[cfg(target_arch = "x86_64")]
fn assert_supported(path: KernelPath) {
    assert!(path.is_supported(), "decode: the {path} path on a CPU without it");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        crate::test_data::values(n, seed, 1.0)
    }

    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        values(n, seed).into_iter().map(|v| ((v + 1.0) * 127.9) as u8).collect()
    }

    /// Blocks with finite, ordinary f16 scales (the random bytes elsewhere in the block are fine).
    fn blocks(format: BlockFormat, n: usize, seed: u64) -> Vec<u8> {
        let mut b = bytes(n * format.block_bytes(), seed);
        for (i, block) in b.chunks_exact_mut(format.block_bytes()).enumerate() {
            let d = 0x2c00u16 + (i as u16 % 512); // ~0.06 and up
            let m = 0xa800u16 + (i as u16 % 256); // ~ -0.03
            match format {
                BlockFormat::Q6K => block[208..210].copy_from_slice(&(d - 0x1000).to_le_bytes()),
                _ => block[0..2].copy_from_slice(&d.to_le_bytes()),
            }
            if format.has_offset() {
                block[2..4].copy_from_slice(&m.to_le_bytes());
            }
        }
        b
    }

    fn definition(x: &[f32], w: &[f32], m: usize, k: usize) -> Vec<f64> {
        let n = w.len() / k;
        let mut out = vec![0f64; n * m];
        for j in 0..n {
            for b in 0..m {
                out[j * m + b] = (0..k).map(|i| x[b * k + i] as f64 * w[j * k + i] as f64).sum();
            }
        }
        out
    }

    /// Paths whose loops are the reference's own give its bits; the AVX2 and AVX-512 paths (fused
    /// multiply-adds) are held within `1e-5 · Σ|x·w|` of it.
    fn agrees(path: KernelPath, got: &[f32], reference: &[f32], magnitude: &[f64], what: &str) {
        if matches!(path, KernelPath::Avx2 | KernelPath::Avx512) {
            for ((g, r), size) in got.iter().zip(reference).zip(magnitude) {
                assert!(((g - r) as f64).abs() <= 1e-5 * size + 1e-30, "{path}, {what}: {g} against {r} (Σ|x·w| = {size})");
            }
        } else {
            assert_eq!(got, reference, "{path}, {what}");
        }
    }

    #[test]
    fn every_path_gives_the_references_bits_and_the_products_value() {
        eprintln!("kernel paths on this machine: {:?}", KernelPath::supported());
        for (n, k) in [(70, 150), (64, 64), (9, 1)] {
            let w = values(n * k, 1);
            for m in [1, 2, 7, 16] {
                let x = values(m * k, m as u64 + 10);
                let want = definition(&x, &w, m, k);
                let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<f32>>();
                let magnitude = definition(&abs(&x), &abs(&w), m, k);
                let mut reference = vec![0f32; n * m];
                generic::rows_f32(&x, &w, &mut reference, m, k);
                for (r, v) in reference.iter().zip(&want) {
                    assert!((*r as f64 - v).abs() < 1e-4 * (1.0 + v.abs()), "reference {r} against {v}");
                }
                for path in KernelPath::supported() {
                    let mut got = vec![0f32; n * m];
                    rows_f32(path, &x, &w, &mut got, m, k);
                    agrees(path, &got, &reference, &magnitude, &format!("{m} rows of {k}"));
                }
            }
        }
    }

    /// Q4_1 and Q8_0 by their definitions, written out here once more (the other formats are held to
    /// candle's dequantisation, bit for bit, in the policy crate's `packed_rows` tests).
    #[test]
    fn q4_1_and_q8_0_blocks_unpack_to_their_definition() {
        for format in [BlockFormat::Q4_1, BlockFormat::Q8_0] {
            let packed = blocks(format, 3, 7);
            for block in packed.chunks_exact(format.block_bytes()) {
                let d = crate::half::f16_le_to_f32(&block[0..2]);
                let want: Vec<f32> = match format {
                    BlockFormat::Q4_1 => {
                        let mn = crate::half::f16_le_to_f32(&block[2..4]);
                        let lo = block[4..20].iter().map(|&b| (b & 0x0f) as f32 * d + mn);
                        lo.chain(block[4..20].iter().map(|&b| (b >> 4) as f32 * d + mn)).collect()
                    }
                    _ => block[2..34].iter().map(|&b| b as i8 as f32 * d).collect(),
                };
                let mut got = [0f32; BLOCK];
                unpack_block(format, block, &mut got);
                assert_eq!(&got[..], &want[..], "{format:?}");
            }
        }
    }

    /// `n` rows of `k` weights as random `format` blocks, and the weights they unpack to.
    fn block_rows(format: BlockFormat, n: usize, k: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
        let packed = blocks(format, n * k / format.block_weights(), seed);
        let mut w = vec![0f32; n * k];
        for (block, out) in packed.chunks_exact(format.block_bytes()).zip(w.chunks_exact_mut(format.block_weights())) {
            unpack_block(format, block, out);
        }
        (packed, w)
    }

    /// Panels: the reference is the product of the loader's weights and the quantised inputs; every path
    /// gives its bits, for any number of input rows, from any first panel, and a row alone the bits it
    /// gets among others.
    #[test]
    fn panels_give_the_references_bits_on_every_path_for_every_row_alike() {
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
        eprintln!("panel kernels on this machine: {:?}", PanelKernel::supported());
        for format in BlockFormat::ALL {
            for k in [format.block_weights(), 3 * format.block_weights()] {
                let n = 3 * PANEL_ROWS;
                let (packed, w) = block_rows(format, n, k, 29);
                for (codes, panels) in [PanelCodes::Nibbles, PanelCodes::Bytes].map(|c| (c, Panels::new(format, &packed, n, k, c))) {
                    assert_eq!((panels.format(), panels.rows(), panels.cols()), (format, n, k));
                    for m in [1, 2, 4, 7, 13, 16] {
                        let xq = Q8Rows::quantize(&values(m * k, 40 + m as u64), m, k);
                        // The inputs as the products see them: each code times its block's scale.
                        let x: Vec<f32> = xq.q.iter().enumerate().map(|(i, &q)| q as f32 * xq.scale[i / BLOCK]).collect();
                        let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<f32>>();
                        let (want, magnitude) = (definition(&x, &w, m, k), definition(&abs(&x), &abs(&w), m, k));
                        let mut reference = vec![0f32; n * m];
                        panels_q8(KernelPath::Generic, &panels, 0, &xq, &mut reference);
                        for ((got, want), magnitude) in reference.iter().zip(&want).zip(&magnitude) {
                            assert!((*got as f64 - want).abs() <= 1e-5 * magnitude + 1e-9, "{format:?} ({codes:?}), {m} rows of {k}: {got} against {want}");
                        }
                        for path in KernelPath::supported() {
                            let mut got = vec![0f32; n * m];
                            panels_q8(path, &panels, 0, &xq, &mut got);
                            assert_eq!(bits(&got), bits(&reference), "{format:?} ({codes:?}) on {path}, {m} rows of {k}");
                        }
                        for kernel in PanelKernel::supported() {
                            let name = kernel.name();
                            let mut got = vec![0f32; n * m];
                            panels_q8_on(kernel, &panels, 0, &xq, &mut got);
                            assert_eq!(bits(&got), bits(&reference), "{format:?} ({codes:?}) on {name}, {m} rows of {k}");
                            // The last two panels alone.
                            let mut tail = vec![0f32; 2 * PANEL_ROWS * m];
                            panels_q8_on(kernel, &panels, 1, &xq, &mut tail);
                            assert_eq!(bits(&tail), bits(&reference[PANEL_ROWS * m..]), "{format:?} ({codes:?}) on {name} from panel 1");
                            // The last input row alone.
                            let alone = Q8Rows::quantize(&x_row(&values(m * k, 40 + m as u64), m - 1, k), 1, k);
                            let mut one = vec![0f32; n];
                            panels_q8_on(kernel, &panels, 0, &alone, &mut one);
                            let among: Vec<f32> = (0..n).map(|j| reference[j * m + m - 1]).collect();
                            assert_eq!(bits(&one), bits(&among), "{format:?} ({codes:?}) on {name}: a row alone and among {m}");
                        }
                    }
                }
            }
        }
    }

    /// Row `r` of the `m × k` input `x`.
    fn x_row(x: &[f32], r: usize, k: usize) -> Vec<f32> {
        x[r * k..][..k].to_vec()
    }

    /// Every format: the reference is the product of the unpacked weights, and every path agrees with it.
    #[test]
    fn every_format_multiplies_alike_on_every_path() {
        use BlockFormat::*;
        for format in [Q4_0, Q4_1, Q5_0, Q8_0, Q4K, Q6K] {
            let (n, k) = (33, 3 * format.block_weights());
            let (packed, w) = block_rows(format, n, k, 7);
            assert!(w.iter().all(|v| v.is_finite()) && w.iter().any(|v| *v != 0.0), "{format:?}: weights");
            for m in [1, 3, 8, 11, 16] {
                let x = values(m * k, m as u64);
                let want = definition(&x, &w, m, k);
                let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<f32>>();
                let magnitude = definition(&abs(&x), &abs(&w), m, k);
                let mut reference = vec![0f32; n * m];
                generic::rows_blocks(format, &x, &packed, &mut reference, m, k);
                for (r, v) in reference.iter().zip(&want) {
                    assert!((*r as f64 - v).abs() < 1e-4 * (1.0 + v.abs()), "{format:?}: {r} against {v}");
                }
                for path in KernelPath::supported() {
                    let mut got = vec![0f32; n * m];
                    rows_blocks(path, format, &x, &packed, &mut got, m, k);
                    agrees(path, &got, &reference, &magnitude, &format!("{format:?}, {m} rows"));
                }
            }
        }
    }

    /// The integer path: every path gives the reference's sums of integer products (to float rounding),
    /// and those are the f32 products of the quantised input; against the unquantised input the gap is
    /// the 8-bit rounding of the activations, bounded by `Σ|w| · scale / 2` per row.
    #[test]
    fn every_format_multiplies_8_bit_rows_alike_on_every_path() {
        use BlockFormat::*;
        for format in [Q4_0, Q4_1, Q5_0, Q8_0, Q4K, Q6K] {
            let (n, k) = (33, 3 * format.block_weights());
            let (packed, w) = block_rows(format, n, k, 9);
            for m in [1, 3, 8, 16] {
                let x = values(m * k, m as u64 + 3);
                let xq = Q8Rows::quantize(&x, m, k);
                let dequantized: Vec<f32> = xq.q.iter().enumerate().map(|(i, &q)| q as f32 * xq.scale[i / BLOCK]).collect();
                let want = definition(&dequantized, &w, m, k);
                let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<f32>>();
                let magnitude = definition(&abs(&dequantized), &abs(&w), m, k);
                let exact = definition(&x, &w, m, k);
                let mut reference = vec![0f32; n * m];
                generic::rows_blocks_q8(format, &xq, &packed, &mut reference);
                for path in KernelPath::supported() {
                    let mut got = vec![0f32; n * m];
                    rows_blocks_q8(path, format, &xq, &packed, &mut got);
                    for (i, g) in got.iter().enumerate() {
                        let (j, b) = (i / m, i % m);
                        let size = magnitude[i] + 1e-6;
                        assert!((*g as f64 - want[i]).abs() <= 1e-5 * size, "{path}, {format:?}, {m} rows: {g} against {} (Σ|x·w| = {size})", want[i]);
                        let bound: f64 = (0..k).map(|c| (w[j * k + c].abs() * xq.scale[(b * k + c) / BLOCK] * 0.5) as f64).sum();
                        assert!((*g as f64 - exact[i]).abs() <= bound * 1.001 + 1e-5 * size, "{path}, {format:?}: {g} against the f32 product {}", exact[i]);
                    }
                    agrees(path, &got, &reference, &magnitude, &format!("{format:?}, {m} 8-bit rows"));
                }
            }
        }
    }

    /// The VNNI kernel of the AVX-512 path gives the AVX2 kernel's bits (what lets a row alone run AVX2's
    /// one-row kernel and keep batch invariance), for every format, every group size and a row of an odd
    /// number of sub-blocks (the last pair half empty). Skipped, saying so, on a CPU without VNNI.
    #[test]
    fn vnni_rows_give_the_avx2_kernels_bits() {
        use BlockFormat::*;
        if !(KernelPath::Avx512.is_supported() && crate::path::has_feature("avx512vnni")) {
            eprintln!("this CPU has no AVX-512 VNNI: the VNNI decode kernel is not tested here");
            return;
        }
        for format in [Q4_0, Q4_1, Q5_0, Q8_0, Q4K, Q6K] {
            for k in [3 * format.block_weights(), 4 * format.block_weights()] {
                let (packed, _) = block_rows(format, 7, k, 21);
                for m in 2..=MAX_ROWS {
                    let xq = Q8Rows::quantize(&values(m * k, 17 + m as u64), m, k);
                    let (mut vnni, mut maddubs) = (vec![0f32; 7 * m], vec![0f32; 7 * m]);
                    rows_blocks_q8(KernelPath::Avx512, format, &xq, &packed, &mut vnni);
                    rows_blocks_q8(KernelPath::Avx2, format, &xq, &packed, &mut maddubs);
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
                    assert_eq!(bits(&vnni), bits(&maddubs), "{format:?}, {m} rows of {k}");
                }
            }
        }
    }

    /// Batch invariance: on every path, a row's product is the same bits whether the row is multiplied
    /// alone or among up to [`MAX_ROWS`] others (at any place among them), for f32 weights, every block
    /// format with f32 activations and with 8-bit ones. Decoding relies on it: a sequence's logits must not
    /// depend on what else shares its step.
    #[test]
    fn a_rows_product_does_not_depend_on_the_rows_beside_it() {
        use BlockFormat::*;
        /// `product(x, out, rows)`: one kernel's product of `rows` input rows.
        type Product<'a> = &'a dyn Fn(&[f32], &mut [f32], usize);
        let (n, k) = (5, 512);
        let x = values(MAX_ROWS * k, 11);
        let wf = values(n * k, 12);
        for path in KernelPath::supported() {
            let alone = |row: usize, f: Product| {
                let mut out = vec![0f32; n];
                f(&x[row * k..(row + 1) * k], &mut out, 1);
                out
            };
            let check = |what: &str, f: Product| {
                for m in 2..=MAX_ROWS {
                    let mut out = vec![0f32; n * m];
                    f(&x[..m * k], &mut out, m);
                    for b in 0..m {
                        let together: Vec<u32> = (0..n).map(|j| out[j * m + b].to_bits()).collect();
                        let one: Vec<u32> = alone(b, f).iter().map(|v| v.to_bits()).collect();
                        assert_eq!(together, one, "{} {what}: row {b} of {m} differs from the row alone", path.name());
                    }
                }
            };
            check("f32", &|x, out, m| rows_f32(path, x, &wf, out, m, k));
            for format in [Q4_0, Q4_1, Q5_0, Q8_0, Q4K, Q6K] {
                let packed = blocks(format, n * k / format.block_weights(), 13);
                check(&format!("{format:?}"), &|x, out, m| rows_blocks(path, format, x, &packed, out, m, k));
                check(&format!("{format:?} 8-bit"), &|x, out, m| rows_blocks_q8(path, format, &Q8Rows::quantize(x, m, k), &packed, out));
            }
        }
    }

    /// Attention's values step: every path agrees with the reference (to rounding on the intrinsics
    /// paths, for widths that fill whole register blocks, leave a one-register block or a scalar tail), and
    /// a row's result is the same bits when the keys come in segments or the row comes alone.
    #[test]
    fn weighted_value_rows_agree_and_do_not_depend_on_segments_or_neighbours() {
        let keys = 37;
        for hd in [64, 72, 5] {
            for rows in [1, 7, 16] {
                let p: Vec<f32> = values(keys * rows, hd as u64).iter().map(|w| w.abs()).collect();
                let v = values(keys * hd, rows as u64 + 1);
                let start = values(rows * hd, 3);
                let seen: Vec<usize> = (0..rows).map(|r| keys - r % 4).collect();
                let magnitude: Vec<f64> = (0..rows * hd)
                    .map(|i| {
                        let (r, c) = (i / hd, i % hd);
                        start[i].abs() as f64 + (0..seen[r]).map(|j| (p[j * rows + r] * v[j * hd + c]).abs() as f64).sum::<f64>()
                    })
                    .collect();
                let mut reference = start.clone();
                generic::add_weighted_rows(&mut reference, &p, rows, &v, &seen);
                for (i, r) in reference.iter().enumerate() {
                    let (row, c) = (i / hd, i % hd);
                    let want = start[i] as f64 + (0..seen[row]).map(|j| p[j * rows + row] as f64 * v[j * hd + c] as f64).sum::<f64>();
                    assert!((*r as f64 - want).abs() < 1e-5 * magnitude[i], "reference {r} against {want}");
                }
                for path in KernelPath::supported() {
                    let what = format!("{rows} rows of {hd}");
                    let mut whole = start.clone();
                    add_weighted_rows(path, &mut whole, &p, rows, &v, &seen);
                    agrees(path, &whole, &reference, &magnitude, &what);
                    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
                    // The keys in three segments, one call each on the same output.
                    let mut split = start.clone();
                    for (from, to) in [(0, 10), (10, 25), (25, keys)] {
                        let seen_here: Vec<usize> = seen.iter().map(|&s| s.clamp(from, to) - from).collect();
                        add_weighted_rows(path, &mut split, &p[from * rows..to * rows], rows, &v[from * hd..to * hd], &seen_here);
                    }
                    assert_eq!(bits(&split), bits(&whole), "{path}, {what}: the keys in segments");
                    // Each row alone.
                    for r in 0..rows {
                        let mut alone = start[r * hd..(r + 1) * hd].to_vec();
                        let column: Vec<f32> = (0..keys).map(|j| p[j * rows + r]).collect();
                        add_weighted_rows(path, &mut alone, &column, 1, &v, &seen[r..r + 1]);
                        assert_eq!(bits(&alone), bits(&whole[r * hd..(r + 1) * hd]), "{path}, {what}: row {r} alone");
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "at most 16")]
    fn too_many_rows_for_the_block_kernel_are_refused() {
        let packed = vec![0u8; 20];
        rows_blocks(KernelPath::Generic, BlockFormat::Q4_1, &[0.0; 17 * 32], &packed, &mut [0.0; 17], 17, 32);
    }
}
