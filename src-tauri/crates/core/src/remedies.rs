//! What would make a refused model fit: the remedies the swap warning and
//! `headroom fit` offer, each with its numbers. Pure: the same fit check
//! ([`fit::check`]) run once per option against the same budget, so a
//! remedy is offered only when the estimate that refused the load accepts
//! it.
//!
//! Unloading the model now loaded is not in the list: one engine holds one
//! model, so every load already counts what the unload frees
//! (`BudgetInputs::freed_by_unload_bytes`) before its verdict.

use serde::{Deserialize, Serialize};

use crate::calibration::Measured;
use crate::fit::{self, FitReport, ModelFootprint};
use crate::kv::{KvFormat, DEFAULT_KV_GROUP_SIZE};

/// The KV widths offered, widest first: 8-bit keeps mlx-lm's quality
/// (its docs call 8-bit KV "near-lossless"), 4-bit saves more.
pub const KV_BITS_OFFERED: [u32; 2] = [8, 4];

/// Another model on disk that may stand in for the refused one.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub id: String,
    pub name: String,
    pub footprint: ModelFootprint,
    /// Its weights' bits (`None`: not quantized).
    pub bits: Option<u32>,
}

/// One way to make the load fit, with what it would then need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case", rename_all_fields = "camelCase")]
pub enum Remedy {
    /// Load at the largest context that fits.
    ShorterContext { context_tokens: u64, predicted_peak_bytes: u64 },
    /// Keep the KV cache at `bits` in groups of `group_size`, converted after `start` tokens.
    KvCache { bits: u32, group_size: u32, start: u64, label: String, predicted_peak_bytes: u64 },
    /// Another quantization of the same model, already on disk.
    OtherQuantization { id: String, name: String, bits: Option<u32>, predicted_peak_bytes: u64 },
}

impl Remedy {
    pub fn predicted_peak_bytes(&self) -> u64 {
        match self {
            Self::ShorterContext { predicted_peak_bytes, .. }
            | Self::KvCache { predicted_peak_bytes, .. }
            | Self::OtherQuantization { predicted_peak_bytes, .. } => *predicted_peak_bytes,
        }
    }
}

/// The remedies for `report` (the refused check of a model at `context`
/// with its KV cache as `kv`), in the order a user would try them: the
/// same model and context with a smaller KV cache, another quantization of
/// the same model, then a shorter context. `start` is the user's
/// quantized-KV start (the settings'); `candidates` are the other models on
/// disk (those of another shape are skipped). Empty when the report does not
/// refuse.
pub fn remedies(report: &FitReport, kv: KvFormat, start: u64, candidates: &[Candidate]) -> Vec<Remedy> {
    if !report.verdict.refuses() {
        return Vec::new();
    }
    let model = &report.footprint;
    let context = report.estimate.context_tokens;
    let inputs = report.budget.inputs;
    // The same model's measurements hold for its other KV formats and
    // contexts; another model's file has none of its own here.
    let fits = |m: &ModelFootprint, kv: KvFormat, measured: &[Measured]| {
        let r = fit::check_with(m, context, kv, inputs, measured);
        (!r.verdict.refuses()).then_some(r)
    };
    let mut out = Vec::new();
    for bits in KV_BITS_OFFERED {
        if kv.quant().is_some_and(|q| q.bits <= bits) {
            continue;
        }
        let Ok(option) = KvFormat::quantized(u64::from(bits), u64::from(DEFAULT_KV_GROUP_SIZE), start) else {
            continue;
        };
        if model.check_kv(option).is_err() {
            continue;
        }
        if let Some(r) = fits(model, option, &report.measured) {
            out.push(Remedy::KvCache {
                bits,
                group_size: DEFAULT_KV_GROUP_SIZE,
                start,
                label: r.kv_label,
                predicted_peak_bytes: r.estimate.predicted_peak_bytes,
            });
            // The widest KV cache that fits is the remedy; narrower ones only lose quality.
            break;
        }
    }
    for c in
        candidates.iter().filter(|c| same_shape(model, &c.footprint) && c.footprint.weight_bytes < model.weight_bytes)
    {
        if let Some(r) = fits(&c.footprint, kv, &[]) {
            out.push(Remedy::OtherQuantization {
                id: c.id.clone(),
                name: c.name.clone(),
                bits: c.bits,
                predicted_peak_bytes: r.estimate.predicted_peak_bytes,
            });
        }
    }
    if let Some(n) = report.largest_context_that_fits.filter(|&n| n < context) {
        out.push(Remedy::ShorterContext {
            context_tokens: n,
            predicted_peak_bytes: fit::check_with(model, n, kv, inputs, &report.measured).estimate.predicted_peak_bytes,
        });
    }
    out
}

/// Whether `b` can be the model of `a` stored another way: the same
/// architecture's shape (layers, widths, heads, vocabulary, experts, KV
/// layer kinds), and weights no smaller than 2 bits per 16-bit weight
/// would make them (an eighth), since quantizing never stores less.
/// Fine-tunes of one base share a shape too; the list names the
/// candidate, so the user sees which it is.
fn same_shape(a: &ModelFootprint, b: &ModelFootprint) -> bool {
    if b.weight_bytes.saturating_mul(8) < a.weight_bytes {
        return false;
    }
    let shape = |m: &ModelFootprint| {
        (m.layers, m.attention_heads, m.kv_heads, m.head_dim, m.hidden_size, m.intermediate_size, m.vocab_size)
    };
    shape(a) == shape(b)
        && a.experts.map(|e| e.count) == b.experts.map(|e| e.count)
        && a.kv_layers.iter().map(|g| g.kind()).eq(b.kv_layers.iter().map(|g| g.kind()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::Backend;
    use crate::fit::{BudgetInputs, KvLayers, GIB};

    /// Qwen2.5-14B-Instruct's shape at 4 bits (`bits` 4) or 8 bits.
    fn qwen14b(bits: u32) -> ModelFootprint {
        ModelFootprint {
            weight_bytes: if bits == 4 { 8_310_000_000 } else { 15_700_000_000 },
            layers: 48,
            attention_heads: 40,
            kv_heads: 8,
            head_dim: 128,
            hidden_size: 5120,
            intermediate_size: 13824,
            vocab_size: 152_064,
            kv_bytes_per_element: 2,
            max_context: Some(32768),
            kv_layers: vec![KvLayers::full(48, 8, 128)],
            backend: Backend::Metal,
            ..ModelFootprint::default()
        }
    }

    fn candidate(id: &str, footprint: ModelFootprint, bits: u32) -> Candidate {
        Candidate { id: id.into(), name: id.into(), footprint, bits: Some(bits) }
    }

    /// The example: a Qwen2.5-14B-shaped 4-bit model at 32K with
    /// 16 GB available (a 12 GB budget after the 4 GB kept for macOS), Metal
    /// figures, swaps with a bf16 KV cache; it fits with an 8-bit cache or
    /// at a shorter context, and the list says so with the numbers the fit
    /// check gives for each.
    #[test]
    fn a_14b_at_32k_with_16_gb_fits_with_an_8_bit_cache_or_a_shorter_context() {
        let inputs = BudgetInputs::new(16 * GIB);
        let model = qwen14b(4);
        let report = fit::check(&model, 32768, KvFormat::Float, inputs);
        assert!(report.verdict.refuses(), "{:?}", report.verdict);
        let list = remedies(&report, KvFormat::Float, 0, &[]);
        let [Remedy::KvCache { bits: 8, label, predicted_peak_bytes, .. }, Remedy::ShorterContext { context_tokens, .. }] =
            list.as_slice()
        else {
            panic!("{list:?}")
        };
        assert_eq!(label, "8-bit (group 64)");
        assert!(*predicted_peak_bytes <= report.budget.budget_bytes);
        assert_eq!(Some(*context_tokens), report.largest_context_that_fits);
        assert!(*context_tokens < 32768);
        // Each remedy, applied, passes the same check that refused the load.
        let q8 = KvFormat::quantized(8, 64, 0).unwrap_or_default();
        assert!(!fit::check(&model, 32768, q8, inputs).verdict.refuses());
        assert!(!fit::check(&model, *context_tokens, KvFormat::Float, inputs).verdict.refuses());
    }

    /// The 8-bit model beside a 4-bit one: the 4-bit is offered; a model of
    /// another shape, or a larger one, is not.
    #[test]
    fn a_smaller_quantization_on_disk_is_offered() {
        let inputs = BudgetInputs::new(20 * GIB);
        let big = qwen14b(8);
        let report = fit::check(&big, 8192, KvFormat::Float, inputs);
        assert!(report.verdict.refuses(), "{:?}", report.verdict);
        let other_shape = ModelFootprint { layers: 28, kv_layers: vec![KvLayers::full(28, 8, 128)], ..qwen14b(4) };
        let cands = [
            candidate("q14-4bit", qwen14b(4), 4),
            candidate("q7-4bit", other_shape, 4),
            candidate("q14-8bit", big.clone(), 8),
        ];
        let list = remedies(&report, KvFormat::Float, 0, &cands);
        let others: Vec<&str> = list
            .iter()
            .filter_map(|r| match r {
                Remedy::OtherQuantization { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(others, ["q14-4bit"]);
        // A folder whose config has the shape but whose weights are far too
        // few to be these weights quantized (a test fixture, a stub) is not offered.
        let stub = ModelFootprint { weight_bytes: big.weight_bytes / 1000, ..big.clone() };
        let list = remedies(&report, KvFormat::Float, 0, &[candidate("stub", stub, 4)]);
        assert!(!list.is_empty(), "the other remedies are still offered");
        assert!(list.iter().all(|r| !matches!(r, Remedy::OtherQuantization { .. })), "{list:?}");
    }

    /// A fitting model has nothing to remedy; a model that fits nowhere
    /// gets no shorter context, and no KV cache that still swaps.
    #[test]
    fn nothing_is_offered_that_would_not_fit() {
        let model = qwen14b(4);
        let roomy = fit::check(&model, 4096, KvFormat::Float, BudgetInputs::new(64 * GIB));
        assert!(remedies(&roomy, KvFormat::Float, 0, &[]).is_empty());
        let huge = ModelFootprint { weight_bytes: 200 * GIB, ..qwen14b(4) };
        let none = fit::check(&huge, 32768, KvFormat::Float, BudgetInputs::new(20 * GIB));
        assert!(none.verdict.refuses());
        assert_eq!(remedies(&none, KvFormat::Float, 0, &[]), []);
    }

    /// A cache already at 8 bits is offered 4 bits, never 8 again; sliding
    /// windows are never offered a quantized cache (mlx-lm cannot).
    #[test]
    fn kv_options_are_narrower_than_now_and_allowed_for_the_model() {
        let model = qwen14b(4);
        let q8 = KvFormat::quantized(8, 64, 0).unwrap_or_default();
        let q4 = KvFormat::quantized(4, 64, 0).unwrap_or_default();
        let peak = |kv| fit::estimate(&model, 32768, kv).predicted_peak_bytes;
        // A budget between the 4-bit and the 8-bit peaks.
        let budget = (peak(q8) + peak(q4)) / 2;
        let inputs = BudgetInputs::new(budget + fit::DEFAULT_OS_HEADROOM);
        let report = fit::check(&model, 32768, q8, inputs);
        let kv_bits: Vec<u32> = remedies(&report, q8, 0, &[])
            .iter()
            .filter_map(|r| match r {
                Remedy::KvCache { bits, .. } => Some(*bits),
                _ => None,
            })
            .collect();
        assert_eq!(kv_bits, [4]);
        let windowed = ModelFootprint {
            kv_layers: vec![KvLayers::sliding(40, 8, 128, 1024), KvLayers::full(8, 8, 128)],
            ..qwen14b(4)
        };
        let float = fit::estimate(&windowed, 32768, KvFormat::Float).predicted_peak_bytes;
        let report = fit::check(
            &windowed,
            32768,
            KvFormat::Float,
            BudgetInputs::new(float - GIB / 4 + fit::DEFAULT_OS_HEADROOM),
        );
        let list = remedies(&report, KvFormat::Float, 0, &[]);
        assert!(matches!(list.as_slice(), [Remedy::ShorterContext { .. }]), "{list:?}");
    }
}
