//! AVX-512 VNNI: `vpdpbusd` adds four unsigned-by-signed byte products into each i32 lane, 64
//! multiply-adds an instruction, with no intermediate rounding or saturation. It sums the codes `c`
//! themselves, so `128 · Σ w` is subtracted per output at the end.
//!
//! A tile is up to 6 rows × 64 outputs: 24 accumulators, 4 weight registers and the broadcast fit the
//! 32 registers.

use super::BLOCK_OUT;
use std::arch::x86_64::*;
use std::ops::Range;

/// Outputs per tile (four registers).
const TILE_OUT: usize = 4 * BLOCK_OUT;
/// Rows per tile.
const TILE_ROWS: usize = 6;

/// Same contract as the reference (`generic::signed_sums`).
///
/// # Safety
/// AVX-512F and VNNI must be present; `sums` as the reference requires.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512vnni")]
pub(super) unsafe fn signed_sums(x: &[u8], rows: usize, in_dim: usize, packed: &[i8], offsets: &[i32], out_dim: usize, columns: Range<usize>, sums: *mut i32) {
    debug_assert!(x.len() >= rows * in_dim && packed.len() == in_dim * out_dim && offsets.len() == out_dim);
    let block_bytes = in_dim * BLOCK_OUT;
    for col in columns.step_by(TILE_OUT) {
        let w = packed.as_ptr().add((col / BLOCK_OUT) * block_bytes);
        let off = offsets.as_ptr().add(col);
        let mut r = 0;
        while r < rows {
            let n = (rows - r).min(TILE_ROWS);
            let (xp, sp) = (x.as_ptr().add(r * in_dim), sums.add(r * out_dim + col));
            match n {
                6 => tile::<6>(xp, in_dim, w, block_bytes, off, sp, out_dim),
                5 => tile::<5>(xp, in_dim, w, block_bytes, off, sp, out_dim),
                4 => tile::<4>(xp, in_dim, w, block_bytes, off, sp, out_dim),
                3 => tile::<3>(xp, in_dim, w, block_bytes, off, sp, out_dim),
                2 => tile::<2>(xp, in_dim, w, block_bytes, off, sp, out_dim),
                _ => tile::<1>(xp, in_dim, w, block_bytes, off, sp, out_dim),
            }
            r += n;
        }
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn tile<const R: usize>(x: *const u8, in_dim: usize, w: *const i8, block_bytes: usize, offsets: *const i32, sums: *mut i32, out_dim: usize) {
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
    for j in 0..4 {
        let off = _mm512_loadu_si512(offsets.add(j * BLOCK_OUT) as *const _);
        for (r, acc_r) in acc.iter().enumerate() {
            _mm512_storeu_si512(sums.add(r * out_dim + j * BLOCK_OUT) as *mut _, _mm512_sub_epi32(acc_r[j], off));
        }
    }
}

/// One dot product per row, minus the row's offset; the row width is a multiple of 64.
///
/// # Safety
/// AVX-512F and VNNI must be present.
#[target_feature(enable = "avx512f,avx512vnni")]
pub(super) unsafe fn dots(x: &[u8], rows: &[i8], offsets: &[i32], out: &mut [i32]) {
    let dim = x.len();
    for (r, o) in out.iter_mut().enumerate() {
        let row = rows.as_ptr().add(r * dim);
        let mut acc = _mm512_setzero_si512();
        for i in (0..dim).step_by(64) {
            let xv = _mm512_loadu_si512(x.as_ptr().add(i) as *const _);
            acc = _mm512_dpbusd_epi32(acc, xv, _mm512_loadu_si512(row.add(i) as *const _));
        }
        *o = _mm512_reduce_add_epi32(acc) - offsets[r];
    }
}
