//! The per-session chart: decode tok/s and TTFT of every turn against the
//! context the turn started with, so the slowdown as a chat grows shows.

use headroom_core::stats::Rates;

use crate::draw::{self, Panel, Series};
use crate::error::Result;
use crate::style::ChartStyle;

const CHART: &str = "session";

/// One turn of a session, as the chart needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnPoint {
    /// 1-based turn number; points are drawn in this order.
    pub turn: u32,
    /// Tokens already in the context when the turn started (the x axis).
    pub context_tokens: u32,
    /// `None` for a turn that generated one token or fewer (no decode rate).
    pub decode_tps: Option<f64>,
    /// `None` for a turn that produced no token at all.
    pub ttft_ms: Option<f64>,
}

impl TurnPoint {
    /// From a turn's rates as `headroom_core::stats` defines them.
    pub fn from_rates(turn: u32, context_tokens: u32, rates: &Rates) -> Self {
        Self { turn, context_tokens, decode_tps: rates.decode_tps, ttft_ms: rates.ttft_ms }
    }
}

/// The session chart as an SVG document.
///
/// Two panels share the x axis (context tokens at the start of each turn):
/// decode tok/s above, with each mark labelled by its turn number (labels
/// that would overlap are skipped), TTFT below, in ms, or in s once a turn
/// took 2 s or more. Each turn is one `<circle>` per panel: filled in the
/// series colour, or, when the value is undefined, a hollow ring on the x
/// axis with a note saying why; the line between turns breaks there.
/// No turns draws a "no turns yet" card rather than failing.
pub fn session_svg(turns: &[TurnPoint], style: &ChartStyle) -> Result<String> {
    draw::check_values(CHART, "decode tok/s", turns.iter().map(|t| t.decode_tps))?;
    draw::check_values(CHART, "TTFT", turns.iter().map(|t| t.ttft_ms))?;
    if turns.is_empty() {
        return crate::no_data_svg(style, "No turns yet", "Speed per turn appears here after the first reply.");
    }
    let mut turns = turns.to_vec();
    turns.sort_by_key(|t| t.turn);

    let in_seconds = draw::max_of(turns.iter().map(|t| t.ttft_ms)).is_some_and(|ms| ms >= 2_000.0);
    let (ttft_scale, ttft_unit) = if in_seconds { (1e-3, "s") } else { (1.0, "ms") };
    let decode: Vec<(f64, Option<f64>)> = turns.iter().map(|t| (f64::from(t.context_tokens), t.decode_tps)).collect();
    let ttft: Vec<(f64, Option<f64>)> =
        turns.iter().map(|t| (f64::from(t.context_tokens), t.ttft_ms.map(|ms| ms * ttft_scale))).collect();
    let labels = turns.iter().zip(&decode).map(|(t, &(x, y))| (x, y.unwrap_or(0.0), t.turn.to_string())).collect();

    let lo = turns.iter().map(|t| t.context_tokens).min().unwrap_or(0);
    let hi = turns.iter().map(|t| t.context_tokens).max().unwrap_or(0);
    let x = draw::padded(f64::from(lo), f64::from(hi));

    draw::render(CHART, style, |root, palette| {
        let panels = [
            Panel {
                y_desc: "decode (tok/s)".to_owned(),
                y_fmt: draw::number_ticks,
                series: Series { color: palette.decode, points: &decode, radius: draw::MARK_R },
                labels,
                note: decode.iter().any(|p| p.1.is_none()).then_some("○ on axis: 1-token turn, no rate"),
            },
            Panel {
                y_desc: format!("TTFT ({ttft_unit})"),
                y_fmt: draw::number_ticks,
                series: Series { color: palette.secondary_series, points: &ttft, radius: draw::MARK_R },
                labels: Vec::new(),
                note: ttft.iter().any(|p| p.1.is_none()).then_some("○ on axis: no token generated"),
            },
        ];
        let x_desc = "context at turn start (tokens) · numbers = turn";
        draw::stacked(root, palette, &x, x_desc, &draw::token_ticks, &panels)
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use headroom_core::stats::TurnTimings;

    use super::*;
    use crate::style::Theme;
    use crate::svgtest::{self, parse};
    use crate::ChartError;

    /// A chat slowing down as its context grows; `one_token` turns have no
    /// decode rate.
    fn turns(n: u32, one_token: &[u32]) -> Vec<TurnPoint> {
        (1..=n)
            .map(|turn| {
                let ctx = (turn - 1) * 700;
                TurnPoint {
                    turn,
                    context_tokens: ctx,
                    decode_tps: (!one_token.contains(&turn)).then(|| 60.0 - f64::from(turn) * 2.5),
                    ttft_ms: Some(150.0 + f64::from(ctx) * 0.1),
                }
            })
            .collect()
    }

    #[test]
    fn one_mark_per_turn_in_each_panel_and_a_ring_for_a_missing_rate() {
        let style = ChartStyle::light();
        let p = style.theme.palette();
        let svg = session_svg(&turns(12, &[5]), &style).unwrap();
        let doc = parse(&svg);
        assert_eq!(svgtest::filled(&doc, p.decode).len(), 11);
        assert_eq!(svgtest::rings(&doc, p.decode).len(), 1, "turn 5 has no decode rate");
        assert_eq!(svgtest::filled(&doc, p.secondary_series).len(), 12);
        assert_eq!(svgtest::circle_count(&doc), 24, "no circle other than the marks");
        assert!(svgtest::has_text(&doc, "○ on axis: 1-token turn, no rate"));
        assert_eq!(svgtest::width(&doc), Some(400));
    }

    #[test]
    fn marks_follow_the_values_and_the_ring_sits_on_the_axis() {
        let style = ChartStyle::dark();
        let p = style.theme.palette();
        let doc_text = session_svg(&turns(8, &[4]), &style).unwrap();
        let doc = parse(&doc_text);
        let decode = svgtest::filled(&doc, p.decode);
        assert_eq!(decode.len(), 7, "eight turns, one without a decode rate: {decode:?}");
        // Context grows left to right and decode falls: y pixels grow.
        for pair in decode.windows(2) {
            assert!(pair[1].0 > pair[0].0 && pair[1].1 > pair[0].1, "{pair:?}");
        }
        // TTFT grows: y pixels shrink.
        let ttft = svgtest::filled(&doc, p.secondary_series);
        assert_eq!(ttft.len(), 8, "{ttft:?}");
        for pair in ttft.windows(2) {
            assert!(pair[1].1 < pair[0].1, "{pair:?}");
        }
        let ring = svgtest::rings(&doc, p.decode);
        assert_eq!(ring.len(), 1);
        assert!(decode.iter().all(|m| m.1 < ring[0].1), "the ring is below every value, at 0");
        // Above the TTFT panel, which starts lower down.
        assert!(ttft.iter().all(|m| m.1 > ring[0].1));
    }

    #[test]
    fn axes_name_their_units_and_turns_are_labelled() {
        let doc_text = session_svg(&turns(6, &[]), &ChartStyle::light()).unwrap();
        let doc = parse(&doc_text);
        for label in ["decode (tok/s)", "TTFT (ms)", "context at turn start (tokens) · numbers = turn"] {
            assert!(svgtest::has_text(&doc, label), "missing axis label {label:?}");
        }
        for turn in 1..=6 {
            assert!(svgtest::has_text(&doc, &turn.to_string()), "turn {turn} is not labelled");
        }
        assert!(svgtest::has_text(&doc, "3K"), "context ticks in tokens: {:?}", svgtest::texts(&doc));
    }

    #[test]
    fn slow_first_tokens_switch_ttft_to_seconds() {
        let mut t = turns(3, &[]);
        t[2].ttft_ms = Some(4_500.0);
        let doc_text = session_svg(&t, &ChartStyle::light()).unwrap();
        let doc = parse(&doc_text);
        assert!(svgtest::has_text(&doc, "TTFT (s)"));
        assert!(!svgtest::has_text(&doc, "TTFT (ms)"));
    }

    #[test]
    fn light_and_dark_use_their_own_palettes() {
        let t = turns(4, &[]);
        let light = session_svg(&t, &ChartStyle::light()).unwrap();
        let dark = session_svg(&t, &ChartStyle::dark()).unwrap();
        assert_ne!(light, dark);
        let (l, d) = (parse(&light), parse(&dark));
        assert_eq!(svgtest::background(&l), Some("#FFFFFF".to_owned()));
        assert_eq!(svgtest::background(&d), Some("#28282A".to_owned()));
        assert_eq!(svgtest::filled(&d, Theme::Dark.palette().decode).len(), 4);
        assert!(svgtest::filled(&d, Theme::Light.palette().decode).is_empty());
    }

    #[test]
    fn turns_are_drawn_in_turn_order_whatever_the_input_order() {
        let mut t = turns(5, &[]);
        t.reverse();
        let doc_text = session_svg(&t, &ChartStyle::light()).unwrap();
        let doc = parse(&doc_text);
        let xs: Vec<f64> =
            svgtest::filled(&doc, ChartStyle::light().theme.palette().decode).iter().map(|m| m.0).collect();
        assert_eq!(xs.len(), 5, "{xs:?}");
        assert!(xs.windows(2).all(|w| w[0] < w[1]), "{xs:?}");
    }

    #[test]
    fn no_turns_draw_a_readable_card() {
        let doc_text = session_svg(&[], &ChartStyle::dark()).unwrap();
        let doc = parse(&doc_text);
        assert_eq!(svgtest::circle_count(&doc), 0);
        assert!(svgtest::has_text(&doc, "No turns yet"));
        assert_eq!(svgtest::background(&doc), Some("#28282A".to_owned()));
    }

    #[test]
    fn a_single_turn_still_has_axes() {
        let doc_text = session_svg(&turns(1, &[]), &ChartStyle::light()).unwrap();
        let doc = parse(&doc_text);
        assert_eq!(svgtest::circle_count(&doc), 2);
        assert!(svgtest::has_text(&doc, "decode (tok/s)"));
    }

    #[test]
    fn bad_values_and_sizes_are_typed_errors() {
        let mut t = turns(3, &[]);
        t[1].decode_tps = Some(f64::NAN);
        let err = session_svg(&t, &ChartStyle::light()).err();
        assert!(
            matches!(err, Some(ChartError::InvalidValue { chart: "session", series: "decode tok/s", index: 1, .. })),
            "{err:?}"
        );
        t[1].decode_tps = Some(10.0);
        t[2].ttft_ms = Some(-3.0);
        let err = session_svg(&t, &ChartStyle::light()).err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("session chart: TTFT value #2 is -3, expected a finite number >= 0"));
        let err = session_svg(&t[..1], &ChartStyle::light().with_size(200, 300)).err();
        assert!(matches!(err, Some(ChartError::TooSmall { width: 200, .. })), "{err:?}");
    }

    #[test]
    fn from_rates_takes_the_core_definitions() {
        let timings = TurnTimings {
            prompt_tokens: 100,
            prefill: Duration::from_millis(100),
            generated_tokens: 1,
            first_token_at: Some(Duration::from_millis(120)),
            last_token_at: Some(Duration::from_millis(120)),
        };
        let point = TurnPoint::from_rates(3, 900, &timings.rates());
        assert_eq!(point, TurnPoint { turn: 3, context_tokens: 900, decode_tps: None, ttft_ms: Some(120.0) });
    }
}
