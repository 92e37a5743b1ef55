//! Estimates that learn from this Mac: a peak measured for a model at one
//! context calibrates `core::fit`'s formula for that model on this machine.
//! Pure: the store keeps the measurements and the app records them; this
//! layer wraps the formula's estimate and never changes its terms.
//!
//! Only complete evidence is a measurement: a turn that prefilled its whole
//! prompt and ran to its end ([`PeakMeasurement::calibration_point`]; the
//! engine never records a cancelled or failed turn). The rule, for a
//! prediction at context `c` (issue #29; `docs/fit-calibration.md` has the
//! measurements behind each number):
//!
//! 1. **The nearest measurement** in context (by ratio, so 4K is as near 8K
//!    as 2K is), at `c0`, gives the correction there: `measured(c0) −
//!    formula(c0)`.
//! 2. **One run may not lower the estimate by much.** Where the measurement
//!    is more than [`SINGLE_POINT_MARGIN`] (3 %) below the formula, it
//!    counts as 3 % below, unless a second measurement agrees: its own
//!    error against the formula (measured / formula − 1, at its own context)
//!    within [`AGREEMENT`] (2 points) of the first's. Then the lowering
//!    counts as far as both show (the lesser of the two). Two runs of one
//!    prompt in fresh processes recorded peaks within 0.8 % of each other,
//!    so a real lowering repeats well inside that band, while one bad
//!    figure (a run cut short, a measurement gone wrong) cannot move the
//!    guard more than 3 % towards swap.
//! 3. **It transfers the way that predicts more.** The correction is part
//!    fixed (the runtime, the allocator: the same bytes at every context)
//!    and part proportional (slack that grows with MLX's buffers), and one
//!    measurement cannot tell the parts apart. Carried as bytes, it
//!    predicts more below `c0`; carried as a fraction of the formula, more
//!    above it (for a correction that lowers, the other way round). The
//!    rule takes the larger prediction: the side a Mac does not swap on.
//! 4. **It shrinks with distance.** At `c` it counts with the weight
//!    `w = max(0, 1 − |ln(c / c0)| / ln √2)`: in full at `c0`, half at
//!    2^¼ (1.19) times or over 2^¼, nothing from √2 times or over √2 on
//!    (the formula alone there). The farther a context, the less one
//!    measurement says about it: with the CPU formula within ±5 % of fresh
//!    peaks from 128 to 4,096 tokens (`core::fit`), what is left of its
//!    error is a few points that can change sign within a factor of 1.2
//!    (the `medium` qwen2: +2.8 % at 255 tokens, +0.8 % at 361, −2.7 % at
//!    429, −2.2 % at 510), so a correction carried √2 times away was
//!    further off than the formula in 3 of 8 cases at c0 = 480 with a
//!    horizon of 2, by up to 1.3 points. Within 2^¼ of `c0` (a chat's
//!    next turn) a raise helped in all 10 cases measured and a lowering
//!    below `c0` in all 3.
//! 5. **A longer context never needs less** than was measured at a shorter
//!    one: at `c ≥ c0` the prediction is at least the measurement (as
//!    counted by rule 2), and a lowering is not carried above `c0` at all.
//!    What a shorter turn needed below the formula says nothing safe about
//!    a longer one, and the guard asks about the longer contexts: carried
//!    up 2^¼ times, a lowering was further off than the formula in 2 of 3
//!    cases (SmolLM2 at 608 after 511, the `medium` qwen3_5 at 1,177 after
//!    990, by half a point), on the side a Mac swaps on.
//!
//! ```text
//! correction(c) = max(counted(c0) − formula(c0),
//!                     (counted(c0) / formula(c0) − 1) × formula(c))
//! predicted(c)  = formula(c) + w(c) × correction(c), and ≥ counted(c0) when c ≥ c0
//!                 (w(c) = 0 above c0 for a correction that lowers)
//! ```
//!
//! At the measured context the prediction is the measurement, held at most
//! 3 % under the formula until a second run agrees. Away from it the
//! prediction lies between the formula and the full correction, nearer the
//! formula the farther it is. `scripts/measure-fit.sh --calibration` checks
//! it at c0/4, c0/2, c0/√2, c0/2^¼, 2^¼ × c0, √2 × c0, 2 × c0 and 4 × c0
//! (four models, two c0, 64 cases off c0, on MLX's CPU backend): all 64
//! within 5 % of a fresh process's peak and none further from it than
//! the formula alone; at 2^¼ the half correction was nearer in 13 of 16.
//! `--calibration-pairs` checks every pair of a √2 ladder of fresh runs:
//! from √2 apart (272 pairs) the formula's, all within 5 %; the 8 pairs
//! 1.15 times apart (each model's first two rungs) all within 5 %, 2 of
//! them further off than the formula by 0.1 and 0.3 points, inside the
//! ±0.8 % in which two fresh runs of one prompt agree
//! (`docs/fit-calibration.md` has every figure). On macOS there is no
//! resettable resident peak; MLX's peak (which counts Metal's buffers) is
//! the measurement there.

use serde::{Deserialize, Serialize};

use crate::kv::KvFormat;

/// What one load or turn really took, for one model as loaded (its
/// weights, dtype and kernel: the store keys measurements by the engine's
/// model fingerprint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Measured {
    /// How the KV cache was stored: a peak measured with an 8-bit cache
    /// says nothing about a 16-bit one.
    pub kv: KvFormat,
    /// Positions the KV cache held at the end of the turn (prompt + generated).
    pub context_tokens: u64,
    /// The peak: the larger of MLX's peak and the process's resident growth
    /// over what it held before the model was read.
    pub peak_bytes: u64,
}

/// How far one measurement may take the prediction below the formula, as a
/// fraction of the formula (module docs, rule 2).
pub const SINGLE_POINT_MARGIN: f64 = 0.03;

/// Two measurements agree when their errors against the formula (measured
/// / formula − 1, each at its own context) differ by at most this.
pub const AGREEMENT: f64 = 0.02;

/// The distance, as a ratio of contexts, at which a correction no longer
/// counts (module docs, rule 4).
pub const SHRINK_HORIZON: f64 = std::f64::consts::SQRT_2;

/// The rule in words, for the fit sheet ([`Calibration::rule`]).
pub const RULE_WORDS: &str = "A peak measured on this Mac counts in full at its own context and less \
     with distance: 50 % at 1.19 times or over 1.19, none from 1.4 times or over 1.4 on. One run \
     may lower the estimate by at most 3 %; more needs a second run that agrees (within 2 points), \
     and a lowering is never carried to a longer context.";

/// What was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeasuredKind {
    /// Reading the weights.
    Load,
    /// One turn: the prefill of its new tokens and the decode.
    Turn,
}

/// One load's or turn's peak, for the model as loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeakMeasurement {
    /// The model as loaded (its files, dtype and kernel):
    /// the engine's `model_fingerprint`, also its `ModelInfo::fingerprint`.
    pub fingerprint: String,
    pub kind: MeasuredKind,
    pub kv: KvFormat,
    /// Positions the KV cache held at the end (prompt + generated; 0 for a load).
    pub context_tokens: u64,
    pub prompt_tokens: u64,
    /// Of the prompt, tokens taken from the prompt cache instead of prefilled.
    pub reused_tokens: u64,
    /// MLX's peak over it (weights included).
    pub mlx_peak_bytes: u64,
    /// MLX's active memory at its end: what stays (weights, the KV caches kept).
    pub mlx_active_bytes: u64,
    /// The process's peak resident set over it less what the process held
    /// before this model's weights were read; `None` where the OS cannot say.
    pub resident_peak_bytes: Option<u64>,
    /// Other requests' KV states the prompt cache held meanwhile: in both
    /// peaks, but not this turn's need (the fit counts them apart, in the
    /// prompt cache's allowance).
    pub cached_bytes: u64,
}

impl PeakMeasurement {
    /// The peak the fit's formula predicts: the larger of the two views,
    /// less the other requests' states held meanwhile.
    pub fn peak_bytes(&self) -> u64 {
        self.mlx_peak_bytes.max(self.resident_peak_bytes.unwrap_or(0)).saturating_sub(self.cached_bytes)
    }

    /// As a calibration point, when it is one: a turn that prefilled its
    /// whole prompt. The formula predicts a whole-context prefill; a turn
    /// that reused a prefix prefills only its new tokens and peaks lower, so
    /// counting it would teach the fit to predict too little.
    pub fn calibration_point(&self) -> Option<Measured> {
        (self.kind == MeasuredKind::Turn && self.reused_tokens == 0 && self.context_tokens > 0).then(|| Measured {
            kv: self.kv,
            context_tokens: self.context_tokens,
            peak_bytes: self.peak_bytes(),
        })
    }
}

/// The measurement a prediction rests on, how it counts, and the formula's
/// figure it is read against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Calibration {
    pub at_context: u64,
    /// The peak measured there.
    pub peak_bytes: u64,
    /// The formula's peak at `at_context`.
    pub formula_bytes: u64,
    /// What the correction counts at `at_context`: the measurement, or the
    /// margin's floor (rule 2), less the formula (negative: the formula
    /// errs high here).
    pub offset_bytes: i64,
    /// The measurement lowers the formula by more than the margin and
    /// nothing confirms it: it counts as [`SINGLE_POINT_MARGIN`] below.
    pub capped: bool,
    /// The context of the measurement that agrees with a lowering beyond
    /// the margin, when one does.
    pub confirmed_at: Option<u64>,
    /// The context the prediction is for.
    pub for_context: u64,
    /// How much of the correction counts there, in percent (rule 4; 0
    /// above the measured context for a correction that lowers, rule 5).
    pub weight_percent: u32,
    /// The rule in words ([`RULE_WORDS`]).
    pub rule: &'static str,
}

/// The measurement with the KV format `kv` nearest `context` by ratio
/// (ties: the larger context, whose growth term is the smaller
/// extrapolation downwards); measurements of nothing (a zero context or
/// peak) are ignored.
pub fn nearest(measured: &[Measured], kv: KvFormat, context: u64) -> Option<Measured> {
    nearest_index(measured, kv, context).map(|i| measured[i])
}

fn nearest_index(measured: &[Measured], kv: KvFormat, context: u64) -> Option<usize> {
    let distance = |m: &Measured| (context.max(1) as f64 / m.context_tokens as f64).ln().abs();
    measured
        .iter()
        .enumerate()
        .filter(|(_, m)| usable(m, kv))
        .min_by(|(_, a), (_, b)| distance(a).total_cmp(&distance(b)).then(b.context_tokens.cmp(&a.context_tokens)))
        .map(|(i, _)| i)
}

fn usable(m: &Measured, kv: KvFormat) -> bool {
    m.kv == kv && m.context_tokens > 0 && m.peak_bytes > 0
}

/// measured / formula − 1 at the measurement's own context; `None` where the
/// formula says nothing (0 bytes).
fn error_against(formula: &impl Fn(u64) -> u64, m: &Measured) -> Option<f64> {
    let f = formula(m.context_tokens);
    (f > 0).then(|| m.peak_bytes as f64 / f as f64 - 1.0)
}

/// How much of a correction learned at `at` counts at `context` (rule 4).
pub fn weight(at: u64, context: u64) -> f64 {
    let distance = (context.max(1) as f64 / at.max(1) as f64).ln().abs();
    (1.0 - distance / SHRINK_HORIZON.ln()).clamp(0.0, 1.0)
}

/// Whether a correction of `offset` bytes learned at `at` is kept from
/// `context` because it lowers and `context` is longer (rule 5).
fn lowering_held(at: u64, context: u64, offset: i64) -> bool {
    offset < 0 && context > at
}

/// What counts at `context` of a correction of `offset` bytes learned at
/// `at`: [`weight`], or nothing where [`lowering_held`].
fn counted_weight(at: u64, context: u64, offset: i64) -> f64 {
    if lowering_held(at, context, offset) {
        0.0
    } else {
        weight(at, context)
    }
}

/// The calibration for a prediction at `context` with the KV cache as
/// `kv`, from `formula` (the formula's peak at a context, from
/// `core::fit::estimate`) and this model's measurements on this machine;
/// `None` when nothing was measured.
pub fn calibration(
    formula: impl Fn(u64) -> u64,
    kv: KvFormat,
    context: u64,
    measured: &[Measured],
) -> Option<Calibration> {
    let i = nearest_index(measured, kv, context)?;
    let m = measured[i];
    let at = formula(m.context_tokens);
    let (mut counted, mut capped, mut confirmed_at) = (m.peak_bytes, false, None);
    if let Some(own) = error_against(&formula, &m).filter(|e| *e < -SINGLE_POINT_MARGIN) {
        // Another measurement that shows the same error confirms it, as far
        // as the lesser of the two goes.
        let agreeing = measured
            .iter()
            .enumerate()
            .filter(|&(j, p)| j != i && usable(p, kv))
            .filter_map(|(_, p)| Some((p.context_tokens, error_against(&formula, p)?)))
            .filter(|(_, e)| (e - own).abs() <= AGREEMENT)
            .max_by(|a, b| a.1.total_cmp(&b.1));
        // Confirmed only as far as both go beyond the margin.
        let (lowest, confirmed) = match agreeing {
            Some((c, e)) if own.max(e) < -SINGLE_POINT_MARGIN => (own.max(e), Some(c)),
            _ => (-SINGLE_POINT_MARGIN, None),
        };
        confirmed_at = confirmed;
        let floor = (at as f64 * (1.0 + lowest)).round() as u64;
        if lowest > own && floor > counted {
            counted = floor;
            capped = confirmed.is_none();
        }
    }
    let offset = i128::from(counted) - i128::from(at);
    let offset_bytes = i64::try_from(offset).unwrap_or(if offset < 0 { i64::MIN } else { i64::MAX });
    Some(Calibration {
        at_context: m.context_tokens,
        peak_bytes: m.peak_bytes,
        formula_bytes: at,
        offset_bytes,
        capped,
        confirmed_at,
        for_context: context,
        weight_percent: (counted_weight(m.context_tokens, context, offset_bytes) * 100.0).round() as u32,
        rule: RULE_WORDS,
    })
}

impl Calibration {
    /// What the correction counts at `at_context`: the measurement, or the
    /// margin's floor.
    pub fn counted_bytes(&self) -> u64 {
        u64::try_from((i128::from(self.formula_bytes) + i128::from(self.offset_bytes)).max(0)).unwrap_or(u64::MAX)
    }

    /// The prediction at `context`, where the formula says `formula_bytes`
    /// (module docs).
    pub fn apply(&self, context: u64, formula_bytes: u64) -> u64 {
        let formula = formula_bytes as f64;
        let offset = self.offset_bytes as f64;
        // Carried as bytes, or as a fraction of the formula: the larger.
        let fraction = if self.formula_bytes == 0 { 0.0 } else { offset / self.formula_bytes as f64 };
        let correction = offset.max(fraction * formula);
        let predicted = (formula + counted_weight(self.at_context, context, self.offset_bytes) * correction).max(0.0);
        // f64 → u64 saturates: an absurd figure stays absurd, never wraps.
        let predicted = predicted.round() as u64;
        if context >= self.at_context {
            predicted.max(self.counted_bytes())
        } else {
            predicted
        }
    }
}

/// A context as people say it: 4096 → "4K", 3000 → "3000".
pub fn context_words(tokens: u64) -> String {
    if tokens >= 1024 && tokens.is_multiple_of(1024) {
        format!("{}K", tokens / 1024)
    } else {
        tokens.to_string()
    }
}

/// What a prediction rests on, in words: "estimated", or "measured here at
/// 4K: 9.8 GB" and how it counts where the prediction is for (", counted
/// 50 % at 16K", ", too far to count at 32K", ", held at 3 % under the
/// formula until a second run agrees", ", confirmed at 2K").
pub fn basis_label(calibration: Option<&Calibration>) -> String {
    let Some(c) = calibration else { return "estimated".to_owned() };
    let mut words = format!(
        "measured here at {}: {:.1} GB",
        context_words(c.at_context),
        c.peak_bytes as f64 / (1u64 << 30) as f64
    );
    if c.capped {
        words.push_str(&format!(
            ", held at {:.0} % under the formula until a second run agrees",
            SINGLE_POINT_MARGIN * 100.0
        ));
    }
    if let Some(at) = c.confirmed_at {
        words.push_str(&format!(", confirmed at {}", context_words(at)));
    }
    match c.weight_percent {
        100.. => {}
        // Within the horizon, the lowering's own rule is why nothing counts.
        0 if lowering_held(c.at_context, c.for_context, c.offset_bytes)
            && weight(c.at_context, c.for_context) > 0.0 =>
        {
            words.push_str(&format!(", a lowering not carried up to {}", context_words(c.for_context)))
        }
        // "counted 0 %" read as if the measurement had gone wrong.
        0 => words.push_str(&format!(", too far to count at {}", context_words(c.for_context))),
        w => words.push_str(&format!(", counted {w} % at {}", context_words(c.for_context))),
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const F: KvFormat = KvFormat::Float;

    /// A formula: 8 GiB of weights and fixed terms, 128 KiB per token.
    fn formula(c: u64) -> u64 {
        8 * GIB + c * (128 << 10)
    }

    fn predict(context: u64, seen: &[Measured]) -> (u64, Option<Calibration>) {
        let c = calibration(formula, F, context, seen);
        (c.map_or(formula(context), |c| c.apply(context, formula(context))), c)
    }

    fn point(context_tokens: u64, peak_bytes: u64) -> Measured {
        Measured { kv: F, context_tokens, peak_bytes }
    }

    /// `formula(c) × (1 + fraction)`.
    fn off(c: u64, fraction: f64) -> u64 {
        (formula(c) as f64 * (1.0 + fraction)).round() as u64
    }

    fn turn(reused: u64) -> PeakMeasurement {
        PeakMeasurement {
            fingerprint: "f".into(),
            kind: MeasuredKind::Turn,
            kv: KvFormat::Float,
            context_tokens: 300,
            prompt_tokens: 290,
            reused_tokens: reused,
            mlx_peak_bytes: 100,
            mlx_active_bytes: 60,
            resident_peak_bytes: Some(130),
            cached_bytes: 0,
        }
    }

    #[test]
    fn only_a_whole_prefill_calibrates_and_its_peak_is_the_larger_view() {
        let point = turn(0).calibration_point();
        assert_eq!(point.map(|m| (m.context_tokens, m.peak_bytes)), Some((300, 130)));
        assert_eq!(turn(200).calibration_point(), None);
        let load = PeakMeasurement { kind: MeasuredKind::Load, context_tokens: 0, ..turn(0) };
        assert_eq!(load.calibration_point(), None);
        let mlx_only = PeakMeasurement { resident_peak_bytes: None, ..turn(0) };
        assert_eq!(mlx_only.peak_bytes(), 100);
        // Other chats' states held meanwhile are not this turn's need.
        let beside = PeakMeasurement { cached_bytes: 20, ..turn(0) };
        assert_eq!(beside.calibration_point().map(|m| m.peak_bytes), Some(110));
    }

    #[test]
    fn without_a_measurement_it_is_the_formula_and_says_estimated() {
        assert_eq!(predict(4096, &[]), (formula(4096), None));
        assert_eq!(basis_label(None), "estimated");
    }

    #[test]
    fn at_the_measured_context_it_is_the_measurement() {
        // Above the formula: taken whole, however far.
        for peak in [formula(4096) + 3 * GIB / 2, formula(4096) + 1] {
            let seen = [point(4096, peak)];
            let (at, c) = predict(4096, &seen);
            assert_eq!(at, peak);
            let c = c.expect("calibrated");
            assert!(!c.capped && c.confirmed_at.is_none() && c.weight_percent == 100, "{c:?}");
            assert_eq!(basis_label(Some(&c)), format!("measured here at 4K: {:.1} GB", peak as f64 / GIB as f64));
        }
        // Below it, within the margin: taken whole too.
        let low = off(4096, -0.029);
        let (at, c) = predict(4096, &[point(4096, low)]);
        assert_eq!(at, low);
        assert!(!c.expect("calibrated").capped);
    }

    #[test]
    fn one_measurement_lowers_the_formula_by_the_margin_at_most() {
        // One run says the formula errs 20 % high: it counts as 3 %.
        let seen = [point(4096, off(4096, -0.20))];
        let (at, c) = predict(4096, &seen);
        let c = c.expect("calibrated");
        assert_eq!(at, off(4096, -SINGLE_POINT_MARGIN));
        assert!(c.capped && c.confirmed_at.is_none(), "{c:?}");
        assert_eq!(c.peak_bytes, seen[0].peak_bytes, "the measurement is still shown as it was");
        assert_eq!(
            basis_label(Some(&c)),
            format!(
                "measured here at 4K: {:.1} GB, held at 3 % under the formula until a second run agrees",
                seen[0].peak_bytes as f64 / GIB as f64
            )
        );
        // A measurement of another KV format confirms nothing.
        let q8 = KvFormat::bits_from_start(8);
        let other = [seen[0], Measured { kv: q8, ..point(1024, off(1024, -0.20)) }];
        assert_eq!(predict(4096, &other).0, at);
    }

    #[test]
    fn one_measurement_never_takes_the_prediction_below_the_formula_less_the_margin() {
        // However low the one point, at any context (both transfers, every
        // weight, either side of it).
        for fraction in [-0.031, -0.1, -0.5, -0.99, -1.0] {
            for c0 in [64, 1000, 4096, 100_000] {
                let seen = [point(c0, off(c0, fraction).max(1))];
                for c in [1, 16, 100, 512, 2048, 4096, 8192, 65_536, 1 << 20] {
                    let floor = formula(c) as f64 * (1.0 - SINGLE_POINT_MARGIN);
                    let at = predict(c, &seen).0;
                    assert!(at as f64 >= floor - 1.0, "{fraction} at {c0}, asked at {c}: {at} < {floor}");
                }
            }
        }
    }

    #[test]
    fn a_second_agreeing_measurement_confirms_a_lowering_as_far_as_both_show() {
        // Two runs, at 4K and 1K, both say the formula errs 10–11 % high:
        // the nearest counts as far as the lesser of the two.
        let seen = [point(4096, off(4096, -0.11)), point(1024, off(1024, -0.10))];
        let (at, c) = predict(4096, &seen);
        let c = c.expect("calibrated");
        assert!(at.abs_diff(off(4096, -0.10)) <= 2, "{at}");
        assert_eq!((c.capped, c.confirmed_at), (false, Some(1024)));
        assert!(basis_label(Some(&c)).ends_with(", confirmed at 1K"), "{}", basis_label(Some(&c)));
        // The confirming one showing the larger lowering: the nearest is taken whole.
        let seen = [point(4096, off(4096, -0.10)), point(1024, off(1024, -0.115))];
        assert_eq!(predict(4096, &seen).0, seen[0].peak_bytes);
        // A repeat at the same context confirms as well as another context does.
        let again = [point(4096, off(4096, -0.10)), point(4096, off(4096, -0.09))];
        assert!(predict(4096, &again).0.abs_diff(off(4096, -0.09)) <= 2);
        // Two that disagree (3 points apart) confirm nothing: the margin holds.
        let apart = [point(4096, off(4096, -0.12)), point(1024, off(1024, -0.09))];
        let (at, c) = predict(4096, &apart);
        assert_eq!(at, off(4096, -SINGLE_POINT_MARGIN));
        assert!(c.is_some_and(|c| c.capped && c.confirmed_at.is_none()));
        // One that agrees but lowers by less than the margin extends nothing.
        let near = [point(4096, off(4096, -0.04)), point(1024, off(1024, -0.025))];
        let (at, c) = predict(4096, &near);
        assert_eq!(at, off(4096, -SINGLE_POINT_MARGIN));
        assert!(c.is_some_and(|c| c.capped && c.confirmed_at.is_none()));
    }

    #[test]
    fn the_correction_shrinks_with_distance_to_nothing_at_the_horizon() {
        assert_eq!(weight(4096, 4096), 1.0);
        // 4871 and 3444 are 2^¼ (1.19) times and over 2^¼ from 4096; 5793
        // and 2896, √2 times and over √2.
        for (c, w) in [(4871, 0.5), (3444, 0.5), (5793, 0.0), (2896, 0.0), (8192, 0.0), (65_536, 0.0), (256, 0.0)] {
            assert!((weight(4096, c) - w).abs() < 5e-4, "{c}: {}", weight(4096, c));
        }
        assert_eq!(weight(4096, 1 << 30), 0.0);
        // 1 GiB over the formula at 4K: the full correction, shrunk, on the formula.
        let seen = [point(4096, formula(4096) + GIB)];
        let fraction = GIB as f64 / formula(4096) as f64;
        // Below 4K it carries as bytes (the larger there), above as a fraction.
        let (at, c) = predict(3444, &seen);
        let half = weight(4096, 3444);
        assert_eq!(at, (formula(3444) as f64 + half * GIB as f64).round() as u64);
        assert!(basis_label(c.as_ref()).ends_with(", counted 50 % at 3444"), "{}", basis_label(c.as_ref()));
        // Above, at least what 4K took (rule 5), which here is the larger.
        let expected = formula(4871) as f64 * (1.0 + weight(4096, 4871) * fraction);
        assert!(expected < (formula(4096) + GIB) as f64);
        assert_eq!(predict(4871, &seen).0, formula(4096) + GIB);
        // From √2 times or over √2 on: the formula, but never less than was
        // measured at a shorter context.
        assert_eq!(predict(2896, &seen).0, formula(2896));
        assert_eq!(predict(2048, &seen).0, formula(2048));
        let (_, far) = predict(2048, &seen);
        assert!(basis_label(far.as_ref()).ends_with(", too far to count at 2K"), "{}", basis_label(far.as_ref()));
        assert_eq!(predict(5793, &seen).0, formula(5793).max(seen[0].peak_bytes));
        assert_eq!(predict(8192, &seen).0, formula(8192).max(seen[0].peak_bytes));
        assert_eq!(predict(1 << 20, &seen).0, formula(1 << 20));
        // Between: always between the formula and the full correction.
        for c in [1, 100, 256, 300, 700, 1024, 1500, 2048, 3000, 4096, 5000, 8192, 12_000, 16_384, 40_000, 65_536] {
            let full = (formula(c) as f64 + (GIB as f64).max(fraction * formula(c) as f64)).round() as u64;
            let at = predict(c, &seen).0;
            assert!(formula(c) <= at && at <= full.max(seen[0].peak_bytes), "{c}: {at}");
        }
        // A lowering shrinks the same way below its context (4000, the
        // nearer): about half of it at 2^¼ times under it (as a fraction
        // there: the larger).
        let seen = [point(4096, off(4096, -0.10)), point(4000, off(4000, -0.10))];
        let lowered = formula(3444) as f64 * (1.0 - weight(4000, 3444) * 0.10);
        assert!(predict(3444, &seen).0.abs_diff(lowered.round() as u64) <= 2);
        // Above it, none of it (rule 5): the formula, and at least what 4K took.
        let (at, c) = predict(4871, &seen);
        assert_eq!(at, formula(4871));
        assert!(
            basis_label(c.as_ref()).ends_with(", a lowering not carried up to 4871"),
            "{}",
            basis_label(c.as_ref())
        );
        // Beyond the horizon, distance is the reason the words give.
        let (at, c) = predict(8192, &seen);
        assert_eq!(at, formula(8192));
        assert!(basis_label(c.as_ref()).ends_with(", too far to count at 8K"), "{}", basis_label(c.as_ref()));
    }

    #[test]
    fn a_longer_context_never_needs_less_than_was_measured() {
        // The formula grows little with context (a big model, short contexts):
        // a large correction shrinking away must not make 2K cheaper than 1K was.
        let flat = |c: u64| 8 * GIB + c * 1024;
        let seen = [point(1024, flat(1024) + 2 * GIB)];
        let cal = |c| calibration(flat, F, c, &seen).map(|k| k.apply(c, flat(c))).unwrap_or(0);
        let mut last = 0;
        for c in (1024..=1 << 16).step_by(512) {
            let at = cal(c);
            assert!(at >= seen[0].peak_bytes && at >= last, "{c}: {at} after {last}");
            last = at;
        }
    }

    #[test]
    fn the_nearest_measurement_by_ratio_and_kv_format_wins_and_empty_ones_are_ignored() {
        let q8 = KvFormat::bits_from_start(8);
        let seen = [
            point(1024, 9 * GIB),
            point(16384, 11 * GIB),
            point(0, 50 * GIB),
            point(8192, 0),
            Measured { kv: q8, ..point(2048, 7 * GIB) },
        ];
        assert_eq!(nearest(&seen, F, 2048).map(|m| m.context_tokens), Some(1024));
        assert_eq!(nearest(&seen, F, 8192).map(|m| m.context_tokens), Some(16384));
        // 4096 is 4× from both: the larger wins.
        assert_eq!(nearest(&seen, F, 4096).map(|m| m.context_tokens), Some(16384));
        assert_eq!(nearest(&seen[2..4], F, 4096), None);
        // Another KV format's peak is not this one's.
        assert_eq!(nearest(&seen, q8, 16384).map(|m| m.peak_bytes), Some(7 * GIB));
        assert_eq!(nearest(&seen[..4], q8, 2048), None);
    }

    #[test]
    fn the_rule_in_words_says_the_constants() {
        let w = |ratio: f64| (1.0 - ratio.ln() / SHRINK_HORIZON.ln()) * 100.0;
        // Half counts half-way to the horizon, by ratio.
        let (half, horizon) = (SHRINK_HORIZON.sqrt(), SHRINK_HORIZON);
        let words = format!(
            "{:.0} % at {half:.2} times or over {half:.2}, none from {horizon:.1} times or over {horizon:.1} on. \
             One run may lower the estimate by at most {:.0} %; more needs a second run that agrees (within \
             {:.0} points), and a lowering is never carried to a longer context.",
            w(half),
            SINGLE_POINT_MARGIN * 100.0,
            AGREEMENT * 100.0
        );
        assert!(RULE_WORDS.ends_with(&words), "{RULE_WORDS}");
        let c = calibration(formula, F, 4096, &[point(4096, formula(4096))]);
        assert_eq!(c.map(|c| c.rule), Some(RULE_WORDS));
    }

    #[test]
    fn hostile_figures_saturate_instead_of_wrapping() {
        let huge = [point(1, u64::MAX)];
        // The offset saturates at i64's range: still an absurd peak, never a small one.
        assert!(predict(1 << 20, &huge).0 >= i64::MAX as u64);
        let tiny = [point(1 << 20, 1)];
        assert!(predict(1, &tiny).0 as f64 >= formula(1) as f64 * (1.0 - SINGLE_POINT_MARGIN) - 1.0);
        let zero = |_| 0;
        let c = calibration(zero, F, 10, &[point(10, 5)]);
        assert_eq!(c.map(|c| c.apply(10, 0)), Some(5));
        assert_eq!(context_words(4096), "4K");
        assert_eq!(context_words(3000), "3000");
        assert_eq!(context_words(0), "0");
    }
}
