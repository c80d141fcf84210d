//! NEON (aarch64): `smull` multiplies eight signed bytes into i16 (|q · w| ≤ 127 · 127, exact) and
//! `sadalp` adds neighbouring i16 pairs into i32 accumulators. Codes become `q = c − 128` by flipping
//! their top bit.
//!
//! A 16-byte vector of the packed weights holds 4 outputs × 4 inputs; its low half (outputs 0-1) and high
//! half (outputs 2-3) accumulate separately, two i32 lanes per output, and `addp` joins them at the end.

use super::{BLOCK_OUT, GROUP_IN};
use std::arch::aarch64::*;
use std::ops::Range;

/// Same contract as the reference (`generic::signed_sums`).
///
/// # Safety
/// `sums` as the reference requires (NEON is part of every aarch64 CPU).
#[target_feature(enable = "neon")]
pub(super) unsafe fn signed_sums(x: &[u8], rows: usize, in_dim: usize, packed: &[i8], out_dim: usize, columns: Range<usize>, sums: *mut i32) {
    debug_assert!(x.len() >= rows * in_dim && packed.len() == in_dim * out_dim);
    let block_bytes = in_dim * BLOCK_OUT;
    let flip = vdupq_n_u8(0x80);
    for block in columns.start / BLOCK_OUT..columns.end / BLOCK_OUT {
        let w = packed.as_ptr().add(block * block_bytes);
        for r in 0..rows {
            let xr = x.as_ptr().add(r * in_dim);
            // Per quarter j of the block (outputs 4j..4j+4): low and high halves.
            let mut lo = [vdupq_n_s32(0); 4];
            let mut hi = [vdupq_n_s32(0); 4];
            for g in 0..in_dim / GROUP_IN {
                let c = vreinterpretq_u8_u32(vdupq_n_u32((xr.add(g * GROUP_IN) as *const u32).read_unaligned()));
                let q = vreinterpretq_s8_u8(veorq_u8(c, flip));
                for j in 0..4 {
                    let wv = vld1q_s8(w.add(g * 64 + j * 16));
                    lo[j] = vpadalq_s16(lo[j], vmull_s8(vget_low_s8(wv), vget_low_s8(q)));
                    hi[j] = vpadalq_s16(hi[j], vmull_high_s8(wv, q));
                }
            }
            for j in 0..4 {
                vst1q_s32(sums.add(r * out_dim + block * BLOCK_OUT + 4 * j), vpaddq_s32(lo[j], hi[j]));
            }
        }
    }
}

/// One dot product per row: `Σ (x − 128) · row`; the row width is a multiple of 16.
///
/// # Safety
/// None beyond the shapes (checked by the caller).
#[target_feature(enable = "neon")]
pub(super) unsafe fn dots(x: &[u8], rows: &[i8], out: &mut [i32]) {
    let dim = x.len();
    debug_assert!(dim.is_multiple_of(16) && rows.len() == out.len() * dim);
    let flip = vdupq_n_u8(0x80);
    for (r, o) in out.iter_mut().enumerate() {
        let row = rows.as_ptr().add(r * dim);
        let mut acc = vdupq_n_s32(0);
        for i in (0..dim).step_by(16) {
            let q = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(x.as_ptr().add(i)), flip));
            let w = vld1q_s8(row.add(i));
            acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(q)));
            acc = vpadalq_s16(acc, vmull_high_s8(w, q));
        }
        *o = vaddvq_s32(acc);
    }
}
