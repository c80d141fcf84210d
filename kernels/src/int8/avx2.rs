//! AVX2: `vpmaddubsw` multiplies unsigned by signed bytes and adds pairs into i16, saturating.
//!
//! Narrow weights (`|w| ≤ 64`, what the MiniLM query encoder quantises to) take [`narrow_sums`]: the
//! codes `c ∈ [1, 255]` times `w` stay within 2 · 255 · 64 = 32,640 a pair, so `vpmaddubsw(c, w)` is
//! exact, and `128 · Σ w` is subtracted at the end. Paired weights (`|w| ≤ 32`, the section encoder's)
//! take [`paired_sums`]: two such products add in i16 before they are widened. Wider weights take [`signed_sums`]: a pair of `c · w` could
//! reach 2 · 255 · 127 and saturate, so it multiplies `|w|` (≤ 127) by `q · sign(w)`
//! (`q = c − 128 ∈ [-127, 127]`): each pair stays within ±32,258, exact, at two more instructions per
//! 32 multiply-adds and a signed copy of the codes (1.7x slower). `vpmaddwd` by ones then widens the
//! pairs into i32 sums of four products.
//!
//! The codes are turned into `q` once per call (a thread-local copy), not once per block of outputs:
//! that xor was a tenth of the loop. A 16-output block of the packed weights is two 256-bit registers
//! (outputs 0-7 and 8-15, four inputs each). A tile is up to four rows × one block: 8 accumulators, 2 weights and their absolute values,
//! the broadcast row, ones and a product fit the 16 registers. Columns outside, rows inside, so a block
//! (16 × in_dim bytes, 6-24 KB) stays in L1 while every row of a long input passes over it.

use super::{BLOCK_OUT, GROUP_IN};
use std::arch::x86_64::*;
use std::ops::Range;

/// Rows per tile.
const TILE_ROWS: usize = 4;
/// Rows per tile of the paired kernel: its four weight registers leave room for three rows'
/// accumulators (four spilled: 105 against 113 GMAC/s, `kernel_speed`, 128 rows).
const PAIRED_TILE_ROWS: usize = 3;

/// Same contract as the reference (`generic::signed_sums`).
///
/// # Safety
/// AVX2 must be present; `sums` as the reference requires.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn signed_sums(x: &[u8], rows: usize, in_dim: usize, packed: &[i8], out_dim: usize, columns: Range<usize>, sums: *mut i32) {
    debug_assert!(x.len() >= rows * in_dim && packed.len() == in_dim * out_dim);
    // The codes turned into q = c − 128 once (flipping the top bit), not once per block of outputs.
    SIGNED.with(|cell| {
        let mut q = cell.borrow_mut();
        q.clear();
        q.extend(x[..rows * in_dim].iter().map(|&c| (c ^ 0x80) as i8));
        signed_sums_of_q(&q, rows, in_dim, packed, out_dim, columns, sums)
    })
}

thread_local! {
    /// The signed activations of the current call (a few KB: rows × in_dim).
    static SIGNED: std::cell::RefCell<Vec<i8>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[target_feature(enable = "avx2")]
unsafe fn signed_sums_of_q(x: &[i8], rows: usize, in_dim: usize, packed: &[i8], out_dim: usize, columns: Range<usize>, sums: *mut i32) {
    let block_bytes = in_dim * BLOCK_OUT;
    for block in columns.start / BLOCK_OUT..columns.end / BLOCK_OUT {
        let w = packed.as_ptr().add(block * block_bytes);
        let mut r = 0;
        while r < rows {
            let n = (rows - r).min(TILE_ROWS);
            let (xp, sp) = (x.as_ptr().add(r * in_dim), sums.add(r * out_dim + block * BLOCK_OUT));
            match n {
                4 => tile::<4>(xp, in_dim, w, sp, out_dim),
                3 => tile::<3>(xp, in_dim, w, sp, out_dim),
                2 => tile::<2>(xp, in_dim, w, sp, out_dim),
                _ => tile::<1>(xp, in_dim, w, sp, out_dim),
            }
            r += n;
        }
    }
}

/// `R` rows × one 16-output block.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn tile<const R: usize>(x: *const i8, in_dim: usize, w: *const i8, sums: *mut i32, out_dim: usize) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); 2]; R];
    for g in 0..in_dim / GROUP_IN {
        let w0 = _mm256_loadu_si256(w.add(g * 64) as *const __m256i);
        let w1 = _mm256_loadu_si256(w.add(g * 64 + 32) as *const __m256i);
        let (a0, a1) = (_mm256_abs_epi8(w0), _mm256_abs_epi8(w1));
        for (r, acc_r) in acc.iter_mut().enumerate() {
            // Four activations of row r, in every 32-bit lane.
            let q = _mm256_set1_epi32((x.add(r * in_dim + g * GROUP_IN) as *const i32).read_unaligned());
            let p0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(q, w0));
            let p1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(q, w1));
            acc_r[0] = _mm256_add_epi32(acc_r[0], _mm256_madd_epi16(p0, ones));
            acc_r[1] = _mm256_add_epi32(acc_r[1], _mm256_madd_epi16(p1, ones));
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        _mm256_storeu_si256(sums.add(r * out_dim) as *mut __m256i, acc_r[0]);
        _mm256_storeu_si256(sums.add(r * out_dim + 8) as *mut __m256i, acc_r[1]);
    }
}

/// As [`signed_sums`] for narrow weights (every `|w| ≤ 64`): `vpmaddubsw` of the codes themselves
/// (`c ≤ 255`) and `w` stays within 2 · 255 · 64 = 32,640, so no sign juggling: three instructions per
/// 32 multiply-adds instead of four, and no signed copy of the codes. `128 · Σ w` is subtracted at the
/// end, as VNNI does.
///
/// # Safety
/// AVX2 must be present; every weight within ±64; `sums` as the reference requires.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn narrow_sums(x: &[u8], rows: usize, in_dim: usize, packed: &[i8], offsets: &[i32], out_dim: usize, columns: Range<usize>, sums: *mut i32) {
    unsigned_sums::<false>(x, rows, in_dim, packed, offsets, out_dim, columns, sums)
}

/// As [`narrow_sums`] for paired weights (every `|w| ≤ 32`): one `vpmaddubsw` of the codes and `w` stays
/// within 2 · 255 · 32 = 16,320, so the products of two groups of four inputs add in i16 (`vpaddw`,
/// which any vector port runs) before one `vpmaddwd` widens them: three multiplies per 64 multiply-adds
/// instead of four. 1.13-1.16x the narrow kernel on a Zen 3 core (`kernel_speed`). Summing four groups
/// (weights within ±16) was no faster there: `vpmaddubsw` itself is then the bound.
///
/// # Safety
/// AVX2 must be present; every weight within ±32; `sums` as the reference requires.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn paired_sums(x: &[u8], rows: usize, in_dim: usize, packed: &[i8], offsets: &[i32], out_dim: usize, columns: Range<usize>, sums: *mut i32) {
    unsigned_sums::<true>(x, rows, in_dim, packed, offsets, out_dim, columns, sums)
}

/// The frame of the narrow and paired kernels (`PAIRED`): 16-output blocks outside, tiles of rows
/// inside, each tile's sums minus `128 · Σ w`.
#[inline]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn unsigned_sums<const PAIRED: bool>(
    x: &[u8],
    rows: usize,
    in_dim: usize,
    packed: &[i8],
    offsets: &[i32],
    out_dim: usize,
    columns: Range<usize>,
    sums: *mut i32,
) {
    debug_assert!(x.len() >= rows * in_dim && packed.len() == in_dim * out_dim && offsets.len() == out_dim);
    let block_bytes = in_dim * BLOCK_OUT;
    for block in columns.start / BLOCK_OUT..columns.end / BLOCK_OUT {
        let w = packed.as_ptr().add(block * block_bytes);
        let off = offsets.as_ptr().add(block * BLOCK_OUT);
        let mut r = 0;
        while r < rows {
            let n = match (rows - r, PAIRED) {
                // Four rows left go as two and two, not three and a lone row.
                (4, true) => 2,
                (left, true) => left.min(PAIRED_TILE_ROWS),
                (left, false) => left.min(TILE_ROWS),
            };
            let (xp, sp) = (x.as_ptr().add(r * in_dim), sums.add(r * out_dim + block * BLOCK_OUT));
            match n {
                4 => unsigned_tile::<4, PAIRED>(xp, in_dim, w, off, sp, out_dim),
                3 => unsigned_tile::<3, PAIRED>(xp, in_dim, w, off, sp, out_dim),
                2 => unsigned_tile::<2, PAIRED>(xp, in_dim, w, off, sp, out_dim),
                _ => unsigned_tile::<1, PAIRED>(xp, in_dim, w, off, sp, out_dim),
            }
            r += n;
        }
    }
}

/// `R` rows × one 16-output block: with `PAIRED`, two groups of inputs a step (an odd last group alone).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn unsigned_tile<const R: usize, const PAIRED: bool>(x: *const u8, in_dim: usize, w: *const i8, offsets: *const i32, sums: *mut i32, out_dim: usize) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); 2]; R];
    let groups = in_dim / GROUP_IN;
    let mut g = 0;
    while PAIRED && g + 2 <= groups {
        let (w0, w1) = (_mm256_loadu_si256(w.add(g * 64) as *const __m256i), _mm256_loadu_si256(w.add(g * 64 + 32) as *const __m256i));
        let (w2, w3) = (_mm256_loadu_si256(w.add(g * 64 + 64) as *const __m256i), _mm256_loadu_si256(w.add(g * 64 + 96) as *const __m256i));
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let row = x.add(r * in_dim + g * GROUP_IN);
            let c0 = _mm256_set1_epi32((row as *const i32).read_unaligned());
            let c1 = _mm256_set1_epi32((row.add(GROUP_IN) as *const i32).read_unaligned());
            let low = _mm256_add_epi16(_mm256_maddubs_epi16(c0, w0), _mm256_maddubs_epi16(c1, w2));
            let high = _mm256_add_epi16(_mm256_maddubs_epi16(c0, w1), _mm256_maddubs_epi16(c1, w3));
            acc_r[0] = _mm256_add_epi32(acc_r[0], _mm256_madd_epi16(low, ones));
            acc_r[1] = _mm256_add_epi32(acc_r[1], _mm256_madd_epi16(high, ones));
        }
        g += 2;
    }
    // One group a step: every group of a narrow tile, the odd last one of a paired tile.
    while g < groups {
        let (w0, w1) = (_mm256_loadu_si256(w.add(g * 64) as *const __m256i), _mm256_loadu_si256(w.add(g * 64 + 32) as *const __m256i));
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let c = _mm256_set1_epi32((x.add(r * in_dim + g * GROUP_IN) as *const i32).read_unaligned());
            acc_r[0] = _mm256_add_epi32(acc_r[0], _mm256_madd_epi16(_mm256_maddubs_epi16(c, w0), ones));
            acc_r[1] = _mm256_add_epi32(acc_r[1], _mm256_madd_epi16(_mm256_maddubs_epi16(c, w1), ones));
        }
        g += 1;
    }
    let (o0, o1) = (_mm256_loadu_si256(offsets as *const __m256i), _mm256_loadu_si256(offsets.add(8) as *const __m256i));
    for (r, acc_r) in acc.iter().enumerate() {
        _mm256_storeu_si256(sums.add(r * out_dim) as *mut __m256i, _mm256_sub_epi32(acc_r[0], o0));
        _mm256_storeu_si256(sums.add(r * out_dim + 8) as *mut __m256i, _mm256_sub_epi32(acc_r[1], o1));
    }
}

/// One dot product per row: `Σ (x − 128) · row`; the row width is a multiple of 32.
///
/// # Safety
/// AVX2 must be present.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dots(x: &[u8], rows: &[i8], out: &mut [i32]) {
    let dim = x.len();
    debug_assert!(dim.is_multiple_of(32) && rows.len() == out.len() * dim);
    let ones = _mm256_set1_epi16(1);
    let flip = _mm256_set1_epi8(-128);
    for (r, o) in out.iter_mut().enumerate() {
        let row = rows.as_ptr().add(r * dim);
        let mut acc = _mm256_setzero_si256();
        for i in (0..dim).step_by(32) {
            let q = _mm256_xor_si256(_mm256_loadu_si256(x.as_ptr().add(i) as *const __m256i), flip);
            let w = _mm256_loadu_si256(row.add(i) as *const __m256i);
            let p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(q, w));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
        }
        *o = sum_lanes(acc);
    }
}

#[inline]
#[target_feature(enable = "avx2")]
unsafe fn sum_lanes(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}
