//! The live chart: memory used / available / swap with the pressure level
//! as a band, and tok/s, on one time axis, so a slowdown that coincides with
//! swap growth is visible, and marked.

use headroom_core::pressure::PressureLevel;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::draw::{self, Area, Axes, DrawResult, Series, Xy};
use crate::error::Result;
use crate::format;
use crate::style::{ChartStyle, Palette};

const CHART: &str = "live";

/// 1 GB on the axis is 2^30 bytes, as the UI prints memory.
const GB: f64 = (1u64 << 30) as f64;

/// A tok/s point at most this fraction of the one before is a drop.
pub const SLOWDOWN_RATIO: f64 = 0.8;
/// Swap must have grown by at least this much between the two points.
pub const SWAP_GROWTH_BYTES: u64 = 64 << 20;
/// The time axis covers at least this much, so a fresh chart is not zoomed in.
pub const MIN_WINDOW_S: f64 = 60.0;

/// One memory reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPoint {
    /// Unix time of the reading, ms.
    pub at_ms: u64,
    pub used_bytes: u64,
    pub available_bytes: u64,
    pub swap_used_bytes: u64,
    pub pressure: PressureLevel,
}

/// One tok/s figure (a finished turn's decode rate, or a streaming rate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TpsPoint {
    /// Unix time the rate was measured at, ms.
    pub at_ms: u64,
    pub tps: f64,
}

/// A tok/s drop that happened while swap grew.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slowdown {
    /// When the slower rate was measured.
    pub at_ms: u64,
    pub tps_before: f64,
    pub tps_after: f64,
    pub swap_growth_bytes: u64,
}

/// The drops the live chart marks. The rule: a tok/s point is marked when
/// it is at most [`SLOWDOWN_RATIO`] (80 %) of the point before it AND swap
/// used grew by at least [`SWAP_GROWTH_BYTES`] (64 MiB) between the two
/// points' times. Swap at a time is that of the last reading at or before
/// it (the first reading, for a time before all readings).
pub fn swap_slowdowns(memory: &[MemoryPoint], tps: &[TpsPoint]) -> Vec<Slowdown> {
    let mut memory = memory.to_vec();
    memory.sort_by_key(|m| m.at_ms);
    let mut tps = tps.to_vec();
    tps.sort_by_key(|t| t.at_ms);
    let swap_at = |at: u64| {
        let after = memory.partition_point(|m| m.at_ms <= at);
        memory.get(after.saturating_sub(1)).map(|m| m.swap_used_bytes)
    };
    tps.windows(2)
        .filter_map(|pair| {
            let (before, after) = (pair[0], pair[1]);
            let dropped = after.tps <= before.tps * SLOWDOWN_RATIO;
            let growth = swap_at(after.at_ms)?.saturating_sub(swap_at(before.at_ms)?);
            (dropped && growth >= SWAP_GROWTH_BYTES).then_some(Slowdown {
                at_ms: after.at_ms,
                tps_before: before.tps,
                tps_after: after.tps,
                swap_growth_bytes: growth,
            })
        })
        .collect()
}

/// The live chart as an SVG document.
///
/// Time runs left to right in seconds before the newest point (0 = now);
/// the window is the span of the data, at least [`MIN_WINDOW_S`] (the caller
/// passes the last few minutes). Upper panel: used, available and swap in GB,
/// one small `<circle>` per reading and series on a line, under a band
/// coloured by the pressure level (the area is also tinted at warning and
/// critical). Lower panel: one `<circle>` per tok/s point. Each drop found
/// by [`swap_slowdowns`] is a vertical line through both panels in the alert
/// colour, the first one labelled. No points at all draws a "no readings
/// yet" card.
pub fn live_svg(memory: &[MemoryPoint], tps: &[TpsPoint], style: &ChartStyle) -> Result<String> {
    draw::check_values(CHART, "tok/s", tps.iter().map(|t| Some(t.tps)))?;
    let times = memory.iter().map(|m| m.at_ms).chain(tps.iter().map(|t| t.at_ms));
    let (Some(first), Some(last)) = (times.clone().min(), times.max()) else {
        return crate::no_data_svg(style, "No readings yet", "Memory and tok/s appear here while Headroom runs.");
    };
    let mut memory = memory.to_vec();
    memory.sort_by_key(|m| m.at_ms);
    let mut tps = tps.to_vec();
    tps.sort_by_key(|t| t.at_ms);

    // x = seconds relative to the newest point, so 0 is "now".
    let secs = |at: u64| -((last - at) as f64 / 1e3);
    let window = ((last - first) as f64 / 1e3).max(MIN_WINDOW_S);
    let pad = window * 0.02;
    let x = (-window - pad)..pad;
    let gb = |bytes: u64| Some(bytes as f64 / GB);
    let used: Vec<_> = memory.iter().map(|m| (secs(m.at_ms), gb(m.used_bytes))).collect();
    let available: Vec<_> = memory.iter().map(|m| (secs(m.at_ms), gb(m.available_bytes))).collect();
    let swap: Vec<_> = memory.iter().map(|m| (secs(m.at_ms), gb(m.swap_used_bytes))).collect();
    let rates: Vec<_> = tps.iter().map(|t| (secs(t.at_ms), Some(t.tps))).collect();
    let slowdowns: Vec<f64> = swap_slowdowns(&memory, &tps).iter().map(|s| secs(s.at_ms)).collect();
    // Dense readings (1 Hz over minutes) get pinpoint marks so they read as a line.
    let radius = |n: usize| if n > 60 { 1 } else { 2 };

    draw::render(CHART, style, |root, palette| {
        const LEGEND: u32 = 22;
        let (_, h) = root.dim_in_pixel();
        let (legend, rest) = root.split_vertically(LEGEND);
        let mem_h = (h - LEGEND - draw::X_LABEL_AREA) * 11 / 20;
        let (upper, lower) = rest.split_vertically(mem_h);
        draw_legend(&legend, palette)?;

        let mem_max = draw::max_of(used.iter().chain(&available).chain(&swap).map(|p| p.1));
        let mut mem = draw::axes(
            &upper,
            palette,
            &Axes {
                x: x.clone(),
                y: draw::from_zero(mem_max),
                x_desc: None,
                y_desc: "memory (GB)",
                x_fmt: &draw::number_ticks,
                y_fmt: &draw::number_ticks,
                top_margin: 4,
            },
        )?;
        pressure_band(&mut mem, palette, &memory, &secs)?;
        for (points, color) in [(&available, palette.mem_available), (&used, palette.mem_used), (&swap, palette.swap)] {
            draw::series(&mut mem, &Series { color, points, radius: radius(points.len()) })?;
        }
        slowdown_lines(&mut mem, palette, &slowdowns)?;

        let mut rate = draw::axes(
            &lower,
            palette,
            &Axes {
                x: x.clone(),
                y: draw::from_zero(draw::max_of(rates.iter().map(|p| p.1))),
                x_desc: Some("seconds ago"),
                y_desc: "tok/s",
                x_fmt: &seconds_ago,
                y_fmt: &draw::number_ticks,
                top_margin: 10,
            },
        )?;
        slowdown_lines(&mut rate, palette, &slowdowns)?;
        draw::series(&mut rate, &Series { color: palette.decode, points: &rates, radius: radius(rates.len()) + 1 })?;
        // The first drop is labelled: later lines lie to its right, so a
        // label placed left of it crosses none of them.
        if let Some(&at) = slowdowns.first() {
            label_slowdown(&rate, palette, at)?;
        }
        Ok(())
    })
}

fn seconds_ago(v: &f64) -> String {
    if *v > 0.5 {
        String::new()
    } else {
        format::number(-v.round())
    }
}

/// Swatches for the three memory series and the pressure band.
fn draw_legend(area: &Area<'_>, palette: &Palette) -> DrawResult {
    let style = draw::font(draw::SMALL_PX, palette.text_secondary).pos(Pos::new(HPos::Left, VPos::Center));
    let y = 11;
    let mut x = draw::Y_LABEL_AREA as i32;
    for (color, label) in [(palette.mem_used, "used"), (palette.mem_available, "available"), (palette.swap, "swap")] {
        area.draw(&Rectangle::new([(x, y - 4), (x + 8, y + 4)], color.filled()))?;
        area.draw(&Text::new(label, (x + 12, y), style.clone()))?;
        x += 12 + draw::text_width(label, draw::SMALL_PX) + 14;
    }
    for level in [PressureLevel::Normal, PressureLevel::Warning, PressureLevel::Critical] {
        area.draw(&Rectangle::new([(x, y - 4), (x + 6, y + 4)], palette.pressure(level).filled()))?;
        x += 6;
    }
    area.draw(&Text::new("pressure (band)", (x + 4, y), style))
}

/// The band at the top of the memory panel: each reading's level from its
/// time to the next reading's (the newest to "now").
fn pressure_band(
    chart: &mut Xy<'_, '_>,
    palette: &Palette,
    memory: &[MemoryPoint],
    secs: &dyn Fn(u64) -> f64,
) -> DrawResult {
    let top = chart.y_range().end;
    let band = top * 0.045;
    let now = 0.0;
    let spans: Vec<(f64, f64, PressureLevel)> = memory
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let end = memory.get(i + 1).map_or(now, |next| secs(next.at_ms));
            (secs(m.at_ms), end, m.pressure)
        })
        .collect();
    chart.draw_series(
        spans
            .iter()
            .filter(|s| matches!(s.2, PressureLevel::Warning | PressureLevel::Critical))
            .map(|&(x0, x1, level)| Rectangle::new([(x0, 0.0), (x1, top)], palette.pressure(level).mix(0.12).filled())),
    )?;
    chart.draw_series(
        spans
            .iter()
            .map(|&(x0, x1, level)| Rectangle::new([(x0, top - band), (x1, top)], palette.pressure(level).filled())),
    )?;
    Ok(())
}

fn slowdown_lines(chart: &mut Xy<'_, '_>, palette: &Palette, at: &[f64]) -> DrawResult {
    let y = chart.y_range();
    let style = ShapeStyle { color: palette.alert.mix(0.8), filled: false, stroke_width: 1 };
    chart.draw_series(at.iter().map(|&x| PathElement::new(vec![(x, y.start), (x, y.end)], style)))?;
    Ok(())
}

fn label_slowdown(chart: &Xy<'_, '_>, palette: &Palette, at: f64) -> DrawResult {
    let text = "slower as swap grew";
    let (px, py) = chart.backend_coord(&(at, chart.y_range().end));
    let (right, _) = chart.backend_coord(&(chart.x_range().end, 0.0));
    // Right of the line if it fits, else left of it.
    let fits_right = px + 4 + draw::text_width(text, draw::SMALL_PX) < right;
    let (dx, h) = if fits_right { (4, HPos::Left) } else { (-4, HPos::Right) };
    let style = draw::font(draw::SMALL_PX, palette.alert).pos(Pos::new(h, VPos::Top));
    draw::text_at(chart, (px + dx, py + 2), text, style)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::svgtest::{self, parse};
    use crate::{ChartError, Theme};

    const T0: u64 = 1_800_000_000_000;
    const MIB: u64 = 1 << 20;

    fn mem(at_s: u64, swap_mib: u64, pressure: PressureLevel) -> MemoryPoint {
        MemoryPoint {
            at_ms: T0 + at_s * 1_000,
            used_bytes: 20 << 30,
            available_bytes: 10 << 30,
            swap_used_bytes: swap_mib * MIB,
            pressure,
        }
    }

    fn tps(at_s: u64, tps: f64) -> TpsPoint {
        TpsPoint { at_ms: T0 + at_s * 1_000, tps }
    }

    /// 90 s at 1 Hz; swap grows by 10 MiB/s from t = 60 s.
    fn swapping() -> Vec<MemoryPoint> {
        (0..90)
            .map(|s| {
                let level = if s < 60 { PressureLevel::Normal } else { PressureLevel::Critical };
                mem(s, s.saturating_sub(60) * 10, level)
            })
            .collect()
    }

    #[test]
    fn a_drop_is_marked_only_when_swap_grew_with_it() {
        let memory = swapping();
        let rates = [tps(10, 30.0), tps(40, 23.0), tps(55, 29.0), tps(75, 20.0), tps(85, 19.0)];
        let found = swap_slowdowns(&memory, &rates);
        // 10 -> 40: a 23 % drop, but no swap yet. 55 -> 75: 31 % drop while
        // swap grew 150 MiB. 75 -> 85: swap grew 100 MiB, rate fell only 5 %.
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].at_ms, T0 + 75_000);
        assert_eq!(found[0].swap_growth_bytes, 150 * MIB);
        assert_eq!((found[0].tps_before, found[0].tps_after), (29.0, 20.0));
    }

    #[test]
    fn swap_growth_below_the_threshold_is_not_a_slowdown() {
        let memory = [mem(0, 100, PressureLevel::Normal), mem(10, 150, PressureLevel::Normal)];
        let rates = [tps(1, 30.0), tps(11, 10.0)];
        assert!(swap_slowdowns(&memory, &rates).is_empty(), "50 MiB < 64 MiB");
        let memory = [mem(0, 100, PressureLevel::Normal), mem(10, 164, PressureLevel::Normal)];
        assert_eq!(swap_slowdowns(&memory, &rates).len(), 1, "exactly 64 MiB counts");
        assert!(swap_slowdowns(&[], &rates).is_empty(), "no readings, no swap growth known");
    }

    #[test]
    fn one_mark_per_reading_per_series_and_per_rate() {
        let style = ChartStyle::light();
        let p = style.theme.palette();
        let memory = swapping();
        let rates = [tps(10, 30.0), tps(40, 29.0), tps(55, 29.0), tps(75, 20.0), tps(85, 19.0)];
        let svg = live_svg(&memory, &rates, &style).unwrap_or_else(|e| panic!("{e}"));
        let doc = parse(&svg);
        for (name, color) in [("used", p.mem_used), ("available", p.mem_available), ("swap", p.swap)] {
            assert_eq!(svgtest::filled(&doc, color).len(), 90, "{name}");
        }
        assert_eq!(svgtest::filled(&doc, p.decode).len(), 5);
        assert_eq!(svgtest::circle_count(&doc), 90 * 3 + 5);
        // One slowdown: a line in each panel, labelled once.
        assert_eq!(svgtest::polylines(&doc, p.alert), 2);
        assert!(svgtest::has_text(&doc, "slower as swap grew"));
        for label in ["memory (GB)", "tok/s", "seconds ago", "pressure (band)", "swap"] {
            assert!(svgtest::has_text(&doc, label), "missing label {label:?}");
        }
        assert_eq!(svgtest::width(&doc), Some(400));
    }

    #[test]
    fn the_pressure_band_follows_the_readings() {
        let style = ChartStyle::dark();
        let p = style.theme.palette();
        let svg = live_svg(&swapping(), &[], &style).unwrap_or_else(|e| panic!("{e}"));
        let doc = parse(&svg);
        let rects = |color| {
            let c = svgtest::hex(color);
            doc.descendants().filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some(c.as_str())).count()
        };
        // One band segment per reading (plus the legend swatch), and a tint
        // behind each critical reading.
        assert_eq!(rects(p.pressure_normal), 60 + 1);
        assert_eq!(rects(p.pressure_critical), 30 * 2 + 1);
        assert_eq!(rects(p.pressure_warning), 1, "only the legend swatch");
        assert_eq!(svgtest::polylines(&doc, p.alert), 0, "no tok/s, nothing to mark");
    }

    #[test]
    fn the_newest_point_is_now_and_time_runs_left_to_right() {
        let style = ChartStyle::light();
        let p = style.theme.palette();
        let rates = [tps(0, 10.0), tps(30, 12.0), tps(120, 11.0)];
        let svg = live_svg(&[], &rates, &style).unwrap_or_else(|e| panic!("{e}"));
        let doc = parse(&svg);
        let xs: Vec<f64> = svgtest::filled(&doc, p.decode).iter().map(|m| m.0).collect();
        assert!(xs.windows(2).all(|w| w[0] < w[1]), "{xs:?}");
        assert!(svgtest::has_text(&doc, "0"), "the axis reaches now");
        assert!(svgtest::has_text(&doc, "100"), "ticks cover the oldest point: {:?}", svgtest::texts(&doc));
    }

    #[test]
    fn no_readings_draw_a_card_and_bad_rates_are_errors() {
        let doc_text = live_svg(&[], &[], &ChartStyle::popover(Theme::Dark)).unwrap_or_else(|e| panic!("{e}"));
        let doc = parse(&doc_text);
        assert!(svgtest::has_text(&doc, "No readings yet"));
        assert_eq!(svgtest::circle_count(&doc), 0);
        let err = live_svg(&[], &[tps(0, f64::INFINITY)], &ChartStyle::light()).err();
        assert!(matches!(err, Some(ChartError::InvalidValue { chart: "live", index: 0, .. })), "{err:?}");
    }
}
