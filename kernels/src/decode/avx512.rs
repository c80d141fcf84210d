//! The reference loops compiled for 512-bit registers, dispatched per task: a closure does not inherit
//! its caller's target features, so the instance must be a function of its own. Same operations in the
//! same order as the reference, so the same bits.

use super::generic::{self, BlockFormat};

/// # Safety
/// The CPU must have AVX-512 F/BW/VL/DQ, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
pub(super) unsafe fn rows_f32(x: &[f32], w_rows: &[f32], out_rows: &mut [f32], m: usize, k: usize) {
    generic::rows_f32(x, w_rows, out_rows, m, k)
}

/// # Safety
/// As [`rows_f32`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
pub(super) unsafe fn rows_blocks(format: BlockFormat, x: &[f32], rows: &[u8], out_rows: &mut [f32], m: usize, k: usize) {
    generic::rows_blocks(format, x, rows, out_rows, m, k)
}
