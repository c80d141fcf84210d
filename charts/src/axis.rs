//! Axis ranges from data, and a categorical x axis for bars.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};

use crate::style::plottable;

/// The range of the plottable `values`, widened by 5% each side; `None` if there are none.
/// A single value or constant values get a range of non-zero width around them.
pub(crate) fn padded_range(values: impl Iterator<Item = f64>) -> Option<Range<f64>> {
    let (lo, hi) = min_max(values)?;
    let span = hi - lo;
    let mid_scale = lo.abs().max(hi.abs());
    if span <= mid_scale * 1e-9 || span == 0.0 {
        // Constant (or numerically constant) data: give it a width of 10% of its magnitude.
        let half = if mid_scale == 0.0 { 0.5 } else { mid_scale * 0.05 };
        return Some(lo - half..hi + half);
    }
    Some(lo - span * 0.05..hi + span * 0.05)
}

/// A y range for bars: always includes 0 (bars grow from it), padded away from 0 by 8% for value
/// labels, and with the top extended so that `top_reserve` (a fraction of the plot height, for a
/// legend) stays free of data. `None` if no value is plottable.
pub(crate) fn bar_range(values: impl Iterator<Item = f64>, top_reserve: f64) -> Option<Range<f64>> {
    let (lo, hi) = min_max(values)?;
    let (mut lo, mut hi) = (lo.min(0.0), hi.max(0.0));
    if hi - lo == 0.0 {
        hi = 1.0;
    }
    let span = hi - lo;
    if lo < 0.0 {
        lo -= span * 0.08;
    }
    if hi > 0.0 {
        hi += span * 0.08;
    }
    let reserve = top_reserve.clamp(0.0, 0.6);
    hi = lo + (hi - lo) / (1.0 - reserve);
    Some(lo..hi)
}

/// Tick positions for `range`: the multiples of a round step (1, 2 or 5 times a power of ten) inside it,
/// about `max` of them at most; with `integer` (an axis of whole numbers, such as steps) the step is at least
/// 1, so every tick is a whole number. Returns the ticks and the step.
pub(crate) fn ticks(range: &Range<f64>, max: usize, integer: bool) -> (Vec<f64>, f64) {
    let span = range.end - range.start;
    if !(span.is_finite() && span > 0.0) {
        return (vec![], 1.0);
    }
    let raw = span / max.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = magnitude
        * match raw / magnitude {
            n if n <= 1.0 => 1.0,
            n if n <= 2.0 => 2.0,
            n if n <= 5.0 => 5.0,
            _ => 10.0,
        };
    let step = if integer { step.max(1.0).round() } else { step };
    let (first, last) = ((range.start / step).ceil() as i64, (range.end / step).floor() as i64);
    // Each tick is k x step, not a sum of steps, so no rounding accumulates.
    ((first..=last).map(|k| k as f64 * step).collect(), step)
}

/// The label of the tick `value` on an axis whose ticks are `step` apart: as many decimals as the step needs
/// (none for whole steps), never a "-0" (a value that rounds to zero is "0"), and in scientific notation when
/// the step is below 1e-4 or the value is a million or more.
pub(crate) fn tick_label(value: f64, step: f64) -> String {
    if value.abs() < step.abs() * 1e-6 || value == 0.0 {
        return "0".to_string();
    }
    if step.abs() < 1e-4 || value.abs() >= 1e6 {
        return format!("{value:.1e}");
    }
    let decimals = (-step.abs().log10() - 1e-9).ceil().max(0.0) as usize;
    let label = format!("{value:.decimals$}");
    match label.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => label,
    }
}

/// Whether every plottable value is a whole number (an axis of steps or counts).
pub(crate) fn all_integers(mut values: impl Iterator<Item = f64>) -> bool {
    values.all(|v| !plottable(v) || v.fract() == 0.0)
}

fn min_max(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.filter(|v| plottable(*v)).fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
    })
}

/// A categorical axis of `n` slots: slot `i` spans `[i, i + 1)` and its tick (where the label
/// goes) is at its centre `i + 0.5`. Bars are drawn at fractional positions inside their slot.
pub(crate) struct Categories(pub usize);

impl Ranged for Categories {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let frac = value / self.0.max(1) as f64;
        limit.0 + (f64::from(limit.1 - limit.0) * frac).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        let step = self.0.div_ceil(hint.max_num_points().max(1)).max(1);
        (0..self.0).step_by(step).map(|i| i as f64 + 0.5).collect()
    }

    fn range(&self) -> Range<f64> {
        0.0..self.0 as f64
    }
}

/// The label of the slot containing `x`, shortened; empty outside the axis.
pub(crate) fn category_label(labels: &[String], x: f64) -> String {
    if x < 0.0 {
        return String::new();
    }
    labels.get(x.floor() as usize).map(|l| crate::style::short_label(l, crate::style::TICK_LABEL_CHARS)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_range_widens_constant_and_single_values() {
        let r = padded_range([3.0].into_iter()).unwrap();
        assert!(r.start < 3.0 && r.end > 3.0);
        let r = padded_range([0.0, 0.0].into_iter()).unwrap();
        assert_eq!(r, -0.5..0.5);
        let r = padded_range([0.0, 10.0, f64::NAN, f64::INFINITY].into_iter()).unwrap();
        assert_eq!(r, -0.5..10.5);
        assert!(padded_range([f64::NAN, f64::NEG_INFINITY].into_iter()).is_none());
    }

    #[test]
    fn integer_axes_get_whole_ticks() {
        // Steps 1 to 3, padded: 1, 2, 3, not 1.0, 1.5, ... 3.0.
        let r = padded_range([1.0, 2.0, 3.0].into_iter()).unwrap();
        let (t, step) = ticks(&r, 6, true);
        assert_eq!((t.clone(), step), (vec![1.0, 2.0, 3.0], 1.0));
        assert_eq!(t.iter().map(|&v| tick_label(v, step)).collect::<Vec<_>>(), ["1", "2", "3"]);
        // One step: its own tick.
        let r = padded_range([1.0].into_iter()).unwrap();
        assert_eq!(ticks(&r, 6, true).0, vec![1.0]);
        // Many steps: round multiples.
        let (t, step) = ticks(&(0.0..200.0), 6, true);
        assert_eq!(step, 50.0);
        assert_eq!(t, vec![0.0, 50.0, 100.0, 150.0, 200.0]);
        assert!(all_integers([1.0, 2.0, f64::NAN].into_iter()) && !all_integers([1.0, 1.5].into_iter()));
        // Not integer: fractional steps are allowed.
        let (t, step) = ticks(&(0.0..1.0), 6, false);
        assert_eq!(step, 0.2);
        assert_eq!(t.iter().map(|&v| tick_label(v, step)).collect::<Vec<_>>(), ["0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
    }

    #[test]
    fn tick_labels_never_say_minus_zero() {
        // A range around 0 whose ticks are sums of a step that does not land on 0 exactly.
        for range in [-0.5..0.5, -0.05..0.05, -1e-3..2e-3, -3.0..3.0] {
            let (t, step) = ticks(&range, 6, false);
            assert!(t.contains(&0.0), "{range:?}: {t:?}");
            for v in t {
                let label = tick_label(v, step);
                assert!(label != "-0" && label != "-0.0" && label != "-0.00" && label != "-0.000", "{range:?}: {label}");
            }
        }
        assert_eq!(tick_label(-0.0, 0.1), "0");
        assert_eq!(tick_label(-1e-17, 0.1), "0");
        assert_eq!(tick_label(-0.0004, 0.001), "0.000");
        assert_eq!(tick_label(-0.2, 0.1), "-0.2");
        assert_eq!(tick_label(2.5e-5, 1e-5), "2.5e-5");
        assert_eq!(tick_label(3.0, 1.0), "3");
    }

    #[test]
    fn bar_range_includes_zero_and_reserves_top() {
        let r = bar_range([2.0, 4.0].into_iter(), 0.0).unwrap();
        assert_eq!(r.start, 0.0);
        assert!(r.end > 4.0);
        let r = bar_range([-1.0].into_iter(), 0.0).unwrap();
        assert!(r.start < -1.0 && r.end == 0.0);
        let r = bar_range([0.0].into_iter(), 0.5).unwrap();
        assert_eq!(r.start, 0.0);
        assert!((r.end - 2.16).abs() < 1e-9, "{r:?}");
    }
}
