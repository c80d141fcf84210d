//! AVX-512, written with intrinsics as `avx2.rs` is, on 16-lane registers: one fused multiply-add per 16
//! weights and input row, the input rows in groups of up to 8 whose accumulators stay in registers while
//! a weight chunk (or an unpacked block) is reused across them.
//!
//! Why not the reference loops compiled for 512-bit registers (what this file was): the compiler kept
//! the block kernel's 32 partial sums per row in memory, and sampling ran at 0.58x the AVX2 path on the
//! same AVX-512 machine (96 against 167 tokens/s, 8 rows of SmolLM2-135M). Like the AVX2 path, this one
//! agrees with the reference to rounding (the multiply fused into the add, the sums grouped otherwise):
//! within `1e-5 · Σ|x·w|`.

use super::generic::{by_format, BlockFormat, BLOCK};
use super::GROUP;
use std::arch::x86_64::*;

// The CPU must have AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C.
f32_row_kernels!(
    features: "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    lanes: 16,
    regs: 4,
    zero: _mm512_setzero_ps,
    load: _mm512_loadu_ps,
    store: _mm512_storeu_ps,
    splat: _mm512_set1_ps,
    fma: _mm512_fmadd_ps,
    sum: _mm512_reduce_add_ps
);

/// Sub-block `s` of a block as two registers of 16 weights, from its integers (the AVX2 path's
/// `unpack_i8`: every AVX-512 CPU has AVX2) by the reference's formula (`q · scale`, plus the offset where
/// the format has one; each multiply and add rounded on its own, so the values are the loader's).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn unpack<const F: u8>(block: *const u8, s: usize) -> [__m512; 2] {
    let format = BlockFormat::from_id(F);
    let (q, scales, offset) = super::avx2::unpack_i8::<F>(block, s);
    let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
    let mut w = [_mm512_setzero_ps(); 2];
    for ((w, half), scale) in w.iter_mut().zip(halves).zip(scales) {
        *w = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(half)), _mm512_set1_ps(scale));
        if format.has_offset() {
            *w = _mm512_add_ps(*w, _mm512_set1_ps(offset));
        }
    }
    w
}
