//! Rounding f32 rows to the operands the int8 products take: weights per output channel to ±the matrix's
//! [`WeightReach`], activations per row to codes `q + 128` with `q ∈ [-127, 127]`. The one home of these
//! rules for every caller (the MiniLM encoder and section scan in `agentrt-search`, the learner's frozen
//! products in `agentrt-policy`), so a weight or a row rounds the same way wherever it is multiplied.
//!
//! A row holding a NaN or an infinity is refused (`None`, for the caller to name in its error): a NaN
//! rounded to a code would give a plausible-looking, wrong product.

use super::WeightReach;

/// Independent maxima a pass keeps, so the loop fills vector registers (the order of comparisons is
/// fixed, so the result is too).
const LANES: usize = 16;

/// `max |a[i]|`: 0 for an empty slice, NaN if any value is NaN (`f32::max` would drop it), so callers can
/// refuse it. `#[inline(always)]` so that a caller compiled for a wider instruction set gets it in that set.
#[inline(always)]
pub fn max_abs(a: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let c = a.chunks_exact(LANES);
    let mut m = c.remainder().iter().fold(0f32, |m, x| if x.abs() > m || x.is_nan() { x.abs() } else { m });
    for x in c {
        for i in 0..LANES {
            acc[i] = if x[i].abs() > acc[i] || x[i].is_nan() { x[i].abs() } else { acc[i] };
        }
    }
    for v in acc {
        m = if v > m || v.is_nan() { v } else { m };
    }
    m
}

/// Rounds one row of activations to codes `q + 128` with one symmetric scale (`v ≈ scale · q`) and
/// returns the scale, or `None` if the row holds a NaN or an infinity. A row too small for the inverse
/// scale to be finite (all zeros, or below ~1e-30) rounds to zeros with scale 1.
///
/// # Panics
/// If the lengths differ.
#[inline(always)]
#[must_use]
pub fn activation_codes(row: &[f32], codes: &mut [u8]) -> Option<f32> {
    round_row(row, codes, |q| (q + 128) as u8)
}

/// As [`activation_codes`], with the signed values `q` themselves (a stored vector the scan multiplies).
#[inline(always)]
#[must_use]
pub fn activation_values(row: &[f32], q: &mut [i8]) -> Option<f32> {
    round_row(row, q, |q| q as i8)
}

/// The rounding both activation forms share: `out[i] = store(round(row[i] · 127 / max|row|))`.
#[inline(always)]
fn round_row<T>(row: &[f32], out: &mut [T], store: impl Fn(i32) -> T) -> Option<f32> {
    assert_eq!(row.len(), out.len(), "int8 quantize: {} values for {} codes", row.len(), out.len());
    let (scale, inv) = activation_scale(max_abs(row))?;
    for (o, v) in out.iter_mut().zip(row) {
        *o = store(round_to_int(v * inv));
    }
    Some(scale)
}

/// Rounds one output channel of a weight matrix to ±`reach.max()` (`w ≈ scale · q`, ties away from zero)
/// and returns its scale (1 for an all-zero channel), or `None` if the channel holds a NaN or an infinity.
///
/// # Panics
/// If the lengths differ.
#[must_use]
pub fn weight_values(row: &[f32], reach: WeightReach, q: &mut [i8]) -> Option<f32> {
    assert_eq!(row.len(), q.len(), "weight_values: {} weights for {} codes", row.len(), q.len());
    let max = max_abs(row);
    if !max.is_finite() {
        return None;
    }
    let scale = if max > 0.0 { max / reach.max() as f32 } else { 1.0 };
    for (q, v) in q.iter_mut().zip(row) {
        *q = round_half_away(v / scale) as i8;
    }
    Some(scale)
}

/// The scale that maps `[-max, max]` onto `[-127, 127]`, and its inverse; `None` for a non-finite `max`.
#[inline(always)]
fn activation_scale(max: f32) -> Option<(f32, f32)> {
    if !max.is_finite() {
        None
    } else if max > 1e-30 {
        Some((max / 127.0, 127.0 / max))
    } else {
        Some((1.0, 0.0))
    }
}

/// Round `v` to the nearest integer (ties to even), for `|v| ≤ 128`: the callers scale every value into
/// [-127, 127] first. Adding 1.5 · 2²³ pushes the fraction out of the mantissa, so no libm `round`
/// call; and the conversion is unchecked because the range is known, so the loop vectorises (a checked
/// `as i32` made quantisation a scalar loop, 0.7 ms of a 3 ms query).
#[inline(always)]
fn round_to_int(v: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0;
    let r = (v + MAGIC) - MAGIC;
    debug_assert!(r.abs() <= 128.0, "round_to_int: {v} is outside the quantisation range");
    // SAFETY: callers pass |v| ≤ 127 (times 1 + a rounding error): finite and well inside i32.
    unsafe { r.to_int_unchecked::<i32>() }
}

/// `v.round()` (ties away from zero) for `|v| ≤ 128`, without the libm call that kept the weights'
/// quantisation a scalar loop (a tenth of `agentrt exec`'s start-up): the truncation is exact in that
/// range, and so is the fraction `v - t`.
#[inline(always)]
fn round_half_away(v: f32) -> i32 {
    debug_assert!(v.abs() <= 128.0, "round_half_away: {v} is outside the quantisation range");
    // SAFETY: callers pass |v| ≤ 127 (times 1 + a rounding error): finite and well inside i32.
    let t = unsafe { v.to_int_unchecked::<i32>() };
    let fraction = v - t as f32;
    t + i32::from(fraction >= 0.5) - i32::from(fraction <= -0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_half_away_is_round_on_the_quantisation_range() {
        let mut v = -128.0f32;
        while v <= 128.0 {
            assert_eq!(round_half_away(v), v.round() as i32, "{v}");
            v += 1.0 / 1024.0;
        }
        for v in [0.5f32, -0.5, 1.5, -1.5, 126.5, -126.5, 0.49999997, -0.49999997, 2.5000002, 1e-30, -0.0] {
            assert_eq!(round_half_away(v), v.round() as i32, "{v}");
        }
    }

    #[test]
    fn max_abs_matches_the_plain_fold_and_surfaces_nan() {
        let a: Vec<f32> = (0..53).map(|i| ((i * 37) % 23) as f32 - 11.5).collect();
        assert_eq!(max_abs(&a), a.iter().fold(0f32, |m, x| m.max(x.abs())));
        assert_eq!(max_abs(&[]), 0.0);
        for at in [20, 36, 52] {
            let mut with_nan = a.clone();
            with_nan[at] = f32::NAN;
            assert!(max_abs(&with_nan).is_nan(), "a NaN at {at} was dropped");
        }
    }

    /// Codes decode back to within half a step; the row's largest value lands on ±127; zeros stay zero.
    #[test]
    fn activation_codes_round_trip_within_half_a_step() {
        let row: Vec<f32> = (0..40).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let mut codes = vec![0u8; 40];
        let scale = activation_codes(&row, &mut codes).unwrap();
        let max = max_abs(&row);
        assert!((scale - max / 127.0).abs() <= f32::EPSILON * max);
        for (v, c) in row.iter().zip(&codes) {
            assert!((1..=255).contains(c), "code {c} is outside [1, 255]");
            assert!((v - scale * (*c as i32 - 128) as f32).abs() <= 0.5001 * scale, "{v} came back far");
        }
        assert!(codes.iter().any(|&c| c == 1 || c == 255));
        let mut zero = vec![7u8; 8];
        assert_eq!(activation_codes(&[0.0; 8], &mut zero), Some(1.0));
        assert!(zero.iter().all(|&c| c == 128));
        let mut q = vec![0i8; 40];
        assert_eq!(activation_values(&row, &mut q), Some(scale));
        assert!(q.iter().zip(&codes).all(|(q, c)| *q as i32 + 128 == *c as i32));
    }

    #[test]
    fn a_row_with_a_nan_or_an_infinity_is_refused() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut row = vec![0.5f32; 24];
            row[17] = bad;
            assert_eq!(activation_codes(&row, &mut [0u8; 24]), None, "{bad}");
            assert_eq!(activation_values(&row, &mut [0i8; 24]), None, "{bad}");
            assert_eq!(weight_values(&row, WeightReach::Narrow, &mut [0i8; 24]), None, "{bad}");
        }
    }

    #[test]
    fn weights_reach_exactly_their_bound() {
        let row: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.01).collect();
        for reach in [WeightReach::Paired, WeightReach::Narrow, WeightReach::Full] {
            let mut q = vec![0i8; 64];
            let scale = weight_values(&row, reach, &mut q).unwrap();
            assert_eq!(q.iter().map(|v| v.unsigned_abs()).max(), Some(reach.max() as u8));
            assert_eq!(WeightReach::of(&q), reach);
            for (v, q) in row.iter().zip(&q) {
                assert!((v - scale * *q as f32).abs() <= 0.5001 * scale);
            }
        }
    }
}
