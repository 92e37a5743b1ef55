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
use headroom_core::speculative::{PlainBecause, Speculation, SpeculativeMode};
use headroom_core::stats::TurnTimings;
use mlx_rs::transforms::{async_eval, eval};
use mlx_rs::Array;

use crate::cache::KvCache;
use crate::draft::Draft;
use crate::error::{EngineError, MlxContext, Result};
use crate::grammar::Guide;
use crate::lookup::{propose, Depth, DEPTH_MAX};
use crate::models::{Logits, Model};
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
    /// Whether to propose tokens and check several per forward pass.
    pub speculative: SpeculativeMode,
    /// Where prompt lookup's depth starts (what earlier turns of this
    /// model measured: [`Depth::carry_over`]).
    pub depth: Depth,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_tokens: 256,
            eos_ids: Vec::new(),
            prefill_chunk: PREFILL_CHUNK,
            checkpoint: false,
            speculative: SpeculativeMode::None,
            depth: Depth::default(),
        }
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
    /// What speculative decoding did (the mode `None`: plain throughout).
    pub speculation: Speculation,
    /// The depth as the turn left it (its measured costs are worth keeping).
    pub depth: Depth,
}

/// Generates after `prompt`, the whole conversation so far as token ids.
/// The cache keeps its common prefix with `prompt`; only the rest is prefilled.
/// `on_token` sees each generated id as soon as it is known, and whether it
/// is part of a thinking block; returning `false` stops the turn (as
/// cancellation does).
#[allow(clippy::too_many_arguments)]
pub fn generate(
    model: &Model,
    cache: &mut KvCache,
    prompt: &[u32],
    options: &GenerateOptions,
    sampler: &mut Sampler,
    clock: &dyn Clock,
    cancel: &AtomicBool,
    on_token: impl FnMut(u32, bool) -> bool,
) -> Result<Generation> {
    generate_with(model, cache, prompt, options, None, None, sampler, clock, cancel, on_token)
}

/// [`generate`] with a draft model beside the model, used when `options`
/// asks for [`SpeculativeMode::Draft`] (without one, such a turn decodes
/// plainly and says why), and a `guide` that masks each step's logits (a
/// grammar, a thinking budget: `crate::grammar`). Under a guide the step
/// after token n is still computed while token n is read, and sampled once
/// n's mask is known (the mask is computed meanwhile); proposals are
/// checked against the guide before the model sees them.
#[allow(clippy::too_many_arguments)]
pub fn generate_with(
    model: &Model,
    cache: &mut KvCache,
    prompt: &[u32],
    options: &GenerateOptions,
    mut draft_model: Option<&mut Draft>,
    mut guide: Option<&mut Guide>,
    sampler: &mut Sampler,
    clock: &dyn Clock,
    cancel: &AtomicBool,
    mut on_token: impl FnMut(u32, bool) -> bool,
) -> Result<Generation> {
    if prompt.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    check_ids(model, prompt)?;
    let context_tokens = cache.offset();
    let reused = cache.reuse_prefix(prompt);
    let use_history = sampler.uses_history();
    let history: Vec<u32> = if use_history { prompt.to_vec() } else { Vec::new() };
    let mut finish = FinishReason::Length;
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
                speculation: Speculation { mode: options.speculative, ..Speculation::default() },
                depth: options.depth.clone(),
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

    // Speculation needs to step back past a rejected proposal: a window
    // or a recurrent state cannot (their checkpoints cover turns, not steps).
    let mut speculation = Speculation { mode: options.speculative, ..Speculation::default() };
    let asked_for = options.speculative != SpeculativeMode::None;
    if options.speculative != SpeculativeMode::Draft {
        draft_model = None;
    } else if draft_model.is_none() {
        speculation.plain_because = Some(PlainBecause::NoDraftModel);
    }
    if asked_for && speculation.plain_because.is_none() && !cache.always_steps_back() {
        speculation.plain_because = Some(PlainBecause::CacheCannotStepBack);
    }
    // Proposing at all (from the conversation, or from the draft model).
    let lookup = asked_for && speculation.plain_because.is_none();
    // Only prompt lookup learns its acceptance from plain steps for free.
    let shadowed = lookup && draft_model.is_none();
    let mut seq: Vec<u32> = if lookup { prompt.to_vec() } else { Vec::new() };
    let mut depth = options.depth.clone();

    let width = model.config().text.vocab_size;
    let first = bias(guide.as_deref_mut(), width)?;
    let mut y = step(model, sampler, cache, &ids_array(rest), Some(rest), &history, first.as_ref())?;
    async_eval([&y]).op("async_eval")?;

    let mut out = Emitted::new(use_history, history, &options.eos_ids);
    let mut pending: Option<Array> = None;
    // The next token is read before the step after it is scheduled: the
    // lookup wants its value (set after a plain token whose continuation
    // has a proposal, and after every pass that checked proposals).
    let mut drain = false;
    // How the token being read was computed, for the depth's timings.
    let mut came_from = Came::Prefill;
    let mut last_at = Duration::ZERO;
    loop {
        if options.max_tokens == 0 {
            pending = Some(y);
            break;
        }
        // Build and schedule token n+1 before waiting on token n. Its input is
        // y as a lazy array, so the cache gets y without a round trip.
        let ahead = !drain && out.tokens.len() + 1 < options.max_tokens;
        let next = if ahead {
            let y_in = y.reshape(&[1, 1]).op("reshape")?;
            speculation.forward_passes += 1;
            if guide.is_some() {
                // Its mask needs token n: the pass runs now, the sampling
                // waits for the mask, computed while the pass runs.
                let logits = model.forward(&y_in, cache)?;
                async_eval([&logits]).op("async_eval")?;
                Some(Ahead::Logits(logits))
            } else {
                let next = step(model, sampler, cache, &y_in, None, &out.history, None)?;
                async_eval([&next]).op("async_eval")?;
                Some(Ahead::Token(next))
            }
        } else {
            None
        };
        let token = y.item_exact::<u32>();
        let now = clock.elapsed();
        if !matches!(came_from, Came::Prefill) {
            // A decode pass's own token (the prefill's first one is not).
            speculation.decoded += 1;
        }
        if out.tokens.is_empty() && out.first_token_at.is_none() {
            // Prefill ends when the first token exists: its sampling is part of TTFT.
            out.prefill = now.saturating_sub(prefill_started);
        }
        match came_from {
            // A plain step's time is the gap between two reads only while
            // each read has the next step scheduled before it. A read with
            // nothing scheduled (the loop drains for proposals) can find
            // its token already made: MLX's CPU backend computes most of a
            // step while it is built, because the CPU kernel evaluates `x`
            // before each matmul. Counted, each near-zero gap made plain
            // decoding look about 30 % cheaper than it was (the running
            // average's weight), and passes that paid look as if they did
            // not.
            Came::Plain if ahead => depth.plain_step(now.saturating_sub(last_at)),
            Came::Plain | Came::Prefill | Came::Unpipelined => {}
        }
        last_at = now;
        if ahead {
            // y went into the cache through the step just scheduled.
            cache.push_tokens(&[token]);
        }
        if let Some(reason) = out.emit(token, now, guide.as_deref_mut(), &mut on_token, cancel)? {
            finish = reason;
            if next.is_some() {
                // Scheduled, never read: not a pass of this turn's figures.
                speculation.forward_passes -= 1;
            }
            pending = next.map(Ahead::into_array);
            break;
        }
        if out.tokens.len() % CLEAR_CACHE_EVERY == 1 {
            mlx_rs::memory::clear_cache().op("clear_cache")?;
        }
        if lookup {
            seq.push(token);
            if ahead && shadowed {
                // Decoded plainly: would the lookup have proposed it?
                depth.shadow(&seq);
            }
        }
        if let Some(next) = next {
            y = match next {
                Ahead::Token(next) => next,
                Ahead::Logits(logits) => {
                    let mask = bias(guide.as_deref_mut(), width)?;
                    let next = sampler.sample(&masked(&logits, mask.as_ref())?, &out.history)?;
                    async_eval([&next]).op("async_eval")?;
                    next
                }
            };
            came_from = Came::Plain;
            // While token n+1 computes: would its continuation be proposed?
            // A draft's proposals are not free: a plain step is measured
            // first, so that drafting is weighed against it.
            let proposal_ready = match draft_model {
                Some(_) => depth.knows_plain(),
                None => !propose(&seq, 1).is_empty(),
            };
            drain = lookup && depth.depth() > 0 && proposal_ready;
            continue;
        }
        if out.tokens.len() >= options.max_tokens {
            finish = FinishReason::Length;
            break;
        }
        drain = false;
        // `token` is out and not yet in the cache: feed it alone, or with
        // proposals for what follows it.
        let room = options.max_tokens - out.tokens.len();
        let asked = if lookup { depth.depth().min(room - 1).min(DEPTH_MAX) } else { 0 };
        let started = clock.elapsed();
        let (draft, proposing) = match draft_model.as_deref_mut() {
            Some(d) if asked > 0 => {
                // The draft's catch-up on tokens decoded plainly is part of
                // the pass, not of each proposal's cost.
                let rest = d.catch_up(&seq)?;
                let proposing = clock.elapsed();
                (d.propose(rest, asked)?, proposing)
            }
            _ => (propose(&seq, asked).to_vec(), clock.elapsed()),
        };
        depth.proposed(draft.len(), clock.elapsed().saturating_sub(proposing));
        // Under a guide, proposals stop at the first it would not allow,
        // and each row of the pass is masked as the step would be.
        let (draft, rows) = match guide.as_deref() {
            Some(g) => check_draft(g, draft, width)?,
            None => (draft, None),
        };
        if draft.is_empty() {
            let mask = bias(guide.as_deref_mut(), width)?;
            y = step(model, sampler, cache, &ids_array(&[token]), Some(&[token]), &out.history, mask.as_ref())?;
            async_eval([&y]).op("async_eval")?;
            speculation.forward_passes += 1;
            came_from = Came::Unpipelined;
            continue;
        }
        let fed: Vec<u32> = std::iter::once(token).chain(draft.iter().copied()).collect();
        let logits = model.forward_with(&ids_array(&fed), cache, Logits::All)?;
        let logits = masked(&logits, rows.as_ref())?;
        cache.push_tokens(&fed);
        let (accepted, following) = sampler.verify(&logits, &draft, &out.history)?;
        // Keep `token` and the accepted proposals; forget the rest.
        cache.trim(draft.len() - accepted);
        let now = clock.elapsed();
        depth.pass(asked, draft.len(), accepted, now.saturating_sub(started));
        // `RUST_LOG=headroom_engine::lookup=debug`: each pass and what the depth then knows.
        tracing::debug!(
            target: "headroom_engine::lookup",
            at = out.tokens.len(),
            asked,
            proposed = draft.len(),
            accepted,
            ms = now.saturating_sub(started).as_secs_f64() * 1e3,
            next = depth.depth(),
            "pass; {depth:?}"
        );
        speculation.forward_passes += 1;
        speculation.verify_passes += 1;
        speculation.drafted += u32::try_from(draft.len()).unwrap_or(u32::MAX);
        speculation.accepted += u32::try_from(accepted).unwrap_or(u32::MAX);
        speculation.decoded += u32::try_from(accepted).unwrap_or(u32::MAX);
        let mut stopped = None;
        for &d in &draft[..accepted] {
            if let Some(reason) = out.emit(d, now, guide.as_deref_mut(), &mut on_token, cancel)? {
                stopped = Some(reason);
                break;
            }
            seq.push(d);
        }
        if let Some(reason) = stopped {
            finish = reason;
            break;
        }
        // The pass's own token is read (and sent) next round, like a sampled one.
        y = Array::from_slice(&[following], &[1]);
        came_from = Came::Unpipelined;
        drain = depth.depth() > 0;
    }
    // Let an in-flight step finish so the cache is consistent for the next turn.
    if let Some(p) = pending {
        eval([&p]).op("eval")?;
    }

    let Emitted { tokens, prefill, first_token_at, last_token_at, .. } = out;
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
        speculation,
        depth,
    })
}

/// Refuses an id the embedding has no row for: MLX's gather reads past the
/// table without a word (the app's tokenizer is checked against the
/// embedding at load, but ids given directly are not). Sampled ids and
/// lookup proposals come from logits and the prompt, so the prompt is all
/// that needs checking.
fn check_ids(model: &Model, prompt: &[u32]) -> Result<()> {
    let vocab_size = model.config().text.vocab_size;
    match prompt.iter().find(|&&t| i64::from(t) >= i64::from(vocab_size)) {
        Some(&token) => Err(EngineError::TokenOutOfVocab { token, vocab_size }),
        None => Ok(()),
    }
}

/// One forward pass of `ids` and the sampled token after it (lazy), the
/// logits masked by `mask` ([`bias`]) when a guide gave one.
fn step(
    model: &Model,
    sampler: &mut Sampler,
    cache: &mut KvCache,
    ids: &Array,
    fed: Option<&[u32]>,
    history: &[u32],
    mask: Option<&Array>,
) -> Result<Array> {
    let logits = model.forward(ids, cache)?;
    if let Some(fed) = fed {
        cache.push_tokens(fed);
    }
    sampler.sample(&masked(&logits, mask)?, history)
}

/// A step scheduled before the token it follows was read: its token, or
/// (under a guide) its logits, sampled once the mask is known.
enum Ahead {
    Token(Array),
    Logits(Array),
}

impl Ahead {
    fn into_array(self) -> Array {
        match self {
            Ahead::Token(a) | Ahead::Logits(a) => a,
        }
    }
}

/// The guide's mask for the next token as an additive bias `[1, width]`
/// (0 where allowed, −inf elsewhere); `None` where any token may come.
fn bias(guide: Option<&mut Guide>, width: i32) -> Result<Option<Array>> {
    let Some(guide) = guide else { return Ok(None) };
    Ok(guide.mask()?.map(|m| bias_rows(&[Some(m)], width)))
}

/// Rows of masks as a bias `[rows, width]`; a `None` row allows every token.
/// Ids past the mask (embedding rows no token uses) are never allowed
/// under a mask.
fn bias_rows(masks: &[Option<llguidance::toktrie::SimpleVob>], width: i32) -> Array {
    let w = usize::try_from(width).unwrap_or(0);
    let mut values = vec![0f32; w * masks.len()];
    for (row, mask) in values.chunks_exact_mut(w.max(1)).zip(masks) {
        if let Some(mask) = mask {
            for (i, v) in row.iter_mut().enumerate() {
                if i >= mask.len() || !mask.is_allowed(i as u32) {
                    *v = f32::NEG_INFINITY;
                }
            }
        }
    }
    Array::from_slice(&values, &[i32::try_from(masks.len()).unwrap_or(i32::MAX), width])
}

/// `logits` plus the bias (broadcast over the batch), or as they are.
fn masked(logits: &Array, bias: Option<&Array>) -> Result<Array> {
    match bias {
        Some(b) => logits.add(b).op("grammar mask"),
        None => Ok(logits.clone()),
    }
}

/// `draft` cut at the first proposal the guide would not allow, and the
/// mask of each row of the pass that checks it (`k + 1` rows: the one
/// after the fed token, then after each proposal), from a clone of the
/// guide, so the guide itself reads only the tokens that are kept.
fn check_draft(guide: &Guide, mut draft: Vec<u32>, width: i32) -> Result<(Vec<u32>, Option<Array>)> {
    let mut g = guide.clone();
    let mut rows = Vec::with_capacity(draft.len() + 1);
    let mut kept = 0;
    for &d in &draft {
        let mask = g.mask()?;
        if mask.as_ref().is_some_and(|m| !m.is_allowed(d)) {
            break;
        }
        rows.push(mask);
        kept += 1;
        if g.accept(d)?.finished {
            break;
        }
    }
    draft.truncate(kept);
    rows.push(g.mask()?);
    if rows.iter().all(Option::is_none) {
        return Ok((draft, None));
    }
    Ok((draft, Some(bias_rows(&rows, width))))
}

/// How the token about to be read was computed.
#[derive(Debug, Clone, Copy)]
enum Came {
    Prefill,
    /// A step scheduled before the previous token was read.
    Plain,
    /// A step scheduled after the previous token was read, or a pass that
    /// checked proposals: not a plain step's timing.
    Unpipelined,
}

/// The tokens a turn has handed out, and when.
struct Emitted<'a> {
    tokens: Vec<u32>,
    /// Prompt and generated tokens, kept only when the sampler reads them.
    history: Vec<u32>,
    use_history: bool,
    eos_ids: &'a [u32],
    prefill: Duration,
    first_token_at: Option<Duration>,
    last_token_at: Option<Duration>,
}

impl<'a> Emitted<'a> {
    fn new(use_history: bool, history: Vec<u32>, eos_ids: &'a [u32]) -> Self {
        Self {
            tokens: Vec::new(),
            history,
            use_history,
            eos_ids,
            prefill: Duration::ZERO,
            first_token_at: None,
            last_token_at: None,
        }
    }

    /// Hands out `token`, read at `now` (the guide reads it first); `Some`
    /// when the turn ends here.
    fn emit(
        &mut self,
        token: u32,
        now: Duration,
        guide: Option<&mut Guide>,
        on_token: &mut impl FnMut(u32, bool) -> bool,
        cancel: &AtomicBool,
    ) -> Result<Option<FinishReason>> {
        if self.first_token_at.is_none() {
            self.first_token_at = Some(now);
        }
        if self.eos_ids.contains(&token) {
            return Ok(Some(FinishReason::Stop));
        }
        let step = match guide {
            Some(g) => g.accept(token)?,
            None => crate::grammar::Step::default(),
        };
        self.tokens.push(token);
        self.last_token_at = Some(now);
        if self.use_history {
            self.history.push(token);
        }
        if !on_token(token, step.thinking) || cancel.load(Ordering::Relaxed) {
            return Ok(Some(FinishReason::Cancelled));
        }
        Ok(step.finished.then_some(FinishReason::Stop))
    }
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
        generate(model, cache, prompt, opts, &mut greedy(), &FakeClock(Cell::new(0)), &cancel, |_, _| true)
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

    /// Top logit minus the runner-up's after `seq`, by full recomputation.
    fn top_two_gap(model: &Model, seq: &[u32]) -> f32 {
        let logits = model.forward_with(&ids_array(seq), &mut model.new_cache(), Logits::All).expect("forward");
        let logits = logits.as_dtype(mlx_rs::Dtype::Float32).expect("cast");
        let v = logits.as_slice::<f32>();
        let vocab = usize::try_from(model.config().text.vocab_size).expect("vocab");
        let mut last = v[v.len() - vocab..].to_vec();
        last.sort_by(|a, b| b.total_cmp(a));
        last[0] - last[1]
    }

    /// A prompt that invites proposals: a greedy answer, then the question
    /// again, so the model's continuation can be looked up in the prompt.
    fn copying_prompt(m: &Model, base: &[u32]) -> Vec<u32> {
        let plain = run(m, &mut m.new_cache(), base, &GenerateOptions { max_tokens: 24, ..Default::default() });
        [base, &plain.tokens, base].concat()
    }

    /// Greedy decoding with prompt lookup gives exactly the tokens plain
    /// decoding gives, on every architecture; where the cache cannot step
    /// back it decodes plainly and says why.
    #[test]
    fn prompt_lookup_is_token_identical_to_plain_greedy_decoding() {
        let (mut checked, mut ties) = (0, 0);
        let (mut drafted, mut accepted) = (0, 0);
        let archs = [Arch::Qwen2, Arch::Qwen3, Arch::Llama].into_iter().chain(NEW_ARCHS);
        for arch in archs {
            // The project's demo models (a vocabulary that covers every id
            // below 400), in f32 with this device's kernel, as users run them.
            let m = demo_model(arch, ComputeDtype::F32);
            let base: Vec<u32> = (0..12u32).map(|i| 3 + i * 29 % 400).collect();
            let prompt = copying_prompt(&m, &base);
            let plain = GenerateOptions { max_tokens: 40, ..Default::default() };
            // As a chat's later answer starts: the costs of a plain step and
            // of a pass measured by an earlier one (the first answer's first
            // pass waits for a copy of three tokens, which these random
            // weights seldom make).
            let mut depth = Depth::default();
            depth.plain_step(Duration::from_millis(10));
            depth.pass(2, 2, 2, Duration::from_millis(12));
            let lookup =
                GenerateOptions { speculative: SpeculativeMode::Lookup, depth: depth.carry_over(), ..plain.clone() };
            let a = run(&m, &mut m.new_cache(), &prompt, &plain);
            let mut cache = m.new_cache();
            let b = run(&m, &mut cache, &prompt, &lookup);
            // Identical, or parted only where the model's top two tokens
            // tie to rounding (a pass of several rows and a one-row step
            // sum in different orders, as a prefill chunk and decode do).
            if let Some(i) = a.tokens.iter().zip(&b.tokens).position(|(x, y)| x != y) {
                let gap = top_two_gap(&m, &[prompt.as_slice(), &a.tokens[..i]].concat());
                assert!(gap < 1e-3, "{arch:?}: parted at {i} with a gap of {gap}: {:?} vs {:?}", a.tokens, b.tokens);
                ties += 1;
                continue;
            }
            assert_eq!(b.speculation.mode, SpeculativeMode::Lookup);
            if m.new_cache().always_steps_back() {
                assert_eq!(b.speculation.plain_because, None, "{arch:?}");
                assert!(b.speculation.verify_passes > 0, "{arch:?}: {:?}", b.speculation);
                // Each pass yields its own token plus the proposals it accepted.
                assert_eq!(b.speculation.decoded, b.tokens.len() as u32 - 1, "{arch:?}");
                assert_eq!(b.speculation.decoded, b.speculation.forward_passes + b.speculation.accepted, "{arch:?}");
                drafted += b.speculation.drafted;
                accepted += b.speculation.accepted;
                // The cache holds exactly the conversation fed: a next turn reuses it.
                assert_eq!(cache.tokens(), &[prompt.as_slice(), &b.tokens[..b.tokens.len() - 1]].concat()[..]);
            } else {
                assert_eq!(b.speculation.plain_because, Some(PlainBecause::CacheCannotStepBack), "{arch:?}");
                assert_eq!(b.speculation.drafted, 0);
            }
            checked += 1;
        }
        assert_eq!(checked + ties, 7);
        assert!(checked >= 5, "only {checked} architectures compared whole");
        // Both outcomes of a check happened: accepted runs and rejections.
        assert!(accepted > 0 && accepted < drafted, "accepted {accepted} of {drafted}");
    }

    /// A demo model's folder (kept until the test is done with it).
    fn demo_dir(arch: Arch, seed: u64) -> std::path::PathBuf {
        use crate::demo::{write_demo_model, Bits, DemoSpec, Preset};
        let dir = crate::testutil::temp_dir(&format!("draft-{}-{seed}", arch.as_str()));
        let spec = DemoSpec { seed, ..DemoSpec::new(arch, Preset::Tiny, Bits::Four) };
        write_demo_model(&dir, &spec).expect("demo model");
        dir
    }

    /// Greedy decoding with a draft model gives exactly the tokens plain
    /// decoding gives, on every architecture, whether the draft mostly
    /// agrees (the model as its own draft) or mostly not (other weights);
    /// a draft of another vocabulary or one that cannot step back is
    /// refused at load, and a target that cannot step back decodes plainly.
    #[test]
    fn a_draft_model_is_token_identical_to_plain_greedy_decoding() {
        use crate::tokenizer::Tokenizer;
        use headroom_core::kv::KvFormat;
        let kernel = crate::quant::QuantKernel::for_device(crate::backend::backend_info().device);
        let (mut compared, mut ties, mut refused) = (0, 0, 0);
        let (mut drafted, mut accepted) = (0, 0);
        let archs = [Arch::Qwen2, Arch::Qwen3, Arch::Llama].into_iter().chain(NEW_ARCHS);
        for arch in archs {
            let dir = demo_dir(arch, 0);
            let m = load_model(&dir, ComputeDtype::F32).expect("load");
            let words = Tokenizer::for_model(&dir).expect("tokenizer");
            let base: Vec<u32> = (0..12u32).map(|i| 3 + i * 29 % 400).collect();
            let plain = GenerateOptions { max_tokens: 32, ..Default::default() };
            let drafted_opts = GenerateOptions { speculative: SpeculativeMode::Draft, ..plain.clone() };
            let a = run(&m, &mut m.new_cache(), &base, &plain);
            let others = [demo_dir(arch, 7), demo_dir(Arch::Qwen2, 7)];
            for draft_dir in [&dir, &others[0], &others[1]] {
                let how = (ComputeDtype::F32, kernel, KvFormat::Float);
                let mut draft =
                    match Draft::check_vocabulary(draft_dir, &words).and_then(|v| Draft::load(&v, how, &m, 64)) {
                        Ok(d) => d,
                        Err(e) => {
                            let text = e.to_string();
                            assert!(text.contains("full attention") || text.contains("vocabulary"), "{arch:?}: {text}");
                            refused += 1;
                            continue;
                        }
                    };
                let mut cache = m.new_cache();
                let cancel = AtomicBool::new(false);
                let clock = FakeClock(Cell::new(0));
                let b = generate_with(
                    &m,
                    &mut cache,
                    &base,
                    &drafted_opts,
                    Some(&mut draft),
                    None,
                    &mut greedy(),
                    &clock,
                    &cancel,
                    |_, _| true,
                )
                .expect("generate");
                if let Some(i) = a.tokens.iter().zip(&b.tokens).position(|(x, y)| x != y) {
                    let gap = top_two_gap(&m, &[base.as_slice(), &a.tokens[..i]].concat());
                    assert!(
                        gap < 1e-3,
                        "{arch:?}: parted at {i} with a gap of {gap}: {:?} vs {:?}",
                        a.tokens,
                        b.tokens
                    );
                    ties += 1;
                    continue;
                }
                assert_eq!(b.tokens.len(), a.tokens.len(), "{arch:?}");
                if m.new_cache().always_steps_back() {
                    assert_eq!(b.speculation.plain_because, None, "{arch:?}");
                    assert!(b.speculation.verify_passes > 0, "{arch:?}: {:?}", b.speculation);
                    assert_eq!(
                        b.speculation.decoded,
                        b.speculation.forward_passes + b.speculation.accepted,
                        "{arch:?}"
                    );
                    drafted += b.speculation.drafted;
                    accepted += b.speculation.accepted;
                    // Both caches hold exactly the conversation: the next turn reuses them.
                    let fed = [base.as_slice(), &b.tokens[..b.tokens.len() - 1]].concat();
                    assert_eq!(cache.tokens(), &fed[..], "{arch:?}");
                } else {
                    assert_eq!(b.speculation.plain_because, Some(PlainBecause::CacheCannotStepBack), "{arch:?}");
                    assert_eq!(b.speculation.drafted, 0);
                }
                compared += 1;
            }
            for d in [dir].iter().chain(&others) {
                let _ = std::fs::remove_dir_all(d);
            }
        }
        assert!(compared >= 8, "compared {compared}, ties {ties}, refused {refused}");
        assert!(refused >= 2, "gemma3_text and qwen3_5 are refused as drafts: {refused}");
        // The model as its own draft is mostly accepted; random other weights mostly not.
        assert!(accepted > 0 && accepted < drafted, "accepted {accepted} of {drafted}");
        // Asked for without a draft model: plain, and why.
        let m = demo_model(Arch::Qwen2, ComputeDtype::F32);
        let opts = GenerateOptions { speculative: SpeculativeMode::Draft, max_tokens: 4, ..Default::default() };
        let g = run(&m, &mut m.new_cache(), &[3, 17, 42], &opts);
        assert_eq!(g.speculation.plain_because, Some(PlainBecause::NoDraftModel));
    }

    /// An id past the embedding is refused before anything runs. Unchecked,
    /// MLX's gather read past the table: the same prompt (ids up to 322 on
    /// the 256-row tiny model) gave another first token on each run.
    #[test]
    fn a_prompt_id_outside_the_vocabulary_is_refused() {
        let m = model(Arch::Qwen3);
        let vocab = u32::try_from(crate::testutil::VOCAB).unwrap();
        let mut cache = m.new_cache();
        let cancel = AtomicBool::new(false);
        let opts = GenerateOptions { max_tokens: 2, ..Default::default() };
        let err = generate(
            &m,
            &mut cache,
            &[3, vocab, 5],
            &opts,
            &mut greedy(),
            &FakeClock(Cell::new(0)),
            &cancel,
            |_, _| true,
        )
        .unwrap_err();
        assert!(
            matches!(err, EngineError::TokenOutOfVocab { token, vocab_size } if token == vocab && vocab_size == 256)
        );
        assert_eq!(cache.offset(), 0, "nothing was prefilled");
        // The last row is in: it answers, and the same on every run.
        let first = run(&m, &mut m.new_cache(), &[3, vocab - 1, 5], &opts);
        assert_eq!(first.tokens, run(&m, &mut m.new_cache(), &[3, vocab - 1, 5], &opts).tokens);
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
            |_, _| {
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
            |_, _| true,
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
        let g = generate(&m, &mut cache, &prompt, &opts, &mut greedy(), &FakeClock(Cell::new(0)), &cancel, |_, _| {
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
