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

    // Round ticks, whole ones on an axis of whole numbers (steps), labelled without a "-0".
    let (x_ticks, x_step) = axis::ticks(&x_range, 6, axis::all_integers(all().map(|p| p.0)));
    let (y_ticks, y_step) = axis::ticks(&y_range, 6, false);
    let corner = emptiest_corner(&chart.series, &x_range, &y_range);
    let mut ctx = ChartBuilder::on(area)
        .caption(&chart.title, style::title_font())
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range.with_key_points(x_ticks), y_range.with_key_points(y_ticks))?;
    ctx.configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .light_line_style(TRANSPARENT)
        .label_style(style::label_font())
        .axis_desc_style(style::label_font())
        .x_label_formatter(&|v| axis::tick_label(*v, x_step))
        .y_label_formatter(&|v| axis::tick_label(*v, y_step))
        .draw()?;

    for (i, series) in chart.series.iter().enumerate() {
        let color = style::color(i);
        let points: Vec<(f64, f64)> = finite_points(series).collect();
        let name = if points.is_empty() { format!("{} (no data)", series.name) } else { series.name.clone() };
        if let [only] = points[..] {
            // A one-point line draws nothing; mark the point instead.
            ctx.draw_series(std::iter::once(Circle::new(only, 3, color.filled())))?;
        }
        ctx.draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }

    if chart.series.len() > 1 {
        style::draw_legend(&mut ctx, corner)?;
    }
    Ok(())
}

/// The corner of the plot (of `x` by `y`) the legend covers least data in: the one whose box (the outer
/// 40% of the width by 35% of the height) the lines pass through least, upper right first on a tie.
fn emptiest_corner(series: &[Series], x: &std::ops::Range<f64>, y: &std::ops::Range<f64>) -> SeriesLabelPosition {
    // Where each point lies as a fraction of the plot, x from the left, y from the bottom.
    let at = |(px, py): (f64, f64)| ((px - x.start) / (x.end - x.start), (py - y.start) / (y.end - y.start));
    let mut samples = Vec::new();
    for s in series {
        let points: Vec<(f64, f64)> = finite_points(s).map(at).collect();
        samples.extend(points.iter().copied());
        // Along each segment too: a line crosses a corner between two of its points.
        for w in points.windows(2) {
            samples.extend((1..16).map(|i| {
                let t = f64::from(i) / 16.0;
                (w[0].0 + (w[1].0 - w[0].0) * t, w[0].1 + (w[1].1 - w[0].1) * t)
            }));
        }
    }
    let (w, h) = (0.4, 0.35);
    // Upper right, upper left, lower right, lower left: each box's x and y spans.
    let boxes = [(1.0 - w..=1.0, 1.0 - h..=1.0), (0.0..=w, 1.0 - h..=1.0), (1.0 - w..=1.0, 0.0..=h), (0.0..=w, 0.0..=h)];
    let mut best = (usize::MAX, 0);
    for (i, (xs, ys)) in boxes.iter().enumerate() {
        let n = samples.iter().filter(|(px, py)| xs.contains(px) && ys.contains(py)).count();
        if n < best.0 {
            best = (n, i);
        }
    }
    match best.1 {
        0 => SeriesLabelPosition::UpperRight,
        1 => SeriesLabelPosition::UpperLeft,
        2 => SeriesLabelPosition::LowerRight,
        _ => SeriesLabelPosition::LowerLeft,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: &[(f64, f64)]) -> Series {
        Series { name: "s".into(), points: points.to_vec() }
    }

    fn corner(series: &[Series]) -> &'static str {
        match emptiest_corner(series, &(0.0..10.0), &(0.0..1.0)) {
            SeriesLabelPosition::UpperRight => "upper right",
            SeriesLabelPosition::UpperLeft => "upper left",
            SeriesLabelPosition::LowerRight => "lower right",
            SeriesLabelPosition::LowerLeft => "lower left",
            _ => "other",
        }
    }

    #[test]
    fn the_legend_goes_where_the_lines_are_not() {
        // Rising lines fill the lower left and upper right: the legend goes upper left.
        let rising = [series(&[(0.0, 0.0), (10.0, 1.0)]), series(&[(0.0, 0.1), (10.0, 0.9)])];
        assert_eq!(corner(&rising), "upper left");
        // Falling: upper left and lower right are taken.
        assert_eq!(corner(&[series(&[(0.0, 1.0), (10.0, 0.0)])]), "upper right");
        // A line along the top: a lower corner.
        assert_eq!(corner(&[series(&[(0.0, 0.95), (10.0, 0.95)])]), "lower right");
        // A line crossing the upper right between its two points still counts there.
        assert_eq!(corner(&[series(&[(5.0, 1.0), (10.0, 0.7)]), series(&[(0.0, 0.0), (4.0, 0.1)])]), "upper left");
        // Nothing: upper right.
        assert_eq!(corner(&[]), "upper right");
    }
}
