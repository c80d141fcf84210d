//! Exact int8 products: a linear layer's `x · Wᵀ` over packed weights, and the dot products of one query
//! with many rows (the section scan).
//!
//! Activations arrive as codes `c = q + 128` (`q ∈ [-127, 127]`, so `c ∈ [1, 255]`), the form VNNI's
//! and AMX's unsigned-by-signed multiply wants; weights are signed. Every kernel returns the signed sums
//! `Σ_k q[k] · w[k] = Σ_k (c[k] − 128) · w[k]`, exactly, in i32, so every path gives the same bits.
//! How each gets there:
//!
//! | kernel | file | how |
//! |---|---|---|
//! | generic | `generic.rs` | `(c − 128) · w`, one product at a time: the reference |
//! | avx2 | `avx2.rs` | narrow weights (`|w| ≤ 64`): `vpmaddubsw(c, w)`, then `vpmaddwd` by ones, minus `128 · Σ w`; paired ones (`|w| ≤ 32`): two groups' `vpmaddubsw` added in i16 before the `vpmaddwd`; wider ones: `vpmaddubsw(|w|, sign(q, w))`, since a pair of `c · w` could reach 2 · 255 · 127 and saturate the i16 |
//! | avx512-vnni | `avx512.rs` | `vpdpbusd(c, w)`, 64 multiply-adds an instruction, minus `128 · Σ w` per output |
//! | amx | `amx.rs` | `tdpbusd` tiles of 16 rows × 16 outputs × 64 inputs, minus `128 · Σ w` |
//! | neon | `neon.rs` | `smull` of `q` and `w` into i16, `sadalp` into i32 |
//!
//! How f32 rows become these operands (weights per output channel, activations per row) is
//! [`quantize`]'s, for every caller.

mod generic;
pub mod quantize;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;

use crate::path::{has_feature, KernelPath};
use std::ops::Range;

/// Outputs per packed block: one 512-bit register of i32, two 256-bit ones, four 128-bit ones.
pub const BLOCK_OUT: usize = 16;
/// Inputs per packed group: one i32's worth of bytes, what `vpdpbusd` sums per lane.
pub const GROUP_IN: usize = 4;
/// Output channels must come in multiples of this (the AVX-512 and AMX kernels' tile).
pub const TILE_OUT: usize = 64;

/// The int8 kernel that runs: one per instruction set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Int8Kernel {
    /// Portable Rust, one product at a time: the reference the others must match bit for bit.
    Generic,
    /// AVX2 `vpmaddubsw` of `|w|` and the sign-adjusted activations, widened with `vpmaddwd`.
    Avx2,
    /// AVX-512 VNNI `vpdpbusd`, minus `128 · Σ w` per output.
    Avx512Vnni,
    /// AMX `tdpbusd` tiles (16 rows × 16 outputs × 64 inputs), minus `128 · Σ w` per output.
    Amx,
    /// Arm NEON `smull` into i16, accumulated into i32 with `sadalp`.
    Neon,
}

impl Int8Kernel {
    /// The kernel a path runs: within AVX-512, AMX where the CPU and Linux allow it (not with
    /// [`crate::path::NO_AMX_ENV`] set), else VNNI where present, else the AVX2 kernel.
    pub fn for_path(path: KernelPath) -> Int8Kernel {
        match path {
            KernelPath::Generic => Int8Kernel::Generic,
            KernelPath::Avx2 => Int8Kernel::Avx2,
            KernelPath::Neon => Int8Kernel::Neon,
            KernelPath::Avx512 if crate::path::amx_usable() => Int8Kernel::Amx,
            KernelPath::Avx512 if has_feature("avx512vnni") => Int8Kernel::Avx512Vnni,
            KernelPath::Avx512 => Int8Kernel::Avx2,
        }
    }

    /// The kernel of the selected path ([`crate::selected`]).
    pub fn selected() -> Int8Kernel {
        static SELECTED: std::sync::OnceLock<Int8Kernel> = std::sync::OnceLock::new();
        *SELECTED.get_or_init(|| Int8Kernel::for_path(crate::selected()))
    }

    /// Every kernel this machine can run (what the tests compare).
    pub fn supported() -> Vec<Int8Kernel> {
        let mut kernels: Vec<Int8Kernel> = KernelPath::supported().into_iter().map(Int8Kernel::for_path).collect();
        if has_feature("avx512vnni") && has_feature("avx512f") && !kernels.contains(&Int8Kernel::Avx512Vnni) {
            kernels.push(Int8Kernel::Avx512Vnni);
        }
        kernels.dedup();
        kernels
    }

    /// The name printed by [`crate::describe`] and the tests.
    pub fn name(self) -> &'static str {
        match self {
            Int8Kernel::Generic => "generic",
            Int8Kernel::Avx2 => "avx2-maddubs",
            Int8Kernel::Avx512Vnni => "avx512-vnni",
            Int8Kernel::Amx => "amx",
            Int8Kernel::Neon => "neon-smull",
        }
    }
}

/// A weight matrix `out_dim × in_dim` of int8 values in the kernels' layout, with what the unsigned
/// kernels need to return signed sums.
#[derive(Debug, Clone)]
pub struct Int8Weights {
    in_dim: usize,
    out_dim: usize,
    /// For each block of 16 outputs, for each group of 4 inputs, 16 × 4 bytes (output-major inside the
    /// group): one 64-byte load feeds one `vpdpbusd`, and 16 blocks of it are AMX's right-hand tile.
    packed: Vec<i8>,
    /// Per output: `128 · Σ_k w[o][k]`, the activations' +128 offset's share of an unsigned sum (read by
    /// the VNNI and AMX kernels only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    offsets: Vec<i32>,
    /// How far the weights reach, which decides what the AVX2 kernel may do with them.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    reach: WeightReach,
}

/// How far a matrix's weights reach: the AVX2 kernel's `vpmaddubsw` multiplies the codes (up to 255)
/// by weights directly only while a pair of products fits its i16, and adds two of its results in
/// i16 only while four products do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightReach {
    /// Every `|w| ≤` [`PAIRED_MAX`].
    Paired,
    /// Every `|w| ≤` [`NARROW_MAX`].
    Narrow,
    /// Any int8 weight (within ±127).
    Full,
}

impl WeightReach {
    /// The narrowest reach that holds every weight of `q`.
    pub fn of(q: &[i8]) -> WeightReach {
        let max = q.iter().map(|w| w.unsigned_abs()).max().unwrap_or(0);
        if max <= PAIRED_MAX as u8 {
            WeightReach::Paired
        } else if max <= NARROW_MAX as u8 {
            WeightReach::Narrow
        } else {
            WeightReach::Full
        }
    }

    /// The largest weight magnitude a quantiser may produce for this reach.
    pub fn max(self) -> i8 {
        match self {
            WeightReach::Paired => PAIRED_MAX,
            WeightReach::Narrow => NARROW_MAX,
            WeightReach::Full => 127,
        }
    }
}

/// The largest weight magnitude of a narrow matrix: `2 · 255 · 64` still fits `vpmaddubsw`'s i16.
pub const NARROW_MAX: i8 = 64;
/// The largest weight magnitude of a paired matrix: two `vpmaddubsw` results, `2 · 2 · 255 · 32`, still
/// fit an i16.
pub const PAIRED_MAX: i8 = 32;

impl Int8Weights {
    /// Lay out `q`, `out_dim × in_dim` row-major int8 weights.
    ///
    /// # Panics
    /// Unless `in_dim` is a multiple of 4 and `out_dim` of 64 (BERT's 384, 1,152 and 1,536 all are).
    pub fn new(q: &[i8], out_dim: usize, in_dim: usize) -> Self {
        assert_eq!(q.len(), out_dim * in_dim, "Int8Weights: {} values is not {out_dim} × {in_dim}", q.len());
        assert!(
            in_dim.is_multiple_of(GROUP_IN) && out_dim.is_multiple_of(TILE_OUT) && in_dim > 0,
            "Int8Weights: {out_dim} × {in_dim} does not tile (outputs by {TILE_OUT}, inputs by {GROUP_IN})"
        );
        let groups = in_dim / GROUP_IN;
        let mut packed = vec![0i8; out_dim * in_dim];
        // A group's GROUP_IN inputs stay together: copy them as one piece.
        for (o, row) in q.chunks_exact(in_dim).enumerate() {
            let (block, lane) = (o / BLOCK_OUT, o % BLOCK_OUT);
            for (g, group) in row.chunks_exact(GROUP_IN).enumerate() {
                let at = ((block * groups + g) * BLOCK_OUT + lane) * GROUP_IN;
                packed[at..at + GROUP_IN].copy_from_slice(group);
            }
        }
        let offsets = q.chunks_exact(in_dim).map(|row| 128 * row.iter().map(|&w| w as i32).sum::<i32>()).collect();
        Int8Weights { in_dim, out_dim, packed, offsets, reach: WeightReach::of(q) }
    }

    /// Input width.
    pub fn in_dim(&self) -> usize {
        self.in_dim
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.out_dim
    }

    /// How far the weights reach (which AVX2 kernel multiplies them).
    pub fn reach(&self) -> WeightReach {
        self.reach
    }

    /// Bytes of weights (what a product reads).
    pub fn bytes(&self) -> usize {
        self.packed.len()
    }

    /// Weight `(o, k)` (tests and checks).
    pub fn weight(&self, o: usize, k: usize) -> i8 {
        self.packed[(((o / BLOCK_OUT) * (self.in_dim / GROUP_IN) + k / GROUP_IN) * BLOCK_OUT + o % BLOCK_OUT) * GROUP_IN + k % GROUP_IN]
    }

    /// `sums[r][o] = Σ_k (x[r][k] − 128) · w[o][k]` for every row of `x` (`rows × in_dim` codes) and the
    /// outputs `o` in `columns` (multiples of 64); `sums` is `rows × out_dim`, row-major.
    ///
    /// # Safety
    /// `sums` must point to `rows × out_dim` i32 that no other thread reads or writes in these columns
    /// meanwhile, and `kernel` must be one this CPU runs ([`Int8Kernel::supported`]).
    pub unsafe fn signed_sums(&self, kernel: Int8Kernel, x: &[u8], rows: usize, columns: Range<usize>, sums: *mut i32) {
        assert!(
            columns.start.is_multiple_of(TILE_OUT) && columns.end.is_multiple_of(TILE_OUT) && columns.start <= columns.end && columns.end <= self.out_dim,
            "Int8Weights: columns {columns:?} of {}",
            self.out_dim
        );
        assert!(x.len() >= rows * self.in_dim, "Int8Weights: {} codes for {rows} rows of {}", x.len(), self.in_dim);
        let (k, n) = (self.in_dim, self.out_dim);
        // SAFETY: (all arms) shapes checked above; the caller vouches for `sums` and the CPU.
        unsafe {
            match kernel {
                #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
                Int8Kernel::Amx if k.is_multiple_of(64) => amx::signed_sums(x, rows, k, &self.packed, &self.offsets, n, columns, sums),
                #[cfg(target_arch = "x86_64")]
                Int8Kernel::Avx512Vnni | Int8Kernel::Amx => avx512::signed_sums(x, rows, k, &self.packed, &self.offsets, n, columns, sums),
                #[cfg(target_arch = "x86_64")]
                Int8Kernel::Avx2 if self.reach == WeightReach::Paired => avx2::paired_sums(x, rows, k, &self.packed, &self.offsets, n, columns, sums),
                #[cfg(target_arch = "x86_64")]
                Int8Kernel::Avx2 if self.reach == WeightReach::Narrow => avx2::narrow_sums(x, rows, k, &self.packed, &self.offsets, n, columns, sums),
                #[cfg(target_arch = "x86_64")]
                Int8Kernel::Avx2 => avx2::signed_sums(x, rows, k, &self.packed, n, columns, sums),
                #[cfg(target_arch = "aarch64")]
                Int8Kernel::Neon => neon::signed_sums(x, rows, k, &self.packed, n, columns, sums),
                Int8Kernel::Generic => generic::signed_sums(x, rows, k, &self.packed, n, columns, sums),
                #[allow(unreachable_patterns)]
                other => panic!("int8 kernel {} is not built for {}", other.name(), std::env::consts::ARCH),
            }
        }
    }

    /// [`Int8Weights::signed_sums`] for every output into a `rows × out_dim` slice, on the selected kernel.
    pub fn signed_sums_into(&self, x: &[u8], rows: usize, sums: &mut [i32]) {
        self.signed_sums_with(Int8Kernel::selected(), x, rows, sums)
    }

    /// As [`Int8Weights::signed_sums_into`] on a named kernel (tests compare them).
    ///
    /// # Panics
    /// When this CPU cannot run `kernel`.
    pub fn signed_sums_with(&self, kernel: Int8Kernel, x: &[u8], rows: usize, sums: &mut [i32]) {
        assert!(Int8Kernel::supported().contains(&kernel), "int8 kernel {} does not run on this CPU", kernel.name());
        assert_eq!(sums.len(), rows * self.out_dim, "Int8Weights: output is not {rows} × {}", self.out_dim);
        // SAFETY: `sums` is exclusively ours and sized; the kernel runs here (checked).
        unsafe { self.signed_sums(kernel, x, rows, 0..self.out_dim, sums.as_mut_ptr()) }
    }
}

/// Rows of int8 codes (a vector store), each with `128 · Σ row`, for [`dots`].
pub fn row_offsets(rows: &[i8], dim: usize) -> Vec<i32> {
    assert!(dim > 0 && rows.len().is_multiple_of(dim), "row_offsets: {} bytes is not rows of {dim}", rows.len());
    rows.chunks_exact(dim).map(|r| 128 * r.iter().map(|&w| w as i32).sum::<i32>()).collect()
}

/// `out[r] = Σ_k (x[k] − 128) · rows[r][k]`, exact, for the codes `x` of one query and every row of
/// `rows` (width `x.len()`); `offsets` is [`row_offsets`] of the same rows. The section scan.
pub fn dots(kernel: Int8Kernel, x: &[u8], rows: &[i8], offsets: &[i32], out: &mut [i32]) {
    let dim = x.len();
    assert!(dim > 0 && rows.len() == out.len() * dim, "int8 dots: {} bytes is not {} rows of {dim}", rows.len(), out.len());
    assert_eq!(offsets.len(), out.len(), "int8 dots: {} offsets for {} rows", offsets.len(), out.len());
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Int8Kernel::Avx512Vnni | Int8Kernel::Amx if dim.is_multiple_of(64) && has_feature("avx512vnni") => {
            // SAFETY: VNNI is present (checked); the row width is a multiple of 64.
            unsafe { avx512::dots(x, rows, offsets, out) }
        }
        #[cfg(target_arch = "x86_64")]
        Int8Kernel::Avx2 | Int8Kernel::Avx512Vnni | Int8Kernel::Amx if dim.is_multiple_of(32) => {
            assert!(has_feature("avx2"), "int8 dots: the AVX2 kernel on a CPU without AVX2");
            // SAFETY: AVX2 is present (checked); the row width is a multiple of 32.
            unsafe { avx2::dots(x, rows, out) }
        }
        #[cfg(target_arch = "aarch64")]
        Int8Kernel::Neon if dim.is_multiple_of(16) => {
            // SAFETY: NEON is part of every aarch64 CPU; the row width is a multiple of 16.
            unsafe { neon::dots(x, rows, out) }
        }
        _ => generic::dots(x, rows, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) use crate::test_data::bytes;

    /// Codes in [1, 255] (what quantisation produces), with the extremes forced in.
    fn codes(n: usize, seed: u64) -> Vec<u8> {
        let mut c: Vec<u8> = bytes(n, seed).into_iter().map(|b| b.max(1)).collect();
        c[0] = 1;
        if n > 1 {
            c[1] = 255;
        }
        c
    }

    /// Weights in [-127, 127], extremes included.
    fn weights(n: usize, seed: u64) -> Vec<i8> {
        let mut w: Vec<i8> = bytes(n, seed).into_iter().map(|b| (b as i8).max(-127)).collect();
        w[0] = -127;
        w[1] = 127;
        w
    }

    fn definition(x: &[u8], rows: usize, q: &[i8], out_dim: usize, in_dim: usize) -> Vec<i32> {
        let mut s = vec![0i32; rows * out_dim];
        for r in 0..rows {
            for o in 0..out_dim {
                s[r * out_dim + o] = (0..in_dim).map(|k| (x[r * in_dim + k] as i32 - 128) * q[o * in_dim + k] as i32).sum();
            }
        }
        s
    }

    /// Every kernel on this machine gives `want`, the definition's sums of the `rows` rows of `x` against `w`.
    fn assert_every_kernel_sums(w: &Int8Weights, x: &[u8], rows: usize, want: &[i32], case: &str) {
        for kernel in Int8Kernel::supported() {
            let mut got = vec![0i32; want.len()];
            w.signed_sums_with(kernel, x, rows, &mut got);
            assert_eq!(got, want, "{} kernel, {case}", kernel.name());
        }
    }

    #[test]
    fn every_kernel_gives_the_definitions_sums_for_every_row_count() {
        eprintln!("int8 kernels on this machine: {:?}", Int8Kernel::supported());
        for (in_dim, out_dim) in [(192, 192), (384, 128), (68, 64)] {
            let q = weights(out_dim * in_dim, in_dim as u64);
            let w = Int8Weights::new(&q, out_dim, in_dim);
            assert_eq!(w.weight(out_dim - 1, in_dim - 1), q[out_dim * in_dim - 1]);
            for rows in (1..=18).chain([33, 40]) {
                let x = codes(rows * in_dim, rows as u64);
                let want = definition(&x, rows, &q, out_dim, in_dim);
                assert_every_kernel_sums(&w, &x, rows, &want, &format!("{rows} rows, {out_dim} × {in_dim}"));
            }
        }
    }

    /// The largest sums the codes allow: every product at ±127 · 127, where a saturating i16 step would
    /// show.
    #[test]
    fn extreme_values_do_not_saturate() {
        let (in_dim, out_dim, rows) = (256, 64, 3);
        let x: Vec<u8> = [vec![255u8; in_dim], vec![1u8; in_dim], codes(in_dim, 3)].concat();
        let q: Vec<i8> = (0..out_dim * in_dim).map(|i| if (i / in_dim) % 2 == 0 { 127 } else { -127 }).collect();
        let w = Int8Weights::new(&q, out_dim, in_dim);
        let want = definition(&x, rows, &q, out_dim, in_dim);
        assert_eq!(want[0], 127 * 127 * in_dim as i32);
        assert_every_kernel_sums(&w, &x, rows, &want, "the extremes");
    }

    /// Narrow weights (every `|w| ≤ 64`) take the AVX2 kernel's direct path: `vpmaddubsw` of a code
    /// and a weight, where 255 · 64 twice must not saturate; paired ones (`|w| ≤ 32`) add two such
    /// results in i16, where 255 · 32 four times must not overflow. One weight past a reach's limit
    /// sends a matrix to the next path; every path gives the definition's sums, at the extremes, for an
    /// odd number of input groups (the paired kernel's last group alone) and for any number of rows.
    #[test]
    fn narrow_and_paired_weights_are_exact_at_the_extremes() {
        for (reach, max, next) in [(WeightReach::Paired, PAIRED_MAX, WeightReach::Narrow), (WeightReach::Narrow, NARROW_MAX, WeightReach::Full)] {
            for in_dim in [256, 196] {
                let (out_dim, rows) = (64, 4);
                let x: Vec<u8> = [vec![255u8; in_dim], vec![1u8; in_dim], codes(in_dim, 3), vec![128u8; in_dim]].concat();
                let mut q: Vec<i8> = (0..out_dim * in_dim).map(|i| if (i / in_dim) % 2 == 0 { max } else { -max }).collect();
                q[in_dim + 3] = 17;
                let within = Int8Weights::new(&q, out_dim, in_dim);
                assert_eq!(within.reach(), reach);
                let want = definition(&x, rows, &q, out_dim, in_dim);
                assert_eq!(want[0], 127 * max as i32 * in_dim as i32);
                q[5] = max + 1;
                let past = Int8Weights::new(&q, out_dim, in_dim);
                assert_eq!(past.reach(), next);
                let want_past = definition(&x, rows, &q, out_dim, in_dim);
                for (w, want) in [(&within, &want), (&past, &want_past)] {
                    assert_every_kernel_sums(w, &x, rows, want, &format!("{:?} weights, {in_dim} inputs", w.reach()));
                }
            }
            for rows in [1, 2, 3, 5, 17] {
                let q: Vec<i8> = weights(196 * 128, rows as u64).into_iter().map(|w| (w as i32 * max as i32 / 127) as i8).collect();
                let w = Int8Weights::new(&q, 128, 196);
                assert_eq!(w.reach(), reach);
                let x = codes(rows * 196, 40 + rows as u64);
                let want = definition(&x, rows, &q, 128, 196);
                assert_every_kernel_sums(&w, &x, rows, &want, &format!("{rows} rows of {reach:?} weights"));
            }
        }
    }

    #[test]
    fn a_column_range_writes_only_its_columns() {
        let (in_dim, out_dim, rows) = (128, 192, 7);
        let wide = weights(out_dim * in_dim, 5);
        let narrow: Vec<i8> = wide.iter().map(|w| w / 2).collect();
        let paired: Vec<i8> = wide.iter().map(|w| w / 4).collect();
        for (q, kernel) in [&wide, &narrow, &paired].into_iter().flat_map(|q| Int8Kernel::supported().into_iter().map(move |k| (q, k))) {
            let w = Int8Weights::new(q, out_dim, in_dim);
            let x = codes(rows * in_dim, 6);
            let want = definition(&x, rows, q, out_dim, in_dim);
            let mut got = vec![i32::MIN; rows * out_dim];
            // SAFETY: sized, exclusive, and the kernel runs here.
            unsafe { w.signed_sums(kernel, &x, rows, 64..128, got.as_mut_ptr()) };
            for r in 0..rows {
                for o in 0..out_dim {
                    let v = got[r * out_dim + o];
                    if (64..128).contains(&o) {
                        assert_eq!(v, want[r * out_dim + o], "{} ({r}, {o})", kernel.name());
                    } else {
                        assert_eq!(v, i32::MIN, "{} wrote outside its columns at ({r}, {o})", kernel.name());
                    }
                }
            }
        }
    }

    #[test]
    fn the_row_scan_is_exact_on_every_kernel_and_width() {
        for dim in [384, 96, 64, 100, 1] {
            let x = codes(dim, 11);
            let rows = weights(9 * dim.max(2), 12);
            let rows = &rows[..9 * dim];
            let offsets = row_offsets(rows, dim);
            let want: Vec<i32> = rows.chunks_exact(dim).map(|r| x.iter().zip(r).map(|(&a, &b)| (a as i32 - 128) * b as i32).sum()).collect();
            for kernel in Int8Kernel::supported() {
                let mut got = vec![0i32; 9];
                dots(kernel, &x, rows, &offsets, &mut got);
                assert_eq!(got, want, "{} kernel, width {dim}", kernel.name());
            }
        }
    }

    #[test]
    #[should_panic(expected = "does not tile")]
    fn a_shape_the_kernels_cannot_tile_is_refused() {
        Int8Weights::new(&[0; 6 * 10], 10, 6);
    }

    #[test]
    fn the_selected_kernel_is_supported() {
        assert!(Int8Kernel::supported().contains(&Int8Kernel::selected()));
        assert_eq!(Int8Kernel::for_path(KernelPath::Generic), Int8Kernel::Generic);
    }
}
