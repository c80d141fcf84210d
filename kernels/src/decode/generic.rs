//! The reference: the loops every path runs, written so that a compiler vectorises them (independent
//! partial sums in arrays, added in a fixed order at the end). `#[inline(always)]`, so that the
//! `#[target_feature]` instances in `avx2.rs` and `avx512.rs` compile them for their own registers.

use crate::half::f16_le_to_f32;

/// Weights per block in both formats.
pub const BLOCK: usize = 32;

/// The GGUF block formats the decode kernels read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockFormat {
    /// `d: f16, m: f16, 16 bytes of nibbles`; weight `j` is `nibble_j · d + m`, low nibbles first.
    Q4_1,
    /// `d: f16, 32 × i8`; weight `j` is `q_j · d`.
    Q8_0,
}

impl BlockFormat {
    /// Bytes per block of 32 weights.
    pub fn block_bytes(self) -> usize {
        match self {
            BlockFormat::Q4_1 => 20,
            BlockFormat::Q8_0 => 34,
        }
    }
}

/// The 32 weights of one block.
#[inline(always)]
pub fn unpack_block(format: BlockFormat, block: &[u8], w: &mut [f32; BLOCK]) {
    let d = f16_le_to_f32(&block[0..2]);
    match format {
        BlockFormat::Q4_1 => {
            let m = f16_le_to_f32(&block[2..4]);
            let qs = &block[4..20];
            for j in 0..BLOCK / 2 {
                w[j] = (qs[j] & 0x0F) as f32 * d + m;
                w[j + BLOCK / 2] = (qs[j] >> 4) as f32 * d + m;
            }
        }
        BlockFormat::Q8_0 => {
            for (j, &q) in block[2..34].iter().enumerate() {
                w[j] = q as i8 as f32 * d;
            }
        }
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

/// See [`super::rows_blocks`]. Each block is unpacked once and multiplied into every input row's 32
/// partial sums.
#[inline(always)]
pub(super) fn rows_blocks(format: BlockFormat, x: &[f32], rows: &[u8], out_rows: &mut [f32], m: usize, k: usize) {
    let row_bytes = k / BLOCK * format.block_bytes();
    let mut w = [0f32; BLOCK];
    let mut acc = [[0f32; BLOCK]; super::MAX_ROWS];
    for (o, row) in out_rows.chunks_mut(m).zip(rows.chunks(row_bytes)) {
        acc[..m].iter_mut().for_each(|a| *a = [0.0; BLOCK]);
        for (bi, block) in row.chunks_exact(format.block_bytes()).enumerate() {
            unpack_block(format, block, &mut w);
            for (a, xr) in acc[..m].iter_mut().zip(x.chunks_exact(k)) {
                let xb: &[f32; BLOCK] = xr[bi * BLOCK..(bi + 1) * BLOCK].try_into().expect("a whole block");
                for j in 0..BLOCK {
                    a[j] += w[j] * xb[j];
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
