//! The drawing shared by every chart: the SVG canvas, fonts, a "no data yet"
//! card, and the stacked x/y panel the session and bench charts are made of.
//!
//! Marks: every data point is exactly one `<circle>` in its series' colour,
//! filled when it has a value, a hollow ring on the x axis when it has none
//! (so a turn is never silently dropped). Nothing else in a chart draws a
//! circle; legends use squares.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io;
use std::ops::Range;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::{ChartError, Result};
use crate::format;
use crate::style::{ChartStyle, Palette};

pub(crate) type Svg<'a> = SVGBackend<'a>;
pub(crate) type Area<'a> = DrawingArea<Svg<'a>, Shift>;
pub(crate) type DrawResult<T = ()> = std::result::Result<T, DrawingAreaErrorKind<io::Error>>;
pub(crate) type Xy<'a, 'b> = ChartContext<'a, Svg<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The UI's text stack; the webview resolves it, nothing here reads a font.
const FONT_FAMILY: &str = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif";

/// Tick labels and notes, px. 11 px is the popover's caption size.
pub(crate) const SMALL_PX: f64 = 11.0;
/// Axis titles, px.
pub(crate) const TITLE_PX: f64 = 11.5;
/// Radius of a data mark, px (integer: plotters' circles are).
pub(crate) const MARK_R: u32 = 3;

/// A text style whose SVG `font-size` is `px`: plotters' SVG backend writes
/// the size divided by 1.24, so undo that here.
pub(crate) fn font(px: f64, color: RGBColor) -> TextStyle<'static> {
    (FontFamily::Name(FONT_FAMILY), px * 1.24).into_font().color(&color)
}

/// Width of `text` at `px`, estimated as plotters does without a font
/// (about 0.56 em per character), for placing labels that must not collide.
pub(crate) fn text_width(text: &str, px: f64) -> i32 {
    (text.chars().count() as f64 * px * 0.565).round() as i32
}

/// Renders `draw` onto a fresh canvas of `style`'s size, filled with the
/// theme's background, and returns the SVG document.
pub(crate) fn render(
    chart: &'static str,
    style: &ChartStyle,
    draw: impl FnOnce(&Area<'_>, &Palette) -> DrawResult,
) -> Result<String> {
    style.check_size()?;
    let palette = style.theme.palette();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (style.width, style.height)).into_drawing_area();
        root.fill(&palette.background)
            .and_then(|()| draw(&root, &palette))
            .and_then(|()| root.present())
            .map_err(|source| ChartError::Draw { chart, source })?;
    }
    Ok(svg)
}

/// A readable card instead of empty axes: what the chart will show, and how
/// to get data into it.
pub(crate) fn no_data(root: &Area<'_>, palette: &Palette, title: &str, hint: &str) -> DrawResult {
    let (w, h) = root.dim_in_pixel();
    let (cx, cy) = (w as i32 / 2, h as i32 / 2);
    let centered = |px, color| font(px, color).pos(Pos::new(HPos::Center, VPos::Center));
    root.draw(&Text::new(title.to_owned(), (cx, cy - 10), centered(14.0, palette.text)))?;
    root.draw(&Text::new(hint.to_owned(), (cx, cy + 12), centered(SMALL_PX, palette.text_secondary)))
}

/// Checks that every present value can sit on an axis that starts at 0.
pub(crate) fn check_values<'v>(
    chart: &'static str,
    series: &'static str,
    values: impl IntoIterator<Item = Option<f64>> + 'v,
) -> Result<()> {
    for (index, value) in values.into_iter().enumerate() {
        if let Some(value) = value {
            if !value.is_finite() || value < 0.0 {
                return Err(ChartError::InvalidValue { chart, series, index, value });
            }
        }
    }
    Ok(())
}

/// `lo..hi` (token counts) widened so marks at either end are not cut by
/// the axes; a single value gets a window around it of at least the KV
/// cache's 256-position step (a window of a token or two labels its ticks
/// "0 0 1").
pub(crate) fn padded(lo: f64, hi: f64) -> Range<f64> {
    let span = hi - lo;
    let pad = if span > 0.0 { span * 0.06 } else { (hi.abs() * 0.1).max(256.0) };
    (lo - pad)..(hi + pad)
}

/// `0..max` with headroom above the top mark; tok/s and milliseconds start
/// at zero so the height of a mark reads as its size.
pub(crate) fn from_zero(max: Option<f64>) -> Range<f64> {
    match max {
        Some(m) if m > 0.0 => 0.0..m * 1.18,
        _ => 0.0..1.0,
    }
}

pub(crate) fn max_of(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    values.into_iter().flatten().fold(None, |acc: Option<f64>, v| Some(acc.map_or(v, |a| a.max(v))))
}

/// One series: points in drawing order, `None` where the value is undefined.
#[derive(Debug)]
pub(crate) struct Series<'a> {
    pub color: RGBColor,
    pub points: &'a [(f64, Option<f64>)],
    pub radius: u32,
}

/// Builds x/y axes in `area` and draws the mesh. `x_desc: None` hides the x
/// tick labels (an upper panel sharing the x axis of the one below).
pub(crate) struct Axes<'a> {
    pub x: Range<f64>,
    pub y: Range<f64>,
    pub x_desc: Option<&'a str>,
    pub y_desc: &'a str,
    pub x_fmt: &'a dyn Fn(&f64) -> String,
    pub y_fmt: &'a dyn Fn(&f64) -> String,
    pub top_margin: u32,
}

pub(crate) const Y_LABEL_AREA: u32 = 50;
pub(crate) const X_LABEL_AREA: u32 = 36;
pub(crate) const RIGHT_MARGIN: u32 = 14;

pub(crate) fn axes<'a, 'b>(area: &'a Area<'b>, palette: &Palette, spec: &Axes<'_>) -> DrawResult<Xy<'a, 'b>> {
    let mut chart = ChartBuilder::on(area)
        .margin_top(spec.top_margin)
        .margin_right(RIGHT_MARGIN)
        .x_label_area_size(if spec.x_desc.is_some() { X_LABEL_AREA } else { 0 })
        .y_label_area_size(Y_LABEL_AREA)
        .build_cartesian_2d(spec.x.clone(), spec.y.clone())?;
    let mut mesh = chart.configure_mesh();
    mesh.x_labels(6)
        .y_labels(5)
        .max_light_lines(0)
        .bold_line_style(palette.grid)
        .axis_style(palette.axis)
        .set_all_tick_mark_size(3)
        .label_style(font(SMALL_PX, palette.text_secondary))
        .axis_desc_style(font(TITLE_PX, palette.text))
        .x_label_formatter(spec.x_fmt)
        .y_label_formatter(spec.y_fmt)
        .y_desc(spec.y_desc);
    match spec.x_desc {
        Some(desc) => {
            mesh.x_desc(desc);
        }
        None => {
            // Keep the vertical grid lines aligned with the panel below, but
            // no tick labels: they would repeat the lower panel's.
            mesh.x_label_formatter(&|_| String::new());
        }
    }
    mesh.draw()?;
    Ok(chart)
}

/// Draws a series: a line through consecutive defined points (broken where a
/// value is missing, so a gap is never bridged by a made-up slope), then one
/// circle per point.
pub(crate) fn series(chart: &mut Xy<'_, '_>, series: &Series<'_>) -> DrawResult {
    let baseline = chart.y_range().start;
    let line = ShapeStyle { color: series.color.mix(0.45), filled: false, stroke_width: 2 };
    for run in series.points.split(|(_, y)| y.is_none()) {
        if run.len() > 1 {
            let path: Vec<(f64, f64)> = run.iter().filter_map(|&(x, y)| y.map(|y| (x, y))).collect();
            chart.draw_series(std::iter::once(PathElement::new(path, line)))?;
        }
    }
    let filled = series.color.filled();
    let ring = ShapeStyle { color: series.color.to_rgba(), filled: false, stroke_width: 1 };
    chart.draw_series(series.points.iter().map(|&(x, y)| match y {
        Some(y) => Circle::new((x, y), series.radius, filled),
        None => Circle::new((x, baseline), series.radius, ring),
    }))?;
    Ok(())
}

/// A short note at the top right inside the plot area (what a hollow ring
/// means).
pub(crate) fn note(chart: &Xy<'_, '_>, palette: &Palette, text: &str) -> DrawResult {
    let (px, py) = chart.backend_coord(&(chart.x_range().end, chart.y_range().end));
    let style = font(SMALL_PX - 1.0, palette.text_secondary).pos(Pos::new(HPos::Right, VPos::Top));
    text_at(chart, (px - 4, py + 3), text, style)
}

/// Draws text at an absolute pixel position inside the plot area.
pub(crate) fn text_at(chart: &Xy<'_, '_>, at: (i32, i32), text: &str, style: TextStyle<'_>) -> DrawResult {
    // A pixel view of the plot area: its origin is the area's own corner.
    let area = chart.plotting_area().strip_coord_spec();
    let (ox, oy) = area.get_base_pixel();
    area.draw(&Text::new(text.to_owned(), (at.0 - ox, at.1 - oy), style))
}

/// Labels points with short texts above their marks, skipping a label that
/// would overlap the last one drawn (the last point always keeps its label).
pub(crate) fn point_labels(chart: &Xy<'_, '_>, palette: &Palette, labels: &[(f64, f64, String)]) -> DrawResult {
    let placed = thin_labels(chart, labels);
    let style = font(SMALL_PX - 1.5, palette.text_secondary).pos(Pos::new(HPos::Center, VPos::Bottom));
    for i in placed {
        let (x, y, ref text) = labels[i];
        let (px, py) = chart.backend_coord(&(x, y));
        text_at(chart, (px, py - MARK_R as i32 - 2), text, style.clone())?;
    }
    Ok(())
}

fn thin_labels(chart: &Xy<'_, '_>, labels: &[(f64, f64, String)]) -> Vec<usize> {
    let mut kept: Vec<usize> = Vec::new();
    let mut right_edge = i32::MIN;
    let last = labels.len().saturating_sub(1);
    for (i, (x, y, text)) in labels.iter().enumerate() {
        let (px, _) = chart.backend_coord(&(*x, *y));
        let half = text_width(text, SMALL_PX - 1.5) / 2 + 2;
        if px - half >= right_edge {
            kept.push(i);
            right_edge = px + half;
        } else if i == last {
            // The newest turn matters most: it replaces the label it hits.
            kept.pop();
            kept.push(i);
            right_edge = px + half;
        }
    }
    kept
}

/// The x tick formatter for token counts.
pub(crate) fn token_ticks(v: &f64) -> String {
    if *v < 0.0 {
        String::new()
    } else {
        format::tokens(*v)
    }
}

pub(crate) fn number_ticks(v: &f64) -> String {
    format::number(*v)
}

/// One panel of a stacked chart.
#[derive(Debug)]
pub(crate) struct Panel<'a> {
    pub y_desc: String,
    pub y_fmt: fn(&f64) -> String,
    pub series: Series<'a>,
    /// Texts above marks (turn numbers).
    pub labels: Vec<(f64, f64, String)>,
    pub note: Option<&'a str>,
}

/// Panels stacked on one shared x axis, labelled once at the bottom, with
/// plot areas of equal height so their slopes compare by eye.
pub(crate) fn stacked(
    root: &Area<'_>,
    palette: &Palette,
    x: &Range<f64>,
    x_desc: &str,
    x_fmt: &dyn Fn(&f64) -> String,
    panels: &[Panel<'_>],
) -> DrawResult {
    const TOP: u32 = 10;
    const GAP: u32 = 12;
    let n = panels.len().max(1) as u32;
    let (_, h) = root.dim_in_pixel();
    let plot_h = h.saturating_sub(TOP + X_LABEL_AREA + GAP * (n - 1)) / n;
    let mut rest = root.clone();
    for (i, panel) in panels.iter().enumerate() {
        let first = i == 0;
        let last = i + 1 == panels.len();
        let top_margin = if first { TOP } else { GAP };
        let area = if last {
            rest.clone()
        } else {
            let (area, below) = rest.split_vertically(top_margin + plot_h);
            rest = below;
            area
        };
        let values = panel.series.points.iter().map(|p| p.1);
        let spec = Axes {
            x: x.clone(),
            y: from_zero(max_of(values)),
            x_desc: last.then_some(x_desc),
            y_desc: &panel.y_desc,
            x_fmt,
            y_fmt: &panel.y_fmt,
            top_margin,
        };
        let mut chart = axes(&area, palette, &spec)?;
        series(&mut chart, &panel.series)?;
        point_labels(&chart, palette, &panel.labels)?;
        if let Some(text) = panel.note {
            note(&chart, palette, text)?;
        }
    }
    Ok(())
}

/// Opens a sentinel: a private-use character no chart text contains.
const SENTINEL: char = '\u{E000}';

/// An attribute of a tagged group or mark: `data-<name>` = value.
pub(crate) type Attr = (&'static str, String);

/// Groups of marks that the UI and the tests find by data attributes (a
/// series, the slowdown stretches), not by colour or position. plotters'
/// SVG backend cannot attach attributes, so while drawing, a group is
/// bracketed by two sentinel `<text>` elements, and [`Tags::apply`] turns
/// them into `<g data-…>…</g>`, giving each element inside the attributes
/// of its own mark when the group lists them (then the counts must match).
#[derive(Debug, Default)]
pub(crate) struct Tags {
    groups: RefCell<Vec<TagGroup>>,
}

#[derive(Debug)]
struct TagGroup {
    attrs: Vec<Attr>,
    marks: Vec<Vec<Attr>>,
}

impl Tags {
    /// Draws `draw`'s elements as one group with `attrs`; `marks`, if not
    /// empty, are the attributes of each element it draws, in order.
    pub(crate) fn group<T>(
        &self,
        root: &Area<'_>,
        attrs: Vec<Attr>,
        marks: Vec<Vec<Attr>>,
        draw: impl FnOnce() -> DrawResult<T>,
    ) -> DrawResult<T> {
        let id = {
            let mut groups = self.groups.borrow_mut();
            groups.push(TagGroup { attrs, marks });
            groups.len() - 1
        };
        // `o`pen / `c`lose: letters, which plotters writes as they are.
        let sentinel = |kind: char| Text::new(format!("{SENTINEL}{id}{kind}"), (0, 0), font(1.0, BLACK));
        root.draw(&sentinel('o'))?;
        let out = draw()?;
        root.draw(&sentinel('c'))?;
        Ok(out)
    }

    /// The SVG with every group's sentinels turned into a `<g>` with its
    /// attributes, and each mark's attributes on its element.
    pub(crate) fn apply(&self, chart: &'static str, svg: &str) -> Result<String> {
        let groups = self.groups.borrow();
        let lines: Vec<&str> = svg.lines().collect();
        let mut out = String::with_capacity(svg.len() + svg.len() / 4);
        // (group, marks tagged so far) for each open group, innermost last.
        let mut open: Vec<(usize, usize)> = Vec::new();
        let mismatch = |group: usize, found: usize| ChartError::Tagging {
            chart,
            group,
            expected: groups.get(group).map_or(0, |g| g.marks.len()),
            found,
        };
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            let sentinel = lines.get(i + 1).and_then(|l| l.strip_prefix(SENTINEL));
            if let (true, Some(tag), Some(&"</text>")) = (line.starts_with("<text"), sentinel, lines.get(i + 2)) {
                let (id, kind) = tag.split_at(tag.len().saturating_sub(1));
                let id: usize = id.parse().map_err(|_| mismatch(usize::MAX, 0))?;
                let group = groups.get(id).ok_or_else(|| mismatch(id, 0))?;
                if kind == "o" {
                    out.push_str("<g");
                    push_attrs(&mut out, &group.attrs);
                    out.push_str(">\n");
                    open.push((id, 0));
                } else {
                    let (id, tagged) = open.pop().ok_or_else(|| mismatch(id, 0))?;
                    if !groups[id].marks.is_empty() && tagged != groups[id].marks.len() {
                        return Err(mismatch(id, tagged));
                    }
                    out.push_str("</g>\n");
                }
                i += 3;
                continue;
            }
            match open.last_mut() {
                // The first line of an element inside a group that tags its marks.
                Some((id, tagged))
                    if !groups[*id].marks.is_empty() && line.starts_with('<') && !line.starts_with("</") =>
                {
                    let attrs = groups[*id].marks.get(*tagged).ok_or_else(|| mismatch(*id, *tagged + 1))?;
                    let name_end = line.find([' ', '/', '>']).unwrap_or(line.len());
                    out.push_str(&line[..name_end]);
                    push_attrs(&mut out, attrs);
                    out.push_str(&line[name_end..]);
                    *tagged += 1;
                }
                _ => out.push_str(line),
            }
            out.push('\n');
            i += 1;
        }
        if let Some(&(id, tagged)) = open.last() {
            return Err(mismatch(id, tagged));
        }
        Ok(out)
    }
}

fn push_attrs(out: &mut String, attrs: &[Attr]) {
    for (name, value) in attrs {
        let _ = write!(out, " data-{name}=\"");
        for c in value.chars() {
            match c {
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '&' => out.push_str("&amp;"),
                '"' => out.push_str("&quot;"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
}
