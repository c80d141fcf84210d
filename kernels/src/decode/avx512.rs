//! AVX-512, written with intrinsics as `avx2.rs` is, on 16-lane registers: one fused multiply-add per 16
//! weights and input row, the input rows in groups of up to 8 whose accumulators stay in registers while
//! a weight chunk (or an unpacked block) is reused across them.
//!
//! Why not the reference loops compiled for 512-bit registers (what this file was): the compiler kept
//! the block kernel's 32 partial sums per row in memory, and sampling ran at 0.58x the AVX2 path on the
//! same AVX-512 machine (96 against 167 tokens/s, 8 rows of SmolLM2-135M). Like the AVX2 path, this one
//! agrees with the reference to rounding (the multiply fused into the add, the sums grouped otherwise):
//! within `1e-5 · Σ|x·w|`.
//!
//! With VNNI, the 8-bit products of two input rows or more are `vpdpbusd`s over pairs of sub-blocks (64
//! weights an instruction, up to 16 rows a pass over the weights), written to give the AVX2 kernel's bits:
//! see [`rows_blocks_q8`].

use super::avx2;
use super::generic::{by_format, BlockFormat, Q8Rows, BLOCK};
use super::panels::{by_panel_format, CodeStore, Panels, BYTES, NIBBLES, NIBBLES_FIFTH_BIT, NIBBLES_LESS_8, OFFSETS, PANEL_ROWS, PLAIN, SUB_SCALES};
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

/// Input rows one pass of [`q8_group`] takes: an accumulator register each, beside the weights, their
/// scales, the offsets' sums and the temporaries (of AVX-512's 32 registers); every run of the callers
/// ([`super::MAX_ROWS`]) in one pass over the weights.
const VNNI_GROUP: usize = 16;

/// The 8-bit products with VNNI, for two input rows or more: two sub-blocks of a weight row a step, one
/// `vpdpbusd` per input row for their 64 weights (AVX2 needs `maddubs`, `madd` and their sign fixes per
/// 32), the input rows in one group of up to 16 sharing each unpacked pair. A row alone (a decoding step
/// of one sequence) is AVX2's (`super::rows_blocks_q8` sends it there), whose one-row loop reads the
/// memory as fast as one thread can.
///
/// The arithmetic is the AVX2 path's, bit for bit: `vpdpbusd`'s lanes are `madd(maddubs(..))`'s (the sums
/// of four consecutive byte products, exact in both), a register's low eight lanes are AVX2's even
/// accumulator and its high eight the odd one, and the scales are the same products of the same floats.
/// So a row's product is the same bits alone (AVX2) and among others (VNNI): decoding stays
/// batch-invariant across the two kernels.
///
/// # Safety
/// The CPU must have this path's features and AVX-512 VNNI; sizes as `super::rows_blocks_q8` checks them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn rows_blocks_q8(format: BlockFormat, x: &Q8Rows, rows: &[u8], out_rows: &mut [f32]) {
    by_format!(format, rows_blocks_q8_of(x, rows, out_rows))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn rows_blocks_q8_of<const F: u8>(x: &Q8Rows, rows: &[u8], out_rows: &mut [f32]) {
    let format = BlockFormat::from_id(F);
    let m = x.m;
    for (o, row) in out_rows.chunks_mut(m).zip(rows.chunks(format.row_bytes(x.k))) {
        for b0 in (0..m).step_by(VNNI_GROUP) {
            by_group_size!(up_to_16: (m - b0).min(VNNI_GROUP), q8_group::<_, F>(x, row, o, b0));
        }
    }
}

/// Quantised input rows `b0 .. b0 + G` against one row of blocks, a pair of sub-blocks (`xb`, `xb + 1`)
/// a step in the low and high halves of a register.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_group<const G: usize, const F: u8>(x: &Q8Rows, row: &[u8], o: &mut [f32], b0: usize) {
    let format = BlockFormat::from_id(F);
    let (k, subs, bb) = (x.k, format.block_weights() / BLOCK, format.block_bytes());
    let n = row.len() / bb * subs;
    let (unsigned, q6k) = (avx2::unsigned_weights(format), format == BlockFormat::Q6K);
    let xblocks = k / BLOCK;
    let (xq, xscale, p) = (x.q.as_ptr().add(b0 * k), x.scale.as_ptr().add(b0 * xblocks), row.as_ptr());
    let zero = _mm512_setzero_si512();
    // Signed weights (Q8_0, Q6_K) meet the input as unsigned bytes, `q + 128`, and `128 · Σ w` comes off
    // (exact integers: `vpdpbusd` multiplies unsigned bytes by signed ones).
    let flip = _mm512_set1_epi8(-128);
    // A lane's float from the first value (low half) or the second (high half), or from one of four
    // (Q6_K's two scales per sub-block, a quarter of the register each).
    let halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let quarters = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    let rows_mask: __mmask16 = ((1u32 << G) - 1) as __mmask16;
    let mut acc = [_mm512_setzero_ps(); G];
    // The offsets' products (`offset · Σ x`), one lane per row, even and odd sub-blocks apart.
    let mut offsets = [_mm512_setzero_ps(); 2];
    let mut xb = 0;
    while xb < n {
        let two = xb + 1 < n;
        let (block, s) = (p.add(xb / subs * bb), xb % subs);
        let (wa, [sa, _], offset_a) = avx2::unpack_unsigned::<F>(block, s);
        let (wb, sb, offset_b) = if two {
            let (w, [sb, _], offset) = avx2::unpack_unsigned::<F>(p.add((xb + 1) / subs * bb), (xb + 1) % subs);
            (w, sb, offset)
        } else {
            (_mm256_setzero_si256(), 0.0, 0.0)
        };
        let w = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(wa), wb);
        // The weights' float scale per lane and, for Q6_K, its 8-bit scales (one per 16 weights: a pair's
        // four are consecutive bytes, the pair starting at an even sub-block of the same super-block).
        let (w_scale, q6k_scales) = if q6k {
            let four = (block.add(192 + 8 * (s / 4) + 2 * (s % 4)) as *const i32).read_unaligned();
            let four = _mm_cvtepi8_epi32(_mm_cvtsi32_si128(four));
            (_mm512_set1_ps(avx2::f16_le(block.add(208))), _mm512_permutexvar_epi32(quarters, _mm512_castsi128_si512(four)))
        } else {
            (_mm512_permutexvar_ps(halves, _mm512_castps128_ps512(_mm_setr_ps(sa, sb, 0.0, 0.0))), zero)
        };
        let minus_bias = if unsigned { zero } else { _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, flip, w)) };
        if unsigned {
            let sums = x.scaled_sum_by_run.as_ptr().add(xb * x.m + b0);
            offsets[0] = _mm512_fmadd_ps(_mm512_set1_ps(offset_a), _mm512_maskz_loadu_ps(rows_mask, sums), offsets[0]);
            if two {
                offsets[1] = _mm512_fmadd_ps(_mm512_set1_ps(offset_b), _mm512_maskz_loadu_ps(rows_mask, sums.add(x.m)), offsets[1]);
            }
        }
        let (bytes_mask, scales_mask): (__mmask64, __mmask16) = if two { (!0, 0b11) } else { (u32::MAX as __mmask64, 0b1) };
        for (b, a) in acc.iter_mut().enumerate() {
            let at = b * xblocks + xb;
            let q = _mm512_maskz_loadu_epi8(bytes_mask, xq.add(at * BLOCK));
            let sums = if unsigned { _mm512_dpbusd_epi32(zero, w, q) } else { _mm512_dpbusd_epi32(minus_bias, _mm512_xor_si512(q, flip), w) };
            let sums = if q6k { _mm512_mullo_epi32(sums, q6k_scales) } else { sums };
            let x_scale = _mm512_permutexvar_ps(halves, _mm512_maskz_loadu_ps(scales_mask, xscale.add(at)));
            let scale = _mm512_mul_ps(w_scale, x_scale);
            *a = if two { _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, *a) } else { _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, *a, 0x00ff) };
        }
        xb += 2;
    }
    let mut by_row = [[0f32; 16]; 2];
    _mm512_storeu_ps(by_row[0].as_mut_ptr(), offsets[0]);
    _mm512_storeu_ps(by_row[1].as_mut_ptr(), offsets[1]);
    for (b, a) in acc.iter().enumerate() {
        let (even, odd) = (_mm512_castps512_ps256(*a), _mm512_extractf32x8_ps::<1>(*a));
        o[b0 + b] = avx2::sum_lanes(_mm256_add_ps(even, odd)) + (by_row[0][b] + by_row[1][b]);
    }
}

/// Panel block `unit`'s eight code registers, signed (register `g`: the 16 weight rows' codes of inputs
/// `4g .. 4g + 4`), as the panels keep them (`STORE`) or widened from their nibbles: the low and high
/// nibbles of four registers, less 8 (Q4_0), or with Q5_0's fifth bits (16 taken off where a mask bit says
/// the bit is clear). Shared by the VNNI kernel and the AMX one, whose right-hand tiles they are.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn panel_codes<const STORE: u8>(p: &Panels, unit: usize) -> [__m512i; 8] {
    let store = CodeStore::from_id(STORE);
    let cp = p.codes.as_ptr().add(unit * store.block_bytes());
    if store == CodeStore::Bytes {
        return std::array::from_fn(|g| _mm512_loadu_si512(cp.add(g * 4 * PANEL_ROWS) as *const __m512i));
    }
    let low = _mm512_set1_epi8(0x0F);
    let mut codes = [_mm512_setzero_si512(); 8];
    for j in 0..4 {
        let v = _mm512_loadu_si512(cp.add(j * 4 * PANEL_ROWS) as *const __m512i);
        codes[j] = _mm512_and_si512(v, low);
        codes[j + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
    }
    match store {
        CodeStore::NibblesLess8 => {
            for c in &mut codes {
                *c = _mm512_sub_epi8(*c, _mm512_set1_epi8(8));
            }
        }
        CodeStore::NibblesFifthBit => {
            let masks = p.minus_16.as_ptr().add(unit * 8);
            for (g, c) in codes.iter_mut().enumerate() {
                *c = _mm512_mask_sub_epi8(*c, *masks.add(g), *c, _mm512_set1_epi8(16));
            }
        }
        CodeStore::Bytes | CodeStore::Nibbles => {}
    }
    codes
}

/// The product of weight panels (`super::panels`, whose documentation gives the arithmetic), with VNNI:
/// per block, eight `vpdpbusd`s of an input row's four bytes (plus 128, broadcast) against the panel's
/// eight code registers (widened once for all the input rows, [`panel_codes`]) sum the block exactly for
/// all 16 weight rows (less the codes' `128 · Σ`), then one conversion, scale product and fused add for
/// the 16, the input rows' accumulators in registers across the blocks.
///
/// # Safety
/// The CPU must have this path's features and AVX-512 VNNI; sizes as `super::panels_q8` checks them, and
/// `x_plus_128` is `x.q` plus 128.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn panels_q8(p: &Panels, first: usize, x: &Q8Rows, x_plus_128: &[u8], out_rows: &mut [f32]) {
    by_panel_format!(p, x.m, panels_of(p, first, x, x_plus_128, out_rows))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn panels_of<const M: usize, const KIND: u8, const STORE: u8>(p: &Panels, first: usize, x: &Q8Rows, x_plus_128: &[u8], out_rows: &mut [f32]) {
    let (sub_scales, offsets_too) = (KIND == SUB_SCALES, KIND == OFFSETS);
    let blocks = p.blocks();
    let zero = _mm512_setzero_si512();
    let load_i32 = |at: *const i32| _mm512_loadu_si512(at as *const __m512i);
    // 128 · Σ codes of 16 rows, from their 16-bit sums.
    let load_bias = |at: *const i16| _mm512_slli_epi32::<7>(_mm512_cvtepi16_epi32(_mm256_loadu_si256(at as *const __m256i)));
    for (g, out) in out_rows.chunks_exact_mut(PANEL_ROWS * M).enumerate() {
        let mut acc = [_mm512_setzero_ps(); M];
        for b in 0..blocks {
            let unit = (first + g) * blocks + b;
            let codes = panel_codes::<STORE>(p, unit);
            let (bias_lo, bias_hi, sc_lo, sc_hi) = if sub_scales {
                let (sums, sc) = (p.code_sums.as_ptr().add(unit * 2 * PANEL_ROWS), p.sub_scales.as_ptr().add(unit * 2 * PANEL_ROWS));
                (load_bias(sums), load_bias(sums.add(PANEL_ROWS)), load_i32(sc), load_i32(sc.add(PANEL_ROWS)))
            } else {
                (load_bias(p.code_sums.as_ptr().add(unit * PANEL_ROWS)), zero, zero, zero)
            };
            let scales = _mm512_loadu_ps(p.scales.as_ptr().add(unit * PANEL_ROWS));
            let offsets = if offsets_too { _mm512_loadu_ps(p.offsets.as_ptr().add(unit * PANEL_ROWS)) } else { _mm512_setzero_ps() };
            for (r, acc) in acc.iter_mut().enumerate() {
                let xp = x_plus_128.as_ptr().add((r * blocks + b) * BLOCK) as *const i32;
                let four = |j: usize| _mm512_set1_epi32(xp.add(j).read_unaligned());
                let sum = if sub_scales {
                    let (mut lo, mut hi) = (_mm512_sub_epi32(zero, bias_lo), _mm512_sub_epi32(zero, bias_hi));
                    for j in 0..4 {
                        lo = _mm512_dpbusd_epi32(lo, four(j), codes[j]);
                        hi = _mm512_dpbusd_epi32(hi, four(4 + j), codes[4 + j]);
                    }
                    _mm512_add_epi32(_mm512_mullo_epi32(lo, sc_lo), _mm512_mullo_epi32(hi, sc_hi))
                } else {
                    let mut sum = _mm512_sub_epi32(zero, bias_lo);
                    for (j, c) in codes.iter().enumerate() {
                        sum = _mm512_dpbusd_epi32(sum, four(j), *c);
                    }
                    sum
                };
                let scale = _mm512_mul_ps(scales, _mm512_set1_ps(*x.scale.get_unchecked(r * blocks + b)));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, *acc);
                if offsets_too {
                    *acc = _mm512_fmadd_ps(offsets, _mm512_set1_ps(*x.scaled_sum_by_run.get_unchecked(b * M + r)), *acc);
                }
            }
        }
        // Lane `j` of row `r`'s accumulator is weight row `j`'s output for it: `out[j][r]`.
        let mut lanes = [[0f32; PANEL_ROWS]; M];
        for (lanes, acc) in lanes.iter_mut().zip(&acc) {
            _mm512_storeu_ps(lanes.as_mut_ptr(), *acc);
        }
        for (j, out) in out.chunks_exact_mut(M).enumerate() {
            for (o, lanes) in out.iter_mut().zip(&lanes) {
                *o = lanes[j];
            }
        }
    }
}
