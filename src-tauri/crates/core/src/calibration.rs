//! Estimates that learn from this Mac: a peak measured for a model at one
//! context calibrates `core::fit`'s formula for that model on this machine.
//! Pure: the store keeps the measurements and the app records them; this
//! layer wraps the formula's estimate and never changes its terms.
//!
//! The rule: take the measurement nearest in context (by ratio, so 4K is as
//! near 8K as 2K is); the prediction at context `c` is the peak measured at
//! `c0` plus the formula's growth from `c0` to `c`:
//!
//! ```text
//! predicted(c) = measured(c0) + formula(c) − formula(c0)
//! ```
//!
//! At the measured context it is the measurement itself; elsewhere the
//! measurement fixes the level (what the formula's constant terms miss on
//! this machine: the allocator, MLX's buffer cache, the runtime) and the
//! formula supplies what changes with context (the KV cache and the
//! attention and activation buffers), which it models term by term.

use serde::Serialize;

/// What one load or turn really took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Measured {
    pub context_tokens: u64,
    /// The peak (the larger of MLX's peak and the process's peak resident set).
    pub peak_bytes: u64,
}

/// Where a prediction comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Basis {
    /// The formula alone: nothing measured for this model here yet.
    Estimated,
    /// Calibrated by the peak measured at this context.
    #[serde(rename_all = "camelCase")]
    Measured { at_context: u64, peak_bytes: u64 },
}

/// A prediction and what it rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Calibrated {
    pub context_tokens: u64,
    pub predicted_peak_bytes: u64,
    /// The formula's own figure at this context.
    pub formula_peak_bytes: u64,
    pub basis: Basis,
}

/// The measurement nearest `context` by ratio (ties: the larger context,
/// whose growth term is the smaller extrapolation downwards); measurements
/// of nothing (a zero context or peak) are ignored.
pub fn nearest(measured: &[Measured], context: u64) -> Option<Measured> {
    let distance = |m: &Measured| (context.max(1) as f64 / m.context_tokens as f64).ln().abs();
    measured
        .iter()
        .filter(|m| m.context_tokens > 0 && m.peak_bytes > 0)
        .min_by(|a, b| distance(a).total_cmp(&distance(b)).then(b.context_tokens.cmp(&a.context_tokens)))
        .copied()
}

/// The prediction at `context` from `formula` (the formula's peak at a
/// context, `core::fit::estimate(..).predicted_peak_bytes`) and this
/// model's measurements on this machine. See the module docs for the rule.
pub fn calibrate(formula: impl Fn(u64) -> u64, context: u64, measured: &[Measured]) -> Calibrated {
    let formula_peak_bytes = formula(context);
    let Some(m) = nearest(measured, context) else {
        return Calibrated {
            context_tokens: context,
            predicted_peak_bytes: formula_peak_bytes,
            formula_peak_bytes,
            basis: Basis::Estimated,
        };
    };
    let at_measured = formula(m.context_tokens);
    // i128: the growth is negative below the measured context.
    let predicted = i128::from(m.peak_bytes) + i128::from(formula_peak_bytes) - i128::from(at_measured);
    let predicted_peak_bytes = u64::try_from(predicted.max(0)).unwrap_or(u64::MAX);
    Calibrated {
        context_tokens: context,
        predicted_peak_bytes,
        formula_peak_bytes,
        basis: Basis::Measured { at_context: m.context_tokens, peak_bytes: m.peak_bytes },
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

impl Calibrated {
    /// What the figure rests on, in words: "measured here at 4K: 9.8 GB" or "estimated".
    pub fn label(&self) -> String {
        match self.basis {
            Basis::Estimated => "estimated".to_owned(),
            Basis::Measured { at_context, peak_bytes } => format!(
                "measured here at {}: {:.1} GB",
                context_words(at_context),
                peak_bytes as f64 / (1u64 << 30) as f64
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// A formula: 8 GiB of weights and fixed terms, 128 KiB per token.
    fn formula(c: u64) -> u64 {
        8 * GIB + c * (128 << 10)
    }

    #[test]
    fn without_a_measurement_it_is_the_formula_and_says_estimated() {
        let c = calibrate(formula, 4096, &[]);
        assert_eq!((c.predicted_peak_bytes, c.basis), (formula(4096), Basis::Estimated));
        assert_eq!(c.label(), "estimated");
    }

    #[test]
    fn at_the_measured_context_it_is_the_measurement_and_elsewhere_the_formula_s_growth_on_top() {
        // This Mac needs 1.5 GiB more than the formula says at 4K.
        let seen = [Measured { context_tokens: 4096, peak_bytes: formula(4096) + 3 * GIB / 2 }];
        let at = calibrate(formula, 4096, &seen);
        assert_eq!(at.predicted_peak_bytes, seen[0].peak_bytes);
        assert_eq!(at.formula_peak_bytes, formula(4096));
        let twice = calibrate(formula, 8192, &seen);
        assert_eq!(twice.predicted_peak_bytes, seen[0].peak_bytes + 4096 * (128 << 10));
        let half = calibrate(formula, 2048, &seen);
        assert_eq!(half.predicted_peak_bytes, seen[0].peak_bytes - 2048 * (128 << 10));
        assert_eq!(at.label(), format!("measured here at 4K: {:.1} GB", seen[0].peak_bytes as f64 / GIB as f64));
    }

    #[test]
    fn the_nearest_measurement_by_ratio_wins_and_empty_ones_are_ignored() {
        let seen = [
            Measured { context_tokens: 1024, peak_bytes: 9 * GIB },
            Measured { context_tokens: 16384, peak_bytes: 11 * GIB },
            Measured { context_tokens: 0, peak_bytes: 50 * GIB },
            Measured { context_tokens: 8192, peak_bytes: 0 },
        ];
        assert_eq!(nearest(&seen, 2048).map(|m| m.context_tokens), Some(1024));
        assert_eq!(nearest(&seen, 8192).map(|m| m.context_tokens), Some(16384));
        // 4096 is 4× from both: the larger wins.
        assert_eq!(nearest(&seen, 4096).map(|m| m.context_tokens), Some(16384));
        assert_eq!(nearest(&seen[2..], 4096), None);
    }

    #[test]
    fn hostile_figures_saturate_instead_of_wrapping() {
        let huge = [Measured { context_tokens: 1, peak_bytes: u64::MAX }];
        assert_eq!(calibrate(formula, 1 << 20, &huge).predicted_peak_bytes, u64::MAX);
        let tiny = [Measured { context_tokens: 1 << 20, peak_bytes: 1 }];
        assert_eq!(calibrate(formula, 1, &tiny).predicted_peak_bytes, 0);
        assert_eq!(context_words(4096), "4K");
        assert_eq!(context_words(3000), "3000");
        assert_eq!(context_words(0), "0");
    }
}
