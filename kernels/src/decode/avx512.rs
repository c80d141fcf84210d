//! AVX-512, written with intrinsics as `avx2.rs` is, on 16-lane registers: one fused multiply-add per 16
//! weights and input row, the input rows in groups of up to 8 whose accumulators stay in registers while
//! a weight chunk (or an unpacked block) is reused across them.
//!
//! Why not the reference loops compiled for 512-bit registers (what this file was): the compiler kept
//! the block kernel's 32 partial sums per row in memory, and sampling ran at 0.58x the AVX2 path on the
//! same AVX-512 machine (96 against 167 tokens/s, 8 rows of SmolLM2-135M). Like the AVX2 path, this one
//! agrees with the reference to rounding (the multiply fused into the add, the sums grouped otherwise):
//! within `1e-5 · Σ|x·w|`.

use super::generic::{by_format, q4k_scale_min, BlockFormat, BLOCK};
use std::arch::x86_64::*;

/// Input rows whose accumulators share one pass over the weights.
const GROUP: usize = 8;

/// # Safety
/// The CPU must have AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C; sizes as `super::rows_f32` checks them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn rows_f32(x: &[f32], w_rows: &[f32], out_rows: &mut [f32], m: usize, k: usize) {
    let full = k / 16 * 16;
    for (o, wr) in out_rows.chunks_mut(m).zip(w_rows.chunks(k)) {
        for b0 in (0..m).step_by(GROUP) {
            match (m - b0).min(GROUP) {
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
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn f32_group<const G: usize>(x: &[f32], wr: &[f32], o: &mut [f32], b0: usize, k: usize, full: usize) {
    let mut acc = [_mm512_setzero_ps(); G];
    let (wp, xp) = (wr.as_ptr(), x.as_ptr().add(b0 * k));
    let mut i = 0;
    while i < full {
        let w = _mm512_loadu_ps(wp.add(i));
        for (b, a) in acc.iter_mut().enumerate() {
            *a = _mm512_fmadd_ps(w, _mm512_loadu_ps(xp.add(b * k + i)), *a);
        }
        i += 16;
    }
    for (b, a) in acc.iter().enumerate() {
        let mut s = _mm512_reduce_add_ps(*a);
        for j in full..k {
            s += wr[j] * x[(b0 + b) * k + j];
        }
        o[b0 + b] = s;
    }
}

/// # Safety
/// As [`rows_f32`]; sizes as `super::rows_blocks` checks them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn rows_blocks(format: BlockFormat, x: &[f32], rows: &[u8], out_rows: &mut [f32], m: usize, k: usize) {
    by_format!(format, rows_blocks_of(x, rows, out_rows, m, k))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn rows_blocks_of<const F: u8>(x: &[f32], rows: &[u8], out_rows: &mut [f32], m: usize, k: usize) {
    let format = BlockFormat::from_id(F);
    for (o, row) in out_rows.chunks_mut(m).zip(rows.chunks(format.row_bytes(k))) {
        for b0 in (0..m).step_by(GROUP) {
            match (m - b0).min(GROUP) {
                8 => block_group::<8, F>(x, row, o, b0, k),
                7 => block_group::<7, F>(x, row, o, b0, k),
                6 => block_group::<6, F>(x, row, o, b0, k),
                5 => block_group::<5, F>(x, row, o, b0, k),
                4 => block_group::<4, F>(x, row, o, b0, k),
                3 => block_group::<3, F>(x, row, o, b0, k),
                2 => block_group::<2, F>(x, row, o, b0, k),
                _ => block_group::<1, F>(x, row, o, b0, k),
            }
        }
    }
}

/// Sub-block `s` of a block as two registers of 16 weights, by the reference's formula (each multiply
/// and add rounded on its own, as the loader does, so the values are the loader's).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn unpack<const F: u8>(block: *const u8, s: usize) -> [__m512; 2] {
    let format = BlockFormat::from_id(F);
    let f16_at = |at: usize| f16_le(block.add(at));
    let nibbles = _mm_set1_epi8(0x0f);
    match format {
        BlockFormat::Q4_0 | BlockFormat::Q4_1 | BlockFormat::Q5_0 => {
            let d = _mm512_set1_ps(f16_at(0));
            let at = match format {
                BlockFormat::Q4_0 => 2,
                BlockFormat::Q4_1 => 4,
                _ => 6,
            };
            let qs = _mm_loadu_si128(block.add(at) as *const __m128i);
            let lo = _mm_and_si128(qs, nibbles); // weights 0..16
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(qs), nibbles); // weights 16..32
            let q = [lo, hi].map(|v| _mm512_cvtepu8_epi32(v));
            match format {
                BlockFormat::Q4_1 => {
                    let mn = _mm512_set1_ps(f16_at(2));
                    q.map(|q| _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q), d), mn))
                }
                BlockFormat::Q4_0 => q.map(|q| _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, _mm512_set1_epi32(8))), d)),
                _ => {
                    // Weight j's fifth bit is bit j of qh.
                    let qh = _mm512_set1_epi32(u32::from_le_bytes(*(block.add(2) as *const [u8; 4])) as i32);
                    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
                    let mut out = [_mm512_setzero_ps(); 2];
                    for (i, (o, q)) in out.iter_mut().zip(q).enumerate() {
                        let bit = _mm512_and_si512(_mm512_srlv_epi32(qh, _mm512_add_epi32(lanes, _mm512_set1_epi32(16 * i as i32))), _mm512_set1_epi32(1));
                        let v = _mm512_sub_epi32(_mm512_or_si512(q, _mm512_slli_epi32::<4>(bit)), _mm512_set1_epi32(16));
                        *o = _mm512_mul_ps(_mm512_cvtepi32_ps(v), d);
                    }
                    out
                }
            }
        }
        BlockFormat::Q8_0 => {
            let d = _mm512_set1_ps(f16_at(0));
            let q = block.add(2);
            [q8(q, d), q8(q.add(16), d)]
        }
        BlockFormat::Q4K => {
            let (sc, mn) = q4k_scale_min(s, std::slice::from_raw_parts(block.add(4), 12));
            let d1 = _mm512_set1_ps(f16_at(0) * sc as f32);
            let m1 = _mm512_set1_ps(f16_at(2) * mn as f32);
            let q = block.add(16 + 32 * (s / 2));
            let shift = _mm_cvtsi32_si128(4 * (s % 2) as i32);
            [0, 16].map(|l| {
                let v = _mm512_and_si512(_mm512_srl_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(q.add(l) as *const __m128i)), shift), _mm512_set1_epi32(0x0f));
                _mm512_sub_ps(_mm512_mul_ps(d1, _mm512_cvtepi32_ps(v)), m1)
            })
        }
        BlockFormat::Q6K => {
            let (half, quarter) = (s / 4, s % 4);
            let ql = block.add(64 * half + 32 * (quarter & 1));
            let qh = block.add(128 + 32 * half);
            let d = f16_at(208);
            let (lo_shift, hi_shift) = (_mm_cvtsi32_si128(4 * (quarter / 2) as i32), _mm_cvtsi32_si128(2 * quarter as i32));
            [0, 16].map(|l| {
                let low =
                    _mm512_and_si512(_mm512_srl_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(ql.add(l) as *const __m128i)), lo_shift), _mm512_set1_epi32(0x0f));
                let high =
                    _mm512_and_si512(_mm512_srl_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(qh.add(l) as *const __m128i)), hi_shift), _mm512_set1_epi32(3));
                let q = _mm512_sub_epi32(_mm512_or_si512(low, _mm512_slli_epi32::<4>(high)), _mm512_set1_epi32(32));
                let scale = *block.add(192 + 8 * half + 2 * quarter + l / 16) as i8;
                _mm512_mul_ps(_mm512_set1_ps(d * scale as f32), _mm512_cvtepi32_ps(q))
            })
        }
    }
}

/// Sixteen signed bytes at `p` as `q · d`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn q8(p: *const u8, d: __m512) -> __m512 {
    _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i))), d)
}

/// Input rows `b0 .. b0 + G` against one row of blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn block_group<const G: usize, const F: u8>(x: &[f32], row: &[u8], o: &mut [f32], b0: usize, k: usize) {
    let format = BlockFormat::from_id(F);
    let mut acc = [_mm512_setzero_ps(); G];
    let xp = x.as_ptr().add(b0 * k);
    let (bw, subs) = (format.block_weights(), format.block_weights() / BLOCK);
    for (bi, block) in row.chunks_exact(format.block_bytes()).enumerate() {
        for s in 0..subs {
            let w = unpack::<F>(block.as_ptr(), s);
            for (b, a) in acc.iter_mut().enumerate() {
                let xb = xp.add(b * k + bi * bw + s * BLOCK);
                let v = _mm512_fmadd_ps(w[0], _mm512_loadu_ps(xb), *a);
                *a = _mm512_fmadd_ps(w[1], _mm512_loadu_ps(xb.add(16)), v);
            }
        }
    }
    for (b, a) in acc.iter().enumerate() {
        o[b0 + b] = _mm512_reduce_add_ps(*a);
    }
}

/// The f16 at `p` (little-endian) as f32, by F16C's conversion (exact, as every f16 is an f32).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn f16_le(p: *const u8) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes(*(p as *const [u8; 2])) as i32)))
}
