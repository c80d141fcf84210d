//! The reference: plain Rust, one product at a time, in the order the definition reads.

use super::{BLOCK_OUT, GROUP_IN};
use std::ops::Range;

/// `sums[r][o] = Σ_k (x[r][k] − 128) · w[o][k]` over the packed weights, for `o` in `columns`.
///
/// # Safety
/// `sums` points to `rows × out_dim` i32 this call may write in these columns; shapes were checked.
pub(super) unsafe fn signed_sums(x: &[u8], rows: usize, in_dim: usize, packed: &[i8], out_dim: usize, columns: Range<usize>, sums: *mut i32) {
    let groups = in_dim / GROUP_IN;
    for r in 0..rows {
        let xr = &x[r * in_dim..(r + 1) * in_dim];
        for block in columns.start / BLOCK_OUT..columns.end / BLOCK_OUT {
            let mut acc = [0i32; BLOCK_OUT];
            for g in 0..groups {
                let w = &packed[(block * groups + g) * BLOCK_OUT * GROUP_IN..][..BLOCK_OUT * GROUP_IN];
                let xq = &xr[g * GROUP_IN..(g + 1) * GROUP_IN];
                for (lane, a) in acc.iter_mut().enumerate() {
                    for j in 0..GROUP_IN {
                        *a += (xq[j] as i32 - 128) * w[lane * GROUP_IN + j] as i32;
                    }
                }
            }
            // SAFETY: row r, columns block·16 .. +16 lie inside the caller's buffer.
            unsafe { std::ptr::copy_nonoverlapping(acc.as_ptr(), sums.add(r * out_dim + block * BLOCK_OUT), BLOCK_OUT) };
        }
    }
}

/// `out[r] = Σ_k (x[k] − 128) · rows[r][k]`.
pub(super) fn dots(x: &[u8], rows: &[i8], out: &mut [i32]) {
    for (o, row) in out.iter_mut().zip(rows.chunks_exact(x.len())) {
        *o = x.iter().zip(row).map(|(&a, &b)| (a as i32 - 128) * b as i32).sum();
    }
}
