//! One benchmark case on the loaded model, run on the engine thread through
//! the real generation loop (`generate::generate`, the one chat turns use):
//! fill a KV cache to depth d with random token ids (timed on its own, not
//! part of any figure), then, per run, prefill p random tokens after it and
//! decode n tokens through any EOS, batch 1. One warm-up run is excluded;
//! between runs the cache is trimmed back to d, so every run starts from the
//! same depth. This is llama-bench's `-p/-n/-d` and `mlx_lm.benchmark`'s
//! shape, with the figures defined once in `headroom_core::stats`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use headroom_core::bench::{BenchShape, DecodeTraffic};
use headroom_core::kv::KvFormat;
use headroom_core::speculative::{Speculation, SpeculativeMode};
use headroom_core::stats::{Rates, TurnTimings};
use mlx_rs::Dtype;

use crate::cache::KvCache;
use crate::dtype::{dtype_bytes, dtype_name};
use crate::error::{EngineError, Result};
use crate::generate::{generate, GenerateOptions, WallClock};
use crate::models::Model;
use crate::quant::QuantKernel;
use crate::sampler::{Sampler, SamplingParams};
use crate::worker::{EngineHandle, Metering};

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchCase {
    pub shape: BenchShape,
    /// Counted runs (the warm-up comes on top).
    pub runs: usize,
    /// Seed of the random token ids (the same seed, the same prompts).
    pub seed: u64,
    /// How the runs decode (`headroom_core::speculative`).
    pub speculative: SpeculativeMode,
}

/// What the model is, for the labels and the roofline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLabels {
    /// config.json's `model_type`.
    pub model_type: String,
    /// `(bits, group_size)`; `None` if unquantized.
    pub quantization: Option<(i32, i32)>,
    /// What the KV cache holds during the runs: its float type as MLX names
    /// it ("bfloat16", …), or its quantization ("8-bit (group 64)").
    pub kv_dtype: String,
    /// How quantized matrices multiply; `None` if unquantized.
    pub quant_kernel: Option<QuantKernel>,
    /// Weight bytes read per decoded token and KV bytes per cached position.
    pub traffic: DecodeTraffic,
}

/// One timed run.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRun {
    /// 0 is the warm-up, 1 … runs the counted ones.
    pub index: usize,
    pub warmup: bool,
    /// Cache positions when the run started (measured: the depth really reached).
    pub context_tokens: usize,
    /// Positions prefilled by this run.
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// Cache positions when the run ended: depth + p + n − 1 (the last token is sampled, never fed).
    pub cache_tokens_after: usize,
    pub timings: TurnTimings,
    pub rates: Rates,
    /// MLX's peak allocation during the run (weights included), bytes.
    pub peak_memory_bytes: usize,
    /// What speculative decoding did in the run.
    pub speculation: Speculation,
}

/// What a case reports while it runs, in this order: `Filled`, `Labels`
/// (once the warm-up has written the cache, whose dtype they name), then one
/// `Run` per run (warm-up first).
#[derive(Debug, Clone, PartialEq)]
pub enum BenchEvent {
    Labels(ModelLabels),
    /// The cache holds `depth` positions, after `time` (not part of any figure).
    Filled {
        depth: usize,
        time: Duration,
    },
    Run(BenchRun),
}

/// Everything a case produced.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseResult {
    pub case: BenchCase,
    pub labels: ModelLabels,
    pub fill_time: Duration,
    /// Counted runs only (the warm-up is in `warmup`).
    pub runs: Vec<BenchRun>,
    pub warmup: BenchRun,
}

/// Runs `case` on the model loaded in `engine`, blocking until done.
/// `on_event` sees each event on the calling thread as it happens (to read
/// memory pressure between runs, print progress); `cancel` stops it between
/// runs or tokens, with `EngineError::BenchCancelled`.
pub fn run_case(
    engine: &EngineHandle,
    case: BenchCase,
    cancel: &Arc<AtomicBool>,
    mut on_event: impl FnMut(&BenchEvent),
) -> Result<CaseResult> {
    validate(&case)?;
    let (tx, rx) = mpsc::channel::<Result<BenchEvent>>();
    let job_cancel = Arc::clone(cancel);
    engine.with_model(move |model, settings, metering| {
        let outcome = match model {
            None => Err(EngineError::NoModelLoaded),
            Some(model) => run_on_engine(model, settings.context_limit, settings.kv, &case, metering, &job_cancel, &tx),
        };
        if let Err(e) = outcome {
            let _ = tx.send(Err(e));
        }
    })?;

    let (mut labels, mut fill_time, mut warmup, mut runs) = (None, Duration::ZERO, None, Vec::new());
    for event in rx.iter() {
        let event = event?;
        on_event(&event);
        match event {
            BenchEvent::Labels(l) => labels = Some(l),
            BenchEvent::Filled { time, .. } => fill_time = time,
            BenchEvent::Run(run) if run.warmup => warmup = Some(run),
            BenchEvent::Run(run) => runs.push(run),
        }
    }
    match (labels, warmup) {
        (Some(labels), Some(warmup)) if runs.len() == case.runs => {
            Ok(CaseResult { case, labels, fill_time, runs, warmup })
        }
        // The job ended without an error and without all its runs: it panicked.
        _ => {
            Err(EngineError::Panicked { during: "bench", message: "the benchmark stopped before its last run".into() })
        }
    }
}

fn validate(case: &BenchCase) -> Result<()> {
    let bad = |name, value: usize, reason| Err(EngineError::InvalidSetting { name, value: value.to_string(), reason });
    if case.shape.prompt_tokens == 0 {
        return bad(
            "prompt tokens (-p)",
            0,
            "must be at least 1: the first token comes from the prompt's last position",
        );
    }
    if case.shape.gen_tokens < 2 {
        return bad(
            "generated tokens (-n)",
            case.shape.gen_tokens,
            "must be at least 2: decode speed excludes the first token",
        );
    }
    if case.runs == 0 {
        return bad("runs (-r)", 0, "must be at least 1");
    }
    Ok(())
}

/// The case itself, on the engine thread. The fill and every run are
/// measured as turns (`metering`), so a benchmark at a depth teaches the fit
/// that context: the fill prefills it whole.
fn run_on_engine(
    model: &Model,
    context_limit: usize,
    kv: KvFormat,
    case: &BenchCase,
    metering: &Metering<'_>,
    cancel: &AtomicBool,
    tx: &mpsc::Sender<Result<BenchEvent>>,
) -> Result<()> {
    let BenchShape { depth, prompt_tokens: p, gen_tokens: n } = case.shape;
    // The cache peaks at d + p + n − 1 positions; the fit was approved at the limit.
    if depth + p + n - 1 > context_limit {
        return Err(EngineError::BenchContext { depth, prompt: p, generated: n, limit: context_limit });
    }
    let config = model.config();
    let vocab = u32::try_from(config.text.vocab_size).unwrap_or(0).max(1);
    let mut ids = TokenStream::new(case.seed, vocab);
    let mut cache = model.new_cache_as(kv)?;
    let mut sampler = Sampler::new(SamplingParams { seed: Some(case.seed), ..SamplingParams::default() })?;
    let send = |event: BenchEvent| tx.send(Ok(event)).map_err(|_| EngineError::BenchCancelled);

    // Fill to the depth through the same loop (its TTFT is the fill time);
    // with one token to generate, the cache ends holding exactly the prompt.
    let fill_time = if depth > 0 {
        let fill: Vec<u32> = ids.take(depth);
        metering.start()?;
        let g = run_once(model, &mut cache, &fill, 1, SpeculativeMode::None, &mut sampler, cancel)?;
        metering.finish_turn(kv, &fill, &g)?;
        g.timings.first_token_at.unwrap_or_default()
    } else {
        Duration::ZERO
    };
    send(BenchEvent::Filled { depth: cache.offset(), time: fill_time })?;
    // A sliding window that has rotated, or a recurrent state, cannot step
    // back to the depth: such a model restarts each run from this snapshot
    // (arrays are shared until written, so it costs nothing until then).
    let filled = cache.clone();

    for index in 0..=case.runs {
        if cancel.load(Ordering::Relaxed) {
            return Err(EngineError::BenchCancelled);
        }
        // Back to the depth (the buffers stay allocated), then fresh prompt ids.
        let back = cache.offset() - depth;
        if cache.can_trim(back) {
            cache.trim(back);
        } else {
            cache = filled.clone();
        }
        let mut prompt = cache.tokens().to_vec();
        prompt.extend(ids.take(p));
        metering.start()?;
        let g = run_once(model, &mut cache, &prompt, n, case.speculative, &mut sampler, cancel)?;
        if g.finish_reason != headroom_core::chat::FinishReason::Length {
            return Err(EngineError::BenchCancelled);
        }
        let peak_memory_bytes = metering.finish_turn(kv, &prompt, &g)?;
        let run = BenchRun {
            index,
            warmup: index == 0,
            context_tokens: g.context_tokens.min(g.reused_tokens),
            prompt_tokens: g.timings.prompt_tokens as usize,
            generated_tokens: g.tokens.len(),
            cache_tokens_after: cache.offset(),
            rates: g.timings.rates(),
            timings: g.timings,
            peak_memory_bytes,
            speculation: g.speculation,
        };
        if index == 0 {
            send(BenchEvent::Labels(labels(model, &cache)))?;
        }
        send(BenchEvent::Run(run))?;
    }
    Ok(())
}

/// One pass of the real generation loop, EOS ignored, timed from the call.
fn run_once(
    model: &Model,
    cache: &mut KvCache,
    prompt: &[u32],
    max_tokens: usize,
    speculative: SpeculativeMode,
    sampler: &mut Sampler,
    cancel: &AtomicBool,
) -> Result<crate::generate::Generation> {
    let options = GenerateOptions { max_tokens, eos_ids: Vec::new(), speculative, ..GenerateOptions::default() };
    generate(model, cache, prompt, &options, sampler, &WallClock::start(), cancel, |_, _| true)
}

fn labels(model: &Model, cache: &KvCache) -> ModelLabels {
    let config = model.config();
    let c = &config.text;
    let kv_dtype = cache.dtype().unwrap_or(Dtype::Float32);
    // The roofline reads the cache as it is stored during the runs.
    let stored = if cache.is_quantized() { cache.format() } else { KvFormat::Float };
    let linear = u64::try_from(c.layers_of(headroom_core::format::LayerAttention::Linear)).unwrap_or(0);
    let state_bytes = c.linear_attention.map_or(0, |l| linear * l.state_bytes(dtype_bytes(kv_dtype)));
    ModelLabels {
        model_type: config.model_type_name().to_owned(),
        quantization: config.quantization.as_ref().map(|q| (q.default.bits, q.default.group_size)),
        kv_dtype: cache.label(dtype_name(kv_dtype)),
        quant_kernel: model.quant_kernel(),
        traffic: DecodeTraffic::of(c, model.weight_bytes(), dtype_bytes(kv_dtype), state_bytes, stored),
    }
}

/// Random token ids in `[0, vocab)` like mlx-lm's benchmark uses, from a
/// seeded xorshift (repeatable, independent of MLX's global RNG).
#[derive(Debug)]
struct TokenStream {
    state: u64,
    vocab: u32,
}

impl TokenStream {
    fn new(seed: u64, vocab: u32) -> Self {
        // xorshift must not start at 0.
        Self { state: seed ^ 0x9E37_79B9_7F4A_7C15, vocab }
    }

    fn take(&mut self, n: usize) -> Vec<u32> {
        (0..n)
            .map(|_| {
                self.state ^= self.state << 13;
                self.state ^= self.state >> 7;
                self.state ^= self.state << 17;
                u32::try_from(self.state % u64::from(self.vocab)).unwrap_or(0)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::read_config;
    use crate::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
    use crate::testutil::temp_dir;
    use crate::worker::LoadSettings;

    /// The tiny demo model (bf16 scales, so bf16 activations and KV), one per test process.
    fn demo_dir() -> &'static std::path::PathBuf {
        static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
        DIR.get_or_init(|| {
            let dir = temp_dir("bench-demo");
            write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).unwrap();
            dir
        })
    }

    fn engine_with_tiny(context_limit: usize) -> EngineHandle {
        let dir = demo_dir();
        let engine = EngineHandle::spawn().unwrap();
        engine.load(dir, LoadSettings { context_limit, ..LoadSettings::default() }).unwrap();
        engine
    }

    fn case(depth: usize, p: usize, n: usize, runs: usize) -> BenchCase {
        BenchCase {
            shape: BenchShape { depth, prompt_tokens: p, gen_tokens: n },
            runs,
            seed: 7,
            speculative: SpeculativeMode::None,
        }
    }

    #[test]
    fn a_case_reaches_its_depth_and_counts_every_run() {
        let engine = engine_with_tiny(1024);
        let cancel = Arc::new(AtomicBool::new(false));
        let mut events = Vec::new();
        let r = run_case(&engine, case(300, 24, 6, 3), &cancel, |e| events.push(e.clone())).unwrap();
        assert_eq!(r.runs.len(), 3);
        assert!(r.warmup.warmup && r.warmup.index == 0);
        assert_eq!(r.runs.iter().map(|run| run.index).collect::<Vec<_>>(), [1, 2, 3]);
        for run in std::iter::once(&r.warmup).chain(&r.runs) {
            // The depth is really in the cache: the run starts there, prefills
            // p after it (context d + p at the first token) and ends at d + p + n − 1.
            assert_eq!((run.context_tokens, run.prompt_tokens, run.generated_tokens), (300, 24, 6), "{run:?}");
            assert_eq!(run.cache_tokens_after, 300 + 24 + 6 - 1);
            assert!(run.rates.decode_tps.is_some_and(|v| v > 0.0) && run.rates.ttft_ms.is_some(), "{run:?}");
            assert!(run.peak_memory_bytes > 0);
        }
        assert!(r.fill_time > Duration::ZERO);
        assert_eq!(r.labels.model_type, "qwen2");
        assert!(r.labels.traffic.weight_bytes > 0);
        // bf16 keys and values: 2 × layers × kv heads × head dim × 2 bytes.
        assert_eq!(r.labels.kv_dtype, "bfloat16");
        assert_eq!(r.labels.quantization, Some((4, 64)));
        let c = read_config(demo_dir()).unwrap().text;
        let per_position = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 2;
        assert_eq!(r.labels.traffic.kv_bytes_per_position, u64::try_from(per_position).unwrap_or(0));
        assert_eq!(events[0], BenchEvent::Filled { depth: 300, time: r.fill_time });
        assert!(matches!(events[1], BenchEvent::Labels(_)));
        assert_eq!(events.len(), 2 + 4);

        // Depth 0: nothing to fill, the prompt starts an empty cache.
        let r0 = run_case(&engine, case(0, 8, 3, 1), &cancel, |_| {}).unwrap();
        assert_eq!(
            (r0.runs[0].context_tokens, r0.runs[0].cache_tokens_after, r0.fill_time),
            (0, 8 + 3 - 1, Duration::ZERO)
        );
    }

    #[test]
    fn the_fill_and_every_run_are_measured_as_turns_and_the_fill_calibrates() {
        use crate::meter::{MeasuredKind, TestMeter};
        let engine = engine_with_tiny(1024);
        let meter = Arc::new(TestMeter::default());
        engine.set_meter(Some(meter.clone())).unwrap();
        let cancel = Arc::new(AtomicBool::new(false));
        let r = run_case(&engine, case(200, 16, 4, 2), &cancel, |_| {}).unwrap();
        let kept = meter.kept();
        assert_eq!(kept.len(), 1 + 3, "the fill, the warm-up and two runs: {kept:?}");
        assert!(kept.iter().all(|m| m.kind == MeasuredKind::Turn && m.kv == KvFormat::Float));
        // The fill prefilled 200 tokens whole and generated one: a point of
        // the context curve at 201 positions.
        let fill = &kept[0];
        assert_eq!((fill.context_tokens, fill.prompt_tokens, fill.reused_tokens), (201, 200, 0));
        assert!(fill.calibration_point().is_some_and(|p| p.context_tokens == 201), "{fill:?}");
        // Each run continues the depth: measured, but no point of the curve.
        for (m, run) in kept[1..].iter().zip(std::iter::once(&r.warmup).chain(&r.runs)) {
            assert_eq!((m.context_tokens, m.prompt_tokens, m.reused_tokens), (200 + 16 + 4, 216, 200), "{m:?}");
            assert_eq!(m.mlx_peak_bytes, run.peak_memory_bytes as u64, "the run's peak is the one measured");
            assert!(m.calibration_point().is_none());
        }
        // At depth 0 every run prefills its whole prompt: each is a point.
        run_case(&engine, case(0, 32, 3, 1), &cancel, |_| {}).unwrap();
        let at_zero = &meter.kept()[4..];
        assert_eq!(at_zero.len(), 2);
        assert!(at_zero.iter().all(|m| m.reused_tokens == 0 && m.calibration_point().is_some()), "{at_zero:?}");
    }

    #[test]
    fn bad_shapes_no_model_and_too_long_contexts_are_refused() {
        let engine = engine_with_tiny(64);
        let cancel = Arc::new(AtomicBool::new(false));
        let err = |c| run_case(&engine, c, &cancel, |_| {}).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(case(0, 0, 4, 1)).contains("-p"));
        assert!(err(case(0, 4, 1, 1)).contains("-n"));
        assert!(err(case(0, 4, 4, 0)).contains("-r"));
        assert!(err(case(60, 4, 4, 1)).contains(
            "needs 67 cache positions (depth 60 + prompt 4 + generated 4 − 1), beyond the context limit of 64"
        ));
        let empty = EngineHandle::spawn().unwrap();
        let e = run_case(&empty, case(0, 4, 4, 1), &cancel, |_| {}).err();
        assert!(matches!(e, Some(EngineError::NoModelLoaded)), "{e:?}");
        cancel.store(true, Ordering::Relaxed);
        assert!(matches!(run_case(&engine, case(0, 4, 4, 1), &cancel, |_| {}), Err(EngineError::BenchCancelled)));
    }

    #[test]
    fn the_token_stream_is_seeded_and_within_the_vocabulary() {
        let a = TokenStream::new(1, 100).take(500);
        assert_eq!(a, TokenStream::new(1, 100).take(500));
        assert_ne!(a, TokenStream::new(2, 100).take(500));
        assert!(a.iter().all(|&t| t < 100) && a.iter().collect::<std::collections::HashSet<_>>().len() > 50);
    }
}
