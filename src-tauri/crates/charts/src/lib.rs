//! headroom-charts: Headroom's charts as SVG strings, drawn with plotters.
//!
//! Pure functions from numbers to a self-contained SVG document sized for the
//! popover (400 px wide), in the UI's light or dark palette:
//! [`session_svg`] (speed per turn), [`live_chart`] (memory against the budget,
//! swap, pressure and tok/s over time, slowdowns marked) and [`bench_depth_svg`] (tok/s against context depth).
//!
//! No font is read: text is plain SVG `<text>` in the UI's font stack, laid
//! out with plotters' built-in size estimate (its `ttf` feature is off).
//! Every data point is one `<circle>` in its series' colour; see each
//! function for how a point without a value is drawn. Empty input is not an
//! error: it draws a "no data yet" card of the same size.

pub mod bench;
mod draw;
pub mod error;
mod format;
pub mod live;
pub mod session;
pub mod style;
#[cfg(test)]
mod svgtest;

pub use bench::{bench_depth_svg, DepthPoint};
pub use error::{ChartError, Result};
pub use live::{live_chart, live_svg, LiveChart, LiveData, PlotBox};
pub use session::{session_svg, TurnPoint};
pub use style::{ChartStyle, Palette, Theme};

/// A card of the chart's size saying there is nothing to draw yet, with a
/// hint on how to get data. The chart functions return it for empty input.
pub fn no_data_svg(style: &ChartStyle, title: &str, hint: &str) -> Result<String> {
    draw::render("no data", style, |root, palette| draw::no_data(root, palette, title, hint))
}
