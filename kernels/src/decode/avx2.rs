//! AVX2 + FMA, written with intrinsics: one fused multiply-add per 8 weights and input row, with the
//! input rows in groups of up to 8 so that their accumulators stay in registers while a weight chunk (or
//! an unpacked block) is reused across them.
//!
//! Fusing the multiply into the add rounds once where the reference rounds twice, and the partial sums
//! are grouped differently, so this path agrees with the reference to rounding, not bit for bit: within
//! `1e-5 · Σ|x·w|` (the tests hold it there), far below what a sampled token's log-probability can show.

use super::generic::{BlockFormat, BLOCK};
use crate::half::f16_le_to_f32;
use std::arch::x86_64::*;

/// Input rows whose accumulators share one pass over the weights.
const GROUP: usize = 8;

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum_lanes(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// # Safety
/// The CPU must have AVX2 and FMA; sizes as `super::rows_f32` checks them.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_f32(x: &[f32], w_rows: &[f32], out_rows: &mut [f32], m: usize, k: usize) {
    let full = k / 8 * 8;
    for (o, wr) in out_rows.chunks_mut(m).zip(w_rows.chunks(k)) {
        for b0 in (0..m).step_by(GROUP) {
            let g = (m - b0).min(GROUP);
            match g {
                8 => f32_group::<8>(x, wr, o, b0, k, full),
                7 => f32_group::<7>(x, wr, o, b0, k, full),
                6 => f32_group::<6>(x, wr, o, b0, k, full),
                5 => f32_group::<5>(x, wr, o, b0, k, full),
                4 => f32_group::<4>(x, wr, o, b0, k, full),
                3 => f32_group::<3>(x, wr, o, b0, k, full),
                2 => f32_group::<2>(x, wr, o, b0, k, full),
                _ => f32_group::<1>(x, wr, o, b0, k, full),
            }
        }
    }
}

/// Input rows `b0 .. b0 + G` against one weight row.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn f32_group<const G: usize>(x: &[f32], wr: &[f32], o: &mut [f32], b0: usize, k: usize, full: usize) {
    let mut acc = [_mm256_setzero_ps(); G];
    let (wp, xp) = (wr.as_ptr(), x.as_ptr().add(b0 * k));
    let mut i = 0;
    while i < full {
        let w = _mm256_loadu_ps(wp.add(i));
        for (b, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(w, _mm256_loadu_ps(xp.add(b * k + i)), *a);
        }
        i += 8;
    }
    for (b, a) in acc.iter().enumerate() {
        let mut s = sum_lanes(*a);
        for j in full..k {
            s += wr[j] * x[(b0 + b) * k + j];
        }
        o[b0 + b] = s;
    }
}

/// # Safety
/// The CPU must have AVX2 and FMA; sizes as `super::rows_blocks` checks them.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_blocks(format: BlockFormat, x: &[f32], rows: &[u8], out_rows: &mut [f32], m: usize, k: usize) {
    let row_bytes = k / BLOCK * format.block_bytes();
    for (o, row) in out_rows.chunks_mut(m).zip(rows.chunks(row_bytes)) {
        for b0 in (0..m).step_by(GROUP) {
            let g = (m - b0).min(GROUP);
            match g {
                8 => block_group::<8>(format, x, row, o, b0, k),
                7 => block_group::<7>(format, x, row, o, b0, k),
                6 => block_group::<6>(format, x, row, o, b0, k),
                5 => block_group::<5>(format, x, row, o, b0, k),
                4 => block_group::<4>(format, x, row, o, b0, k),
                3 => block_group::<3>(format, x, row, o, b0, k),
                2 => block_group::<2>(format, x, row, o, b0, k),
                _ => block_group::<1>(format, x, row, o, b0, k),
            }
        }
    }
}

/// The 32 weights of a block as four registers of 8, by the loader's formula (`q · d + m`, `q · d`;
/// the multiply and the add rounded separately, as the loader does, so the values are the loader's).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn unpack(format: BlockFormat, block: *const u8) -> [__m256; 4] {
    let d = _mm256_set1_ps(f16_le_to_f32(std::slice::from_raw_parts(block, 2)));
    match format {
        BlockFormat::Q4_1 => {
            let mn = _mm256_set1_ps(f16_le_to_f32(std::slice::from_raw_parts(block.add(2), 2)));
            let qs = _mm_loadu_si128(block.add(4) as *const __m128i);
            let mask = _mm_set1_epi8(0x0f);
            let lo = _mm_and_si128(qs, mask); // weights 0..16
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(qs), mask); // weights 16..32
            [q4(lo, d, mn), q4(_mm_srli_si128::<8>(lo), d, mn), q4(hi, d, mn), q4(_mm_srli_si128::<8>(hi), d, mn)]
        }
        BlockFormat::Q8_0 => {
            let q = block.add(2);
            [q8(q, d), q8(q.add(8), d), q8(q.add(16), d), q8(q.add(24), d)]
        }
    }
}

/// Eight nibbles (the low 8 bytes of `v`) as `q · d + m`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q4(v: __m128i, d: __m256, mn: __m256) -> __m256 {
    _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), d), mn)
}

/// Eight signed bytes at `p` as `q · d`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q8(p: *const u8, d: __m256) -> __m256 {
    _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i))), d)
}

/// Input rows `b0 .. b0 + G` against one row of blocks.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_group<const G: usize>(format: BlockFormat, x: &[f32], row: &[u8], o: &mut [f32], b0: usize, k: usize) {
    let mut acc = [_mm256_setzero_ps(); G];
    let xp = x.as_ptr().add(b0 * k);
    let bb = format.block_bytes();
    for (bi, block) in row.chunks_exact(bb).enumerate() {
        let w = unpack(format, block.as_ptr());
        for (b, a) in acc.iter_mut().enumerate() {
            let xb = xp.add(b * k + bi * BLOCK);
            let mut s = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(xb), *a);
            s = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xb.add(8)), s);
            s = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xb.add(16)), s);
            *a = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xb.add(24)), s);
        }
    }
    for (b, a) in acc.iter().enumerate() {
        o[b0 + b] = sum_lanes(*a);
    }
}
