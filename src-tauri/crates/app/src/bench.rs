//! The benchmark's plan and report, shared by `headroom bench` and the
//! app's Bench view: for each context depth d, fill the KV cache to d, then
//! r counted runs (after one warm-up) of prefill p + decode n, batch 1; the
//! mean ± sd of each figure with every label, peak memory, pressure and swap
//! delta; then the roofline (decode bytes per token vs memory bandwidth).

use headroom_core::speculative::{Speculation, SpeculativeMode};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use headroom_core::bench::{rated_bandwidth, BenchShape, DecodeTraffic, RateSummary, RatedBandwidth, Roofline};
use headroom_core::pressure::PressureLevel;
use headroom_engine::bench::{run_case, BenchCase, BenchEvent, BenchRun, CaseResult};
use headroom_engine::worker::EngineHandle;
use headroom_engine::{EngineError, QuantKernel};
use headroom_memory::bandwidth::{self, BandwidthReport, MachineInfo};
use headroom_memory::MemoryError;
use serde::Serialize;
use serde_json::{json, Value};

/// What running a plan can fail with.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The engine failed, or the run was cancelled (`BenchCancelled`).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The machine's description or memory readings could not be read.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// What to run on a loaded model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchPlan {
    pub depths: Vec<usize>,
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    pub repetitions: usize,
    pub seed: u64,
    /// How the runs decode (`--speculative`; the app's setting).
    pub speculative: SpeculativeMode,
}

impl BenchPlan {
    /// Cache positions the deepest case needs: the context to load (and fit-check) at.
    pub fn context(&self) -> usize {
        self.depths.iter().max().copied().unwrap_or(0) + self.prompt_tokens + self.gen_tokens
    }
}

/// Where the roofline's bandwidth comes from.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Bandwidth {
    /// `headroom bandwidth`'s best kernel (copy or triad).
    Measured(BandwidthReport),
    /// `--bandwidth` on the command line.
    Given { gb_per_s: f64 },
}

impl Bandwidth {
    pub fn gb_per_s(&self) -> f64 {
        match self {
            Self::Measured(r) => r.best_gb_per_s(),
            Self::Given { gb_per_s } => *gb_per_s,
        }
    }
}

/// One depth's results.
#[derive(Debug, Clone, PartialEq)]
pub struct DepthReport {
    pub case: CaseResult,
    pub summary: RateSummary,
    /// The worst level read before, between and after the runs.
    pub pressure: PressureLevel,
    /// Swap used after the last run minus before the fill, bytes.
    pub swap_delta_bytes: i64,
    /// The largest MLX peak of the counted runs.
    pub peak_memory_bytes: usize,
    /// Against the measured (or given) bandwidth.
    pub roofline: Option<Roofline>,
    /// Against the chip's rated bandwidth (Apple silicon).
    pub rated_roofline: Option<Roofline>,
}

impl DepthReport {
    /// What speculative decoding did over the counted runs together.
    pub fn speculation(&self) -> Speculation {
        Speculation::total(self.case.runs.iter().map(|r| &r.speculation))
    }
}

/// What speculative decoding did, as reported: over a depth's counted runs
/// here, over one turn in `headroom generate --json`.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[ts(rename = "BenchSpeculation")]
pub struct SpeculationJson {
    pub mode: SpeculativeMode,
    pub drafted: u32,
    pub accepted: u32,
    /// accepted ÷ drafted; `None` when nothing was drafted.
    pub acceptance: Option<f64>,
    pub forward_passes: u32,
    pub tokens_per_pass: Option<f64>,
    /// Why the runs decoded plainly, if they did.
    pub plain_because: Option<&'static str>,
}

impl SpeculationJson {
    pub fn of(s: &Speculation) -> Self {
        Self {
            mode: s.mode,
            drafted: s.drafted,
            accepted: s.accepted,
            acceptance: s.acceptance(),
            forward_passes: s.forward_passes,
            tokens_per_pass: s.tokens_per_pass(),
            plain_because: s.plain_because.map(|p| p.describe()),
        }
    }
}
/// A whole benchmark.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchReport {
    pub model: String,
    pub dir: PathBuf,
    pub plan: BenchPlan,
    pub machine: MachineInfo,
    pub bandwidth: Bandwidth,
    pub rated: Option<&'static RatedBandwidth>,
    pub depths: Vec<DepthReport>,
}

/// Progress while a plan runs, for a progress line or the app's Channel.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct BenchProgress {
    pub depth: usize,
    /// 0 is the warm-up.
    pub run: usize,
    pub runs: usize,
    pub decode_tps: Option<f64>,
}

/// Runs `plan` on the model loaded in `engine`, one depth after the other.
pub fn run_plan(
    engine: &EngineHandle,
    model: &str,
    dir: &Path,
    plan: &BenchPlan,
    bandwidth: Bandwidth,
    cancel: &Arc<AtomicBool>,
    mut on_progress: impl FnMut(&BenchProgress),
) -> Result<BenchReport, BenchError> {
    let machine = bandwidth::machine_info()?;
    let rated = rated_bandwidth(&machine.cpu, machine.cpu_cores);
    let mut reader = headroom_memory::Reader::new()?;
    let mut depths = Vec::new();
    for &depth in &plan.depths {
        let shape = BenchShape { depth, prompt_tokens: plan.prompt_tokens, gen_tokens: plan.gen_tokens };
        let first = reader.read();
        let mut pressure = first.pressure;
        let case = BenchCase {
            shape,
            runs: plan.repetitions,
            seed: plan.seed.wrapping_add(depth as u64),
            speculative: plan.speculative,
        };
        let result = run_case(engine, case, cancel, |event| {
            if let BenchEvent::Run(run) = event {
                pressure = pressure.worst(reader.read().pressure);
                on_progress(&BenchProgress {
                    depth,
                    run: run.index,
                    runs: plan.repetitions,
                    decode_tps: run.rates.decode_tps,
                });
            }
        })?;
        let last = reader.read();
        let pressure = pressure.worst(last.pressure);
        let summary = RateSummary::of(&result.runs.iter().map(|r| r.rates).collect::<Vec<_>>());
        let roofline_at = |gb_per_s: f64| {
            summary.decode_tps.and_then(|d| Roofline::new(&result.labels.traffic, &shape, gb_per_s * 1e9, d.mean))
        };
        depths.push(DepthReport {
            summary,
            pressure,
            swap_delta_bytes: i64::try_from(last.swap_used).unwrap_or(i64::MAX)
                - i64::try_from(first.swap_used).unwrap_or(i64::MAX),
            peak_memory_bytes: result.runs.iter().map(|r| r.peak_memory_bytes).max().unwrap_or(0),
            roofline: roofline_at(bandwidth.gb_per_s()),
            rated_roofline: rated.and_then(|r| roofline_at(r.gb_per_s)),
            case: result,
        });
    }
    Ok(BenchReport {
        model: model.to_owned(),
        dir: dir.to_owned(),
        plan: plan.clone(),
        machine,
        bandwidth,
        rated,
        depths,
    })
}

/// A report split the way the store's `bench_runs` table keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreRecord {
    pub labels: Value,
    /// The machine, the bandwidth used and the chip's rated figure.
    pub machine: Value,
    /// Per depth: the summary, roofline, pressure, swap delta, peak memory.
    pub summary: Value,
    /// Per depth: the fill time, the warm-up and every counted run, raw.
    pub runs: Value,
}

impl StoreRecord {
    pub fn of(report: &BenchReport) -> Self {
        let v = report_json(report);
        let depths = v["depths"].as_array().cloned().unwrap_or_default();
        let pick = |keys: &[&str]| -> Value {
            Value::Array(
                depths
                    .iter()
                    .map(|d| Value::Object(keys.iter().map(|&k| (k.to_owned(), d[k].clone())).collect()))
                    .collect(),
            )
        };
        Self {
            summary: pick(&[
                "depth",
                "summary",
                "roofline",
                "rated_roofline",
                "pressure",
                "swap_delta_bytes",
                "peak_memory_bytes",
            ]),
            runs: pick(&["depth", "fill_ms", "warmup", "runs"]),
            machine: json!({ "machine": v["machine"], "bandwidth": v["bandwidth"], "rated_bandwidth": v["rated_bandwidth"] }),
            labels: v["labels"].clone(),
        }
    }
}

/// One raw run as reported; an undefined rate is `None`, never 0.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[ts(rename = "BenchRun")]
pub struct RunJson {
    pub index: usize,
    pub context_tokens: usize,
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    pub cache_tokens_after: usize,
    pub ttft_ms: Option<f64>,
    pub prefill_tps: Option<f64>,
    pub decode_tps: Option<f64>,
    pub e2e_tps: Option<f64>,
    pub prefill_ms: f64,
    pub first_token_ms: Option<f64>,
    pub last_token_ms: Option<f64>,
    pub peak_memory_bytes: usize,
}

impl RunJson {
    fn of(r: &BenchRun) -> Self {
        let ms = |d: Option<std::time::Duration>| d.map(|d| d.as_secs_f64() * 1e3);
        Self {
            index: r.index,
            context_tokens: r.context_tokens,
            prompt_tokens: r.prompt_tokens,
            generated_tokens: r.generated_tokens,
            cache_tokens_after: r.cache_tokens_after,
            ttft_ms: r.rates.ttft_ms,
            prefill_tps: r.rates.prefill_tps,
            decode_tps: r.rates.decode_tps,
            e2e_tps: r.rates.e2e_tps,
            prefill_ms: r.timings.prefill.as_secs_f64() * 1e3,
            first_token_ms: ms(r.timings.first_token_at),
            last_token_ms: ms(r.timings.last_token_at),
            peak_memory_bytes: r.peak_memory_bytes,
        }
    }
}

/// Quantization bits and group size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct QuantLabel {
    pub bits: i32,
    pub group_size: i32,
}

/// Which quantized-matmul kernel ran ([`QuantKernel`]'s kinds, by its `as_str` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
pub enum KernelKind {
    #[serde(rename = "fused")]
    Fused,
    #[serde(rename = "cpu-f32")]
    CpuF32,
}

impl From<QuantKernel> for KernelKind {
    fn from(k: QuantKernel) -> Self {
        match k {
            QuantKernel::Fused => Self::Fused,
            QuantKernel::CpuF32 { .. } => Self::CpuF32,
        }
    }
}

/// How quantized matrices multiply (`QuantKernel`), as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct KernelLabel {
    pub kind: KernelKind,
    /// The CPU kernel's switch to a dequantized matmul; `None` for fused.
    pub dequantize_from_rows: Option<i32>,
    /// Below this many rows the CPU kernel unpacks each weight once for all
    /// rows (4/8-bit matrices on an AVX2 CPU); `None` where it does not.
    pub row_shared_below_rows: Option<i32>,
}

/// What was measured: the model's labels and the plan (`None`: no depth ran).
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct BenchLabels {
    pub model_type: Option<String>,
    pub quantization: Option<QuantLabel>,
    pub kv_dtype: Option<String>,
    pub quant_kernel: Option<KernelLabel>,
    pub weight_bytes: Option<u64>,
    /// Weight bytes one decoded token reads (one embedding row, the chosen experts).
    pub active_weight_bytes: Option<u64>,
    /// Every weight, all in memory.
    pub resident_weight_bytes: Option<u64>,
    /// What one decode step reads, by part.
    pub traffic: Option<DecodeTraffic>,
    pub kv_bytes_per_position: Option<u64>,
    pub batch: u32,
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    pub repetitions: usize,
    pub depths: Vec<usize>,
    pub seed: u64,
}

/// One depth as reported: the raw runs, their summary, the roofline.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[ts(rename = "BenchDepth")]
pub struct DepthJson {
    pub depth: usize,
    pub fill_ms: f64,
    pub warmup: RunJson,
    pub runs: Vec<RunJson>,
    pub summary: RateSummary,
    pub speculative: SpeculationJson,
    pub pressure: PressureLevel,
    pub swap_delta_bytes: i64,
    pub peak_memory_bytes: usize,
    pub roofline: Option<Roofline>,
    pub rated_roofline: Option<Roofline>,
}

/// `headroom bench --json`'s object (snake_case, as the CLI prints it and
/// the store keeps it): labels, machine, bandwidth, and per depth the raw
/// runs (warm-up apart), the summary and the roofline.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct BenchJson {
    pub model: String,
    pub path: PathBuf,
    pub labels: BenchLabels,
    pub machine: MachineInfo,
    pub bandwidth: Bandwidth,
    pub rated_bandwidth: Option<RatedBandwidth>,
    pub depths: Vec<DepthJson>,
}

impl BenchJson {
    pub fn of(r: &BenchReport) -> Self {
        let labels = r.depths.first().map(|d| &d.case.labels);
        Self {
            model: r.model.clone(),
            path: r.dir.clone(),
            labels: BenchLabels {
                model_type: labels.map(|l| l.model_type.clone()),
                quantization: labels
                    .and_then(|l| l.quantization)
                    .map(|(bits, group_size)| QuantLabel { bits, group_size }),
                kv_dtype: labels.map(|l| l.kv_dtype.clone()),
                quant_kernel: labels.and_then(|l| Some((l.quant_kernel?, l.quantization))).map(|(k, quant)| {
                    // The paths this model's matrices take on this machine
                    // (a mixed-width model is labelled by its default width).
                    let paths = quant.and_then(|(bits, group)| k.cpu_paths(bits, group));
                    KernelLabel {
                        kind: k.into(),
                        dequantize_from_rows: paths.map(|p| p.dequantize_from),
                        row_shared_below_rows: paths.and_then(|p| p.row_shared_below),
                    }
                }),
                weight_bytes: labels.map(|l| l.traffic.weight_bytes),
                active_weight_bytes: labels.map(|l| l.traffic.weight_bytes),
                resident_weight_bytes: labels.map(|l| l.traffic.resident_bytes()),
                traffic: labels.map(|l| l.traffic),
                kv_bytes_per_position: labels.map(|l| l.traffic.kv_bytes_per_position),
                batch: 1,
                prompt_tokens: r.plan.prompt_tokens,
                gen_tokens: r.plan.gen_tokens,
                repetitions: r.plan.repetitions,
                depths: r.plan.depths.clone(),
                seed: r.plan.seed,
            },
            machine: r.machine.clone(),
            bandwidth: r.bandwidth.clone(),
            rated_bandwidth: r.rated.copied(),
            depths: r
                .depths
                .iter()
                .map(|d| DepthJson {
                    depth: d.case.case.shape.depth,
                    fill_ms: d.case.fill_time.as_secs_f64() * 1e3,
                    warmup: RunJson::of(&d.case.warmup),
                    runs: d.case.runs.iter().map(RunJson::of).collect(),
                    summary: d.summary,
                    speculative: SpeculationJson::of(&d.speculation()),
                    pressure: d.pressure,
                    swap_delta_bytes: d.swap_delta_bytes,
                    peak_memory_bytes: d.peak_memory_bytes,
                    roofline: d.roofline,
                    rated_roofline: d.rated_roofline,
                })
                .collect(),
        }
    }
}

/// What `bench_run` resolves to: the report, the stored row's id and the
/// depth chart (decode and prefill tok/s vs depth), an SVG document.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct BenchRunReply {
    #[serde(flatten)]
    pub report: BenchJson,
    pub id: i64,
    pub chart_svg: String,
}
/// The `--json` object ([`BenchJson`]) as a JSON value. It has no maps, so
/// it always serializes (`Null` is unreachable).
pub fn report_json(r: &BenchReport) -> Value {
    serde_json::to_value(BenchJson::of(r)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use headroom_engine::QuantKernel;

    use super::KernelKind;

    /// The report names the kernel as the engine does (`QuantKernel::as_str`).
    #[test]
    fn kernel_kinds_are_sent_as_the_engine_names_them() {
        // One of each kind: a new kind fails to compile in `From`.
        for k in [QuantKernel::Fused, QuantKernel::CPU] {
            assert_eq!(serde_json::to_value(KernelKind::from(k)).unwrap(), k.as_str());
        }
    }
}
