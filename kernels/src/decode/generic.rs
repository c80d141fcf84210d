//! The reference: the loops every path runs, written so that a compiler vectorises them (independent
//! partial sums in arrays, added in a fixed order at the end). `#[inline(always)]`, so that the
//! `#[target_feature]` instances in `avx2.rs` and `avx512.rs` compile them for their own registers.
//!
//! Every format is read as sub-blocks of 32 weights (a K-quant super-block of 256 holds 8), each
//! unpacked by the formula, and in the order of operations, of candle's GGUF dequantisation (the loader's
//! f32 copy), so that the weights are the loader's bit for bit.

use crate::half::f16_le_to_f32;

/// `by_format!(format, f(args))` calls `f::<{format as u8}>(args)`: one instance of `f` per format.
macro_rules! by_format {
    ($format:expr, $f:ident ($($arg:expr),* $(,)?)) => {
        match $format {
            BlockFormat::Q4_0 => $f::<0>($($arg),*),
            BlockFormat::Q4_1 => $f::<1>($($arg),*),
            BlockFormat::Q5_0 => $f::<2>($($arg),*),
            BlockFormat::Q8_0 => $f::<3>($($arg),*),
            BlockFormat::Q4K => $f::<4>($($arg),*),
            BlockFormat::Q6K => $f::<5>($($arg),*),
        }
    };
}
// The intrinsics paths' files name it by path; the aarch64 build has none of them.
#[cfg(target_arch = "x86_64")]
pub(super) use by_format;

/// Weights per sub-block: the unit every kernel unpacks and multiplies.
pub const BLOCK: usize = 32;

/// The GGUF block formats the decode kernels read: what SmolLM2-135M (Q4_1, Q8_0) and
/// Qwen2.5-Coder-0.5B Q4_K_M (Q5_0, Q8_0, Q4_K, Q6_K) are made of, and Q4_0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum BlockFormat {
    /// `d: f16, 16 bytes of nibbles`; weight `j` is `(nibble_j - 8) · d`, low nibbles first.
    Q4_0,
    /// `d: f16, m: f16, 16 bytes of nibbles`; weight `j` is `nibble_j · d + m`, low nibbles first.
    Q4_1,
    /// `d: f16, qh: u32, 16 bytes of nibbles`; weight `j` is `((nibble_j | bit_j(qh) << 4) - 16) · d`.
    Q5_0,
    /// `d: f16, 32 × i8`; weight `j` is `q_j · d`.
    Q8_0,
    /// A super-block of 256: `d: f16, dmin: f16`, twelve bytes packing a 6-bit scale and min for each of
    /// 8 sub-blocks, 128 bytes of nibbles; weight is `(d · scale) · nibble - dmin · min`.
    Q4K,
    /// A super-block of 256: 128 bytes of low nibbles, 64 of 2-bit highs, 16 `i8` scales (one per 16
    /// weights), `d: f16`; weight is `(d · scale) · (q - 32)` with `q` six bits.
    Q6K,
}

impl BlockFormat {
    /// Every format, in the order of their ids.
    pub const ALL: [BlockFormat; 6] = [BlockFormat::Q4_0, BlockFormat::Q4_1, BlockFormat::Q5_0, BlockFormat::Q8_0, BlockFormat::Q4K, BlockFormat::Q6K];

    /// The format whose id ([`BlockFormat`] `as u8`) is `id`: the kernels take the format as a const
    /// parameter, so that each one's unpacking is compiled into its own loop (a match on the format
    /// inside the loop kept the unpacking out of line, at a third of the speed).
    pub(super) const fn from_id(id: u8) -> BlockFormat {
        match id {
            0 => BlockFormat::Q4_0,
            1 => BlockFormat::Q4_1,
            2 => BlockFormat::Q5_0,
            3 => BlockFormat::Q8_0,
            4 => BlockFormat::Q4K,
            5 => BlockFormat::Q6K,
            _ => panic!("no block format has this id"),
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            BlockFormat::Q4_0 => 18,
            BlockFormat::Q4_1 => 20,
            BlockFormat::Q5_0 => 22,
            BlockFormat::Q8_0 => 34,
            BlockFormat::Q4K => 144,
            BlockFormat::Q6K => 210,
        }
    }

    /// Weights per block (a whole number of [`BLOCK`] sub-blocks).
    pub fn block_weights(self) -> usize {
        match self {
            BlockFormat::Q4K | BlockFormat::Q6K => 256,
            _ => BLOCK,
        }
    }

    /// Whether its weights are `scale · q + offset` (unsigned `q`) rather than `scale · q`.
    pub fn has_offset(self) -> bool {
        matches!(self, BlockFormat::Q4_1 | BlockFormat::Q4K)
    }

    /// Bytes of a row of `k` weights (`k` a multiple of [`BlockFormat::block_weights`]).
    pub fn row_bytes(self, k: usize) -> usize {
        k / self.block_weights() * self.block_bytes()
    }
}

/// The scale and min of sub-block `j` of a Q4_K super-block, from its twelve packed bytes (6 bits each).
#[inline(always)]
pub(super) fn q4k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// Sub-block `s` (weights `32·s .. 32·s + 32`) of `block`: its integers ([`unpack_sub_i8`]) as
/// `q · scale`, plus the offset where the format has one (the loader's values: `d · q - m` and `q · d +
/// (-m)` round alike).
#[inline(always)]
pub fn unpack_sub(format: BlockFormat, block: &[u8], s: usize, w: &mut [f32; BLOCK]) {
    let (q, scales, offset) = unpack_sub_i8(format, block, s);
    for (j, (wj, &qj)) in w.iter_mut().zip(&q).enumerate() {
        *wj = qj as f32 * scales[j / (BLOCK / 2)];
        if format.has_offset() {
            *wj += offset;
        }
    }
}

/// Every weight of one block (`w.len()` is [`BlockFormat::block_weights`]).
pub fn unpack_block(format: BlockFormat, block: &[u8], w: &mut [f32]) {
    assert_eq!(w.len(), format.block_weights(), "{format:?}: a block holds {} weights", format.block_weights());
    for (s, sub) in w.chunks_exact_mut(BLOCK).enumerate() {
        unpack_sub(format, block, s, sub.try_into().expect("a whole sub-block"));
    }
}

/// `Σ a·b` with 64 partial sums (four 16-lane registers' worth: independent chains, so the adds
/// pipeline), added in a fixed order.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 64];
    let (ca, cb) = (a.chunks_exact(64), b.chunks_exact(64));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..64 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = 0f32;
    for v in acc {
        s += v;
    }
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// See [`super::rows_f32`].
#[inline(always)]
pub(super) fn rows_f32(x: &[f32], w_rows: &[f32], out_rows: &mut [f32], m: usize, k: usize) {
    for (o, wr) in out_rows.chunks_mut(m).zip(w_rows.chunks(k)) {
        for (ob, xr) in o.iter_mut().zip(x.chunks(k)) {
            *ob = dot(wr, xr);
        }
    }
}

/// See [`super::add_weighted_rows`]: per output row, key after key, a multiply then an add per lane.
#[inline(always)]
pub(super) fn add_weighted_rows(out: &mut [f32], p: &[f32], rows: usize, v: &[f32], seen: &[usize]) {
    let hd = out.len() / rows;
    for ((r, o), &seen) in out.chunks_exact_mut(hd).enumerate().zip(seen) {
        for (j, vj) in v.chunks_exact(hd).take(seen).enumerate() {
            let w = p[j * rows + r];
            o.iter_mut().zip(vj).for_each(|(o, v)| *o += w * v);
        }
    }
}

/// See [`super::rows_blocks`]. Each sub-block is unpacked once and multiplied into every input row's 32
/// partial sums.
#[inline(always)]
pub(super) fn rows_blocks(format: BlockFormat, x: &[f32], rows: &[u8], out_rows: &mut [f32], m: usize, k: usize) {
    by_format!(format, rows_blocks_of(x, rows, out_rows, m, k))
}

#[inline(always)]
fn rows_blocks_of<const F: u8>(x: &[f32], rows: &[u8], out_rows: &mut [f32], m: usize, k: usize) {
    let format = BlockFormat::from_id(F);
    let (bw, subs) = (format.block_weights(), format.block_weights() / BLOCK);
    let mut w = [0f32; BLOCK];
    let mut acc = [[0f32; BLOCK]; super::MAX_ROWS];
    for (o, row) in out_rows.chunks_mut(m).zip(rows.chunks(format.row_bytes(k))) {
        acc[..m].iter_mut().for_each(|a| *a = [0.0; BLOCK]);
        for (bi, block) in row.chunks_exact(format.block_bytes()).enumerate() {
            for s in 0..subs {
                unpack_sub(format, block, s, &mut w);
                let at = bi * bw + s * BLOCK;
                for (a, xr) in acc[..m].iter_mut().zip(x.chunks_exact(k)) {
                    let xb: &[f32; BLOCK] = xr[at..at + BLOCK].try_into().expect("a whole sub-block");
                    for j in 0..BLOCK {
                        a[j] += w[j] * xb[j];
                    }
                }
            }
        }
        for (ob, a) in o.iter_mut().zip(&acc[..m]) {
            let mut s = 0f32;
            for v in a {
                s += v;
            }
            *ob = s;
        }
    }
}

/// Input rows quantised as a decoding step multiplies them with integer dot products: per run of 32
/// values, `x ≈ scale · q` with `q` in `-127..=127` (Q8_0's scale, as llama.cpp quantises its
/// activations), and `scale · Σ q` for the formats whose weights carry an offset.
#[derive(Debug, Clone, Default)]
pub struct Q8Rows {
    /// `m × k` quantised values.
    pub q: Vec<i8>,
    /// One scale per 32 values, `m × k / 32`.
    pub scale: Vec<f32>,
    /// `scale · Σ q` (the run's `Σ x` as quantised) by run, then row: `k / 32 × m`, so that a kernel reads
    /// the offsets' factor of every row of a run at once.
    pub scaled_sum_by_run: Vec<f32>,
    /// Rows.
    pub m: usize,
    /// Values per row (a multiple of 32).
    pub k: usize,
    /// `q + 128` as unsigned bytes, made once on the first ask (`Q8Rows::q_plus_128`).
    #[cfg(target_arch = "x86_64")]
    q_plus_128: std::sync::OnceLock<Vec<u8>>,
}

/// 1.5 · 2²³: adding and subtracting it rounds an f32 of magnitude below 2²² to the nearest integer, ties
/// to even (as llama.cpp's AVX2 quantiser rounds), in plain arithmetic that vectorises; `f32::round` is a
/// libm call per value on x86-64's baseline, a tenth of a decoding step's quantising.
const ROUNDING: f32 = 12_582_912.0;

impl Q8Rows {
    /// `x` (`m × k`, `k` a multiple of [`BLOCK`]) quantised per 32 values.
    pub fn quantize(x: &[f32], m: usize, k: usize) -> Q8Rows {
        assert!(k.is_multiple_of(BLOCK) && x.len() == m * k, "Q8Rows: {} values are not {m} rows of {k} (a multiple of {BLOCK})", x.len());
        let runs = k / BLOCK;
        let mut rows = Q8Rows {
            q: vec![0; m * k],
            scale: Vec::with_capacity(m * runs),
            scaled_sum_by_run: vec![0.0; m * runs],
            m,
            k,
            #[cfg(target_arch = "x86_64")]
            q_plus_128: Default::default(),
        };
        for (i, (xs, qs)) in x.chunks_exact(BLOCK).zip(rows.q.chunks_exact_mut(BLOCK)).enumerate() {
            let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            let mut sum = 0i32;
            for (q, v) in qs.iter_mut().zip(xs) {
                *q = ((v * id + ROUNDING) - ROUNDING) as i8;
                sum += *q as i32;
            }
            rows.scale.push(d);
            rows.scaled_sum_by_run[(i % runs) * m + i / runs] = d * sum as f32;
        }
        rows
    }

    /// The values plus 128, as unsigned bytes (the AVX-512 panels kernel's `vpdpbusd` operand), made once
    /// and shared by every task of every product of these rows.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn q_plus_128(&self) -> &[u8] {
        self.q_plus_128.get_or_init(|| self.q.iter().map(|&q| q as u8 ^ 0x80).collect())
    }
}

/// Sub-block `s` of `block` as integers: `(q, [scale of weights 0..16, of 16..32], offset)`, the weights
/// being `scale · q + offset`.
#[inline(always)]
pub(super) fn unpack_sub_i8(format: BlockFormat, block: &[u8], s: usize) -> ([i8; BLOCK], [f32; 2], f32) {
    let mut q = [0i8; BLOCK];
    let nibbles = |q: &mut [i8; BLOCK], qs: &[u8], minus: i8| {
        for j in 0..BLOCK / 2 {
            q[j] = (qs[j] & 0x0F) as i8 - minus;
            q[j + BLOCK / 2] = (qs[j] >> 4) as i8 - minus;
        }
    };
    match format {
        BlockFormat::Q4_0 => {
            let d = f16_le_to_f32(&block[0..2]);
            nibbles(&mut q, &block[2..18], 8);
            (q, [d, d], 0.0)
        }
        BlockFormat::Q4_1 => {
            let d = f16_le_to_f32(&block[0..2]);
            nibbles(&mut q, &block[4..20], 0);
            (q, [d, d], f16_le_to_f32(&block[2..4]))
        }
        BlockFormat::Q5_0 => {
            let d = f16_le_to_f32(&block[0..2]);
            let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            nibbles(&mut q, &block[6..22], 0);
            for (j, v) in q.iter_mut().enumerate() {
                *v = (*v | (((qh >> j) & 1) << 4) as i8) - 16;
            }
            (q, [d, d], 0.0)
        }
        BlockFormat::Q8_0 => {
            for (v, &b) in q.iter_mut().zip(&block[2..34]) {
                *v = b as i8;
            }
            let d = f16_le_to_f32(&block[0..2]);
            (q, [d, d], 0.0)
        }
        BlockFormat::Q4K => {
            let (d, dmin) = (f16_le_to_f32(&block[0..2]), f16_le_to_f32(&block[2..4]));
            let (sc, mn) = q4k_scale_min(s, &block[4..16]);
            let shift = 4 * (s % 2) as u32;
            for (v, &b) in q.iter_mut().zip(&block[16 + 32 * (s / 2)..][..BLOCK]) {
                *v = ((b >> shift) & 0x0F) as i8;
            }
            let d1 = d * sc as f32;
            (q, [d1, d1], -(dmin * mn as f32))
        }
        BlockFormat::Q6K => {
            let (half, quarter) = (s / 4, s % 4);
            let ql = &block[64 * half + 32 * (quarter & 1)..][..BLOCK];
            let qh = &block[128 + 32 * half..][..BLOCK];
            let (lo_shift, hi_shift) = (4 * (quarter / 2) as u32, 2 * quarter as u32);
            for l in 0..BLOCK {
                q[l] = (((ql[l] >> lo_shift) & 0x0F) | (((qh[l] >> hi_shift) & 3) << 4)) as i8 - 32;
            }
            let d = f16_le_to_f32(&block[208..210]);
            let scale = |i: usize| d * block[192 + 8 * half + 2 * quarter + i] as i8 as f32;
            (q, [scale(0), scale(1)], 0.0)
        }
    }
}

/// See [`super::rows_blocks_q8`]: per sub-block and row, two integer dot products (one per half, whose
/// scales may differ) scaled into a float sum.
#[inline(always)]
pub(super) fn rows_blocks_q8(format: BlockFormat, x: &Q8Rows, rows: &[u8], out_rows: &mut [f32]) {
    by_format!(format, rows_blocks_q8_of(x, rows, out_rows))
}

#[inline(always)]
fn rows_blocks_q8_of<const F: u8>(x: &Q8Rows, rows: &[u8], out_rows: &mut [f32]) {
    let format = BlockFormat::from_id(F);
    let (m, k, subs) = (x.m, x.k, format.block_weights() / BLOCK);
    let mut acc = [0f32; super::MAX_ROWS];
    for (o, row) in out_rows.chunks_mut(m).zip(rows.chunks(format.row_bytes(k))) {
        acc[..m].iter_mut().for_each(|a| *a = 0.0);
        for (bi, block) in row.chunks_exact(format.block_bytes()).enumerate() {
            for s in 0..subs {
                let (wq, [s0, s1], offset) = unpack_sub_i8(format, block, s);
                let xb = bi * subs + s;
                for (b, a) in acc[..m].iter_mut().enumerate() {
                    let at = b * k / BLOCK + xb;
                    let xq = &x.q[at * BLOCK..][..BLOCK];
                    let (mut lo, mut hi) = (0i32, 0i32);
                    for j in 0..BLOCK / 2 {
                        lo += wq[j] as i32 * xq[j] as i32;
                        hi += wq[j + BLOCK / 2] as i32 * xq[j + BLOCK / 2] as i32;
                    }
                    *a += x.scale[at] * (s0 * lo as f32 + s1 * hi as f32) + offset * x.scaled_sum_by_run[xb * m + b];
                }
            }
        }
        o.copy_from_slice(&acc[..m]);
    }
}
