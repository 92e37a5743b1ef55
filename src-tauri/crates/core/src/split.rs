//! One model across two Macs: which layers each runs, and the fit verdict
//! for each (issue #28). A pipeline split: the host runs the embedding, its
//! first `k` layers and the output head; the peer (the Mac lent to it) runs
//! the rest and hands the hidden state back, one hand-off each way per
//! forward pass.
//!
//! Each Mac's share is a model of its own for the fit: its layers' weights
//! (read from the headers, layer by layer), its layers' KV cache, and the
//! whole per-pass overhead (a prompt chunk's activations pass through every
//! layer of both Macs). Both hold the embedding, the final norm and the head
//! (the peer loads them with its range; they are counted on both sides, the
//! safe direction). The split is the one that leaves the most room on the
//! tighter Mac, relative to its own budget: not an even split of the layers,
//! and never one that would swap either Mac while another would not.
//!
//! The calibration that corrects the one-Mac formula (`crate::calibration`)
//! is not applied: it was measured for the whole model in one process.

use serde::{Deserialize, Serialize};

use crate::fit::{check, BudgetInputs, FitReport, KvKind, ModelFootprint, Verdict};
use crate::kv::KvFormat;

/// One Mac's part of a split.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Share {
    /// The first layer it runs (0 on the host).
    pub first_layer: u64,
    /// How many consecutive layers it runs.
    pub layers: u64,
    /// Its fit as a model of its own: weights, KV share, overhead, its
    /// own budget and verdict.
    pub fit: FitReport,
}

impl Share {
    /// The layers it runs, as `first..end`.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.first_layer..self.first_layer + self.layers
    }
}

/// Which Mac a share is on, in words and JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Host,
    Peer,
}

/// The chosen split and both verdicts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct SplitReport {
    pub context_tokens: u64,
    pub host: Share,
    pub peer: Share,
}

impl SplitReport {
    /// The worse of the two verdicts: the split fits only where both Macs do.
    pub fn verdict(&self) -> Verdict {
        worse(self.host.fit.verdict, self.peer.fit.verdict)
    }

    /// Whether loading this split should be refused (either Mac would swap).
    pub fn refuses(&self) -> bool {
        self.verdict().refuses()
    }

    /// The share on `side`.
    pub fn share(&self, side: Side) -> &Share {
        match side {
            Side::Host => &self.host,
            Side::Peer => &self.peer,
        }
    }
}

/// Why a model cannot be split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// Fewer than two layers: nothing to hand over.
    #[error("the model has {layers} layer(s); a split across two Macs needs at least 2")]
    TooFewLayers { layers: u64 },
    /// Sliding-window or linear-attention layers: the engine splits only
    /// models whose layers all keep a full KV cache.
    #[error("only models whose every layer is full attention run across two Macs; this one has {kind} layers")]
    LayerKinds { kind: &'static str },
    /// The headers did not give each layer's weight bytes.
    #[error("the weight headers name {found} layers' tensors, the config {layers}")]
    LayerBytes { found: usize, layers: u64 },
}

/// The split of `model` at `context` tokens (KV as `kv`) between the host
/// (`host`'s budget) and a peer (`peer`'s), chosen as the module docs say.
pub fn split(
    model: &ModelFootprint,
    context: u64,
    kv: KvFormat,
    host: BudgetInputs,
    peer: BudgetInputs,
) -> Result<SplitReport, SplitError> {
    check_splittable(model)?;
    let n = model.layers;
    // The pressure each side would be under: its peak over its budget.
    let load = |share: &Share| {
        let budget = share.fit.budget.budget_bytes.max(1) as f64;
        share.fit.estimate.predicted_peak_bytes as f64 / budget
    };
    let mut best: Option<(f64, SplitReport)> = None;
    for k in 1..n {
        let report = SplitReport {
            context_tokens: context,
            host: share(model, 0..k, context, kv, host),
            peer: share(model, k..n, context, kv, peer),
        };
        let worst = load(&report.host).max(load(&report.peer));
        if best.as_ref().is_none_or(|(b, _)| worst < *b) {
            best = Some((worst, report));
        }
    }
    // n ≥ 2 was checked, so the loop ran at least once.
    best.map(|(_, r)| r).ok_or(SplitError::TooFewLayers { layers: n })
}

/// One Mac's share: layers `range` of `model` at `context` tokens within
/// `inputs`. The lender checks the share the host asks of it with this,
/// against its own budget, before it reads a byte.
pub fn share(
    model: &ModelFootprint,
    range: std::ops::Range<u64>,
    context: u64,
    kv: KvFormat,
    inputs: BudgetInputs,
) -> Share {
    let part = part(model, range.clone());
    Share { first_layer: range.start, layers: range.end - range.start, fit: check(&part, context, kv, inputs) }
}

/// Whether the engine can split `model` (checked before any split is weighed).
pub fn check_splittable(model: &ModelFootprint) -> Result<(), SplitError> {
    if model.layers < 2 {
        return Err(SplitError::TooFewLayers { layers: model.layers });
    }
    if let Some(g) = model.kv_layers.iter().find(|g| g.kind() != KvKind::Full) {
        let kind = match g.kind() {
            KvKind::Window => "sliding-window",
            _ => "linear-attention",
        };
        return Err(SplitError::LayerKinds { kind });
    }
    let found = model.layer_weight_bytes.len();
    if u64::try_from(found).ok() != Some(model.layers) {
        return Err(SplitError::LayerBytes { found, layers: model.layers });
    }
    Ok(())
}

/// The footprint of layers `range` of `model` as a model of its own: those
/// layers' weights plus everything outside the layers, and those layers'
/// KV cache. The per-pass terms (activations, attention, logits) stay:
/// each Mac runs a whole prompt chunk through its layers.
fn part(model: &ModelFootprint, range: std::ops::Range<u64>) -> ModelFootprint {
    let index = |i: u64| usize::try_from(i).unwrap_or(usize::MAX);
    let layer_bytes = |r: std::ops::Range<u64>| -> u64 {
        model.layer_weight_bytes.get(index(r.start)..index(r.end)).map_or(0, |s| s.iter().sum())
    };
    let outside = model.weight_bytes.saturating_sub(layer_bytes(0..model.layers));
    let layers = range.end.saturating_sub(range.start);
    let mut kv_layers = model.kv_layers.clone();
    for g in &mut kv_layers {
        g.layers = layers;
    }
    ModelFootprint {
        weight_bytes: outside.saturating_add(layer_bytes(range.clone())),
        layers,
        kv_layers,
        layer_weight_bytes: model.layer_weight_bytes.get(index(range.start)..index(range.end)).unwrap_or(&[]).to_vec(),
        ..model.clone()
    }
}

fn worse(a: Verdict, b: Verdict) -> Verdict {
    let rank = |v: Verdict| match v {
        Verdict::Fits => 0,
        Verdict::Tight => 1,
        Verdict::WouldSwap { .. } => 2,
        Verdict::CannotFit { .. } => 3,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::{KvLayers, GIB};

    /// A 7B-like shape: 28 layers of 150 MB, 1 GB outside them.
    fn model() -> ModelFootprint {
        let layers = 28;
        let per_layer = 150 << 20;
        ModelFootprint {
            weight_bytes: (1 << 30) + layers * per_layer,
            layers,
            attention_heads: 28,
            kv_heads: 4,
            head_dim: 128,
            hidden_size: 3584,
            intermediate_size: 18944,
            vocab_size: 152_064,
            kv_bytes_per_element: 2,
            kv_layers: vec![KvLayers::full(layers, 4, 128)],
            layer_weight_bytes: vec![per_layer; 28],
            ..ModelFootprint::default()
        }
    }

    fn inputs(gib: u64) -> BudgetInputs {
        BudgetInputs { os_headroom_bytes: 0, ..BudgetInputs::new(gib * GIB) }
    }

    #[test]
    fn each_share_counts_its_layers_and_what_lies_outside_them() {
        let m = model();
        let s = split(&m, 4096, KvFormat::Float, inputs(8), inputs(8)).unwrap();
        assert_eq!(s.host.layers + s.peer.layers, 28);
        assert_eq!((s.host.first_layer, s.peer.first_layer), (0, s.host.layers));
        for share in [&s.host, &s.peer] {
            assert_eq!(share.fit.estimate.weight_bytes, (1 << 30) + share.layers * (150 << 20));
            let whole_kv = crate::fit::estimate(&m, 4096, KvFormat::Float).kv_cache_bytes;
            assert_eq!(share.fit.estimate.kv_cache_bytes, whole_kv / 28 * share.layers);
        }
        // Equal budgets: an even split, give or take a layer.
        assert!(s.host.layers.abs_diff(s.peer.layers) <= 1, "{} vs {}", s.host.layers, s.peer.layers);
    }

    #[test]
    fn the_split_follows_the_budgets_not_the_layer_count() {
        let s = split(&model(), 4096, KvFormat::Float, inputs(3), inputs(9)).unwrap();
        assert!(s.peer.layers > 2 * s.host.layers, "host {} peer {}", s.host.layers, s.peer.layers);
        assert!(!s.refuses(), "{:?}", s.verdict());
    }

    #[test]
    fn a_split_that_would_swap_either_mac_is_refused_with_its_numbers() {
        // 1 GB + 28 × 150 MB ≈ 5.1 GB of weights; 2 GB each cannot hold it.
        let s = split(&model(), 4096, KvFormat::Float, inputs(2), inputs(2)).unwrap();
        assert!(s.refuses());
        assert!(s.host.fit.verdict.refuses() || s.peer.fit.verdict.refuses());
        // Alone, the model does not fit one 5 GB Mac; split over two it does.
        let alone = check(&model(), 4096, KvFormat::Float, inputs(5));
        assert!(alone.verdict.refuses(), "{:?}", alone.verdict);
        let both = split(&model(), 4096, KvFormat::Float, inputs(5), inputs(5)).unwrap();
        assert!(!both.refuses(), "host {:?} peer {:?}", both.host.fit.verdict, both.peer.fit.verdict);
    }

    #[test]
    fn models_the_engine_cannot_split_say_why() {
        let mut m = model();
        m.kv_layers.push(KvLayers::sliding(4, 4, 128, 512));
        assert_eq!(check_splittable(&m), Err(SplitError::LayerKinds { kind: "sliding-window" }));
        let one = ModelFootprint { layers: 1, ..model() };
        assert_eq!(check_splittable(&one), Err(SplitError::TooFewLayers { layers: 1 }));
        let unknown = ModelFootprint { layer_weight_bytes: vec![], ..model() };
        assert_eq!(check_splittable(&unknown), Err(SplitError::LayerBytes { found: 0, layers: 28 }));
    }
}
