//! AVX2 + FMA, written with intrinsics: one fused multiply-add per 8 weights and input row, with the
//! input rows in groups of up to 8 so that their accumulators stay in registers while a weight chunk (or
//! an unpacked block) is reused across them.
//!
//! Fusing the multiply into the add rounds once where the reference rounds twice, and the partial sums
//! are grouped differently, so this path agrees with the reference to rounding, not bit for bit: within
//! `1e-5 · Σ|x·w|` (the tests hold it there), far below what a sampled token's log-probability can show.

use super::generic::{by_format, q4k_scale_min, BlockFormat, Q8Rows, BLOCK};
use super::panels::{by_panel_format, CodeStore, Panels, BYTES, NIBBLES, NIBBLES_FIFTH_BIT, NIBBLES_LESS_8, OFFSETS, PANEL_ROWS, PLAIN, SUB_SCALES};
use super::GROUP;
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn sum_lanes(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

f32_row_kernels!(
    features: "avx2,fma,f16c",
    lanes: 8,
    regs: 8,
    zero: _mm256_setzero_ps,
    load: _mm256_loadu_ps,
    store: _mm256_storeu_ps,
    splat: _mm256_set1_ps,
    fma: _mm256_fmadd_ps,
    sum: sum_lanes
);

/// Sub-block `s` of a block as four registers of 8 weights, from its integers ([`unpack_i8`]) by the
/// reference's formula (`q · scale`, plus the offset where the format has one; each multiply and add
/// rounded on its own, as the loader does, so the values are the loader's).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack<const F: u8>(block: *const u8, s: usize) -> [__m256; 4] {
    let format = BlockFormat::from_id(F);
    let (q, [s0, s1], offset) = unpack_i8::<F>(block, s);
    let (lo, hi) = (_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
    let parts = [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)];
    let scales = [s0, s0, s1, s1];
    let mut w = [_mm256_setzero_ps(); 4];
    for ((w, part), scale) in w.iter_mut().zip(parts).zip(scales) {
        *w = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)), _mm256_set1_ps(scale));
        if format.has_offset() {
            *w = _mm256_add_ps(*w, _mm256_set1_ps(offset));
        }
    }
    w
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C; sizes as `super::rows_blocks_q8` checks them.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows_blocks_q8(format: BlockFormat, x: &Q8Rows, rows: &[u8], out_rows: &mut [f32]) {
    by_format!(format, rows_blocks_q8_of(x, rows, out_rows))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_blocks_q8_of<const F: u8>(x: &Q8Rows, rows: &[u8], out_rows: &mut [f32]) {
    let format = BlockFormat::from_id(F);
    let m = x.m;
    if m == 1 {
        for (o, row) in out_rows.iter_mut().zip(rows.chunks(format.row_bytes(x.k))) {
            *o = q8_one_row::<F>(x, row);
        }
        return;
    }
    for (o, row) in out_rows.chunks_mut(m).zip(rows.chunks(format.row_bytes(x.k))) {
        for b0 in (0..m).step_by(GROUP) {
            by_group_size!((m - b0).min(GROUP), q8_group::<_, F>(x, row, o, b0));
        }
    }
}

/// One quantised input row (a decoding step of one sequence) against one row of blocks, two sub-blocks an
/// iteration into two accumulators. [`q8_group`] with one row kept a single chain of dependent adds and
/// re-read the input's pointers from the stack: Q5_0 blocks ran at about 5 GB/s a thread, this at about
/// 7.5 (a 400 MB matrix, AVX2 EPYC), where the memory delivers 10-12.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_one_row<const F: u8>(x: &Q8Rows, row: &[u8]) -> f32 {
    let format = BlockFormat::from_id(F);
    let (bb, subs) = (format.block_bytes(), format.block_weights() / BLOCK);
    let n = row.len() / bb * subs;
    let ones = _mm256_set1_epi16(1);
    let unsigned = unsigned_weights(format);
    let (xq, xs, xsum, p) = (x.q.as_ptr(), x.scale.as_ptr(), x.scaled_sum_by_run.as_ptr(), row.as_ptr());
    // Sub-block `i` of the row into `a` (and its offset's product into `off`).
    let one = |i: usize, a: &mut __m256, off: &mut f32| {
        let (w, [s0, _], offset) = unpack_unsigned::<F>(p.add(i / subs * bb), i % subs);
        let abs_w = if unsigned { w } else { _mm256_sign_epi8(w, w) };
        let q = _mm256_loadu_si256(xq.add(i * BLOCK) as *const __m256i);
        let q = if unsigned { q } else { _mm256_sign_epi8(q, w) };
        let products = _mm256_maddubs_epi16(abs_w, q);
        let d = *xs.add(i);
        let (sums, scale) = if format == BlockFormat::Q6K {
            // Q6_K's two 8-bit scales (one per 16 weights) weigh the pairs' sums as integers, so that
            // one float scale is left.
            let block = p.add(i / subs * bb);
            (_mm256_madd_epi16(products, q6k_scales_i16(block, i % subs)), f16_le(block.add(208)) * d)
        } else {
            (_mm256_madd_epi16(products, ones), s0 * d)
        };
        *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(scale), *a);
        if unsigned {
            *off = offset.mul_add(*xsum.add(i), *off);
        }
    };
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let (mut o0, mut o1) = (0f32, 0f32);
    if subs > 1 {
        // A super-block's sub-blocks in one unrolled loop, so that what they share (its scales' bytes,
        // `d`, `dmin`) is read and converted once a block: Q4_K about 6.2 -> 10.4 GB/s a thread (one
        // weight row of 4,864 in L2 against one input row, AVX2 EPYC); Q6_K's scales as `madd` factors
        // 6.7 -> 11.0.
        for b in 0..n / subs {
            for s in (0..subs).step_by(2) {
                one(b * subs + s, &mut a0, &mut o0);
                one(b * subs + s + 1, &mut a1, &mut o1);
            }
        }
    } else {
        let mut i = 0;
        while i + 1 < n {
            one(i, &mut a0, &mut o0);
            one(i + 1, &mut a1, &mut o1);
            i += 2;
        }
        if i < n {
            one(i, &mut a0, &mut o0);
        }
    }
    sum_lanes(_mm256_add_ps(a0, a1)) + (o0 + o1)
}

/// Quantised input rows `b0 .. b0 + G` against one row of blocks, unpacking each sub-block once for all of
/// them. Each row's arithmetic is [`q8_one_row`]'s, operation for operation (even and odd sub-blocks into
/// two accumulators, Q6_K's scales as `madd` factors, the offsets' products in two sums), so a row's
/// product does not depend on how many rows share the call: decoding is batch-invariant (a sequence's
/// tokens and log-probs are the same alone and beside others).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_group<const G: usize, const F: u8>(x: &Q8Rows, row: &[u8], o: &mut [f32], b0: usize) {
    let format = BlockFormat::from_id(F);
    let (k, subs, bb) = (x.k, format.block_weights() / BLOCK, format.block_bytes());
    let ones = _mm256_set1_epi16(1);
    // Per row, the even and the odd sub-blocks' sums.
    let mut acc = [[_mm256_setzero_ps(); 2]; G];
    // The offsets' products (`offset · Σ x`), one lane per row, even and odd sub-blocks apart.
    let mut offsets = [_mm256_setzero_ps(); 2];
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let rows_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(G as i32), lanes);
    let unsigned = unsigned_weights(format);
    let xblocks = k / BLOCK;
    let (xq, xscale) = (x.q.as_ptr().add(b0 * k), x.scale.as_ptr().add(b0 * k / BLOCK));
    for xb in 0..row.len() / bb * subs {
        let (block, s, parity) = (row.as_ptr().add(xb / subs * bb), xb % subs, xb % 2);
        let (w, [s0, _], offset) = unpack_unsigned::<F>(block, s);
        // Q6_K weighs the pairs' sums by its two 8-bit scales as integers, leaving one float scale, `d`.
        let (factors, w_scale) = if format == BlockFormat::Q6K { (q6k_scales_i16(block, s), f16_le(block.add(208))) } else { (ones, s0) };
        // maddubs multiplies unsigned bytes by signed ones: signed weights lend their sign to x.
        let abs_w = if unsigned { w } else { _mm256_sign_epi8(w, w) };
        if unsigned {
            let sums = _mm256_maskload_ps(x.scaled_sum_by_run.as_ptr().add(xb * x.m + b0), rows_mask);
            offsets[parity] = _mm256_fmadd_ps(_mm256_set1_ps(offset), sums, offsets[parity]);
        }
        for (b, a) in acc.iter_mut().enumerate() {
            let at = b * xblocks + xb;
            let q = _mm256_loadu_si256(xq.add(at * BLOCK) as *const __m256i);
            let q = if unsigned { q } else { _mm256_sign_epi8(q, w) };
            let sums = _mm256_madd_epi16(_mm256_maddubs_epi16(abs_w, q), factors);
            a[parity] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(w_scale * *xscale.add(at)), a[parity]);
        }
    }
    let mut by_row = [[0f32; 8]; 2];
    _mm256_storeu_ps(by_row[0].as_mut_ptr(), offsets[0]);
    _mm256_storeu_ps(by_row[1].as_mut_ptr(), offsets[1]);
    for (b, [a0, a1]) in acc.iter().enumerate() {
        o[b0 + b] = sum_lanes(_mm256_add_ps(*a0, *a1)) + (by_row[0][b] + by_row[1][b]);
    }
}

/// Sub-block `s` as 32 integer weights in a register, with [`super::generic::unpack_sub_i8`]'s scales and
/// offset.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn unpack_i8<const F: u8>(block: *const u8, s: usize) -> (__m256i, [f32; 2], f32) {
    let (q, scales, offset) = unpack_unsigned::<F>(block, s);
    match BlockFormat::from_id(F) {
        BlockFormat::Q4_0 => (_mm256_sub_epi8(q, _mm256_set1_epi8(8)), scales, 0.0),
        BlockFormat::Q5_0 => (_mm256_sub_epi8(q, _mm256_set1_epi8(16)), scales, 0.0),
        _ => (q, scales, offset),
    }
}

/// Whether [`unpack_unsigned`] gives unsigned weights with an offset (all but Q8_0 and Q6_K, whose
/// integers are signed): `maddubs` takes them as they are, without lending their signs to the input.
pub(super) const fn unsigned_weights(format: BlockFormat) -> bool {
    matches!(format, BlockFormat::Q4_0 | BlockFormat::Q4_1 | BlockFormat::Q5_0 | BlockFormat::Q4K)
}

/// As [`unpack_i8`], with Q4_0's and Q5_0's integers unsigned (their nibbles, and the fifth bit) and the
/// offset `-8 · d` or `-16 · d` for the bias: the weights are `scale · q + offset` for every format. The
/// 8-bit kernels take these: two `vpsignb` fewer a sub-block (one weight row against one input row held in
/// L2, AVX2 EPYC, one thread: Q5_0 8.5 -> 9.6 GB/s, Q4_0 8.4 -> 9.7).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn unpack_unsigned<const F: u8>(block: *const u8, s: usize) -> (__m256i, [f32; 2], f32) {
    let format = BlockFormat::from_id(F);
    let f16_at = |at: usize| f16_le(block.add(at));
    let low4 = _mm256_set1_epi8(0x0f);
    // Sixteen bytes of nibbles at `p` as 32 bytes: the low nibbles, then the high ones (the bytes loaded
    // into both halves, the upper half shifted: one instruction fewer than shifting and inserting, though
    // no faster that a run could tell).
    let nibbles = |p: *const u8| {
        let qs = _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i));
        _mm256_and_si256(_mm256_srlv_epi32(qs, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), low4)
    };
    match format {
        BlockFormat::Q4_0 => {
            let d = f16_at(0);
            (nibbles(block.add(2)), [d, d], -8.0 * d)
        }
        BlockFormat::Q4_1 => {
            let d = f16_at(0);
            (nibbles(block.add(4)), [d, d], f16_at(2))
        }
        BlockFormat::Q5_0 => {
            let d = f16_at(0);
            // Bit j of qh to byte j: each byte of qh spread over eight bytes, then one bit tested in each.
            let qh = _mm256_set1_epi32(u32::from_le_bytes(*(block.add(2) as *const [u8; 4])) as i32);
            let spread = _mm256_shuffle_epi8(qh, _mm256_setr_epi64x(0, 0x0101_0101_0101_0101, 0x0202_0202_0202_0202, 0x0303_0303_0303_0303));
            let all_but_bit_j = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe_u64 as i64);
            let set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, all_but_bit_j), _mm256_set1_epi64x(-1));
            (_mm256_or_si256(nibbles(block.add(6)), _mm256_and_si256(set, _mm256_set1_epi8(0x10))), [d, d], -16.0 * d)
        }
        BlockFormat::Q8_0 => {
            let d = f16_at(0);
            (_mm256_loadu_si256(block.add(2) as *const __m256i), [d, d], 0.0)
        }
        BlockFormat::Q4K => {
            let (sc, mn) = q4k_scale_min(s, std::slice::from_raw_parts(block.add(4), 12));
            let q = _mm256_loadu_si256(block.add(16 + 32 * (s / 2)) as *const __m256i);
            let q = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(4 * (s % 2) as i32)), low4);
            let d1 = f16_at(0) * sc as f32;
            (q, [d1, d1], -(f16_at(2) * mn as f32))
        }
        BlockFormat::Q6K => {
            let (half, quarter) = (s / 4, s % 4);
            let ql = _mm256_loadu_si256(block.add(64 * half + 32 * (quarter & 1)) as *const __m256i);
            let qh = _mm256_loadu_si256(block.add(128 + 32 * half) as *const __m256i);
            let low = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (quarter / 2) as i32)), low4);
            let high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * quarter as i32)), _mm256_set1_epi8(3));
            let q = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16::<4>(high)), _mm256_set1_epi8(32));
            let d = f16_at(208);
            let scale = |i: usize| d * *block.add(192 + 8 * half + 2 * quarter + i) as i8 as f32;
            (q, [scale(0), scale(1)], 0.0)
        }
    }
}

/// Sub-block `s`'s two Q6_K scales as sixteen i16 lanes, the first for the pairs of weights 0..16 and
/// the second for 16..32 (`madd`'s factors).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_scales_i16(block: *const u8, s: usize) -> __m256i {
    let scales = block.add(192 + 8 * (s / 4) + 2 * (s % 4));
    _mm256_set_m128i(_mm_set1_epi16(*scales.add(1) as i8 as i16), _mm_set1_epi16(*scales as i8 as i16))
}

/// The f16 at `p` (little-endian) as f32, by F16C's conversion (exact, as every f16 is an f32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_le(p: *const u8) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes(*(p as *const [u8; 2])) as i32)))
}

/// The product of weight panels (`super::panels`, whose documentation gives the arithmetic) with
/// `maddubs`: half a panel (8 weight rows) a register, each four-byte group of the codes multiplied into an
/// input row's four bytes as `|code| · ±x` (at most 128 · 127, so a pair's `i16` sum never saturates)
/// and summed to `i32`, exact; then the reference's conversion, scale product and fused adds lane by
/// lane. A half panel's blocks stay in L1 across the input rows.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; sizes as `super::panels_q8` checks them.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn panels_q8(p: &Panels, first: usize, x: &Q8Rows, out_rows: &mut [f32]) {
    by_panel_format!(p, panels_of(p, first, x, out_rows))
}

/// Group `g` (inputs `4g .. 4g + 4`) of half a panel block, the 8 weight rows from `lanes`, as signed
/// codes: as the panels keep them, or widened from a nibble (less 8 for Q4_0; Q5_0's fifth bits spread
/// from the group's mask to bytes by a shuffle and a compare, and 16 taken off where they are clear).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half_panel_group<const STORE: u8>(p: &Panels, unit: usize, lanes: usize, g: usize) -> __m256i {
    let store = CodeStore::from_id(STORE);
    let cp = p.codes.as_ptr().add(unit * store.block_bytes() + lanes * 4);
    if store == CodeStore::Bytes {
        return _mm256_loadu_si256(cp.add(g * 4 * PANEL_ROWS) as *const __m256i);
    }
    let v = _mm256_loadu_si256(cp.add((g % 4) * 4 * PANEL_ROWS) as *const __m256i);
    let v = if g >= 4 { _mm256_srli_epi16::<4>(v) } else { v };
    let c = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
    match store {
        CodeStore::NibblesLess8 => _mm256_sub_epi8(c, _mm256_set1_epi8(8)),
        CodeStore::NibblesFifthBit => {
            // Byte `i` of the half is bit `i` of its 32 mask bits: mask byte `i / 8`, bit `i % 8`.
            let bits = (*p.minus_16.as_ptr().add(unit * 8 + g) >> (lanes * 4)) as u32;
            let by_byte = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
            let spread = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), by_byte);
            let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
            let clear = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
            _mm256_sub_epi8(c, _mm256_and_si256(clear, _mm256_set1_epi8(16)))
        }
        CodeStore::Bytes | CodeStore::Nibbles => c,
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panels_of<const KIND: u8, const STORE: u8>(p: &Panels, first: usize, x: &Q8Rows, out_rows: &mut [f32]) {
    let (sub_scales, offsets_too) = (KIND == SUB_SCALES, KIND == OFFSETS);
    let (m, blocks) = (x.m, p.blocks());
    let ones = _mm256_set1_epi16(1);
    let load_i32 = |at: *const i32| _mm256_loadu_si256(at as *const __m256i);
    for (g, out) in out_rows.chunks_exact_mut(PANEL_ROWS * m).enumerate() {
        for half in 0..2 {
            let lanes = half * 8;
            let mut acc = [_mm256_setzero_ps(); super::MAX_ROWS];
            for b in 0..blocks {
                let unit = (first + g) * blocks + b;
                // The half block's codes widened once for every input row, with their magnitudes.
                let codes: [__m256i; 8] = std::array::from_fn(|j| half_panel_group::<STORE>(p, unit, lanes, j));
                let magnitudes: [__m256i; 8] = std::array::from_fn(|j| _mm256_abs_epi8(codes[j]));
                let weight_scales = _mm256_loadu_ps(p.scales.as_ptr().add(unit * PANEL_ROWS + lanes));
                let offsets = if offsets_too { _mm256_loadu_ps(p.offsets.as_ptr().add(unit * PANEL_ROWS + lanes)) } else { _mm256_setzero_ps() };
                for (r, acc) in acc[..m].iter_mut().enumerate() {
                    let xp = x.q.as_ptr().add((r * blocks + b) * BLOCK) as *const i32;
                    // Group `j` (inputs 4j .. 4j + 4) of the 8 rows, summed to one i32 a row.
                    let group = |j: usize| {
                        let four = _mm256_set1_epi32(xp.add(j).read_unaligned());
                        _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes[j], _mm256_sign_epi8(four, codes[j])), ones)
                    };
                    let sum = if sub_scales {
                        let (mut lo, mut hi) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                        for j in 0..4 {
                            lo = _mm256_add_epi32(lo, group(j));
                            hi = _mm256_add_epi32(hi, group(4 + j));
                        }
                        let sc = p.sub_scales.as_ptr().add(unit * 2 * PANEL_ROWS + lanes);
                        _mm256_add_epi32(_mm256_mullo_epi32(lo, load_i32(sc)), _mm256_mullo_epi32(hi, load_i32(sc.add(PANEL_ROWS))))
                    } else {
                        let mut sum = _mm256_setzero_si256();
                        for j in 0..8 {
                            sum = _mm256_add_epi32(sum, group(j));
                        }
                        sum
                    };
                    let scale = _mm256_mul_ps(weight_scales, _mm256_set1_ps(*x.scale.get_unchecked(r * blocks + b)));
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), scale, *acc);
                    if offsets_too {
                        *acc = _mm256_fmadd_ps(offsets, _mm256_set1_ps(*x.scaled_sum_by_run.get_unchecked(b * m + r)), *acc);
                    }
                }
            }
            for (r, acc) in acc[..m].iter().enumerate() {
                let mut v = [0f32; 8];
                _mm256_storeu_ps(v.as_mut_ptr(), *acc);
                for (j, v) in v.into_iter().enumerate() {
                    out[(lanes + j) * m + r] = v;
                }
            }
        }
    }
}
