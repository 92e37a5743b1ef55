//! Estimates that learn from this Mac: a peak measured for a model at one
//! context calibrates `core::fit`'s formula for that model on this machine.
//! Pure: the store keeps the measurements and the app records them; this
//! layer wraps the formula's estimate and never changes its terms.
//!
//! The rule: take the measurement nearest in context (by ratio, so 4K is as
//! near 8K as 2K is); the prediction at context `c` is the peak measured at
//! `c0` plus the formula's growth from `c0` to `c`, plus, above `c0`, the
//! growth of the resident slack the measurement showed:
//!
//! ```text
//! predicted(c) = measured(c0) + formula(c) − formula(c0)
//!              + g × max(0, transient(c) − transient(c0))
//!              − (beyond(c) − beyond(c0)), when that is positive
//! g = min(slack(c0) / transient(c0), SLACK_GROWTH_MAX)
//! ```
//!
//! At the measured context it is the measurement itself. Elsewhere the
//! measurement fixes the level (what the formula's constant terms miss on
//! this machine: the allocator, MLX's buffer cache, the runtime) and the
//! formula supplies what changes with context (the KV cache and the
//! attention and activation buffers), which it models term by term.
//!
//! The slack is what the process held beyond MLX's own peak (`slack_bytes`)
//! less what the formula already counts there (`Estimate::beyond_mlx_bytes`:
//! the prefill's slack, the recurrence), `transient` MLX's buffers that live
//! only during a prefill (`Estimate::transient_bytes`). What those terms of
//! the formula already add between `c0` and `c` is not added again: past one
//! prefill chunk the engine clears MLX's cache between chunks, the slack
//! stops growing with the whole block, and the formula's prefill-slack term
//! takes over (measured: 35.6 → 41.7 MB of slack from 2K to 4K tokens). On MLX's CPU backend with the CPU kernel
//! the slack grows with those buffers: `scripts/measure-fit.sh
//! --calibration` measured 0.10–0.27 bytes of slack per byte of their
//! growth (1K → 2K → 4K tokens; with MLX's fused kernel the slack stays
//! near 10–13 MB). The level rule alone then erred low by 4–13 % at twice
//! the context. `g` reads the rate from the measurement itself, bounded by
//! [`SLACK_GROWTH_MAX`]: at a short context the slack is mostly the
//! runtime's one-time cost (tens of MB in a first turn), which does not grow,
//! and an unbounded rate would multiply it into a refusal. Where the OS
//! cannot say (macOS; MLX's peak counts Metal's buffers) there is no slack.

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
    /// Of it, what the process held beyond MLX's peak (0 where the OS cannot say).
    pub slack_bytes: u64,
}

/// The most slack a byte of transient buffers' growth adds (module docs:
/// measured up to 0.27 on the CPU kernel; 0.3 keeps a margin).
pub const SLACK_GROWTH_MAX: f64 = 0.3;

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
            slack_bytes: self.resident_peak_bytes.unwrap_or(0).saturating_sub(self.mlx_peak_bytes),
        })
    }
}

/// The measurement a prediction rests on, and the formula's figures it is
/// read against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Calibration {
    pub at_context: u64,
    pub peak_bytes: u64,
    /// The formula's peak at `at_context`.
    pub formula_bytes: u64,
    /// measured − formula at `at_context` (negative: the formula errs high here).
    pub offset_bytes: i64,
    /// The formula's transient buffers at `at_context` (`Estimate::transient_bytes`).
    pub transient_bytes: u64,
    /// What the process held there beyond MLX's peak and beyond what the
    /// formula already counts as such.
    pub slack_bytes: u64,
    /// What the formula counts beyond MLX's peak at `at_context`.
    pub beyond_mlx_bytes: u64,
}

/// The formula's figures at one context that a calibration reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Formula {
    pub peak_bytes: u64,
    pub transient_bytes: u64,
    /// What the formula already counts beyond MLX's peak (`Estimate::beyond_mlx_bytes`).
    pub beyond_mlx_bytes: u64,
}

/// The measurement with the KV format `kv` nearest `context` by ratio
/// (ties: the larger context, whose growth term is the smaller
/// extrapolation downwards); measurements of nothing (a zero context or
/// peak) are ignored.
pub fn nearest(measured: &[Measured], kv: KvFormat, context: u64) -> Option<Measured> {
    let distance = |m: &Measured| (context.max(1) as f64 / m.context_tokens as f64).ln().abs();
    measured
        .iter()
        .filter(|m| m.kv == kv && m.context_tokens > 0 && m.peak_bytes > 0)
        .min_by(|a, b| distance(a).total_cmp(&distance(b)).then(b.context_tokens.cmp(&a.context_tokens)))
        .copied()
}

/// The calibration for a prediction at `context` with the KV cache as
/// `kv`, from `formula` (the formula's figures at a context, from
/// `core::fit::estimate`) and this model's measurements on this machine;
/// `None` when nothing was measured.
pub fn calibration(
    formula: impl Fn(u64) -> Formula,
    kv: KvFormat,
    context: u64,
    measured: &[Measured],
) -> Option<Calibration> {
    let m = nearest(measured, kv, context)?;
    let at = formula(m.context_tokens);
    let offset = i128::from(m.peak_bytes) - i128::from(at.peak_bytes);
    Some(Calibration {
        at_context: m.context_tokens,
        peak_bytes: m.peak_bytes,
        formula_bytes: at.peak_bytes,
        offset_bytes: i64::try_from(offset).unwrap_or(if offset < 0 { i64::MIN } else { i64::MAX }),
        transient_bytes: at.transient_bytes,
        slack_bytes: m.slack_bytes.saturating_sub(at.beyond_mlx_bytes),
        beyond_mlx_bytes: at.beyond_mlx_bytes,
    })
}

impl Calibration {
    /// The prediction from the formula's figures at some context (module docs).
    pub fn apply(&self, formula: Formula) -> u64 {
        let level = i128::from(formula.peak_bytes) + i128::from(self.offset_bytes);
        let grown = formula.transient_bytes.saturating_sub(self.transient_bytes);
        // What of that growth the formula's own terms beyond MLX (the
        // slack of a prompt spanning chunks, the recurrence) already add.
        let counted = i128::from(formula.beyond_mlx_bytes) - i128::from(self.beyond_mlx_bytes);
        let slack = ((self.slack_growth() * grown as f64) as i128 - counted).max(0);
        u64::try_from((level + slack).max(0)).unwrap_or(u64::MAX)
    }

    /// Slack bytes per byte of transient buffers' growth: the measurement's
    /// own ratio, at most [`SLACK_GROWTH_MAX`].
    pub fn slack_growth(&self) -> f64 {
        if self.transient_bytes == 0 {
            return 0.0;
        }
        (self.slack_bytes as f64 / self.transient_bytes as f64).min(SLACK_GROWTH_MAX)
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

/// What a prediction rests on, in words: "measured here at 4K: 9.8 GB" or "estimated".
pub fn basis_label(calibration: Option<&Calibration>) -> String {
    match calibration {
        None => "estimated".to_owned(),
        Some(c) => format!(
            "measured here at {}: {:.1} GB",
            context_words(c.at_context),
            c.peak_bytes as f64 / (1u64 << 30) as f64
        ),
    }
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

    /// The formula's transient buffers: 64 KiB per token.
    fn transient(c: u64) -> u64 {
        c * (64 << 10)
    }

    fn figures(c: u64) -> Formula {
        Formula { peak_bytes: formula(c), transient_bytes: transient(c), beyond_mlx_bytes: 0 }
    }

    fn predict(context: u64, seen: &[Measured]) -> (u64, Option<Calibration>) {
        let c = calibration(figures, F, context, seen);
        (c.map_or(formula(context), |c| c.apply(figures(context))), c)
    }

    fn point(context_tokens: u64, peak_bytes: u64) -> Measured {
        Measured { kv: F, context_tokens, peak_bytes, slack_bytes: 0 }
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
        assert_eq!(point.map(|m| (m.context_tokens, m.peak_bytes, m.slack_bytes)), Some((300, 130, 30)));
        assert_eq!(turn(200).calibration_point(), None);
        let load = PeakMeasurement { kind: MeasuredKind::Load, context_tokens: 0, ..turn(0) };
        assert_eq!(load.calibration_point(), None);
        let mlx_only = PeakMeasurement { resident_peak_bytes: None, ..turn(0) };
        assert_eq!(mlx_only.peak_bytes(), 100);
        assert_eq!(mlx_only.calibration_point().map(|m| m.slack_bytes), Some(0));
        // Other chats' states held meanwhile are not this turn's need.
        let beside = PeakMeasurement { cached_bytes: 20, ..turn(0) };
        assert_eq!(beside.calibration_point().map(|m| (m.peak_bytes, m.slack_bytes)), Some((110, 30)));
    }

    #[test]
    fn without_a_measurement_it_is_the_formula_and_says_estimated() {
        assert_eq!(predict(4096, &[]), (formula(4096), None));
        assert_eq!(basis_label(None), "estimated");
    }

    #[test]
    fn at_the_measured_context_it_is_the_measurement_and_elsewhere_the_formula_s_growth_on_top() {
        // This Mac needs 1.5 GiB more than the formula says at 4K.
        let seen = [point(4096, formula(4096) + 3 * GIB / 2)];
        let (at, c) = predict(4096, &seen);
        assert_eq!(at, seen[0].peak_bytes);
        assert_eq!(c.map(|c| c.offset_bytes), Some(3 * (GIB as i64) / 2));
        // Nothing beyond MLX's peak was seen: the level and the formula's growth.
        assert_eq!(predict(8192, &seen).0, seen[0].peak_bytes + 4096 * (128 << 10));
        assert_eq!(predict(2048, &seen).0, seen[0].peak_bytes - 2048 * (128 << 10));
        // A formula that errs high keeps its growth on the measured level.
        let low = [point(4096, formula(4096) - GIB / 4)];
        assert_eq!(predict(8192, &low).0, formula(8192) - GIB / 4);
        assert_eq!(
            basis_label(c.as_ref()),
            format!("measured here at 4K: {:.1} GB", seen[0].peak_bytes as f64 / GIB as f64)
        );
    }

    #[test]
    fn slack_beyond_mlx_grows_with_the_transient_buffers_at_a_bounded_rate_and_only_upwards() {
        // 0.2 bytes of slack per transient byte at 4K (within the bound).
        let slack = transient(4096) / 5;
        let seen = [Measured { slack_bytes: slack, ..point(4096, formula(4096) + slack) }];
        let (at, c) = predict(4096, &seen);
        assert_eq!(at, seen[0].peak_bytes, "at the measurement it is the measurement");
        assert!((c.map_or(0.0, |c| c.slack_growth()) - 0.2).abs() < 1e-9);
        let level = seen[0].peak_bytes + 4096 * (128 << 10);
        assert_eq!(predict(8192, &seen).0, level + transient(4096) / 5);
        // Below it, the level alone: the slack seen is never taken away.
        assert_eq!(predict(2048, &seen).0, seen[0].peak_bytes - 2048 * (128 << 10));
        // A first turn's slack at a short context is mostly the runtime's
        // one-time cost: its rate is bounded, not multiplied out.
        let short = [Measured { slack_bytes: 40 << 20, ..point(40, formula(40) + (40 << 20)) }];
        let far = predict(8192, &short).0;
        let bound = formula(8192) + (40 << 20) + (SLACK_GROWTH_MAX * (transient(8192) - transient(40)) as f64) as u64;
        assert!(far <= bound + 1 && far >= formula(8192) + (40 << 20), "{far} vs {bound}");
    }

    #[test]
    fn slack_the_formula_already_counts_is_not_counted_again() {
        // The formula counts 50 MB beyond MLX's peak here (a recurrence);
        // the measurement saw 60 MB: only 10 MB is slack of its own.
        let with = |c| Formula { beyond_mlx_bytes: 50 << 20, ..figures(c) };
        let seen = [Measured { slack_bytes: 60 << 20, ..point(4096, formula(4096) + (10 << 20)) }];
        let cal = calibration(with, F, 4096, &seen).expect("calibrated");
        assert_eq!(cal.slack_bytes, 10 << 20);
        let grown = transient(8192) - transient(4096);
        let slack = ((10u64 << 20) as f64 / transient(4096) as f64 * grown as f64) as u64;
        assert_eq!(cal.apply(with(8192)), formula(8192) + (10 << 20) + slack);
        // Where the formula's own terms beyond MLX grow by more than that,
        // they are the growth: nothing is added on top.
        let more = Formula { beyond_mlx_bytes: (50 << 20) + slack + 1, ..figures(8192) };
        assert_eq!(cal.apply(more), formula(8192) + (10 << 20));
        let some = Formula { beyond_mlx_bytes: (50 << 20) + slack / 2, ..figures(8192) };
        assert_eq!(cal.apply(some), formula(8192) + (10 << 20) + (slack - slack / 2));
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
    fn hostile_figures_saturate_instead_of_wrapping() {
        let huge = [point(1, u64::MAX)];
        // The offset saturates at i64's range: still an absurd peak, never a small one.
        assert!(predict(1 << 20, &huge).0 >= i64::MAX as u64);
        let tiny = [point(1 << 20, 1)];
        assert_eq!(predict(1, &tiny).0, 0);
        assert_eq!(context_words(4096), "4K");
        assert_eq!(context_words(3000), "3000");
        assert_eq!(context_words(0), "0");
    }
}
