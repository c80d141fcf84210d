//! Line charts: training curves (reward, loss, KL, ... against step), several panels per image.

use std::path::Path;

use plotters::prelude::*;

use crate::output::{render_png, Area, DrawError};
use crate::style::{self, plottable, PANEL_HEIGHT, PANEL_WIDTH};
use crate::{axis, ChartError};

/// One line of a [`LineChart`], e.g. the reward curve of one run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    /// Legend text (shown when the chart has more than one series).
    pub name: String,
    /// `(x, y)` points, joined in the given order. Points with a NaN or infinite coordinate are
    /// skipped (the line joins across them); a series with none left is listed as "(no data)".
    pub points: Vec<(f64, f64)>,
}

/// One panel: a titled plot of one or more [`Series`] sharing axes, e.g. "reward" for
/// several runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LineChart {
    /// Panel title, drawn above the plot.
    pub title: String,
    /// Description of the x axis (e.g. "step").
    pub x_label: String,
    /// Description of the y axis (e.g. "mean reward").
    pub y_label: String,
    /// The lines, coloured in order from a fixed palette.
    pub series: Vec<Series>,
}

/// Writes `charts` as one PNG at `path`: a grid of 500x350 px panels, `columns` wide (at most
/// as many columns as charts), filled row by row. Axis ranges come from each panel's finite data
/// with a small margin; a panel with no finite point says "no data". Errors if `charts` is empty
/// or `columns` is 0. The file is replaced atomically and parent directories are created.
pub fn write_line_charts(path: &Path, charts: &[LineChart], columns: usize) -> Result<(), ChartError> {
    if charts.is_empty() {
        return Err(ChartError::NoCharts);
    }
    if columns == 0 {
        return Err(ChartError::ZeroColumns);
    }
    let cols = columns.min(charts.len());
    let rows = charts.len().div_ceil(cols);
    let width = cols as u64 * u64::from(PANEL_WIDTH);
    let height = rows as u64 * u64::from(PANEL_HEIGHT);
    render_png(path, width, height, |root| {
        for (panel, chart) in root.split_evenly((rows, cols)).iter().zip(charts) {
            draw_panel(panel, chart)?;
        }
        Ok(())
    })
}

fn finite_points(series: &Series) -> impl Iterator<Item = (f64, f64)> + '_ {
    series.points.iter().copied().filter(|&(x, y)| plottable(x) && plottable(y))
}

fn draw_panel(area: &Area<'_>, chart: &LineChart) -> Result<(), DrawError> {
    let all = || chart.series.iter().flat_map(finite_points);
    let (Some(x_range), Some(y_range)) = (axis::padded_range(all().map(|p| p.0)), axis::padded_range(all().map(|p| p.1))) else {
        return style::draw_no_data(area, &chart.title);
    };

    // With a legend, the top of the plot (about 20 px a row of the panel's ~270 px of plot) is kept free
    // of data, so no line runs under the legend's box.
    let y_range = if chart.series.len() > 1 {
        let reserve = ((chart.series.len() as f64 * 20.0 + 16.0) / 270.0).min(0.6);
        y_range.start..y_range.start + (y_range.end - y_range.start) / (1.0 - reserve)
    } else {
        y_range
    };
    // Steps, epochs and counts are whole numbers: their axis gets whole-number ticks only.
    let whole_x = all().all(|(x, _)| x.fract() == 0.0);
    let x_ticks = if whole_x { axis::integer_ticks(&x_range, 6) } else { 6 };
    let (x_span, y_span) = (x_range.end - x_range.start, y_range.end - y_range.start);
    // Whole-number ticks are labelled without decimals ("2", not "2.0").
    let x_step = if whole_x { (x_span / x_ticks.max(1) as f64).max(1.0) } else { x_span / x_ticks.max(1) as f64 };
    let mut ctx = ChartBuilder::on(area)
        .caption(&chart.title, style::title_font())
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range, y_range)?;
    ctx.configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .light_line_style(TRANSPARENT)
        .label_style(style::label_font())
        .axis_desc_style(style::label_font())
        .x_labels(x_ticks)
        .y_labels(6)
        .x_label_formatter(&|x| axis::tick_label(*x, x_step))
        .y_label_formatter(&|y| axis::tick_label(*y, y_span / 6.0))
        .draw()?;

    // Earlier series are drawn wider, so a later one over the same values shows inside it: two equal
    // series both stay visible.
    let n = chart.series.len();
    for (i, series) in chart.series.iter().enumerate() {
        let color = style::color(i);
        let width = 2 + 2 * (n - 1 - i) as u32;
        let points: Vec<(f64, f64)> = finite_points(series).collect();
        let name = if points.is_empty() { format!("{} (no data)", series.name) } else { series.name.clone() };
        if let [only] = points[..] {
            // A one-point line draws nothing; mark the point instead.
            ctx.draw_series(std::iter::once(Circle::new(only, 3, color.filled())))?;
        }
        ctx.draw_series(LineSeries::new(points, color.stroke_width(width)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(width)));
    }

    if chart.series.len() > 1 {
        style::draw_legend(&mut ctx)?;
    }
    Ok(())
}
