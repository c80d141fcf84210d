//! Axis ranges from data, and a categorical x axis for bars.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};

use crate::style::plottable;

/// The range of the plottable `values`, widened by 5% each side; `None` if there are none.
/// Constant values (a flat series, a single value) get the range from 0 to them (0 to 1 for zeros), so a
/// flat line reads as its value against zero rather than floating mid-panel between invented bounds.
pub(crate) fn padded_range(values: impl Iterator<Item = f64>) -> Option<Range<f64>> {
    let (lo, hi) = min_max(values)?;
    let span = hi - lo;
    let mid_scale = lo.abs().max(hi.abs());
    if span <= mid_scale * 1e-9 || span == 0.0 {
        let (lo, hi) = if mid_scale == 0.0 { (0.0, 1.0) } else { (lo.min(0.0), hi.max(0.0)) };
        let pad = (hi - lo) * 0.05;
        return Some(lo - pad..hi + pad);
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

/// How many ticks an axis of whole numbers over `range` gets: at most `max`, and no more than the whole
/// numbers it spans, so the axis's "nice" steps are never fractions of one.
pub(crate) fn integer_ticks(range: &Range<f64>, max: usize) -> usize {
    let whole = (range.end.floor() - range.start.ceil()).max(0.0) as usize + 1;
    whole.clamp(1, max.max(1))
}

/// A tick label at `value` on an axis whose ticks are about `step` apart: as many decimals as the step
/// needs and no more, and never "-0" (a tick at zero computed as -1e-17 is zero).
pub(crate) fn tick_label(value: f64, step: f64) -> String {
    let step = step.abs();
    if value.abs() >= 1e5 || (value != 0.0 && value.abs() < 1e-4 && step < 1e-4) {
        return format!("{value:.1e}");
    }
    let decimals = if step > 0.0 && step.is_finite() { (-(step.log10().floor()) as i32).clamp(0, 6) as usize } else { 3 };
    let text = format!("{value:.decimals$}");
    if text.trim_start_matches('-').chars().all(|c| c == '0' || c == '.') {
        text.trim_start_matches('-').to_string()
    } else {
        text
    }
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
    fn tick_labels_have_the_decimals_of_their_step_and_no_negative_zero() {
        assert_eq!(tick_label(-1e-17, 0.1), "0.0");
        assert_eq!(tick_label(-0.0, 1.0), "0");
        assert_eq!(tick_label(0.25, 0.05), "0.25");
        assert_eq!(tick_label(12.0, 2.0), "12");
        assert_eq!(tick_label(1500.0, 200.0), "1500");
        assert_eq!(tick_label(-0.3, 0.1), "-0.3");
        assert_eq!(tick_label(250000.0, 50000.0), "2.5e5");
    }

    #[test]
    fn whole_number_axes_get_no_more_ticks_than_whole_numbers() {
        assert_eq!(integer_ticks(&(0.95..2.05), 6), 2);
        assert_eq!(integer_ticks(&(-0.5..100.5), 6), 6);
        assert_eq!(integer_ticks(&(0.5..0.9), 6), 1);
    }

    #[test]
    fn padded_range_widens_constant_and_single_values() {
        let r = padded_range([3.0].into_iter()).unwrap();
        assert!(r.start < 3.0 && r.end > 3.0);
        let r = padded_range([0.0, 0.0].into_iter()).unwrap();
        assert_eq!(r, -0.05..1.05, "a flat zero series sits at the bottom of 0..1");
        let r = padded_range([-2.0, -2.0].into_iter()).unwrap();
        assert!(r.start < -2.0 && r.end > 0.0 && r.end < 0.2, "{r:?}");
        let r = padded_range([0.0, 10.0, f64::NAN, f64::INFINITY].into_iter()).unwrap();
        assert_eq!(r, -0.5..10.5);
        assert!(padded_range([f64::NAN, f64::NEG_INFINITY].into_iter()).is_none());
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
