//! The charts crate's typed errors.

use plotters::drawing::DrawingAreaErrorKind;

/// What drawing a chart can fail with. Empty input is not an error: it draws
/// a "no data yet" chart (see [`crate::no_data_svg`]).
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// A value that cannot be placed on an axis (NaN, infinite, negative).
    #[error("{chart} chart: {series} value #{index} is {value}, expected a finite number >= 0")]
    InvalidValue { chart: &'static str, series: &'static str, index: usize, value: f64 },
    /// Too small to hold the axes and their labels legibly.
    #[error("chart size {width}x{height} px is too small; the minimum is {min_width}x{min_height} px")]
    TooSmall { width: u32, height: u32, min_width: u32, min_height: u32 },
    /// A theme name other than `light` or `dark`.
    #[error("unknown chart theme {0:?}; expected \"light\" or \"dark\"")]
    UnknownTheme(String),
    /// The live chart's window must be at least a minute.
    #[error("{chart} chart: a window of {window_ms} ms is too short; the shortest is {min_ms} ms")]
    InvalidWindow { chart: &'static str, window_ms: u64, min_ms: u64 },
    /// The marks drawn for a tagged group did not match its data (a bug in
    /// the chart, or a plotters version that writes SVG differently).
    #[error("{chart} chart: group #{group} should tag {expected} marks, found {found}")]
    Tagging { chart: &'static str, group: usize, expected: usize, found: usize },
    /// plotters failed while drawing (it writes into a String, so this means
    /// a layout it could not do, e.g. a label area larger than the chart).
    #[error("drawing the {chart} chart failed: {source}")]
    Draw {
        chart: &'static str,
        #[source]
        source: DrawingAreaErrorKind<std::io::Error>,
    },
}

pub type Result<T, E = ChartError> = std::result::Result<T, E>;
