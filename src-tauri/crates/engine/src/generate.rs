//! The generation loop of one turn, shaped like mlx-lm's `generate_step`:
//! prefill the prompt (after whatever prefix the cache already holds) in
//! chunks of 2048, feed the last prompt token to get the first sample, then
//! decode with `async_eval` so that the graph of token n+1 is being computed
//! while token n is handed out. Timestamps come from an injected clock and
//! become `headroom_core::stats::TurnTimings`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

// One definition of why a turn ended, shared with the UI and the store.
pub use headroom_core::chat::FinishReason;
use headroom_core::stats::TurnTimings;
use mlx_rs::transforms::{async_eval, eval};
use mlx_rs::Array;

use crate::cache::KvCache;
use crate::error::{EngineError, MlxContext, Result};
use crate::models::Model;
use crate::sampler::Sampler;
use crate::sizes::PREFILL_CHUNK;

/// How often (in tokens) MLX's buffer cache is released during decode, as mlx-lm.
const CLEAR_CACHE_EVERY: usize = 256;

/// Time since the request was accepted.
pub trait Clock {
    fn elapsed(&self) -> Duration;
}

/// The real clock, started when the request was accepted.
#[derive(Debug, Clone, Copy)]
pub struct WallClock(pub Instant);

impl WallClock {
    pub fn start() -> Self {
        Self(Instant::now())
    }
}

impl Clock for WallClock {
    fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    /// Token ids that end the turn.
    pub eos_ids: Vec<u32>,
    pub prefill_chunk: usize,
    /// Keep a copy of the cache as it is once the prompt (all but its last
    /// token) is in: for a cache that cannot step back (a window that may
    /// rotate, a recurrent state), the state the next turn can continue from.
    pub checkpoint: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self { max_tokens: 256, eos_ids: Vec::new(), prefill_chunk: PREFILL_CHUNK, checkpoint: false }
    }
}

/// What a turn produced.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Generated ids, EOS excluded.
    pub tokens: Vec<u32>,
    pub finish_reason: FinishReason,
    pub timings: TurnTimings,
    /// Prompt tokens that were already in the cache and not prefilled again.
    pub reused_tokens: usize,
    /// Cache positions before this turn (the context it started from).
    pub context_tokens: usize,
    /// The cache after the prompt, when [`GenerateOptions::checkpoint`] asked for it.
    pub checkpoint: Option<KvCache>,
}

/// Generates after `prompt`, the whole conversation so far as token ids.
/// The cache keeps its common prefix with `prompt`; only the rest is prefilled.
/// `on_token` sees each generated id as soon as it is known; returning
/// `false` stops the turn (as cancellation does).
#[allow(clippy::too_many_arguments)]
pub fn generate(
    model: &Model,
    cache: &mut KvCache,
    prompt: &[u32],
    options: &GenerateOptions,
    sampler: &mut Sampler,
    clock: &dyn Clock,
    cancel: &AtomicBool,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<Generation> {
    if prompt.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    let context_tokens = cache.offset();
    let reused = cache.reuse_prefix(prompt);
    let use_history = sampler.uses_history();
    let mut history: Vec<u32> = if use_history { prompt.to_vec() } else { Vec::new() };
    let chunk = options.prefill_chunk.max(1);
    let prefill_started = clock.elapsed();

    // Prefill all but the last new token; their logits are not needed.
    let mut rest = &prompt[reused..];
    while rest.len() > 1 {
        // A long prefill is many chunks of work: a cancel lands between them.
        // What was prefilled stays in the cache, recorded, for the next turn.
        if cancel.load(Ordering::Relaxed) {
            return Ok(Generation {
                timings: TurnTimings {
                    prompt_tokens: u32::try_from(prompt.len() - reused - rest.len()).unwrap_or(u32::MAX),
                    prefill: clock.elapsed().saturating_sub(prefill_started),
                    generated_tokens: 0,
                    first_token_at: None,
                    last_token_at: None,
                },
                tokens: Vec::new(),
                finish_reason: FinishReason::Cancelled,
                reused_tokens: reused,
                context_tokens,
                checkpoint: None,
            });
        }
        let n = chunk.min(rest.len() - 1);
        model.forward(&ids_array(&rest[..n]), cache)?;
        cache.push_tokens(&rest[..n]);
        eval(cache.arrays()).op("prefill")?;
        mlx_rs::memory::clear_cache().op("clear_cache")?;
        rest = &rest[n..];
    }

    // MLX arrays are shared until written: the copy costs only what decode
    // then writes (a recurrent state is replaced whole each step; a full
    // layer's buffer is copied once).
    let checkpoint = options.checkpoint.then(|| cache.clone());

    let mut step = |cache: &mut KvCache, ids: &Array, fed: Option<&[u32]>, history: &[u32]| -> Result<Array> {
        let logits = model.forward(ids, cache)?;
        if let Some(fed) = fed {
            cache.push_tokens(fed);
        }
        sampler.sample(&logits, history)
    };

    let mut y = step(cache, &ids_array(rest), Some(rest), &history)?;
    async_eval([&y]).op("async_eval")?;

    let mut tokens = Vec::new();
    let mut finish = FinishReason::Length;
    let mut first_token_at = None;
    let mut last_token_at = None;
    let mut prefill = Duration::ZERO;
    let mut pending: Option<Array> = None;
    for n in 0..options.max_tokens {
        // Build and schedule token n+1 before waiting on token n. Its input is
        // y as a lazy array, so the cache gets y without a round trip.
        let next = if n + 1 < options.max_tokens {
            let y_in = y.reshape(&[1, 1]).op("reshape")?;
            let next = step(cache, &y_in, None, &history)?;
            async_eval([&next]).op("async_eval")?;
            Some(next)
        } else {
            None
        };
        let token = y.item_exact::<u32>();
        let now = clock.elapsed();
        if n == 0 {
            // Prefill ends when the first token exists: its sampling is part of TTFT.
            prefill = now.saturating_sub(prefill_started);
            first_token_at = Some(now);
        }
        if next.is_some() {
            // y went into the cache through the step just scheduled.
            cache.push_tokens(&[token]);
        }
        if options.eos_ids.contains(&token) {
            finish = FinishReason::Stop;
            pending = next;
            break;
        }
        tokens.push(token);
        last_token_at = Some(now);
        if use_history {
            history.push(token);
        }
        if !on_token(token) || cancel.load(Ordering::Relaxed) {
            finish = FinishReason::Cancelled;
            pending = next;
            break;
        }
        if n % CLEAR_CACHE_EVERY == 0 {
            mlx_rs::memory::clear_cache().op("clear_cache")?;
        }
        match next {
            Some(next) => y = next,
            None => break,
        }
    }
    // Let an in-flight step finish so the cache is consistent for the next turn.
    if let Some(p) = pending {
        eval([&p]).op("eval")?;
    }

    Ok(Generation {
        timings: TurnTimings {
            prompt_tokens: u32::try_from(prompt.len() - reused).unwrap_or(u32::MAX),
            prefill,
            generated_tokens: u32::try_from(tokens.len()).unwrap_or(u32::MAX),
            first_token_at,
            last_token_at: last_token_at.or(first_token_at),
        },
        tokens,
        finish_reason: finish,
        reused_tokens: reused,
        context_tokens,
        checkpoint,
    })
}

fn ids_array(ids: &[u32]) -> Array {
    let len = i32::try_from(ids.len()).unwrap_or(i32::MAX);
    Array::from_slice(ids, &[1, len])
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::demo::Arch;
    use crate::loader::load_model;
    use crate::models::Logits;
    use crate::sampler::SamplingParams;
    use crate::testutil::{tiny_model, TinySpec};
    use crate::weights::ComputeDtype;

    /// Each call advances 10 ms: timings become exact.
    struct FakeClock(Cell<u64>);
    impl Clock for FakeClock {
        fn elapsed(&self) -> Duration {
            let t = self.0.get() + 10;
            self.0.set(t);
            Duration::from_millis(t)
        }
    }

    fn greedy() -> Sampler {
        Sampler::new(SamplingParams::default()).expect("sampler")
    }

    fn run(model: &Model, cache: &mut KvCache, prompt: &[u32], opts: &GenerateOptions) -> Generation {
        let cancel = AtomicBool::new(false);
        generate(model, cache, prompt, opts, &mut greedy(), &FakeClock(Cell::new(0)), &cancel, |_| true)
            .expect("generate")
    }

    fn model(arch: Arch) -> Model {
        load_model(&tiny_model("gen", &TinySpec::new(arch)), ComputeDtype::Native).expect("load")
    }

    /// Greedy decoding by brute force: the whole sequence through an empty cache each step.
    fn argmax_reference(model: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
        let mut seq = prompt.to_vec();
        for _ in 0..n {
            let mut cache = model.new_cache();
            let logits = model.forward_with(&ids_array(&seq), &mut cache, Logits::All).expect("forward");
            let logits = logits.as_dtype(mlx_rs::Dtype::Float32).expect("cast");
            let v = logits.as_slice::<f32>();
            let vocab = usize::try_from(model.config().text.vocab_size).expect("vocab");
            let last = &v[v.len() - vocab..];
            let best = (0..last.len()).max_by(|&a, &b| last[a].total_cmp(&last[b])).expect("non-empty");
            seq.push(best as u32);
        }
        seq[prompt.len()..].to_vec()
    }

    #[test]
    fn greedy_generation_is_the_argmax_of_full_recomputation() {
        for arch in [Arch::Qwen2, Arch::Qwen3, Arch::Llama] {
            let m = model(arch);
            let prompt = [3u32, 17, 42, 99, 7];
            let opts = GenerateOptions { max_tokens: 12, ..Default::default() };
            let g = run(&m, &mut m.new_cache(), &prompt, &opts);
            assert_eq!(g.finish_reason, FinishReason::Length);
            assert_eq!(g.tokens, argmax_reference(&m, &prompt, 12), "{arch:?}");
        }
    }

    /// A tiny demo model of one of the architectures with experts, windows
    /// or linear attention (the project's writer), loaded as mlx-lm would.
    fn demo_model(arch: Arch, dtype: ComputeDtype) -> Model {
        use crate::demo::{write_demo_model, Bits, DemoSpec, Preset};
        let dir = crate::testutil::temp_dir(&format!("gen-{}", arch.as_str()));
        write_demo_model(&dir, &DemoSpec::new(arch, Preset::Tiny, Bits::Four)).expect("demo model");
        let model = load_model(&dir, dtype).expect("load");
        let _ = std::fs::remove_dir_all(dir);
        model
    }

    const NEW_ARCHS: [Arch; 4] = [Arch::Qwen3Moe, Arch::Gemma3Text, Arch::Qwen3_5, Arch::Qwen3_5Moe];

    #[test]
    fn experts_windows_and_states_decode_as_full_recomputation_does() {
        for arch in NEW_ARCHS {
            // In f32: one token at a time and a whole sequence at once take
            // different matmul kernels, whose bf16 roundings could flip a
            // near tie of these random weights; the cache is what is tested.
            let m = demo_model(arch, ComputeDtype::F32);
            // 20 prompt tokens and 12 more: Gemma's 16-position window wraps.
            let prompt: Vec<u32> = (0..20u32).map(|i| 3 + i * 37 % 500).collect();
            let opts = GenerateOptions { max_tokens: 12, ..Default::default() };
            let g = run(&m, &mut m.new_cache(), &prompt, &opts);
            assert_eq!(g.tokens, argmax_reference(&m, &prompt, 12), "{arch:?}");
        }
    }

    #[test]
    fn windows_and_states_reuse_a_turn_exactly_or_recompute_it() {
        for arch in NEW_ARCHS {
            let m = demo_model(arch, ComputeDtype::Native);
            let opts = GenerateOptions { max_tokens: 8, ..Default::default() };
            let mut cache = m.new_cache();
            let turn1: Vec<u32> = (0..20u32).map(|i| 5 + i * 11 % 300).collect();
            let t1 = run(&m, &mut cache, &turn1, &opts);
            // Turn 2 extends everything cached (27 positions: past the
            // window, through the state): nothing to undo, all reused.
            let mut history = turn1.clone();
            history.extend(&t1.tokens);
            history.extend([11u32, 12, 13]);
            let t2 = run(&m, &mut cache, &history, &opts);
            assert_eq!(t2.reused_tokens, 20 + 7, "{arch:?}");
            let fresh = run(&m, &mut m.new_cache(), &history, &opts);
            assert_eq!(t2.tokens, fresh.tokens, "{arch:?}: reused vs fresh");
            // A turn that parts from the cache inside it: a rotated window
            // or a state cannot step back, so the prompt is recomputed
            // (experts alone, with full attention, step back exactly).
            let mut other = turn1[..10].to_vec();
            other.extend([7u32, 8, 9]);
            let t3 = run(&m, &mut cache, &other, &opts);
            let expect_reused = if arch == Arch::Qwen3Moe { 10 } else { 0 };
            assert_eq!(t3.reused_tokens, expect_reused, "{arch:?}");
            assert_eq!(t3.tokens, run(&m, &mut m.new_cache(), &other, &opts).tokens, "{arch:?}: parted vs fresh");
        }
    }

    #[test]
    fn turn_two_reuses_the_cache_and_matches_a_fresh_run() {
        let m = model(Arch::Qwen2);
        let opts = GenerateOptions { max_tokens: 8, ..Default::default() };
        let mut cache = m.new_cache();
        let turn1_prompt = [5u32, 6, 7, 8, 9, 10];
        let t1 = run(&m, &mut cache, &turn1_prompt, &opts);
        assert_eq!(t1.timings.prompt_tokens, 6);

        let mut history: Vec<u32> = turn1_prompt.to_vec();
        history.extend(&t1.tokens);
        history.extend([11u32, 12, 13]);
        let t2 = run(&m, &mut cache, &history, &opts);
        // Only the tokens after what the cache held were prefilled.
        // The cache holds the prompt and the 7 generated tokens that were fed
        // back (the 8th was sampled, never fed).
        assert_eq!(t2.reused_tokens, 6 + 7);
        assert_eq!(t2.timings.prompt_tokens as usize, history.len() - t2.reused_tokens);
        let fresh = run(&m, &mut m.new_cache(), &history, &opts);
        assert_eq!(t2.tokens, fresh.tokens);
        assert_eq!(cache.tokens(), &[history.as_slice(), &t2.tokens[..7]].concat()[..]);
    }

    #[test]
    fn chunked_prefill_matches_a_single_chunk() {
        let m = model(Arch::Llama);
        let prompt: Vec<u32> = (0..40).map(|i| (i * 37 % 250) as u32).collect();
        let one = run(&m, &mut m.new_cache(), &prompt, &GenerateOptions { max_tokens: 6, ..Default::default() });
        let chunked = run(
            &m,
            &mut m.new_cache(),
            &prompt,
            &GenerateOptions { max_tokens: 6, prefill_chunk: 7, ..Default::default() },
        );
        assert_eq!(one.tokens, chunked.tokens);
    }

    #[test]
    fn stops_on_eos_on_cancel_and_times_with_the_injected_clock() {
        let m = model(Arch::Qwen3);
        let prompt = [1u32, 2, 3];
        let free = run(&m, &mut m.new_cache(), &prompt, &GenerateOptions { max_tokens: 6, ..Default::default() });
        // Make the third generated token an EOS: the turn stops before it.
        let opts = GenerateOptions { max_tokens: 6, eos_ids: vec![free.tokens[2]], ..Default::default() };
        let g = run(&m, &mut m.new_cache(), &prompt, &opts);
        let first_eos = free.tokens.iter().position(|&t| t == free.tokens[2]).expect("present");
        assert_eq!(g.finish_reason, FinishReason::Stop);
        assert_eq!(g.tokens, free.tokens[..first_eos]);

        let cancel = AtomicBool::new(false);
        let mut seen = 0;
        let g = generate(
            &m,
            &mut m.new_cache(),
            &prompt,
            &GenerateOptions { max_tokens: 6, ..Default::default() },
            &mut greedy(),
            &FakeClock(Cell::new(0)),
            &cancel,
            |_| {
                seen += 1;
                if seen == 2 {
                    cancel.store(true, Ordering::Relaxed);
                }
                true
            },
        )
        .expect("generate");
        assert_eq!(g.finish_reason, FinishReason::Cancelled);
        assert_eq!(g.tokens.len(), 2);
        // Clock reads: prefill start (10), first token (20), second (30).
        assert_eq!(g.timings.first_token_at, Some(Duration::from_millis(20)));
        assert_eq!(g.timings.last_token_at, Some(Duration::from_millis(30)));
        assert_eq!(g.timings.prefill, Duration::from_millis(10));
        assert_eq!(g.timings.rates().decode_tps, Some(100.0));

        let empty = generate(
            &m,
            &mut m.new_cache(),
            &[],
            &GenerateOptions::default(),
            &mut greedy(),
            &WallClock::start(),
            &cancel,
            |_| true,
        );
        assert!(matches!(empty, Err(EngineError::EmptyPrompt)));
    }

    #[test]
    fn a_cancel_lands_between_prefill_chunks_and_leaves_a_usable_cache() {
        let m = model(Arch::Qwen2);
        let prompt: Vec<u32> = (0..30).map(|i| (i * 11 % 250) as u32).collect();
        let opts = GenerateOptions { max_tokens: 4, prefill_chunk: 8, ..Default::default() };
        let cancel = AtomicBool::new(true);
        let mut cache = m.new_cache();
        let g = generate(&m, &mut cache, &prompt, &opts, &mut greedy(), &FakeClock(Cell::new(0)), &cancel, |_| {
            panic!("no token may come after a cancel during prefill")
        })
        .expect("generate");
        assert_eq!(g.finish_reason, FinishReason::Cancelled);
        assert!(g.tokens.is_empty() && g.timings.first_token_at.is_none());
        // The same cache then serves a normal turn exactly like a fresh one.
        let fresh = run(&m, &mut m.new_cache(), &prompt, &opts);
        assert_eq!(run(&m, &mut cache, &prompt, &opts).tokens, fresh.tokens);
    }
}
