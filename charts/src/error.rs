//! The one error type of the crate: every failure says which file or which input was at fault.

use std::path::PathBuf;

/// Why a chart could not be written. Callers (`agentrt plot`, `agentrt eval`) usually just print
/// it, so every message names the output path or the offending input.
#[derive(thiserror::Error, Debug)]
pub enum ChartError {
    /// `write_line_charts` was given no charts at all: almost certainly a caller bug (nothing was
    /// logged, or a filter removed everything), so it is refused rather than writing a blank PNG.
    #[error("no charts to draw: the list of line charts is empty")]
    NoCharts,

    /// A grid of panels needs at least one column.
    #[error("cannot lay out charts in 0 columns: columns must be at least 1")]
    ZeroColumns,

    /// A bar chart with no bars, or a grouped bar chart with no groups or no series.
    #[error("chart {title:?} has nothing to draw: {what}")]
    Empty {
        /// Title of the chart that was empty.
        title: String,
        /// What was missing (e.g. "no bars", "no groups").
        what: &'static str,
    },

    /// A series of a grouped bar chart has a different number of values than there are groups.
    #[error("chart {title:?}: series {series:?} has {got} values but there are {expected} groups")]
    LengthMismatch {
        /// Title of the chart.
        title: String,
        /// Name of the series whose length is wrong.
        series: String,
        /// Number of groups, the length every series must have.
        expected: usize,
        /// Length the series actually has.
        got: usize,
    },

    /// A bar's confidence interval has its lower end above its upper end.
    #[error("chart {title:?}: bar {label:?} has an inverted interval ({low}, {high})")]
    InvertedInterval {
        /// Title of the chart.
        title: String,
        /// Label of the bar.
        label: String,
        /// Lower end given.
        low: f64,
        /// Upper end given.
        high: f64,
    },

    /// The requested image would be unreasonably large (too many panels or bars).
    #[error("chart image for {path} would be {width}x{height} px, more than {max} px on a side")]
    TooLarge {
        /// Output path that was requested.
        path: PathBuf,
        /// Width in pixels the layout asked for.
        width: u64,
        /// Height in pixels the layout asked for.
        height: u64,
        /// Largest side allowed.
        max: u32,
    },

    /// The bundled font could not be parsed or registered with plotters.
    #[error("could not load the bundled DejaVu Sans font: {0}")]
    Font(String),

    /// Plotters failed while drawing into the in-memory image.
    #[error("could not render chart {path}: {message}")]
    Render {
        /// Output path of the chart being drawn.
        path: PathBuf,
        /// Plotters' description of the failure.
        message: String,
    },

    /// Creating the directory, writing the temporary file, encoding the PNG or renaming it into
    /// place failed.
    #[error("could not write chart {path}: {source}")]
    Io {
        /// The file or directory being written.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
}
