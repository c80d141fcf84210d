//! Row-major f32 products on candle's own gemm (the same kernels, threads and AVX-512 switch), for the fused
//! ops that work on raw slices.

use gemm::{gemm, Parallelism};

fn parallelism() -> Parallelism {
    match candle_core::utils::get_num_threads() {
        0 | 1 => Parallelism::None,
        n => Parallelism::Rayon(n),
    }
}

/// `out (m×n) = a (m×k) · bᵀ` where `b` is `(n×k)`, all row-major and contiguous.
pub fn matmul_a_bt(a: &[f32], b: &[f32], out: &mut [f32], m: usize, n: usize, k: usize) {
    assert_eq!(a.len(), m * k, "lhs is not {m}x{k}");
    assert_eq!(b.len(), n * k, "rhs is not {n}x{k}");
    assert_eq!(out.len(), m * n, "output is not {m}x{n}");
    // SAFETY: the three extents were checked above; column j of bᵀ is row j of b (stride k between columns).
    unsafe {
        gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism(),
        )
    }
}

/// `out (m×n) = a (m×k) · b (k×n)`, all row-major and contiguous.
pub fn matmul_a_b(a: &[f32], b: &[f32], out: &mut [f32], m: usize, n: usize, k: usize) {
    assert_eq!(a.len(), m * k, "lhs is not {m}x{k}");
    assert_eq!(b.len(), k * n, "rhs is not {k}x{n}");
    assert_eq!(out.len(), m * n, "output is not {m}x{n}");
    // SAFETY: the three extents were checked above.
    unsafe {
        gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_products_match_a_naive_loop() {
        let (m, n, k) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut out = vec![0.0; m * n];
        matmul_a_bt(&a, &b, &mut out, m, n, k);
        for i in 0..m {
            for j in 0..n {
                let want: f32 = (0..k).map(|p| a[i * k + p] * b[j * k + p]).sum();
                assert!((out[i * n + j] - want).abs() < 1e-5);
            }
        }
        // b read as (k×n): element (p, j) is b[p * n + j].
        let b2: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.23).sin()).collect();
        matmul_a_b(&a, &b2, &mut out, m, n, k);
        for i in 0..m {
            for j in 0..n {
                let want: f32 = (0..k).map(|p| a[i * k + p] * b2[p * n + j]).sum();
                assert!((out[i * n + j] - want).abs() < 1e-5);
            }
        }
    }
}
