//! Themes and sizes: the light and dark palettes follow the UI's CSS
//! variables (ui/src/app.css) so a chart sits in the popover without a seam.

use std::str::FromStr;

use headroom_core::pressure::PressureLevel;
use plotters::style::RGBColor;

use crate::error::{ChartError, Result};

/// Light or dark, as the popover follows `prefers-color-scheme`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Theme {
    #[default]
    Light,
    Dark,
}

impl Theme {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Light => "light",
            Self::Dark => "dark",
        }
    }

    pub fn palette(self) -> Palette {
        match self {
            Self::Light => LIGHT,
            Self::Dark => DARK,
        }
    }
}

impl FromStr for Theme {
    type Err = ChartError;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "light" => Ok(Self::Light),
            "dark" => Ok(Self::Dark),
            _ => Err(ChartError::UnknownTheme(s.to_owned())),
        }
    }
}

impl std::fmt::Display for Theme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The colours of one theme. Series colours are distinct within a theme so
/// a reader (or a test) can tell every mark's series from its colour alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Palette {
    /// `--surface`: the chart's background.
    pub background: RGBColor,
    /// `--text`: axis titles.
    pub text: RGBColor,
    /// `--text-secondary`: tick labels, notes.
    pub text_secondary: RGBColor,
    /// Axis lines and grid, `--hairline` flattened onto the background
    /// (plotters writes colours without the CSS alpha).
    pub grid: RGBColor,
    pub axis: RGBColor,
    /// Decode tok/s (session and bench) and live tok/s: the UI accent.
    pub decode: RGBColor,
    /// TTFT (session) and prefill tok/s (bench): system indigo.
    pub secondary_series: RGBColor,
    /// Live memory used: system teal.
    pub mem_used: RGBColor,
    /// Live memory available: a grey, it is the room left, not an alarm.
    pub mem_available: RGBColor,
    /// Live swap used: system purple.
    pub swap: RGBColor,
    /// The slowdown-with-swap marker: `--error`.
    pub alert: RGBColor,
    pub pressure_normal: RGBColor,
    pub pressure_warning: RGBColor,
    pub pressure_critical: RGBColor,
    pub pressure_unknown: RGBColor,
}

impl Palette {
    pub fn pressure(&self, level: PressureLevel) -> RGBColor {
        match level {
            PressureLevel::Normal => self.pressure_normal,
            PressureLevel::Warning => self.pressure_warning,
            PressureLevel::Critical => self.pressure_critical,
            PressureLevel::Unknown => self.pressure_unknown,
        }
    }
}

const LIGHT: Palette = Palette {
    background: RGBColor(0xff, 0xff, 0xff),
    text: RGBColor(0x1d, 0x1d, 0x1f),
    text_secondary: RGBColor(0x5f, 0x5f, 0x64),
    grid: RGBColor(0xec, 0xec, 0xee),
    axis: RGBColor(0xb4, 0xb4, 0xb9),
    decode: RGBColor(0x00, 0x7a, 0xff),
    secondary_series: RGBColor(0x58, 0x56, 0xd6),
    mem_used: RGBColor(0x30, 0xb0, 0xc7),
    mem_available: RGBColor(0x8e, 0x8e, 0x93),
    swap: RGBColor(0xaf, 0x52, 0xde),
    alert: RGBColor(0xd7, 0x00, 0x15),
    pressure_normal: RGBColor(0x34, 0xc7, 0x59),
    pressure_warning: RGBColor(0xff, 0x9f, 0x0a),
    pressure_critical: RGBColor(0xff, 0x3b, 0x30),
    pressure_unknown: RGBColor(0xae, 0xae, 0xb2),
};

const DARK: Palette = Palette {
    background: RGBColor(0x28, 0x28, 0x2a),
    text: RGBColor(0xf5, 0xf5, 0xf7),
    text_secondary: RGBColor(0xa1, 0xa1, 0xa6),
    grid: RGBColor(0x3a, 0x3a, 0x3c),
    axis: RGBColor(0x63, 0x63, 0x66),
    decode: RGBColor(0x0a, 0x84, 0xff),
    secondary_series: RGBColor(0x7d, 0x7a, 0xff),
    mem_used: RGBColor(0x40, 0xc8, 0xe0),
    mem_available: RGBColor(0x98, 0x98, 0x9d),
    swap: RGBColor(0xda, 0x8f, 0xff),
    alert: RGBColor(0xff, 0x69, 0x61),
    pressure_normal: RGBColor(0x30, 0xd1, 0x58),
    pressure_warning: RGBColor(0xff, 0x9f, 0x0a),
    pressure_critical: RGBColor(0xff, 0x45, 0x3a),
    pressure_unknown: RGBColor(0x63, 0x63, 0x66),
};

/// Theme and pixel size of one chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChartStyle {
    pub theme: Theme,
    pub width: u32,
    pub height: u32,
}

impl ChartStyle {
    /// The popover is about 420 px wide; 400 leaves its padding.
    pub const POPOVER_WIDTH: u32 = 400;
    pub const POPOVER_HEIGHT: u32 = 300;
    /// Below this the tick labels of two stacked panels start to collide.
    pub const MIN_WIDTH: u32 = 240;
    pub const MIN_HEIGHT: u32 = 180;

    /// Popover-sized, in `theme`.
    pub fn popover(theme: Theme) -> Self {
        Self { theme, width: Self::POPOVER_WIDTH, height: Self::POPOVER_HEIGHT }
    }

    /// The live graph under the popover's header: full width, short.
    pub const LIVE_HEIGHT: u32 = 200;

    /// The live graph's size, in `theme`.
    pub fn live(theme: Theme) -> Self {
        Self { theme, width: Self::POPOVER_WIDTH, height: Self::LIVE_HEIGHT }
    }

    pub fn light() -> Self {
        Self::popover(Theme::Light)
    }

    pub fn dark() -> Self {
        Self::popover(Theme::Dark)
    }

    pub fn with_size(self, width: u32, height: u32) -> Self {
        Self { width, height, ..self }
    }

    pub(crate) fn check_size(&self) -> Result<()> {
        if self.width < Self::MIN_WIDTH || self.height < Self::MIN_HEIGHT {
            return Err(ChartError::TooSmall {
                width: self.width,
                height: self.height,
                min_width: Self::MIN_WIDTH,
                min_height: Self::MIN_HEIGHT,
            });
        }
        Ok(())
    }
}

impl Default for ChartStyle {
    fn default() -> Self {
        Self::light()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn themes_parse_by_name_and_reject_others() {
        assert_eq!("light".parse::<Theme>().ok(), Some(Theme::Light));
        assert_eq!(" Dark ".parse::<Theme>().ok(), Some(Theme::Dark));
        let err = "sepia".parse::<Theme>().err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("unknown chart theme \"sepia\"; expected \"light\" or \"dark\""));
    }

    #[test]
    fn series_colours_are_distinct_within_each_theme() {
        for theme in [Theme::Light, Theme::Dark] {
            let p = theme.palette();
            let series = [p.decode, p.secondary_series, p.mem_used, p.mem_available, p.swap, p.alert];
            for (i, a) in series.iter().enumerate() {
                for b in &series[i + 1..] {
                    assert_ne!(a, b, "{theme}: two series share a colour");
                }
            }
        }
    }

    #[test]
    fn too_small_is_a_typed_error() {
        let err = ChartStyle::light().with_size(100, 80).check_size();
        assert!(matches!(err, Err(ChartError::TooSmall { width: 100, height: 80, .. })));
    }
}
