//! The fit check shared by the CLI (`headroom fit`, the guard in
//! `headroom generate`) and the app (the picker's badges, the guard in
//! `model_load`): a model folder's footprint (headers only, nothing loaded)
//! plus a memory reading give a [`FitReport`] with every part.

use std::path::Path;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use headroom_core::calibration::{Measured, PeakMeasurement};
use headroom_core::fit::{check_with, BudgetInputs, FitReport, Verdict, DEFAULT_OS_HEADROOM, GIB, MIN_CONTEXT};
use headroom_core::kv::KvFormat;
use headroom_core::remedies::Remedy;
use headroom_engine::meter::{Meter, SharedMeter};
use headroom_engine::prompt_cache::disk::model_fingerprint;
use headroom_engine::worker::LoadSettings;
use headroom_engine::{inspect, ComputeDtype, EngineError, QuantKernel};
use headroom_memory::MemoryError;
use headroom_store::Store;
use serde::Serialize;

/// Where the budget's numbers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetSource {
    /// Plan as if this much were available; `None` reads the OS now.
    pub available_bytes: Option<u64>,
    /// What unloading the currently loaded model would give back.
    pub freed_by_unload_bytes: u64,
    /// What to leave to the OS and other apps.
    pub os_headroom_bytes: u64,
    /// macOS: Metal's recommended working-set size, the second limit
    /// (`None` elsewhere). Read from MLX by [`BudgetSource::default`].
    pub gpu_working_set_bytes: Option<u64>,
}

impl Default for BudgetSource {
    fn default() -> Self {
        Self {
            available_bytes: None,
            freed_by_unload_bytes: 0,
            os_headroom_bytes: DEFAULT_OS_HEADROOM,
            gpu_working_set_bytes: headroom_engine::gpu_working_set_bytes(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// The model's config or weight headers could not be read.
    #[error(transparent)]
    Model(#[from] EngineError),
    /// The OS's memory figures could not be read.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The model cannot be split across two Macs.
    #[error(transparent)]
    Split(#[from] headroom_core::split::SplitError),
}

/// The budget inputs `source` describes, reading the OS if it must.
pub fn budget_inputs(source: BudgetSource) -> Result<BudgetInputs, MemoryError> {
    let available_bytes = match source.available_bytes {
        Some(bytes) => bytes,
        None => headroom_memory::read()?.available,
    };
    Ok(BudgetInputs {
        available_bytes,
        freed_by_unload_bytes: source.freed_by_unload_bytes,
        os_headroom_bytes: source.os_headroom_bytes,
        gpu_working_set_bytes: source.gpu_working_set_bytes,
    })
}

/// What this machine measured for the model in `dir` loaded as `dtype` with
/// `kernel`: the calibration points (`PeakMeasurement::calibration_point`)
/// the store keeps for it, newest first. Empty when nothing was measured
/// or it cannot be read: the formula alone then, said as "estimated".
pub fn learned(store: &Store, dir: &Path, dtype: ComputeDtype, kernel: QuantKernel) -> Vec<Measured> {
    match model_fingerprint(dir, dtype, kernel) {
        Ok(fingerprint) => learned_for(store, &fingerprint),
        Err(e) => {
            tracing::debug!("no measurements for {}: {e}", dir.display());
            Vec::new()
        }
    }
}

/// [`learned`] for the model the engine holds: nothing while a draft model
/// is loaded beside it. What was measured is of the model alone, and its
/// fit now counts both, which is weighed by the formula, as at the load
/// ([`check_load`]): the model's own correction applied to the pair
/// would leave the draft's share out of the figure it corrects.
pub fn learned_for_loaded(store: &Store, info: &headroom_engine::worker::ModelInfo) -> Vec<Measured> {
    match info.draft {
        Some(_) => Vec::new(),
        None => learned_for(store, &info.fingerprint),
    }
}

/// [`learned`] for a model as loaded (`ModelInfo::fingerprint`).
fn learned_for(store: &Store, fingerprint: &str) -> Vec<Measured> {
    match crate::runtime::block_on(store.peak_measurements(fingerprint)) {
        Ok(rows) => rows.iter().filter_map(PeakMeasurement::calibration_point).collect(),
        Err(e) => {
            tracing::warn!("measurements could not be read: {e}");
            Vec::new()
        }
    }
}

/// The engine's meter: the process's resident set from `headroom-memory`,
/// each measurement kept in `store`.
pub fn store_meter(store: Store) -> SharedMeter {
    Arc::new(StoreMeter { store, reset: AtomicBool::new(false) })
}

struct StoreMeter {
    store: Store,
    /// Whether the last reset of the peak took: a peak that was not reset is
    /// the whole process's, not this measurement's.
    reset: AtomicBool,
}

impl Meter for StoreMeter {
    fn resident_bytes(&self) -> Option<u64> {
        headroom_memory::process::resident_bytes()
    }

    fn reset_peak_resident(&self) {
        self.reset.store(headroom_memory::process::reset_peak_resident(), Ordering::Relaxed);
    }

    fn peak_resident_bytes(&self) -> Option<u64> {
        self.reset.load(Ordering::Relaxed).then(headroom_memory::process::peak_resident_bytes).flatten()
    }

    // Written before the engine's next job (one small insert, about a
    // millisecond): a CLI process that ends right after its turn keeps it.
    fn record(&self, measurement: PeakMeasurement) {
        if let Err(e) = crate::runtime::block_on(self.store.add_peak_measurement(&measurement)) {
            tracing::warn!("a measurement was not kept: {e}");
        }
    }
}

/// The verdict for the model in `dir` at `context` tokens, loaded natively
/// with the device's default kernel. Reads only config.json and the weight
/// headers: nothing is loaded.
pub fn check_model(dir: &Path, context: usize, source: BudgetSource) -> Result<FitReport, FitError> {
    check_model_as(dir, context, ComputeDtype::Native, source)
}

/// [`check_model_with`] with the device's default kernel and a float KV cache.
pub fn check_model_as(
    dir: &Path,
    context: usize,
    dtype: ComputeDtype,
    source: BudgetSource,
) -> Result<FitReport, FitError> {
    check_model_with(dir, context, dtype, QuantKernel::choose(Default::default()), KvFormat::Float, source, None)
}

/// The verdict for the model loaded as `dtype` (f32 widens the float
/// weights, the KV cache and the activations) with `kernel` (the CPU kernel
/// dequantizes weights for prompt chunks, which the estimate counts) and
/// its KV cache stored as `kv`, calibrated by what `learned` (the store)
/// measured for it on this machine, if given.
pub fn check_model_with(
    dir: &Path,
    context: usize,
    dtype: ComputeDtype,
    kernel: QuantKernel,
    kv: KvFormat,
    source: BudgetSource,
    learned: Option<&Store>,
) -> Result<FitReport, FitError> {
    let footprint = footprint_for(dir, dtype, kernel, kv)?;
    let inputs = budget_inputs(source)?;
    let measured = learned.map(|store| self::learned(store, dir, dtype, kernel)).unwrap_or_default();
    Ok(check_with(&footprint, u64::try_from(context).unwrap_or(u64::MAX), kv, inputs, &measured))
}

/// How a model would be loaded: what its fit check weighs.
#[derive(Debug, Clone, Copy)]
pub struct LoadPlan<'a> {
    pub dir: &'a Path,
    /// A draft model loaded beside it (its weights and cache count too).
    pub draft: Option<&'a Path>,
    pub context: usize,
    pub dtype: ComputeDtype,
    pub kernel: QuantKernel,
    pub kv: KvFormat,
}

/// The verdict for `plan`: the check every load passes, from the picker,
/// the server and the CLI alike. Calibrated by what `learned` (the store)
/// measured of the model alone, so a load with a draft is weighed by the
/// formula ([`check_model_with_draft`]).
pub fn check_load(plan: &LoadPlan<'_>, source: BudgetSource, learned: Option<&Store>) -> Result<FitReport, FitError> {
    let LoadPlan { dir, context, dtype, kernel, kv, .. } = *plan;
    match plan.draft {
        Some(draft) => check_model_with_draft(dir, draft, context, dtype, kernel, kv, source),
        None => check_model_with(dir, context, dtype, kernel, kv, source, learned),
    }
}

/// [`check_model_with`] for a load with the draft model in `draft` beside
/// it: a draft of another vocabulary is refused first, by name (it would
/// not be used, so it is not weighed); then the two footprints together
/// (`ModelFootprint::with_draft`), by the formula alone, since what this
/// machine measured is of the model alone.
fn check_model_with_draft(
    dir: &Path,
    draft: &Path,
    context: usize,
    dtype: ComputeDtype,
    kernel: QuantKernel,
    kv: KvFormat,
    source: BudgetSource,
) -> Result<FitReport, FitError> {
    headroom_engine::Draft::check_vocabulary(draft, &headroom_engine::Tokenizer::for_model(dir)?)?;
    let footprint = footprint_for(dir, dtype, kernel, kv)?.with_draft(&footprint_for(draft, dtype, kernel, kv)?);
    let inputs = budget_inputs(source)?;
    Ok(check_with(&footprint, u64::try_from(context).unwrap_or(u64::MAX), kv, inputs, &[]))
}

/// The footprint of the model in `dir` loaded as `dtype` with `kernel`,
/// from its headers, refused where its KV cache cannot be stored as `kv`
/// (head dims MLX cannot group, sliding windows mlx-lm cannot quantize).
fn footprint_for(
    dir: &Path,
    dtype: ComputeDtype,
    kernel: QuantKernel,
    kv: KvFormat,
) -> Result<headroom_core::fit::ModelFootprint, FitError> {
    let inspection = inspect(dir, dtype, kernel)?;
    inspection.footprint.check_kv(kv).map_err(|source| FitError::Model(EngineError::KvFormat { source }))?;
    Ok(inspection.footprint)
}

/// Two Macs: the split of the model in `dir` (loaded as `dtype` with
/// `kernel`, KV as `kv`, at `context` tokens) between this Mac (`source`'s
/// budget) and the lending Mac at `peer` (the budget it reports now), with
/// each Mac's verdict (`headroom_core::split`). Headers only, here; the
/// peer is asked one question and loads nothing.
pub fn check_split(
    dir: &Path,
    context: usize,
    dtype: ComputeDtype,
    kernel: QuantKernel,
    kv: KvFormat,
    source: BudgetSource,
    peer: &str,
) -> Result<PeerSplit, FitError> {
    let footprint = footprint_for(dir, dtype, kernel, kv)?;
    let trust = crate::peers::trust(peer)?;
    let (machine, peer_budget) = headroom_engine::peer::host::peer_budget(peer, &trust)?;
    let context = u64::try_from(context).unwrap_or(u64::MAX);
    let report = headroom_core::split::split(&footprint, context, kv, budget_inputs(source)?, peer_budget)?;
    Ok(PeerSplit { address: peer.to_owned(), machine, report })
}

/// A split across this Mac and a peer, and who the peer is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct PeerSplit {
    /// The peer's control address (`HOST:PORT`), as given.
    pub address: String,
    /// The peer's machine name, as it reported it.
    pub machine: String,
    #[serde(flatten)]
    pub report: headroom_core::split::SplitReport,
}

impl PeerSplit {
    /// Where the model's later layers go, for [`load_settings`]'s result,
    /// with the lender's pinned key (this Mac's key could not be kept: an error).
    pub fn placement(&self) -> Result<headroom_engine::peer::PeerPlacement, headroom_engine::EngineError> {
        Ok(headroom_engine::peer::PeerPlacement {
            addr: self.address.clone(),
            trust: crate::peers::trust(&self.address)?,
            first_peer_layer: usize::try_from(self.report.peer.first_layer).unwrap_or(usize::MAX),
            context: usize::try_from(self.report.context_tokens).unwrap_or(usize::MAX),
        })
    }
}

/// How to load a model whose check gave `report`: at `context_limit`, as
/// `dtype` with `kernel`, its KV caches as `kv` (the format the report was
/// computed for), and MLX's buffer-cache and wired limits by the rules in
/// `headroom_core::fit` (`buffer_cache_limit`, `wired_limit`). One place for
/// the app's switch, the server's loads and the CLI's, so every load obeys
/// the budget its verdict approved.
pub fn load_settings(
    report: &FitReport,
    context_limit: usize,
    dtype: ComputeDtype,
    kernel: QuantKernel,
    kv: KvFormat,
    prompt_cache_max: u64,
) -> LoadSettings {
    let bytes = |b: u64| usize::try_from(b).unwrap_or(usize::MAX);
    let prompt_cache = headroom_core::fit::prompt_cache_limit(report, prompt_cache_max);
    LoadSettings {
        dtype,
        kernel,
        context_limit,
        cache_limit_bytes: Some(bytes(headroom_core::fit::buffer_cache_limit(report, prompt_cache))),
        prompt_cache_bytes: bytes(prompt_cache),
        kv,
        wired_limit_bytes: headroom_core::fit::wired_limit(report).map(bytes),
        peer: None,
        draft: None,
    }
}

/// By how much the model is over the budget (0 when it fits).
pub fn over_by(report: &FitReport) -> u64 {
    match report.verdict {
        Verdict::WouldSwap { by_bytes } | Verdict::CannotFit { by_bytes } => by_bytes,
        Verdict::Fits | Verdict::Tight => 0,
    }
}

/// The numbers a refusal (`MODEL_TOO_LARGE`) carries to the UI in
/// `CommandError::details`, in the UI's camelCase, with the whole report
/// under `report` and what would make it fit under `remedies`.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct TooLargeDetails {
    pub verdict: Verdict,
    pub context_tokens: u64,
    pub weight_bytes: u64,
    /// The KV cache at its largest (before a quantized cache is converted, if that is more).
    pub kv_cache_bytes: u64,
    /// The KV format in words ("16-bit float", "8-bit (group 64)").
    pub kv_cache: String,
    pub overhead_bytes: u64,
    pub predicted_peak_bytes: u64,
    pub budget_bytes: u64,
    pub over_by_bytes: u64,
    pub largest_context_that_fits: Option<u64>,
    pub remedies: Vec<Remedy>,
    pub report: FitReport,
}

impl TooLargeDetails {
    /// As `CommandError::details` (whose shape depends on the code). A
    /// struct without maps always serializes, so this is never `None`.
    pub fn into_details(self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }
}

/// The refusal's details for `report`, with `remedies` offered.
pub fn refusal_details(report: &FitReport, remedies: &[Remedy]) -> TooLargeDetails {
    let e = &report.estimate;
    TooLargeDetails {
        verdict: report.verdict,
        context_tokens: e.context_tokens,
        weight_bytes: e.weight_bytes,
        kv_cache_bytes: e.kv_peak_bytes(),
        kv_cache: report.kv_label.clone(),
        overhead_bytes: e.overhead.total_bytes,
        predicted_peak_bytes: e.predicted_peak_bytes,
        budget_bytes: report.budget.budget_bytes,
        over_by_bytes: over_by(report),
        largest_context_that_fits: report.largest_context_that_fits,
        remedies: remedies.to_vec(),
        report: report.clone(),
    }
}
/// A sparse model folder for tests: a real tiny config whose single weight
/// file's header claims `claimed` bytes (no data on disk).
#[cfg(any(test, feature = "testing"))]
// A test fixture (the front ends' tests use it too): a failure is the test's.
#[allow(clippy::unwrap_used)]
pub fn write_sparse_model(dir: &Path, claimed: u64) {
    use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
    use std::io::Write;
    write_demo_model(dir, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Sixteen)).unwrap();
    for f in ["model.safetensors.index.json", "model.safetensors"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    let rows = claimed / 2 / 1_000_000;
    let header = format!(
        r#"{{"model.embed_tokens.weight":{{"dtype":"BF16","shape":[{rows},1000000],"data_offsets":[0,{claimed}]}}}}"#
    );
    let mut f = std::fs::File::create(dir.join("model.safetensors")).unwrap();
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    f.set_len(8 + header.len() as u64 + claimed).unwrap();
}

/// Bytes as GB (2^30), two decimals.
pub fn gb(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / GIB as f64)
}

/// The verdict in words, with its number.
pub fn verdict_line(report: &FitReport) -> String {
    match report.verdict {
        Verdict::Fits => format!("fits, {} to spare", gb(report.spare_bytes.unsigned_abs())),
        Verdict::Tight => format!("tight: fits with only {} to spare", gb(report.spare_bytes.unsigned_abs())),
        Verdict::WouldSwap { by_bytes } => format!("would swap by {}", gb(by_bytes)),
        Verdict::CannotFit { by_bytes } => {
            format!("cannot fit at any context (still {} over at {MIN_CONTEXT} tokens)", gb(by_bytes))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use headroom_core::fit::GIB;
    use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
    use headroom_test_support::scratch;

    use super::*;

    /// `scripts/measure-fit.sh --archs-only`'s run (core::fit's module docs):
    /// the `small` demo of each architecture with experts, windows or linear
    /// attention, 4-bit, f32, on the CPU kernel: (arch, positions held, peak
    /// RSS bytes). The footprint comes from the same headers (written sparse).
    #[test]
    fn the_new_architectures_measured_rss_stays_within_bounds() {
        const BASELINE: u64 = 87_900_000;
        let runs = [
            (Arch::Qwen3Moe, [(262, 113_475_584u64), (4006, 454_758_400)]),
            (Arch::Gemma3Text, [(262, 105_340_928), (4006, 420_012_032)]),
            (Arch::Qwen3_5, [(262, 111_603_712), (4006, 462_479_360)]),
            (Arch::Qwen3_5Moe, [(262, 121_847_808), (4006, 469_598_208)]),
        ];
        for (arch, points) in runs {
            let tmp = scratch(&format!("appfit-rss-{arch}"));
            let dir = tmp.join("model");
            let spec = DemoSpec { sparse: true, ..DemoSpec::new(arch, Preset::Small, Bits::Four) };
            write_demo_model(&dir, &spec).unwrap();
            let footprint = inspect(&dir, ComputeDtype::F32, QuantKernel::CPU)
                .map_err(|e| format!("{arch}: {e}"))
                .unwrap()
                .footprint;
            for (positions, rss) in points {
                let predicted = headroom_core::fit::estimate(&footprint, positions, KvFormat::Float)
                    .predicted_peak_bytes
                    + BASELINE;
                let error = predicted as f64 / rss as f64 - 1.0;
                assert!(
                    (-0.05..=0.25).contains(&error),
                    "{arch} at {positions}: {predicted} vs {rss} ({:+.1} %)",
                    error * 100.0
                );
            }
        }
    }

    #[test]
    fn a_sparse_huge_model_cannot_fit_and_the_details_carry_every_number() {
        let tmp = scratch("appfit-huge");
        let dir = tmp.join("model");
        write_sparse_model(&dir, 200_000_000_000);
        let source = BudgetSource { available_bytes: Some(16 * GIB), ..BudgetSource::default() };
        let report = check_model(&dir, 8192, source).unwrap();
        assert!(matches!(report.verdict, Verdict::CannotFit { .. }), "{:?}", report.verdict);
        assert_eq!(report.budget.budget_bytes, 12 * GIB);
        // Nothing would make it fit: no KV cache, no context, so no remedy is offered.
        let remedies = headroom_core::remedies::remedies(&report, KvFormat::Float, 0, &[]);
        assert_eq!(remedies, []);
        let d = serde_json::to_value(refusal_details(&report, &remedies)).unwrap();
        assert_eq!(d["remedies"], json!([]));
        assert_eq!(d["verdict"]["kind"], "cannot_fit");
        assert_eq!(d["weightBytes"], 200_000_000_000u64);
        assert_eq!(d["budgetBytes"], 12 * GIB);
        assert_eq!(d["overByBytes"], over_by(&report));
        assert!(over_by(&report) > 170 * GIB, "{}", over_by(&report));
        assert!(d["largestContextThatFits"].is_null());
        assert_eq!(d["contextTokens"], 8192);
        assert!(d["kvCacheBytes"].as_u64().is_some_and(|kv| kv > 0));
    }

    #[test]
    fn what_unloading_frees_counts_toward_the_budget() {
        let tmp = scratch("appfit-freed");
        let dir = tmp.join("model");
        write_sparse_model(&dir, 10_000_000_000);
        let tight = BudgetSource { available_bytes: Some(8 * GIB), ..BudgetSource::default() };
        let report = check_model(&dir, 8192, tight).unwrap();
        assert!(report.verdict.refuses(), "{:?}", report.verdict);
        let freed = BudgetSource { freed_by_unload_bytes: 12 * GIB, ..tight };
        let report = check_model(&dir, 8192, freed).unwrap();
        assert_eq!(report.budget.budget_bytes, 16 * GIB);
        assert_eq!(report.verdict, Verdict::Fits);
        assert_eq!(over_by(&report), 0);
    }

    #[test]
    fn the_gpu_working_set_caps_the_budget_when_it_is_lower() {
        let tmp = scratch("appfit-gpu");
        let dir = tmp.join("model");
        write_sparse_model(&dir, 10_000_000_000);
        // 24 GB available − 4 GB headroom = 20 GB from memory; a Mac whose
        // GPU may keep only 12 GB resident gets 12 GB, and the 10 GB model
        // at 8k no longer fits comfortably.
        let source = BudgetSource {
            available_bytes: Some(24 * GIB),
            gpu_working_set_bytes: Some(12 * GIB),
            ..BudgetSource::default()
        };
        let report = check_model(&dir, 8192, source).unwrap();
        assert_eq!(report.budget.from_memory_bytes, 20 * GIB);
        assert_eq!(
            (report.budget.budget_bytes, report.budget.limited_by),
            (12 * GIB, headroom_core::fit::BudgetLimit::GpuWorkingSet)
        );
        let roomy = check_model(&dir, 8192, BudgetSource { gpu_working_set_bytes: Some(30 * GIB), ..source }).unwrap();
        assert_eq!(
            (roomy.budget.budget_bytes, roomy.budget.limited_by),
            (20 * GIB, headroom_core::fit::BudgetLimit::Memory)
        );
        assert!(roomy.spare_bytes > report.spare_bytes);
        // Off macOS nothing is read: the default has no GPU limit.
        #[cfg(not(target_os = "macos"))]
        assert_eq!(BudgetSource::default().gpu_working_set_bytes, None);
    }

    #[test]
    fn a_missing_model_is_a_model_error() {
        let err = check_model(&scratch("appfit-absent").join("absent"), 8192, BudgetSource::default()).err();
        assert!(matches!(err, Some(FitError::Model(_))), "{err:?}");
    }
}
