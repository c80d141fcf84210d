//! PNG charts for agentrt: training curves for `agentrt plot RUN` and metric bar charts for
//! `agentrt eval`.
//!
//! Design: callers describe charts as plain data ([`LineChart`], [`BarChart`], or groups x
//! series for [`write_grouped_bar_chart`]) and get one PNG file per call. Drawing uses plotters'
//! bitmap backend into memory, text is rasterised from DejaVu Sans compiled into the crate (so
//! no system fonts or fontconfig are needed on CI), and the PNG is written to a temporary file
//! next to the target and renamed over it, so readers never see a half-written image. Bad
//! values (NaN, infinities) are skipped rather than fatal: a panel with nothing left says
//! "no data". Structural mistakes (no charts, zero columns, mismatched lengths) are errors.

mod axis;
mod bar;
mod error;
mod font;
mod line;
mod output;
mod style;

pub use bar::{write_bar_chart, write_grouped_bar_chart, Bar, BarChart};
pub use error::ChartError;
pub use line::{write_line_charts, LineChart, Series};

#[cfg(test)]
mod tests;
