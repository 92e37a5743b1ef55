//! The benchmark chart: decode and prefill tok/s against context depth (the
//! tokens already in the KV cache when the measurement ran, llama-bench's `-d`).

use crate::draw::{self, Panel, Series};
use crate::error::Result;
use crate::style::ChartStyle;

const CHART: &str = "bench";

/// One depth of a benchmark run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DepthPoint {
    /// Tokens in the context before the measured prompt / generation.
    pub depth_tokens: u32,
    /// Generation speed at this depth (`tg`); `None` if it was not measured
    /// or was undefined (one token).
    pub decode_tps: Option<f64>,
    /// Prompt processing speed at this depth (`pp`); `None` if not measured.
    pub prefill_tps: Option<f64>,
}

/// The depth chart as an SVG document.
///
/// Decode tok/s above, prefill tok/s below (their scales differ tenfold, so
/// they get their own y axes), on one x axis of context depth. The prefill
/// panel is left out when no depth measured prefill. Each depth is one
/// `<circle>` per panel, a hollow ring on the x axis where that rate is
/// missing. No points draws a "no benchmark yet" card.
pub fn bench_depth_svg(points: &[DepthPoint], style: &ChartStyle) -> Result<String> {
    draw::check_values(CHART, "decode tok/s", points.iter().map(|p| p.decode_tps))?;
    draw::check_values(CHART, "prefill tok/s", points.iter().map(|p| p.prefill_tps))?;
    if points.is_empty() {
        return crate::no_data_svg(style, "No benchmark yet", "Run a benchmark to see tok/s against context depth.");
    }
    let mut points = points.to_vec();
    points.sort_by_key(|p| p.depth_tokens);
    let decode: Vec<(f64, Option<f64>)> = points.iter().map(|p| (f64::from(p.depth_tokens), p.decode_tps)).collect();
    let prefill: Vec<(f64, Option<f64>)> = points.iter().map(|p| (f64::from(p.depth_tokens), p.prefill_tps)).collect();
    let lo = points.first().map_or(0, |p| p.depth_tokens);
    let hi = points.last().map_or(0, |p| p.depth_tokens);
    let x = draw::padded(f64::from(lo), f64::from(hi));

    draw::render(CHART, style, |root, palette| {
        let mut panels = vec![Panel {
            y_desc: "decode (tok/s)".to_owned(),
            y_fmt: draw::number_ticks,
            series: Series { color: palette.decode, points: &decode, radius: draw::MARK_R },
            labels: Vec::new(),
            note: decode.iter().any(|p| p.1.is_none()).then_some("○ on axis: not measured"),
        }];
        if prefill.iter().any(|p| p.1.is_some()) {
            panels.push(Panel {
                y_desc: "prefill (tok/s)".to_owned(),
                y_fmt: draw::number_ticks,
                series: Series { color: palette.secondary_series, points: &prefill, radius: draw::MARK_R },
                labels: Vec::new(),
                note: prefill.iter().any(|p| p.1.is_none()).then_some("○ on axis: not measured"),
            });
        }
        draw::stacked(root, palette, &x, "context depth (tokens)", &draw::token_ticks, &panels)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::svgtest::{self, parse};

    fn depths(prefill: bool) -> Vec<DepthPoint> {
        [0u32, 1024, 4096, 16384]
            .iter()
            .map(|&d| DepthPoint {
                depth_tokens: d,
                decode_tps: Some(60.0 - f64::from(d) / 1_000.0),
                prefill_tps: prefill.then(|| 800.0 - f64::from(d) / 40.0),
            })
            .collect()
    }

    #[test]
    fn a_single_depth_gets_distinct_depth_ticks() {
        let point = [DepthPoint { depth_tokens: 0, decode_tps: Some(379.1), prefill_tps: Some(1076.5) }];
        let svg = bench_depth_svg(&point, &ChartStyle::light()).unwrap();
        let texts = svgtest::texts(&parse(&svg));
        // "0" once per axis (two y axes, one x axis): a window of one token
        // around depth 0 labelled the x ticks "0 0 1".
        let zeros = texts.iter().filter(|t| t.as_str() == "0").count();
        assert_eq!(zeros, 3, "{texts:?}");
    }

    #[test]
    fn one_mark_per_depth_in_each_panel() {
        let style = ChartStyle::light();
        let p = style.theme.palette();
        let mut points = depths(true);
        points[2].decode_tps = None;
        let doc_text = bench_depth_svg(&points, &style).unwrap();
        let doc = parse(&doc_text);
        assert_eq!(svgtest::filled(&doc, p.decode).len(), 3);
        assert_eq!(svgtest::rings(&doc, p.decode).len(), 1);
        assert_eq!(svgtest::filled(&doc, p.secondary_series).len(), 4);
        assert_eq!(svgtest::circle_count(&doc), 8);
        for label in ["decode (tok/s)", "prefill (tok/s)", "context depth (tokens)", "15K"] {
            assert!(svgtest::has_text(&doc, label), "missing {label:?}: {:?}", svgtest::texts(&doc));
        }
        // Decode falls with depth: marks go down as they go right.
        let marks = svgtest::filled(&doc, p.decode);
        assert_eq!(marks.len(), 3, "{marks:?}");
        assert!(marks.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1), "{marks:?}");
    }

    #[test]
    fn without_prefill_figures_there_is_one_panel() {
        let style = ChartStyle::dark();
        let doc_text = bench_depth_svg(&depths(false), &style).unwrap();
        let doc = parse(&doc_text);
        assert_eq!(svgtest::filled(&doc, style.theme.palette().decode).len(), 4);
        assert_eq!(svgtest::circle_count(&doc), 4);
        assert!(!svgtest::has_text(&doc, "prefill (tok/s)"));
        assert!(svgtest::has_text(&doc, "context depth (tokens)"));
    }

    #[test]
    fn empty_and_invalid_input() {
        let doc_text = bench_depth_svg(&[], &ChartStyle::light()).unwrap();
        assert!(svgtest::has_text(&parse(&doc_text), "No benchmark yet"));
        let mut points = depths(true);
        points[3].prefill_tps = Some(-1.0);
        let err = bench_depth_svg(&points, &ChartStyle::light()).err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("bench chart: prefill tok/s value #3 is -1, expected a finite number >= 0"));
    }
}
