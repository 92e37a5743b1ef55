//! The live graph: memory used (an area) against the budget (a dashed line),
//! swap (a thin line) and the pressure level (a faint band, named in words)
//! on one time axis with the decode tok/s of answers (dots on a right-hand
//! axis, one per second while an answer streams), and the stretches where an
//! answer was slowed by memory shaded and labelled. Gaps where nothing was
//! measured stay gaps: no line is drawn across them and no rate is made up.
//!
//! The marks carry data attributes (`data-series="memory-used" | "swap" |
//! "budget" | "tps" | "slowdown" | "pressure"`, and per tok/s dot
//! `data-at-ms` / `data-tps`), so the UI and the tests address them by
//! meaning rather than by colour or position.

use headroom_core::pressure::PressureLevel;
use headroom_core::slowdown::{RatePoint, Stretch};
use headroom_core::timeline::{is_gap, MemoryPoint};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Serialize;

use crate::draw::{self, Area, DrawResult, Tags};
use crate::error::{ChartError, Result};
use crate::format;
use crate::style::{ChartStyle, Palette};

const CHART: &str = "live";

/// 1 GB on the axis is 2^30 bytes, as the UI prints memory.
const GB: f64 = (1u64 << 30) as f64;
const MINUTE_MS: f64 = 60_000.0;

/// The shortest window the graph draws.
pub const MIN_WINDOW_MS: u64 = 60_000;

/// What the live graph shows.
#[derive(Debug, Clone, Copy)]
pub struct LiveData<'a> {
    /// The right edge: now, Unix ms.
    pub end_ms: u64,
    /// How far back the graph reaches (5, 15 or 60 minutes in the app).
    pub window_ms: u64,
    /// Memory rows and readings, each standing for its span (any order).
    pub memory: &'a [MemoryPoint],
    /// Decode-rate points of answers (any order).
    pub rates: &'a [RatePoint],
    /// Stretches slowed by memory (only those with a cause are drawn).
    pub slowdowns: &'a [Stretch],
    /// The dashed line: memory the machine can give before it swaps (total
    /// minus the OS headroom); `None` draws no line.
    pub budget_bytes: Option<u64>,
}

/// The plot area in the SVG's pixels, and the times at its edges: what the
/// UI needs to map the pointer to a time for the hover read-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct PlotBox {
    pub left: i32,
    pub right: i32,
    pub top: i32,
    pub bottom: i32,
    pub start_ms: u64,
    pub end_ms: u64,
}

/// A drawn live graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveChart {
    pub svg: String,
    pub plot: PlotBox,
}

/// The live graph as an SVG document (see [`live_chart`]).
pub fn live_svg(data: &LiveData<'_>, style: &ChartStyle) -> Result<String> {
    live_chart(data, style).map(|c| c.svg)
}

/// Draws the live graph: x is minutes before `end_ms` ("now" at the right);
/// left axis GB (0 to the machine's total), right axis tok/s. No memory
/// reading and no rate in the window draws a "no readings yet" card.
pub fn live_chart(data: &LiveData<'_>, style: &ChartStyle) -> Result<LiveChart> {
    if data.window_ms < MIN_WINDOW_MS {
        return Err(ChartError::InvalidWindow { chart: CHART, window_ms: data.window_ms, min_ms: MIN_WINDOW_MS });
    }
    draw::check_values(CHART, "tok/s", data.rates.iter().map(|r| Some(r.tps)))?;
    let start_ms = data.end_ms.saturating_sub(data.window_ms);
    let in_window = |from: u64, to: u64| to > start_ms && from <= data.end_ms;
    let mut memory: Vec<MemoryPoint> =
        data.memory.iter().copied().filter(|m| in_window(m.at_ms, m.end_ms().max(m.at_ms + 1))).collect();
    memory.sort_by_key(|m| m.at_ms);
    let mut rates: Vec<RatePoint> =
        data.rates.iter().copied().filter(|r| r.at_ms >= start_ms && r.at_ms <= data.end_ms).collect();
    rates.sort_by_key(|r| r.at_ms);
    let slowdowns: Vec<(Stretch, &'static str)> = data
        .slowdowns
        .iter()
        .filter(|s| in_window(s.start_ms, s.end_ms))
        .filter_map(|s| Some((*s, s.label()?)))
        .collect();
    let plot_none = PlotBox { left: 0, right: 0, top: 0, bottom: 0, start_ms, end_ms: data.end_ms };
    if memory.is_empty() && rates.is_empty() {
        let svg = crate::no_data_svg(style, "No readings yet", "Memory and tok/s appear here while Headroom runs.")?;
        return Ok(LiveChart { svg, plot: plot_none });
    }

    // x: minutes relative to now (negative), clamped to the window.
    let minutes = |at: u64| (at.clamp(start_ms, data.end_ms) as f64 - data.end_ms as f64) / MINUTE_MS;
    let window_min = data.window_ms as f64 / MINUTE_MS;
    let x = -window_min..0.0;
    let total = memory.iter().map(|m| m.total_bytes).max().unwrap_or(0);
    let mem_top = memory
        .iter()
        .map(|m| m.total_bytes.max(m.used_bytes).max(m.swap_used_bytes))
        .chain(data.budget_bytes)
        .max()
        .map_or(1.0, |b| (b as f64 / GB).max(0.5) * 1.04);
    let tps_top = draw::max_of(rates.iter().map(|r| Some(r.tps))).map_or(1.0, |m| (m * 1.2).max(1.0));
    let current = memory.last().map_or(PressureLevel::Unknown, |m| m.pressure);

    let tags = Tags::default();
    let mut plot = plot_none;
    let svg = draw::render(CHART, style, |root, palette| {
        const LEGEND: u32 = 18;
        let (legend, rest) = root.split_vertically(LEGEND);
        draw_legend(&legend, palette, current)?;
        let mut chart = ChartBuilder::on(&rest)
            .margin_top(4)
            .margin_right(4)
            .x_label_area_size(20)
            .y_label_area_size(34)
            .right_y_label_area_size(34)
            .build_cartesian_2d(x.clone(), 0.0..mem_top)?
            .set_secondary_coord(x.clone(), 0.0..tps_top);
        chart
            .configure_mesh()
            .x_labels(7)
            .y_labels(5)
            .max_light_lines(0)
            .bold_line_style(palette.grid)
            .axis_style(palette.axis)
            .set_all_tick_mark_size(3)
            .label_style(draw::font(draw::SMALL_PX - 1.0, palette.text_secondary))
            .axis_desc_style(draw::font(draw::SMALL_PX, palette.text_secondary))
            .x_label_formatter(&minutes_ago)
            .y_label_formatter(&|v| format::number(*v))
            .y_desc("GB")
            .draw()?;
        chart
            .configure_secondary_axes()
            .axis_style(palette.axis)
            .label_style(draw::font(draw::SMALL_PX - 1.0, palette.text_secondary))
            .axis_desc_style(draw::font(draw::SMALL_PX, palette.text_secondary))
            .y_labels(5)
            .y_label_formatter(&|v| format::number(*v))
            .y_desc("tok/s")
            .draw()?;
        let (xs, ys) = chart.plotting_area().get_pixel_range();
        plot = PlotBox { left: xs.start, right: xs.end, top: ys.start, bottom: ys.end, start_ms, end_ms: data.end_ms };

        // Behind everything: the pressure band, then the slowdown shading.
        let bands = level_runs(&memory);
        let band_attrs = bands
            .iter()
            .map(|b| {
                vec![
                    ("level", b.level.as_str().to_owned()),
                    ("start-ms", b.from.to_string()),
                    ("end-ms", b.to.to_string()),
                ]
            })
            .collect();
        tags.group(
            root,
            vec![("series", "pressure".into()), ("current", current.as_str().into())],
            band_attrs,
            || {
                chart.draw_series(bands.iter().map(|b| {
                    let color = palette.pressure(b.level).mix(band_alpha(b.level));
                    Rectangle::new([(minutes(b.from), 0.0), (minutes(b.to), mem_top)], color.filled())
                }))?;
                Ok(())
            },
        )?;
        let slow_attrs = slowdowns
            .iter()
            .map(|(s, _)| {
                vec![
                    ("start-ms", s.start_ms.to_string()),
                    ("end-ms", s.end_ms.to_string()),
                    ("sentence", s.sentence().unwrap_or_default()),
                ]
            })
            .collect();
        tags.group(
            root,
            vec![("series", "slowdown".into()), ("count", slowdowns.len().to_string())],
            slow_attrs,
            || {
                chart.draw_series(slowdowns.iter().map(|(s, _)| {
                    Rectangle::new(
                        [(minutes(s.start_ms), 0.0), (minutes(s.end_ms), mem_top)],
                        palette.alert.mix(0.14).filled(),
                    )
                }))?;
                Ok(())
            },
        )?;

        // Memory used: an area per run of readings without a gap.
        let runs = contiguous(&memory);
        let used_steps: Vec<Vec<(f64, f64)>> =
            runs.iter().map(|run| steps(run, &minutes, |m| m.used_bytes as f64 / GB)).collect();
        let last_used = memory.last().map_or(0, |m| m.used_bytes);
        tags.group(
            root,
            vec![
                ("series", "memory-used".into()),
                ("points", memory.len().to_string()),
                ("runs", runs.len().to_string()),
                ("last-bytes", last_used.to_string()),
                ("total-bytes", total.to_string()),
            ],
            Vec::new(),
            || {
                for path in &used_steps {
                    let mut area = path.clone();
                    if let (Some(&(x0, _)), Some(&(x1, _))) = (path.first(), path.last()) {
                        area.push((x1, 0.0));
                        area.push((x0, 0.0));
                    }
                    chart.draw_series(std::iter::once(Polygon::new(area, palette.mem_used.mix(0.28).filled())))?;
                    let line = ShapeStyle { color: palette.mem_used.to_rgba(), filled: false, stroke_width: 2 };
                    chart.draw_series(std::iter::once(PathElement::new(path.clone(), line)))?;
                }
                Ok(())
            },
        )?;

        if let Some(budget) = data.budget_bytes {
            let y = budget as f64 / GB;
            let text = format!("budget {}", gb(budget));
            tags.group(root, vec![("series", "budget".into()), ("bytes", budget.to_string())], Vec::new(), || {
                let style = ShapeStyle { color: palette.text_secondary.to_rgba(), filled: false, stroke_width: 1 };
                chart.draw_series(std::iter::once(DashedPathElement::new(
                    vec![(x.start, y), (0.0, y)],
                    5,
                    4,
                    style,
                )))?;
                // At the left end, clear of the slowdown labels (recent, so right).
                let (px, py) = chart.backend_coord(&(x.start, y));
                let label =
                    draw::font(draw::SMALL_PX - 1.0, palette.text_secondary).pos(Pos::new(HPos::Left, VPos::Bottom));
                draw::text_at(&chart, (px + 3, py - 2), &text, label)
            })?;
        }

        // Swap: a thin line over the same runs.
        let swap_steps: Vec<Vec<(f64, f64)>> =
            runs.iter().map(|run| steps(run, &minutes, |m| m.swap_used_bytes as f64 / GB)).collect();
        let last_swap = memory.last().map_or(0, |m| m.swap_used_bytes);
        tags.group(
            root,
            vec![
                ("series", "swap".into()),
                ("points", memory.len().to_string()),
                ("last-bytes", last_swap.to_string()),
            ],
            Vec::new(),
            || {
                let line = ShapeStyle { color: palette.swap.to_rgba(), filled: false, stroke_width: 1 };
                chart.draw_series(swap_steps.iter().map(|path| PathElement::new(path.clone(), line)))?;
                Ok(())
            },
        )?;

        // Labels of the pressure band (in words, for colour-blind readers)
        // and of the slowdowns, over the areas but under the dots.
        band_labels(&chart, palette, &bands, &minutes)?;
        for (s, label) in &slowdowns {
            slowdown_label(&chart, palette, minutes(s.start_ms), minutes(s.end_ms), label)?;
        }

        // Decode tok/s: one dot per point, on the right-hand axis.
        let dot_attrs = rates
            .iter()
            .map(|r| {
                vec![("at-ms", r.at_ms.to_string()), ("tps", format!("{:.2}", r.tps)), ("tokens", r.tokens.to_string())]
            })
            .collect();
        tags.group(root, vec![("series", "tps".into()), ("points", rates.len().to_string())], dot_attrs, || {
            let radius = if rates.len() > 120 { 2 } else { 3 };
            chart.draw_secondary_series(
                rates.iter().map(|r| Circle::new((minutes(r.at_ms), r.tps), radius, palette.decode.filled())),
            )?;
            Ok(())
        })?;
        Ok(())
    })?;
    Ok(LiveChart { svg: tags.apply(CHART, &svg)?, plot })
}

/// "5m" … "1m", "now" (x is in minutes, negative before now).
fn minutes_ago(v: &f64) -> String {
    if v.abs() < 1e-9 {
        "now".to_owned()
    } else if *v > 0.0 {
        String::new()
    } else {
        format!("{}m", format::number(-v))
    }
}

fn gb(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / GB)
}

fn band_alpha(level: PressureLevel) -> f64 {
    match level {
        PressureLevel::Normal => 0.05,
        PressureLevel::Warning => 0.16,
        PressureLevel::Critical => 0.2,
        PressureLevel::Unknown => 0.0,
    }
}

/// A slowdown's mark over the shading: a bar along the top of the plot over
/// the stretch (apart from the pressure band's tint), its label under it,
/// inside the stretch when it fits, else ending at the stretch's end.
fn slowdown_label(chart: &DualChart<'_, '_>, palette: &Palette, x0: f64, x1: f64, label: &str) -> DrawResult {
    let top = chart.y_range().end;
    let (px0, py) = chart.backend_coord(&(x0, top));
    let (px1, _) = chart.backend_coord(&(x1, top));
    let bar = ShapeStyle { color: palette.alert.to_rgba(), filled: true, stroke_width: 1 };
    let area = chart.plotting_area().strip_coord_spec();
    let (ox, oy) = area.get_base_pixel();
    area.draw(&Rectangle::new([(px0 - ox, py - oy), (px1.max(px0 + 2) - ox, py - oy + 3)], bar))?;
    let px = draw::SMALL_PX - 1.0;
    let plot_right = chart.backend_coord(&(0.0, 0.0)).0;
    let fits = px0 + 3 + draw::text_width(label, px) <= plot_right;
    let (at, h) = if fits { (px0 + 3, HPos::Left) } else { (px1 - 3, HPos::Right) };
    // Under the pressure band's own label (at the top).
    draw::text_at(chart, (at, py + 17), label, draw::font(px, palette.alert).pos(Pos::new(h, VPos::Top)))
}

/// A stretch of one pressure level without a gap.
#[derive(Debug, Clone, Copy, PartialEq)]
struct LevelRun {
    from: u64,
    to: u64,
    level: PressureLevel,
}

/// Readings merged into runs of one level (unknown is left out: no band).
fn level_runs(memory: &[MemoryPoint]) -> Vec<LevelRun> {
    let mut runs: Vec<LevelRun> = Vec::new();
    let mut prev: Option<&MemoryPoint> = None;
    for m in memory {
        let joined = prev.is_some_and(|p| !is_gap(p, m));
        match runs.last_mut() {
            Some(run) if joined && run.level == m.pressure => run.to = run.to.max(m.end_ms()),
            _ => runs.push(LevelRun { from: m.at_ms, to: m.end_ms(), level: m.pressure }),
        }
        prev = Some(m);
    }
    runs.retain(|r| r.level != PressureLevel::Unknown);
    runs
}

/// Readings split where there is a gap between them.
fn contiguous(memory: &[MemoryPoint]) -> Vec<&[MemoryPoint]> {
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=memory.len() {
        if i == memory.len() || is_gap(&memory[i - 1], &memory[i]) {
            if i > start {
                runs.push(&memory[start..i]);
            }
            start = i;
        }
    }
    runs
}

/// A staircase through a run: each reading holds its value over its span
/// (a stored row is the worst of its span, so a slope would invent values).
fn steps(run: &[MemoryPoint], x: &dyn Fn(u64) -> f64, y: impl Fn(&MemoryPoint) -> f64) -> Vec<(f64, f64)> {
    let mut path = Vec::with_capacity(run.len() * 2);
    for (i, m) in run.iter().enumerate() {
        // Up to the next reading, so the steps meet.
        let end = run.get(i + 1).map_or(m.end_ms(), |next| next.at_ms);
        path.push((x(m.at_ms), y(m)));
        path.push((x(end.max(m.at_ms)), y(m)));
    }
    path
}

/// The level's name at the start of each warning or critical run wide
/// enough to hold it.
fn band_labels(
    chart: &DualChart<'_, '_>,
    palette: &Palette,
    bands: &[LevelRun],
    minutes: &dyn Fn(u64) -> f64,
) -> DrawResult {
    for b in bands.iter().filter(|b| matches!(b.level, PressureLevel::Warning | PressureLevel::Critical)) {
        let (x0, y0) = chart.backend_coord(&(minutes(b.from), chart.y_range().end));
        let (x1, _) = chart.backend_coord(&(minutes(b.to), 0.0));
        let text = b.level.as_str();
        if x1 - x0 >= draw::text_width(text, draw::SMALL_PX - 1.0) + 6 {
            let style = draw::font(draw::SMALL_PX - 1.0, palette.text).pos(Pos::new(HPos::Left, VPos::Top));
            draw::text_at(chart, (x0 + 3, y0 + 2), text, style)?;
        }
    }
    Ok(())
}

type DualChart<'a, 'b> = plotters::chart::DualCoordChartContext<
    'a,
    draw::Svg<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The legend row: swatches for the series, and the pressure level now, in words.
fn draw_legend(area: &Area<'_>, palette: &Palette, current: PressureLevel) -> DrawResult {
    let px = draw::SMALL_PX - 0.5;
    let style = draw::font(px, palette.text_secondary).pos(Pos::new(HPos::Left, VPos::Center));
    let y = 10;
    let mut x = 34;
    let line = |c: RGBColor, w| ShapeStyle { color: c.to_rgba(), filled: false, stroke_width: w };
    area.draw(&Rectangle::new([(x, y - 4), (x + 10, y + 4)], palette.mem_used.mix(0.5).filled()))?;
    area.draw(&Text::new("used", (x + 14, y), style.clone()))?;
    x += 14 + draw::text_width("used", px) + 12;
    area.draw(&DashedPathElement::new(vec![(x, y), (x + 12, y)], 3, 2, line(palette.text_secondary, 1)))?;
    area.draw(&Text::new("budget", (x + 16, y), style.clone()))?;
    x += 16 + draw::text_width("budget", px) + 12;
    area.draw(&PathElement::new(vec![(x, y), (x + 12, y)], line(palette.swap, 1)))?;
    area.draw(&Text::new("swap", (x + 16, y), style.clone()))?;
    x += 16 + draw::text_width("swap", px) + 12;
    area.draw(&Rectangle::new([(x + 2, y - 2), (x + 6, y + 2)], palette.decode.filled()))?;
    area.draw(&Text::new("tok/s", (x + 10, y), style.clone()))?;
    // Right-aligned: the level now, with its colour.
    let (w, _) = area.dim_in_pixel();
    let text = format!("pressure {current}");
    let right = w as i32 - 36;
    let tx = right - draw::text_width(&text, px);
    area.draw(&Rectangle::new([(tx - 12, y - 4), (tx - 4, y + 4)], palette.pressure(current).filled()))?;
    area.draw(&Text::new(text, (tx, y), style))
}

#[cfg(test)]
mod tests {
    use headroom_core::slowdown::{find_stretches, MemoryMark, Policy};

    use super::*;
    use crate::svgtest::{self, parse};
    use crate::Theme;

    const T0: u64 = 1_800_000_000_000;
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn mem(at_s: u64, span_s: u64, used_gib: f64, swap_mib: u64, pressure: PressureLevel) -> MemoryPoint {
        let used = (used_gib * GIB as f64) as u64;
        MemoryPoint {
            at_ms: T0 + at_s * 1000,
            span_ms: span_s * 1000,
            total_bytes: 24 * GIB,
            available_bytes: 24 * GIB - used,
            used_bytes: used,
            swap_total_bytes: 4 * GIB,
            swap_used_bytes: swap_mib * MIB,
            process_rss_bytes: 200 * MIB,
            pressure,
        }
    }

    /// Five minutes at 1 Hz: a model loads, swap grows from 200 s, warning then critical.
    fn five_minutes() -> Vec<MemoryPoint> {
        (0..300)
            .map(|s| {
                let level = match s {
                    0..=199 => PressureLevel::Normal,
                    200..=249 => PressureLevel::Warning,
                    _ => PressureLevel::Critical,
                };
                let used = 6.0 + (s as f64 / 20.0).min(12.0);
                mem(s, 1, used, s.saturating_sub(200) * 12, level)
            })
            .collect()
    }

    /// An answer from 150 s to 280 s: 20 tok/s, then 4 tok/s from 230 s.
    fn answer() -> Vec<RatePoint> {
        (150..280u64)
            .filter_map(|s| {
                let n = if s < 230 { 20 } else { 4 };
                RatePoint::from_ms(T0 + s * 1000, T0 + (s + 1) * 1000, n)
            })
            .collect()
    }

    fn data<'a>(memory: &'a [MemoryPoint], rates: &'a [RatePoint], slowdowns: &'a [Stretch]) -> LiveData<'a> {
        LiveData { end_ms: T0 + 300_000, window_ms: 300_000, memory, rates, slowdowns, budget_bytes: Some(20 * GIB) }
    }

    fn group<'a>(doc: &'a roxmltree::Document<'a>, series: &str) -> Option<roxmltree::Node<'a, 'a>> {
        doc.descendants().find(|n| n.has_tag_name("g") && n.attribute("data-series") == Some(series))
    }

    #[test]
    fn every_series_is_found_by_its_data_attributes() {
        let memory = five_minutes();
        let rates = answer();
        let marks: Vec<MemoryMark> = memory.iter().map(MemoryMark::from).collect();
        let stretches = find_stretches(&[], &rates, &marks, &Policy::default());
        assert_eq!(stretches.len(), 1, "{stretches:?}");
        let chart = live_chart(&data(&memory, &rates, &stretches), &ChartStyle::live(Theme::Light)).unwrap();
        let doc = parse(&chart.svg);

        let tps = group(&doc, "tps").expect("no tps group");
        let dots: Vec<_> = tps.children().filter(|n| n.has_tag_name("circle")).collect();
        assert_eq!(dots.len(), 130, "one dot per rate point");
        assert_eq!(tps.attribute("data-points"), Some("130"));
        assert_eq!(dots[0].attribute("data-at-ms"), Some((T0 + 151_000).to_string().as_str()));
        assert_eq!(dots[0].attribute("data-tps"), Some("20.00"));
        assert_eq!(dots[129].attribute("data-tps"), Some("4.00"));
        // Time runs left to right, and a slower answer sits lower.
        let cx =
            |n: &roxmltree::Node<'_, '_>| n.attribute("cx").and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
        let cy =
            |n: &roxmltree::Node<'_, '_>| n.attribute("cy").and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
        assert!(dots.windows(2).all(|w| cx(&w[0]) <= cx(&w[1])));
        assert!(cy(&dots[129]) > cy(&dots[0]));

        let used = group(&doc, "memory-used").expect("no memory group");
        assert_eq!((used.attribute("data-points"), used.attribute("data-runs")), (Some("300"), Some("1")));
        assert_eq!(used.children().filter(|n| n.has_tag_name("polygon")).count(), 1, "one area");
        assert_eq!(
            group(&doc, "swap").and_then(|g| g.attribute("data-last-bytes")),
            Some((99 * 12 * MIB).to_string().as_str())
        );
        assert_eq!(
            group(&doc, "budget").and_then(|g| g.attribute("data-bytes")),
            Some((20 * GIB).to_string().as_str())
        );

        let pressure = group(&doc, "pressure").expect("no pressure group");
        assert_eq!(pressure.attribute("data-current"), Some("critical"));
        let levels: Vec<_> = pressure.children().filter_map(|n| n.attribute("data-level")).collect();
        assert_eq!(levels, vec!["normal", "warning", "critical"], "one band per run of a level");
        for word in
            ["warning", "critical", "pressure critical", "budget 20.0 GB", "slowed by swap", "now", "tok/s", "GB"]
        {
            assert!(svgtest::has_text(&doc, word), "missing {word:?} in {:?}", svgtest::texts(&doc));
        }

        let slow = group(&doc, "slowdown").expect("no slowdown group");
        let rect = slow.children().find(|n| n.has_tag_name("rect")).expect("no shading");
        assert!(rect.attribute("data-sentence").is_some_and(|s| s.starts_with("slowed by swap: 20.0 → 4.0 tok/s")));
        // The plot box lies inside the chart, between the two axes.
        assert!(
            chart.plot.left > 20 && chart.plot.right < 380 && chart.plot.top < chart.plot.bottom,
            "{:?}",
            chart.plot
        );
        assert_eq!((chart.plot.start_ms, chart.plot.end_ms), (T0, T0 + 300_000));
    }

    #[test]
    fn gaps_break_the_lines_and_no_rate_is_made_up() {
        // Two runs of readings with 2 minutes between them (the app was off),
        // and one answer in each run: no dot in the gap.
        let mut memory: Vec<MemoryPoint> = (0..60).map(|s| mem(s, 1, 8.0, 0, PressureLevel::Normal)).collect();
        memory.extend((180..300).map(|s| mem(s, 1, 9.0, 0, PressureLevel::Normal)));
        let rates: Vec<RatePoint> = [(10u64, 5u32), (11, 5), (200, 6), (201, 6)]
            .iter()
            .filter_map(|&(s, n)| RatePoint::from_ms(T0 + s * 1000, T0 + (s + 1) * 1000, n))
            .collect();
        let svg = live_svg(&data(&memory, &rates, &[]), &ChartStyle::live(Theme::Dark)).unwrap();
        let doc = parse(&svg);
        let used = group(&doc, "memory-used").expect("no memory group");
        assert_eq!(used.attribute("data-runs"), Some("2"));
        assert_eq!(used.children().filter(|n| n.has_tag_name("polygon")).count(), 2, "an area per run");
        let swap = group(&doc, "swap").expect("no swap group");
        assert_eq!(swap.children().filter(|n| n.has_tag_name("polyline")).count(), 2);
        let tps = group(&doc, "tps").expect("no tps group");
        assert_eq!(tps.children().filter(|n| n.has_tag_name("circle")).count(), 4);
        assert_eq!(svgtest::circle_count(&doc), 4, "no other circle: nothing stands for a missing rate");
        assert_eq!(svgtest::background(&doc).as_deref(), Some("#28282A"), "dark");
        // Only blamed stretches are drawn: none here.
        assert_eq!(group(&doc, "slowdown").and_then(|g| g.attribute("data-count")), Some("0"));
    }

    #[test]
    fn stored_rows_are_steps_and_older_ones_fall_outside_the_window() {
        // A 60-minute window of stored rows: a row from before the window
        // reaches into it, an idle row stretched over 20 minutes.
        let memory = vec![
            mem(0, 900, 7.0, 0, PressureLevel::Normal),
            mem(900, 1200, 7.5, 0, PressureLevel::Normal),
            mem(2100, 10, 12.0, 300, PressureLevel::Warning),
            mem(2110, 10, 12.5, 400, PressureLevel::Warning),
        ];
        let d = LiveData { end_ms: T0 + 3_700_000, window_ms: 3_600_000, ..data(&memory, &[], &[]) };
        let svg = live_svg(&d, &ChartStyle::live(Theme::Light)).unwrap();
        let doc = parse(&svg);
        let used = group(&doc, "memory-used").expect("no memory group");
        assert_eq!((used.attribute("data-points"), used.attribute("data-runs")), (Some("4"), Some("1")));
        for tick in ["60m", "now"] {
            assert!(svgtest::has_text(&doc, tick), "{:?}", svgtest::texts(&doc));
        }
        // Ten minutes later the window starts at 1000 s: the first row (0–900 s) is out of it.
        let d = LiveData { end_ms: T0 + 4_600_000, ..d };
        let svg = live_svg(&d, &ChartStyle::live(Theme::Light)).unwrap();
        let doc = parse(&svg);
        let used = group(&doc, "memory-used").expect("no memory group");
        assert_eq!(used.attribute("data-points"), Some("3"), "the first row ended before the window began");
    }

    #[test]
    fn nothing_to_draw_is_a_card_and_bad_input_is_a_typed_error() {
        let svg = live_svg(&data(&[], &[], &[]), &ChartStyle::live(Theme::Dark)).unwrap();
        let doc = parse(&svg);
        assert!(svgtest::has_text(&doc, "No readings yet"));
        assert_eq!(svgtest::circle_count(&doc), 0);
        let bad = [RatePoint { start_ms: T0, at_ms: T0 + 1000, tokens: 1, tps: f64::NAN }];
        let err = live_svg(&data(&[], &bad, &[]), &ChartStyle::live(Theme::Light)).err();
        assert!(matches!(err, Some(ChartError::InvalidValue { chart: "live", .. })), "{err:?}");
        let short = LiveData { window_ms: 1_000, ..data(&[], &[], &[]) };
        let err = live_svg(&short, &ChartStyle::live(Theme::Light)).err();
        assert!(matches!(err, Some(ChartError::InvalidWindow { window_ms: 1_000, .. })), "{err:?}");
    }

    #[test]
    fn tagging_refuses_a_count_that_does_not_match() {
        let tags = Tags::default();
        let err = draw::render(CHART, &ChartStyle::live(Theme::Light), |root, palette| {
            tags.group(
                root,
                vec![("series", "x".into())],
                vec![vec![("n", "1".into())], vec![("n", "2".into())]],
                || root.draw(&Circle::new((5, 5), 2, palette.decode.filled())),
            )
        })
        .and_then(|svg| tags.apply(CHART, &svg))
        .err();
        assert!(matches!(err, Some(ChartError::Tagging { expected: 2, found: 1, .. })), "{err:?}");
    }
}
