//! Bar charts: evaluation metrics, optionally with confidence-interval whiskers, and grouped bars
//! comparing several runs on several metrics.

use std::ops::Range;
use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::axis::{self, Categories};
use crate::output::{render_png, Area, DrawError};
use crate::style::{self, plottable};
use crate::ChartError;

/// Height of bar chart images in pixels.
const BAR_HEIGHT: u64 = 400;

/// One bar, e.g. one metric of an evaluation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Bar {
    /// Tick label under the bar (long labels are shortened with "…").
    pub label: String,
    /// Bar height. A NaN or infinite value leaves the slot empty.
    pub value: f64,
    /// Optional `(low, high)` interval, e.g. a 95% confidence interval, drawn as a whisker.
    /// Skipped unless both ends are finite; `low > high` is an error.
    pub interval: Option<(f64, f64)>,
}

/// A titled chart of [`Bar`]s sharing one y axis; each bar's value is printed above it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BarChart {
    /// Chart title, drawn above the plot.
    pub title: String,
    /// Description of the y axis (e.g. "accuracy").
    pub y_label: String,
    /// The bars, left to right.
    pub bars: Vec<Bar>,
}

/// Writes `chart` as a PNG at `path` (400 px high, at least 500 px wide, wider with many bars).
/// The y axis always includes 0. Errors if there are no bars or an interval is inverted; if no
/// value is finite the chart says "no data". The file is replaced atomically.
pub fn write_bar_chart(path: &Path, chart: &BarChart) -> Result<(), ChartError> {
    if chart.bars.is_empty() {
        return Err(ChartError::Empty { title: chart.title.clone(), what: "no bars" });
    }
    for bar in &chart.bars {
        if let Some((low, high)) = bar.interval {
            if low > high {
                return Err(ChartError::InvertedInterval { title: chart.title.clone(), label: bar.label.clone(), low, high });
            }
        }
    }
    // Each bar gets room for its label: 70 px, or about 8 px a character of the longest one as drawn, so
    // that neighbouring labels never run into each other.
    let longest = chart.bars.iter().map(|b| b.label.chars().count().min(crate::style::TICK_LABEL_CHARS) as u64).max().unwrap_or(0);
    let per_bar = (8 * longest + 12).max(70);
    let width = (100 + per_bar * chart.bars.len() as u64).max(500);
    render_png(path, width, BAR_HEIGHT, |root| draw_bars(root, chart))
}

/// Writes side-by-side bars as a PNG at `path`: one slot per entry of `groups` (e.g. metrics),
/// and within it one bar per entry of `series` (e.g. runs), coloured per series with a legend.
/// Every series must have exactly one value per group; NaN or infinite values leave a gap.
/// Errors if there are no groups, no series, or a length mismatch. Replaced atomically.
pub fn write_grouped_bar_chart(path: &Path, title: &str, y_label: &str, groups: &[String], series: &[(String, Vec<f64>)]) -> Result<(), ChartError> {
    let empty = |what| ChartError::Empty { title: title.to_string(), what };
    if groups.is_empty() {
        return Err(empty("no groups"));
    }
    if series.is_empty() {
        return Err(empty("no series"));
    }
    if let Some((name, values)) = series.iter().find(|(_, v)| v.len() != groups.len()) {
        return Err(ChartError::LengthMismatch { title: title.to_string(), series: name.clone(), expected: groups.len(), got: values.len() });
    }
    let per_group = 26 * series.len() as u64 + 40;
    let width = (100 + groups.len() as u64 * per_group).max(600);
    render_png(path, width, BAR_HEIGHT + 20, |root| draw_grouped(root, title, y_label, groups, series))
}

/// Text for a value printed above its bar: 3 decimals, or scientific notation for tiny values.
fn format_value(v: f64) -> String {
    if v != 0.0 && v.abs() < 0.01 || v.abs() >= 1e6 {
        format!("{v:.2e}")
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

fn draw_bars(area: &Area<'_>, chart: &BarChart) -> Result<(), DrawError> {
    let values = chart.bars.iter().flat_map(|b| {
        let (low, high) = b.interval.unwrap_or((f64::NAN, f64::NAN));
        [b.value, low, high]
    });
    let has_value = chart.bars.iter().any(|b| plottable(b.value));
    let (true, Some(y_range)) = (has_value, axis::bar_range(values, 0.0)) else {
        return style::draw_no_data(area, &chart.title);
    };
    let labels: Vec<String> = chart.bars.iter().map(|b| b.label.clone()).collect();
    let mut ctx = category_plot(area, &chart.title, &chart.y_label, &labels, y_range)?;

    let color = style::color(0);
    for (i, bar) in chart.bars.iter().enumerate() {
        if !plottable(bar.value) {
            continue;
        }
        let x = i as f64;
        ctx.draw_series(std::iter::once(Rectangle::new([(x + 0.15, 0.0), (x + 0.85, bar.value)], color.filled())))?;
        let mut label_at = bar.value;
        if let Some((low, high)) = bar.interval.filter(|(l, h)| plottable(*l) && plottable(*h)) {
            let whisker = BLACK.stroke_width(1);
            let mid = x + 0.5;
            ctx.draw_series([
                PathElement::new(vec![(mid, low), (mid, high)], whisker),
                PathElement::new(vec![(mid - 0.1, low), (mid + 0.1, low)], whisker),
                PathElement::new(vec![(mid - 0.1, high), (mid + 0.1, high)], whisker),
            ])?;
            label_at = if bar.value >= 0.0 { high.max(bar.value) } else { low.min(bar.value) };
        }
        let (anchor, offset) = if bar.value >= 0.0 { (VPos::Bottom, -3) } else { (VPos::Top, 3) };
        let text_style = style::value_font().pos(Pos::new(HPos::Center, anchor));
        ctx.draw_series(std::iter::once(EmptyElement::at((x + 0.5, label_at)) + Text::new(format_value(bar.value), (0, offset), text_style)))?;
    }
    Ok(())
}

fn draw_grouped(area: &Area<'_>, title: &str, y_label: &str, groups: &[String], series: &[(String, Vec<f64>)]) -> Result<(), DrawError> {
    // Keep the top of the plot (roughly 20 px per legend row out of ~300 px) free for the legend.
    let reserve = (series.len() as f64 * 20.0 + 20.0) / 300.0;
    let values = series.iter().flat_map(|(_, v)| v.iter().copied());
    let Some(y_range) = axis::bar_range(values, reserve) else {
        return style::draw_no_data(area, title);
    };
    let mut ctx = category_plot(area, title, y_label, groups, y_range)?;

    let slot = 0.8 / series.len() as f64;
    for (j, (name, values)) in series.iter().enumerate() {
        let color = style::color(j);
        let bars = values.iter().enumerate().filter(|(_, v)| plottable(**v)).map(|(g, &v)| {
            let x0 = g as f64 + 0.1 + j as f64 * slot;
            Rectangle::new([(x0 + slot * 0.05, 0.0), (x0 + slot * 0.95, v)], color.filled())
        });
        ctx.draw_series(bars)?.label(name.as_str()).legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    style::draw_legend(&mut ctx)
}

/// The plot of a bar chart, its axes drawn: one slot per label along x (the label under it, no vertical
/// grid lines), `y_range` up.
fn category_plot<'a, 'b>(
    area: &'a Area<'b>,
    title: &str,
    y_label: &str,
    labels: &[String],
    y_range: Range<f64>,
) -> Result<ChartContext<'a, BitMapBackend<'b>, Cartesian2d<Categories, RangedCoordf64>>, DrawError> {
    let mut ctx = ChartBuilder::on(area)
        .caption(title, style::title_font())
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(Categories(labels.len()), y_range)?;
    ctx.configure_mesh()
        .disable_x_mesh()
        .x_labels(labels.len())
        .x_label_formatter(&|x| axis::category_label(labels, *x))
        .y_desc(y_label)
        .light_line_style(TRANSPARENT)
        .label_style(style::label_font())
        .axis_desc_style(style::label_font())
        .draw()?;
    Ok(ctx)
}
