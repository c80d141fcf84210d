//! f32 reductions written so the compiler vectorises them.
//!
//! Rust does not reorder floating-point sums (that would change the result), so `iter().sum()` over
//! f32 runs one add after another. Sixteen independent partial results, combined at the end, let a
//! loop use whole vector registers; the order of additions is fixed, so results stay deterministic.
//! The functions are `#[inline(always)]` so that a caller compiled for AVX-512 (see
//! [`crate::int8_bert`]) gets them in AVX-512 too.

const LANES: usize = 16;

/// `Σ a[i] · b[i]`.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    combine(acc) + tail
}

/// `Σ a[i]`.
#[inline(always)]
pub fn sum(a: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let c = a.chunks_exact(LANES);
    let tail: f32 = c.remainder().iter().sum();
    for x in c {
        for i in 0..LANES {
            acc[i] += x[i];
        }
    }
    combine(acc) + tail
}

/// `Σ (a[i] - m)²`.
#[inline(always)]
pub fn squared_deviation(a: &[f32], m: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let c = a.chunks_exact(LANES);
    let tail: f32 = c.remainder().iter().map(|x| (x - m) * (x - m)).sum();
    for x in c {
        for i in 0..LANES {
            acc[i] += (x[i] - m) * (x[i] - m);
        }
    }
    combine(acc) + tail
}

#[inline(always)]
fn combine(acc: [f32; LANES]) -> f32 {
    let mut half = [0f32; LANES / 2];
    for i in 0..LANES / 2 {
        half[i] = acc[i] + acc[i + LANES / 2];
    }
    half.iter().sum()
}

/// Scale a vector to unit length (a zero vector stays zero).
pub fn normalise(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x /= norm;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_agree_with_plain_loops() {
        let a: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..37).map(|i| (i as f32 * 0.11).cos()).collect();
        let close = |x: f32, y: f32| (x - y).abs() < 1e-5 * (1.0 + y.abs());
        assert!(close(dot(&a, &b), a.iter().zip(&b).map(|(x, y)| x * y).sum()));
        assert!(close(sum(&a), a.iter().sum()));
        assert!(close(squared_deviation(&a, 0.2), a.iter().map(|x| (x - 0.2) * (x - 0.2)).sum()));
    }
}
