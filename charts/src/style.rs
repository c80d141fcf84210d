//! Shared look: panel size, colours, fonts, and the "no data" placeholder panel.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::font::FAMILY;
use crate::output::{Area, DrawError};

/// Size of one line-chart panel in pixels; a grid is `columns` x `rows` of these.
pub(crate) const PANEL_WIDTH: u32 = 500;
/// See [`PANEL_WIDTH`].
pub(crate) const PANEL_HEIGHT: u32 = 350;

/// Series colours (matplotlib's "tab10"), cycled: distinct, and readable when printed in grey.
pub(crate) const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Colour of the `i`-th series.
pub(crate) fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Font of panel titles.
pub(crate) fn title_font() -> TextStyle<'static> {
    (FAMILY, 18).into_font().into()
}

/// Font of axis labels, tick labels and legends.
pub(crate) fn label_font() -> TextStyle<'static> {
    (FAMILY, 13).into_font().into()
}

/// Font of the numbers printed above bars.
pub(crate) fn value_font() -> TextStyle<'static> {
    (FAMILY, 12).into_font().into()
}

/// Whether a value can be plotted. Infinities and NaN cannot; neither can magnitudes so large
/// that axis arithmetic (span, margins) would overflow to infinity.
pub(crate) fn plottable(v: f64) -> bool {
    v.is_finite() && v.abs() <= 1e300
}

/// Draws `title` and a centred "no data" note: what a panel shows when none of its values are
/// plottable, so a broken metric is visible instead of silently missing.
pub(crate) fn draw_no_data(area: &Area<'_>, title: &str) -> Result<(), DrawError> {
    let inner = area.titled(title, title_font())?;
    let (w, h) = inner.dim_in_pixel();
    let style = TextStyle::from((FAMILY, 16).into_font()).color(&RGBColor(110, 110, 110)).pos(Pos::new(HPos::Center, VPos::Center));
    inner.draw(&Text::new("no data", (w as i32 / 2, h as i32 / 2), style))?;
    Ok(())
}

/// Draws the legend of the labelled series of `ctx` in its upper right corner, on a light box that lets
/// the plot show through.
pub(crate) fn draw_legend<'a, 'b: 'a, CT: CoordTranslate>(ctx: &mut ChartContext<'a, BitMapBackend<'b>, CT>) -> Result<(), DrawError> {
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(label_font())
        .draw()?;
    Ok(())
}

/// The most characters of a tick label; longer ones are ellipsised.
pub(crate) const TICK_LABEL_CHARS: usize = 18;

/// A tick label no longer than `max` characters, ellipsised, so long metric names stay legible.
pub(crate) fn short_label(label: &str, max: usize) -> String {
    if label.chars().count() <= max {
        label.to_string()
    } else {
        let mut s: String = label.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}
