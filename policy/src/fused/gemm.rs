//! Row-major f32 products on candle's own gemm (the same kernels, threads and AVX-512 switch), for the fused
//! ops that work on raw slices.

use gemm::{gemm, Parallelism};

/// One strided product for the ops that work on sub-matrices in place: `dst (m×n) = lhs · rhs`, or `+=`
/// with `accumulate`; each operand given by its pointer and (column, row) strides in elements. Runs on the
/// calling thread (callers parallelise over independent products).
///
/// # Safety
/// Every element the strides reach must lie inside its allocation, and nothing else may write `dst`'s
/// elements (or read them, when it is also written) during the call.
#[allow(clippy::too_many_arguments)] // a strided gemm's shape, operands and strides are all needed here
pub unsafe fn matmul_strided(
    shape: (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    accumulate: bool,
    lhs: *const f32,
    lhs_strides: (usize, usize),
    rhs: *const f32,
    rhs_strides: (usize, usize),
) {
    // SAFETY: the caller guarantees the extents and exclusivity.
    unsafe { gemm_f32(shape, dst, dst_rs, accumulate, lhs, lhs_strides, rhs, rhs_strides, Parallelism::None) }
}

/// The one call into the gemm crate: row-major `dst`, operands by (column, row) strides.
///
/// # Safety
/// As [`matmul_strided`].
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_f32(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    accumulate: bool,
    lhs: *const f32,
    (lhs_cs, lhs_rs): (usize, usize),
    rhs: *const f32,
    (rhs_cs, rhs_rs): (usize, usize),
    parallelism: Parallelism,
) {
    // SAFETY: the caller guarantees the extents and exclusivity.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_rs as isize,
            accumulate,
            lhs,
            lhs_cs as isize,
            lhs_rs as isize,
            rhs,
            rhs_cs as isize,
            rhs_rs as isize,
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            parallelism,
        )
    }
}

fn parallelism() -> Parallelism {
    match candle_core::utils::get_num_threads() {
        0 | 1 => Parallelism::None,
        n => Parallelism::Rayon(n),
    }
}

/// How a row-major operand is read: as stored, or transposed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Read {
    /// The buffer is the operand as stored.
    AsIs,
    /// The operand is the transpose of the stored buffer.
    Transposed,
}

/// `out (m×n) = op(a) · op(b)` (or `+=` with `accumulate`), all buffers row-major and contiguous: `op(a)`
/// is `(m×k)` (stored `(m×k)` as is, `(k×m)` transposed), `op(b)` is `(k×n)` (stored `(k×n)` or `(n×k)`).
#[allow(clippy::too_many_arguments)] // a gemm's shape, operands and modes are all needed here
pub fn matmul(a: &[f32], ra: Read, b: &[f32], rb: Read, out: &mut [f32], (m, n, k): (usize, usize, usize), accumulate: bool) {
    assert_eq!(a.len(), m * k, "lhs does not hold {m}x{k}");
    assert_eq!(b.len(), k * n, "rhs does not hold {k}x{n}");
    assert_eq!(out.len(), m * n, "output is not {m}x{n}");
    // (column stride, row stride) of each operand as the product reads it.
    let (a_cs, a_rs) = if ra == Read::AsIs { (1, k) } else { (m, 1) };
    let (b_cs, b_rs) = if rb == Read::AsIs { (1, n) } else { (k, 1) };
    // SAFETY: the extents were checked above and the strides stay inside them.
    unsafe { gemm_f32((m, n, k), out.as_mut_ptr(), n, accumulate, a.as_ptr(), (a_cs, a_rs), b.as_ptr(), (b_cs, b_rs), parallelism()) }
}

/// `out (m×n) = a (m×k) · bᵀ` where `b` is `(n×k)`.
pub fn matmul_a_bt(a: &[f32], b: &[f32], out: &mut [f32], m: usize, n: usize, k: usize) {
    matmul(a, Read::AsIs, b, Read::Transposed, out, (m, n, k), false)
}

/// `out (m×n) = a (m×k) · b (k×n)`.
pub fn matmul_a_b(a: &[f32], b: &[f32], out: &mut [f32], m: usize, n: usize, k: usize) {
    matmul(a, Read::AsIs, b, Read::AsIs, out, (m, n, k), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element of the `m × n` product `out` is `want(i, j)`, to 1e-5.
    fn assert_product(out: &[f32], (m, n): (usize, usize), want: impl Fn(usize, usize) -> f32) {
        for i in 0..m {
            for j in 0..n {
                assert!((out[i * n + j] - want(i, j)).abs() < 1e-5, "({i}, {j}): {} against {}", out[i * n + j], want(i, j));
            }
        }
    }

    #[test]
    fn both_products_match_a_naive_loop() {
        let (m, n, k) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut out = vec![0.0; m * n];
        matmul_a_bt(&a, &b, &mut out, m, n, k);
        assert_product(&out, (m, n), |i, j| (0..k).map(|p| a[i * k + p] * b[j * k + p]).sum());
        // b read as (k×n): element (p, j) is b[p * n + j].
        let b2: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.23).sin()).collect();
        matmul_a_b(&a, &b2, &mut out, m, n, k);
        assert_product(&out, (m, n), |i, j| (0..k).map(|p| a[i * k + p] * b2[p * n + j]).sum());
        // aᵀ · b with a stored (k×m), accumulated onto what is there.
        let at: Vec<f32> = (0..k * m).map(|i| (i as f32 * 0.05).cos()).collect();
        let before = out.clone();
        matmul(&at, Read::Transposed, &b2, Read::AsIs, &mut out, (m, n, k), true);
        assert_product(&out, (m, n), |i, j| before[i * n + j] + (0..k).map(|p| at[p * m + i] * b2[p * n + j]).sum::<f32>());
    }
}
