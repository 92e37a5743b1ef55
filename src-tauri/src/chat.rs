//! One chat turn, for the app and `headroom chat` alike: the history comes
//! from the store, the router decides where the turn runs (the local model,
//! the cloud, or the cloud-answer cache), the run's events are forwarded as
//! `ChatEvent`s to whoever listens (the UI's `ipc::Channel`, stdout, a
//! closure in tests), and the turn is persisted as it goes by one
//! [`TurnRecorder`].
//!
//! A cached answer is stored like a cloud one (`route = cloud`); what marks
//! it is its stats' model id, `cache:<model>` (no schema change needed, and
//! the charts keep it apart from real cloud calls, whose rates it would
//! distort).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use headroom_cloud::{CancellationToken, ChatParams, CloudClient, CloudStats};
use headroom_core::cache_policy::{self, CacheSettings, SamplingKey};
use headroom_core::chat::{FinishReason, Message};
use headroom_core::pressure::PressureLevel;
use headroom_core::router::{Decision, Force, Target};
use headroom_core::settings::Settings;
use headroom_engine::worker::{EngineEvent, GenerateRequest, OverflowPolicy, RunId, TurnStats};
use headroom_engine::SamplingParams;
use headroom_store::cloud_cache::CachedAnswer;
use headroom_store::{MessageStatus, Route, Store, StoreError, TurnOutcome, TurnStart, TurnStatsRecord};
use serde::Serialize;

use crate::cloud_turn;
use crate::error::CommandError;
use crate::state::AppState;

/// The most the UI may ask for in one turn.
pub const MAX_TOKENS_LIMIT: usize = 32_768;

/// What the UI hears about a run, in order: `Started`, `Token`s, `Stats`,
/// `Finished`; or `Error`, which ends it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", content = "data", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum ChatEvent {
    Started {
        run_id: u64,
        prompt_tokens: usize,
        reused_tokens: usize,
        route: RouteInfo,
    },
    Token {
        text: String,
    },
    Stats {
        ttft_ms: Option<f64>,
        prefill_tps: Option<f64>,
        decode_tps: Option<f64>,
        e2e_tps: Option<f64>,
        prompt_tokens: usize,
        generated_tokens: usize,
        context_tokens: usize,
        batch: usize,
        peak_memory_bytes: usize,
        model: String,
    },
    Finished {
        reason: FinishReason,
    },
    Error {
        code: &'static str,
        message: String,
    },
}

impl ChatEvent {
    /// The `Stats` event for a turn's figures (local and cloud turns alike).
    pub(crate) fn stats(s: &TurnStats, model: &str) -> Self {
        Self::Stats {
            ttft_ms: s.rates.ttft_ms,
            prefill_tps: s.rates.prefill_tps,
            decode_tps: s.rates.decode_tps,
            e2e_tps: s.rates.e2e_tps,
            prompt_tokens: s.prompt_tokens,
            generated_tokens: s.generated_tokens,
            context_tokens: s.context_tokens,
            batch: s.batch,
            peak_memory_bytes: s.peak_memory_bytes,
            model: model.to_owned(),
        }
    }
}

/// Where an answer comes from, as the UI labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteTarget {
    Local,
    Cloud,
    /// The cloud's earlier answer to the same request, from this Mac's cache.
    Cached,
}

/// One reason for the route, as the router words it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteReason {
    pub code: &'static str,
    pub message: String,
}

/// Where a turn runs and why; sent with `Started`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteInfo {
    pub target: RouteTarget,
    /// The local model's id, or the cloud model (for a cached answer too).
    pub model_or_provider: String,
    pub reasons: Vec<RouteReason>,
}

/// The reason added to a cache hit's route.
pub const CACHED_REASON: &str = "CACHED";

impl RouteInfo {
    /// A turn nobody routed (`headroom chat --route local|cloud`).
    pub fn unexplained(target: RouteTarget, model: &str) -> Self {
        Self { target, model_or_provider: model.to_owned(), reasons: Vec::new() }
    }

    /// The router's decision, answered by `model` at `target`.
    pub fn of(decision: &Decision, target: RouteTarget, model: &str) -> Self {
        let mut reasons: Vec<RouteReason> =
            decision.reasons.iter().map(|r| RouteReason { code: r.code(), message: r.explain() }).collect();
        if target == RouteTarget::Cached {
            reasons.push(RouteReason {
                code: CACHED_REASON,
                message: format!(
                    "{model} answered this same request (same conversation and settings) before; \
                     this is that answer, from this Mac's cache, and nothing was sent."
                ),
            });
        }
        Self { target, model_or_provider: model.to_owned(), reasons }
    }
}

/// How a forwarded run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnd {
    pub text: String,
    /// `None` when the run failed (or the engine went away mid-run).
    pub reason: Option<FinishReason>,
    /// The turn's figures, if the engine got as far as sending them.
    pub stats: Option<TurnStats>,
    /// Why it failed, as the user was told.
    pub error: Option<String>,
}

/// Turns a run's engine events into `ChatEvent`s for `send` until the run
/// ends. `send` returns false once nobody listens; `on_gone` is then called
/// once (to cancel the run) and the rest is drained quietly. `on_text` sees
/// the whole answer so far after each new piece (the recorder saves it).
pub fn forward(
    run_id: RunId,
    events: &Receiver<EngineEvent>,
    model: &str,
    send: impl FnMut(ChatEvent) -> bool,
    on_gone: impl FnMut(),
    on_text: impl FnMut(&str),
) -> TurnEnd {
    forward_routed(run_id, events, &RouteInfo::unexplained(RouteTarget::Local, model), send, on_gone, on_text)
}

/// [`forward`] for a routed turn: `Started` carries `route`.
pub fn forward_routed(
    run_id: RunId,
    events: &Receiver<EngineEvent>,
    route: &RouteInfo,
    mut send: impl FnMut(ChatEvent) -> bool,
    mut on_gone: impl FnMut(),
    mut on_text: impl FnMut(&str),
) -> TurnEnd {
    let model = route.model_or_provider.as_str();
    let mut text = String::new();
    let mut stats = None;
    let mut listening = true;
    let mut emit = |event: ChatEvent| {
        if listening && !send(event) {
            listening = false;
            on_gone();
        }
    };
    for event in events {
        match event {
            EngineEvent::Started { prompt_tokens, reused_tokens } => {
                emit(ChatEvent::Started { run_id: run_id.0, prompt_tokens, reused_tokens, route: route.clone() });
            }
            EngineEvent::Token { text: piece, .. } | EngineEvent::Text(piece) => {
                if !piece.is_empty() {
                    text.push_str(&piece);
                    on_text(&text);
                    emit(ChatEvent::Token { text: piece });
                }
            }
            EngineEvent::Stats(s) => {
                emit(ChatEvent::stats(&s, model));
                stats = Some(s);
            }
            EngineEvent::Finished { reason } => {
                emit(ChatEvent::Finished { reason });
                return TurnEnd { text, reason: Some(reason), stats, error: None };
            }
            EngineEvent::Error(e) => {
                let e = CommandError::from(e);
                emit(ChatEvent::Error { code: e.code, message: e.message.clone() });
                return TurnEnd { text, reason: None, stats, error: Some(e.message) };
            }
        }
    }
    let e = CommandError::from(headroom_engine::EngineError::EngineStopped);
    emit(ChatEvent::Error { code: e.code, message: e.message.clone() });
    TurnEnd { text, reason: None, stats, error: Some(e.message) }
}

/// Runs a store call from a plain thread (the chat thread, a sync command,
/// the CLI) on Tauri's tokio runtime, which the CLI shares.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tauri::async_runtime::block_on(future)
}

/// How often, at most, the answer's text is written while it streams: a
/// killed process loses at most about this much of it.
pub const SAVE_EVERY: Duration = Duration::from_millis(500);

/// What a turn's stats are labelled with beyond the engine's own figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLabels {
    pub model_id: String,
    /// e.g. "4-bit, group 64"; `None` for an unquantized model.
    pub quantization: Option<String>,
    pub kv_dtype: String,
}

impl ModelLabels {
    /// Read from the model folder's `config.json` and safetensors headers
    /// (no tensor data, the one model-format reader); a label that cannot be
    /// read says "unknown".
    pub fn of(model_id: &str, dir: &Path) -> Self {
        let inspected =
            headroom_engine::inspect(dir, headroom_engine::ComputeDtype::Native, headroom_engine::QuantKernel::Fused);
        let quantization =
            inspected.as_ref().ok().and_then(|i| i.config.quantization.as_ref()).map(|q| q.default.label());
        // The engine keeps K/V in the activations' float type; only its width is known here.
        let kv_dtype = match inspected.map(|i| i.footprint.kv_bytes_per_element) {
            Ok(2) => "16-bit float".to_owned(),
            Ok(4) => "32-bit float".to_owned(),
            Ok(n) => format!("{}-bit", n * 8),
            Err(_) => "unknown".to_owned(),
        };
        Self { model_id: model_id.to_owned(), quantization, kv_dtype }
    }
}

/// The worst of two pressure readings; unknown only if both are.
fn worse(a: PressureLevel, b: PressureLevel) -> PressureLevel {
    match (a, b) {
        (PressureLevel::Unknown, x) | (x, PressureLevel::Unknown) => x,
        (x, y) => x.max(y),
    }
}

/// One turn's persistence, shared by the app and `headroom chat`: the user's
/// message is committed before generation starts, the answer is saved while
/// it streams (at most [`SAVE_EVERY`] behind), and the end (text, status,
/// stats) is committed in one transaction. A process killed mid-answer
/// leaves a `streaming` row that the next `Store::open` marks interrupted.
#[derive(Debug)]
pub struct TurnRecorder {
    store: Store,
    labels: ModelLabels,
    pub start: TurnStart,
    memory_before: Option<headroom_memory::MemoryReading>,
    last_save: Instant,
    saved_len: usize,
    /// The first failed save: reported at the end, not on every token.
    save_error: Option<StoreError>,
}

impl TurnRecorder {
    /// Commits the user's message (creating the session if new) and an
    /// empty `streaming` answer; `start.history` is what to send the model.
    pub fn begin(store: &Store, session: &str, user_text: &str, labels: ModelLabels) -> Result<Self, StoreError> {
        Self::begin_routed(store, session, user_text, labels, Route::Local)
    }

    /// [`Self::begin`] for a turn that `route` answers (the cloud turn runner).
    pub fn begin_routed(
        store: &Store,
        session: &str,
        user_text: &str,
        labels: ModelLabels,
        route: Route,
    ) -> Result<Self, StoreError> {
        let memory_before = headroom_memory::read().ok();
        let start = block_on(store.begin_turn(session, user_text, Some(&labels.model_id), route))?;
        Ok(Self {
            store: store.clone(),
            labels,
            start,
            memory_before,
            last_save: Instant::now(),
            saved_len: 0,
            save_error: None,
        })
    }

    /// The answer so far; written if the last write is [`SAVE_EVERY`] old.
    pub fn on_text(&mut self, text: &str) {
        if text.len() == self.saved_len || self.last_save.elapsed() < SAVE_EVERY {
            return;
        }
        self.last_save = Instant::now();
        match block_on(self.store.save_partial(self.start.assistant_message_id, text)) {
            Ok(()) => self.saved_len = text.len(),
            Err(e) => {
                tracing::warn!("could not save the answer so far: {e}");
                self.save_error.get_or_insert(e);
            }
        }
    }

    /// Commits the end: `complete` (stop/length), `interrupted` (cancelled)
    /// or `error`, with the stats and their labels.
    pub fn finish(self, end: &TurnEnd) -> Result<(), StoreError> {
        let status = match end.reason {
            Some(FinishReason::Cancelled) => MessageStatus::Interrupted,
            Some(FinishReason::Stop | FinishReason::Length) => MessageStatus::Complete,
            None => MessageStatus::Error,
        };
        let after = headroom_memory::read().ok();
        let stats = end.stats.as_ref().filter(|_| end.reason.is_some()).map(|s| {
            let pressure = match (&self.memory_before, &after) {
                (Some(b), Some(a)) => worse(b.pressure, a.pressure),
                (Some(r), None) | (None, Some(r)) => r.pressure,
                (None, None) => PressureLevel::Unknown,
            };
            let swap_delta_bytes = match (&self.memory_before, &after) {
                (Some(b), Some(a)) => {
                    i64::try_from(a.swap_used).ok().zip(i64::try_from(b.swap_used).ok()).map(|(a, b)| a - b)
                }
                _ => None,
            };
            stats_record(s, &self.labels, end.reason.unwrap_or(FinishReason::Stop), pressure, swap_delta_bytes)
        });
        let outcome = TurnOutcome { content: end.text.clone(), status, error: end.error.clone(), stats };
        block_on(self.store.finish_turn(self.start.assistant_message_id, &outcome))
    }

    /// Records a turn that failed before it started (the engine refused it).
    pub fn fail(self, error: &str) -> Result<(), StoreError> {
        let outcome = TurnOutcome {
            content: String::new(),
            status: MessageStatus::Error,
            error: Some(error.to_owned()),
            stats: None,
        };
        block_on(self.store.finish_turn(self.start.assistant_message_id, &outcome))
    }
}

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1e3)
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The engine's figures plus the labels, as stored.
pub fn stats_record(
    s: &TurnStats,
    labels: &ModelLabels,
    reason: FinishReason,
    pressure: PressureLevel,
    swap_delta_bytes: Option<i64>,
) -> TurnStatsRecord {
    TurnStatsRecord {
        model_id: labels.model_id.clone(),
        quantization: labels.quantization.clone(),
        kv_dtype: labels.kv_dtype.clone(),
        batch: count(s.batch),
        context_tokens: count(s.context_tokens),
        prompt_tokens: count(s.prompt_tokens),
        reused_tokens: count(s.reused_tokens),
        generated_tokens: count(s.generated_tokens),
        ttft_ms: s.rates.ttft_ms,
        prefill_tps: s.rates.prefill_tps,
        decode_tps: s.rates.decode_tps,
        e2e_tps: s.rates.e2e_tps,
        prefill_ms: s.timings.prefill.as_secs_f64() * 1e3,
        first_token_ms: ms(s.timings.first_token_at),
        last_token_ms: ms(s.timings.last_token_at),
        peak_memory_bytes: count(s.peak_memory_bytes),
        pressure,
        swap_delta_bytes,
        finish_reason: reason,
    }
}

/// What the user chose for one message, beyond its text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnOptions {
    /// Max new tokens; the settings' value when `None`.
    pub max_tokens: Option<usize>,
    /// Run here or in the cloud instead of where the router would send it.
    /// Forcing the cloud does not let sensitive content out.
    pub force: Option<Force>,
    /// The user lets this one message's sensitive content go to the cloud.
    pub allow_sensitive: bool,
}

/// Cloud run ids start here, so they never meet the engine's (which count
/// up from 1); still below 2^53, so JavaScript numbers hold them exactly.
const CLOUD_RUN_BASE: u64 = 1 << 52;

/// The cloud turns in flight, by run id, for `chat_cancel`.
fn cloud_runs() -> &'static Mutex<HashMap<u64, CancellationToken>> {
    static RUNS: std::sync::OnceLock<Mutex<HashMap<u64, CancellationToken>>> = std::sync::OnceLock::new();
    RUNS.get_or_init(Mutex::default)
}

fn next_cloud_run() -> RunId {
    static NEXT: AtomicU64 = AtomicU64::new(CLOUD_RUN_BASE);
    RunId(NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Stops the run `id`, local or cloud, after what is being computed or
/// received; false if it was already over.
pub fn cancel(state: &AppState, id: RunId) -> bool {
    if id.0 >= CLOUD_RUN_BASE {
        let runs = cloud_runs().lock().unwrap_or_else(PoisonError::into_inner);
        return runs.get(&id.0).is_some_and(|token| {
            token.cancel();
            true
        });
    }
    state.engine.cancel(id)
}

/// Starts a turn in `session`: the router decides where it runs (exactly as
/// the route preview shows), the user's message is committed, and the run's
/// id is returned at once; a thread forwards the events to `send` while the
/// recorder saves the answer, then commits the end. A turn the engine
/// refuses is stored as an error answer, so the history shows what happened.
/// A message that must stay local with nothing local to run it is refused
/// before anything is stored (the UI gives the text back).
pub fn start_turn(
    state: &AppState,
    session: &str,
    text: &str,
    options: TurnOptions,
    send: impl FnMut(ChatEvent) -> bool + Send + 'static,
) -> Result<RunId, CommandError> {
    if text.trim().is_empty() {
        return Err(CommandError::new("EMPTY_MESSAGE", "Type a message first."));
    }
    let settings = block_on(state.store.settings())?;
    let max_tokens = options.max_tokens.unwrap_or(settings.max_tokens);
    if max_tokens == 0 || max_tokens > MAX_TOKENS_LIMIT {
        return Err(CommandError::new(
            "INVALID_SETTING",
            format!("Max new tokens must be between 1 and {MAX_TOKENS_LIMIT}."),
        ));
    }
    if state.loaded_model().is_none() && settings.cloud_base_url.is_none() && options.force != Some(Force::Cloud) {
        // Nothing to route to: the plainest words for the first run.
        return Err(no_model());
    }
    let prior = block_on(state.store.history(session))?;
    let flags = (false, false, options.force, options.allow_sensitive);
    let decision = crate::commands::route::preview(state, &settings, text, flags, &prior)?;
    match &decision.target {
        Target::Local { .. } => start_local(state, session, text, max_tokens, &settings, &decision, send),
        Target::Cloud { .. } => start_cloud(state, session, text, max_tokens, &settings, &prior, decision, send),
    }
}

fn no_model() -> CommandError {
    CommandError::new("NO_MODEL_LOADED", "No model is loaded yet. Pick one from the list at the top.")
}

fn start_local(
    state: &AppState,
    session: &str,
    text: &str,
    max_tokens: usize,
    settings: &Settings,
    decision: &Decision,
    send: impl FnMut(ChatEvent) -> bool + Send + 'static,
) -> Result<RunId, CommandError> {
    // The preview routes only to the loaded model; it may have been unloaded since.
    let model = state.loaded_model().ok_or_else(no_model)?;
    let route = RouteInfo::of(decision, RouteTarget::Local, &model.id);
    let recorder = TurnRecorder::begin(&state.store, session, text, ModelLabels::of(&model.id, &model.path))?;
    let request = GenerateRequest {
        session: Some(session.to_owned()),
        max_tokens,
        // A long chat keeps going: the oldest turns make room.
        overflow: OverflowPolicy::TruncateOldest,
        sampling: SamplingParams {
            temperature: settings.temperature,
            top_p: settings.top_p,
            ..SamplingParams::default()
        },
        ..GenerateRequest::new(recorder.start.history.clone())
    };
    let run = match state.engine.generate(request) {
        Ok(run) => run,
        Err(e) => {
            let e = CommandError::from(e);
            if let Err(store) = recorder.fail(&e.message) {
                tracing::warn!("could not record the failed turn: {store}");
            }
            return Err(e);
        }
    };
    let id = run.id;
    let engine = state.engine.clone();
    let canceller = state.engine.clone();
    let spawned = std::thread::Builder::new().name(format!("headroom-chat-{}", id.0)).spawn(move || {
        let mut recorder = recorder;
        let end = forward_routed(
            id,
            &run.events,
            &route,
            send,
            || {
                canceller.cancel(id);
            },
            |so_far| recorder.on_text(so_far),
        );
        if let Err(e) = recorder.finish(&end) {
            tracing::error!("could not store the finished turn: {e}");
        }
    });
    if let Err(e) = spawned {
        engine.cancel(id);
        return Err(CommandError::new("ENGINE_INTERNAL", format!("Could not start the chat thread: {e}")));
    }
    Ok(id)
}

/// A cloud turn: answered from the cache when the same cacheable request
/// was answered before, else sent, streamed, stored, and cached if allowed.
#[allow(clippy::too_many_arguments)]
fn start_cloud(
    state: &AppState,
    session: &str,
    text: &str,
    max_tokens: usize,
    settings: &Settings,
    prior: &[Message],
    decision: Decision,
    send: impl FnMut(ChatEvent) -> bool + Send + 'static,
) -> Result<RunId, CommandError> {
    let config = cloud_turn::config(settings, &state.locations.data_dir)?;
    let model = config.model.clone();
    let max = u32::try_from(max_tokens).unwrap_or(u32::MAX);
    let params = ChatParams {
        max_tokens: Some(max),
        temperature: Some(settings.temperature),
        top_p: Some(settings.top_p),
        seed: None,
    };
    // The API has no top-k; 0 stands for "not used". The endpoint is part of
    // the model's name here: two providers may serve the same model id.
    let sampling =
        SamplingKey { temperature: settings.temperature, top_p: settings.top_p, top_k: 0, max_tokens: max, seed: None };
    let key = cache_policy::cache_key(
        text,
        &format!("{} {model}", config.base_url),
        &sampling,
        &cache_policy::history_hash(prior),
    );
    // An uncacheable request (sensitive, overridden) is never answered from
    // the cache either: the user asked for the cloud's answer to this one.
    let cacheable = cache_policy::cacheable(&decision);
    if cacheable {
        if let Some(hit) = block_on(state.store.cache_get(&key))? {
            let route = RouteInfo::of(&decision, RouteTarget::Cached, &model);
            let labels = cloud_turn::labels(&format!("cache:{model}"));
            let recorder = TurnRecorder::begin_routed(&state.store, session, text, labels, Route::Cloud)?;
            let id = next_cloud_run();
            spawn_turn(id, move || answer_from_cache(id, recorder, &hit, route, send))?;
            return Ok(id);
        }
    }
    let client = CloudClient::new(config)?;
    let route = RouteInfo::of(&decision, RouteTarget::Cloud, &model);
    let recorder = TurnRecorder::begin_routed(&state.store, session, text, cloud_turn::labels(&model), Route::Cloud)?;
    let id = next_cloud_run();
    let cancel = CancellationToken::new();
    cloud_runs().lock().unwrap_or_else(PoisonError::into_inner).insert(id.0, cancel.clone());
    let store = state.store.clone();
    let budget = CacheSettings { budget_bytes: settings.cloud_cache_mb.saturating_mul(1_000_000), ttl: None };
    let spawned = spawn_turn(id, move || {
        let mut send = send;
        let mut recorder = recorder;
        let history = recorder.start.history.clone();
        let end = cloud_turn::run_blocking(
            client,
            id.0,
            history,
            params,
            cancel,
            |event| match event {
                ChatEvent::Started { run_id, prompt_tokens, reused_tokens, .. } => send(ChatEvent::Started {
                    run_id: *run_id,
                    prompt_tokens: *prompt_tokens,
                    reused_tokens: *reused_tokens,
                    route: route.clone(),
                }),
                other => send(other.clone()),
            },
            |so_far| recorder.on_text(so_far),
        );
        cloud_runs().lock().unwrap_or_else(PoisonError::into_inner).remove(&id.0);
        // Cached before the end is committed: whoever sees the turn stored
        // can count on the cache (a cut or cancelled answer is not kept).
        if matches!(end.reason, Some(FinishReason::Stop | FinishReason::Length)) && cacheable {
            match block_on(store.cache_put(&decision, &key, &model, &end.text, &budget)) {
                Ok(outcome) => tracing::debug!("cloud answer cache: {outcome:?}"),
                Err(e) => tracing::warn!("could not cache the cloud answer: {e}"),
            }
        }
        if let Err(e) = recorder.finish(&end) {
            tracing::error!("could not store the finished turn: {e}");
        }
    });
    if let Err(e) = spawned {
        cloud_runs().lock().unwrap_or_else(PoisonError::into_inner).remove(&id.0);
        return Err(e);
    }
    Ok(id)
}

fn spawn_turn(id: RunId, body: impl FnOnce() + Send + 'static) -> Result<(), CommandError> {
    std::thread::Builder::new()
        .name(format!("headroom-chat-{}", id.0))
        .spawn(body)
        .map(drop)
        .map_err(|e| CommandError::new("ENGINE_INTERNAL", format!("Could not start the chat thread: {e}")))
}

/// Replays a cached answer in a local turn's shape: `Started` (route
/// cached), the text word by word, `Stats` (no tokens were spent: the
/// counts are 0 and the time is the lookup's), `Finished`.
fn answer_from_cache(
    id: RunId,
    recorder: TurnRecorder,
    hit: &CachedAnswer,
    route: RouteInfo,
    mut send: impl FnMut(ChatEvent) -> bool,
) {
    let began = Instant::now();
    let model = recorder.labels.model_id.clone();
    let mut listening = send(ChatEvent::Started { run_id: id.0, prompt_tokens: 0, reused_tokens: 0, route });
    let mut pieces = 0;
    for piece in hit.answer.split_inclusive(char::is_whitespace) {
        listening = listening && send(ChatEvent::Token { text: piece.to_owned() });
        pieces += 1;
    }
    let elapsed = Some(began.elapsed());
    let stats = cloud_turn::turn_stats(&CloudStats::new(None, elapsed, elapsed, pieces, 0));
    if listening && send(ChatEvent::stats(&stats, &model)) {
        send(ChatEvent::Finished { reason: FinishReason::Stop });
    }
    let end = TurnEnd { text: hit.answer.clone(), reason: Some(FinishReason::Stop), stats: Some(stats), error: None };
    if let Err(e) = recorder.finish(&end) {
        tracing::error!("could not store the cached answer: {e}");
    }
}

#[cfg(test)]
mod routing_tests;

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use headroom_core::chat::Role;
    use headroom_core::settings::Settings;

    use super::*;

    /// Greedy sampling, so a test's turns are the same on every run.
    fn greedy(state: &AppState) {
        block_on(state.store.set_settings(&Settings { temperature: 0.0, ..Settings::default() }))
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn events_serialize_tagged_and_camel_case() {
        let route = RouteInfo {
            target: RouteTarget::Cached,
            model_or_provider: "gpt-x".into(),
            reasons: vec![RouteReason { code: "CACHED", message: "m".into() }],
        };
        let v = serde_json::to_value(ChatEvent::Started { run_id: 3, prompt_tokens: 20, reused_tokens: 0, route })
            .unwrap_or_default();
        let route = serde_json::json!({"target":"cached","modelOrProvider":"gpt-x","reasons":[{"code":"CACHED","message":"m"}]});
        assert_eq!(
            v,
            serde_json::json!({"event":"started","data":{"runId":3,"promptTokens":20,"reusedTokens":0,"route":route}})
        );
        let v = serde_json::to_value(ChatEvent::Finished { reason: FinishReason::Cancelled }).unwrap_or_default();
        assert_eq!(v, serde_json::json!({"event":"finished","data":{"reason":"cancelled"}}));
    }

    #[test]
    fn forward_maps_every_engine_event_and_stops_sending_when_nobody_listens() {
        let (tx, rx) = mpsc::channel();
        let timings = headroom_core::stats::TurnTimings {
            prompt_tokens: 20,
            prefill: Duration::from_millis(10),
            generated_tokens: 2,
            first_token_at: Some(Duration::from_millis(20)),
            last_token_at: Some(Duration::from_millis(30)),
        };
        let stats = TurnStats {
            prompt_tokens: 20,
            reused_tokens: 4,
            generated_tokens: 2,
            context_tokens: 20,
            batch: 1,
            rates: timings.rates(),
            timings,
            peak_memory_bytes: 1,
        };
        for e in [
            EngineEvent::Started { prompt_tokens: 20, reused_tokens: 4 },
            EngineEvent::Token { id: 1, text: "Hel".into() },
            EngineEvent::Token { id: 2, text: String::new() },
            EngineEvent::Text("lo".into()),
            EngineEvent::Stats(stats),
            EngineEvent::Finished { reason: FinishReason::Length },
        ] {
            tx.send(e).unwrap_or_else(|e| panic!("{e}"));
        }
        let mut got = Vec::new();
        let mut seen = Vec::new();
        let end = forward(
            RunId(7),
            &rx,
            "demo",
            |e| {
                got.push(e);
                true
            },
            || panic!("still listening"),
            |t| seen.push(t.to_owned()),
        );
        assert_eq!((end.text.as_str(), end.reason, end.error), ("Hello", Some(FinishReason::Length), None));
        assert_eq!(end.stats.map(|s| s.reused_tokens), Some(4));
        assert_eq!(seen, ["Hel", "Hello"], "the recorder sees the whole answer so far");
        assert_eq!(got.len(), 5, "{got:?}"); // the empty token is not sent
        assert_eq!(
            got[0],
            ChatEvent::Started {
                run_id: 7,
                prompt_tokens: 20,
                reused_tokens: 4,
                route: RouteInfo::unexplained(RouteTarget::Local, "demo")
            }
        );
        assert!(matches!(&got[3], ChatEvent::Stats { generated_tokens: 2, batch: 1, model, .. } if model == "demo"));

        let (tx, rx) = mpsc::channel();
        tx.send(EngineEvent::Token { id: 1, text: "a".into() }).unwrap_or_else(|e| panic!("{e}"));
        tx.send(EngineEvent::Error(headroom_engine::EngineError::NoModelLoaded)).unwrap_or_else(|e| panic!("{e}"));
        let mut gone = 0;
        let end = forward(RunId(1), &rx, "demo", |_| false, || gone += 1, |_| {});
        assert_eq!((end.reason, gone, end.text.as_str()), (None, 1, "a"));
        assert!(end.error.is_some_and(|e| e.to_lowercase().contains("no model")), "the failure is kept for the store");

        let (tx, rx) = mpsc::channel::<EngineEvent>();
        drop(tx);
        let mut got = Vec::new();
        forward(
            RunId(2),
            &rx,
            "demo",
            |e| {
                got.push(e);
                true
            },
            || {},
            |_| {},
        );
        assert!(matches!(&got[..], [ChatEvent::Error { code: "ENGINE_INTERNAL", .. }]), "{got:?}");
    }

    fn max(n: usize) -> TurnOptions {
        TurnOptions { max_tokens: Some(n), ..TurnOptions::default() }
    }

    /// The session's messages once the turn's end is committed (also used by
    /// the routing tests).
    pub(super) fn wait_for_status(state: &AppState, session: &str, n: usize) -> Vec<headroom_store::StoredMessage> {
        // The thread commits the end right after the last event.
        for _ in 0..200 {
            let msgs = block_on(state.store.messages(session)).unwrap_or_default();
            if msgs.len() == n && msgs.iter().all(|m| m.status != MessageStatus::Streaming) {
                return msgs;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the turn was not committed: {:?}", block_on(state.store.messages(session)));
    }

    #[test]
    fn a_turn_streams_from_the_demo_model_and_is_persisted_with_its_stats() {
        let state = crate::test_state("turn");
        greedy(&state);
        crate::models::ensure_demo_model(&state).unwrap_or_else(|e| panic!("{e:?}"));
        let (tx, rx) = mpsc::channel();
        let id =
            start_turn(&state, "s1", "hello", max(5), move |e| tx.send(e).is_ok()).unwrap_or_else(|e| panic!("{e:?}"));
        let events: Vec<ChatEvent> = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(60)).ok()).collect();
        assert!(matches!(events.first(), Some(ChatEvent::Started { run_id, .. }) if *run_id == id.0), "{events:?}");
        assert!(matches!(events.last(), Some(ChatEvent::Finished { .. })), "{events:?}");
        assert!(events
            .iter()
            .any(|e| matches!(e, ChatEvent::Stats { model, .. } if model == crate::models::DEMO_MODEL_ID)));
        let streamed: String = events
            .iter()
            .filter_map(|e| match e {
                ChatEvent::Token { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let msgs = wait_for_status(&state, "s1", 2);
        assert_eq!(msgs.iter().map(|m| m.role).collect::<Vec<_>>(), [Role::User, Role::Assistant]);
        assert_eq!((msgs[0].content.as_str(), msgs[1].content.as_str()), ("hello", streamed.as_str()));
        assert_eq!(msgs[1].status, MessageStatus::Complete);
        let stats = msgs[1].stats.clone().unwrap_or_else(|| panic!("no stats: {msgs:?}"));
        assert_eq!(
            (stats.model_id.as_str(), stats.batch, stats.quantization.as_deref()),
            (crate::models::DEMO_MODEL_ID, 1, Some("4-bit, group 64"))
        );
        assert!(stats.generated_tokens <= 5 && stats.prompt_tokens > 0, "{stats:?}");
        let first_prompt = stats.prompt_tokens;

        // A second turn in the same session sees the whole conversation.
        let (tx, rx) = mpsc::channel();
        start_turn(&state, "s1", "more", max(5), move |e| tx.send(e).is_ok()).unwrap_or_else(|e| panic!("{e:?}"));
        let events: Vec<ChatEvent> = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(60)).ok()).collect();
        assert!(matches!(events.last(), Some(ChatEvent::Finished { .. })), "second turn: {events:?}");
        let msgs = wait_for_status(&state, "s1", 4);
        let second = msgs[3].stats.clone().unwrap_or_else(|| panic!("no stats: {msgs:?}"));
        assert!(second.prompt_tokens > first_prompt, "{} then {}", first_prompt, second.prompt_tokens);

        let err = start_turn(&state, "s1", " \n", TurnOptions::default(), |_| true).err();
        assert_eq!(err.map(|e| e.code), Some("EMPTY_MESSAGE"));
        let err = start_turn(&state, "s1", "hi", max(0), |_| true).err();
        assert_eq!(err.map(|e| e.code), Some("INVALID_SETTING"));
        assert_eq!(block_on(state.store.messages("s1")).map(|m| m.len()).ok(), Some(4), "refused turns store nothing");
    }

    #[test]
    fn a_cancelled_turn_is_stored_interrupted_with_what_arrived() {
        let state = crate::test_state("cancel");
        greedy(&state);
        crate::models::ensure_demo_model(&state).unwrap_or_else(|e| panic!("{e:?}"));
        let (tx, rx) = mpsc::channel();
        let engine = state.engine.clone();
        let id = std::sync::Arc::new(std::sync::Mutex::new(None::<RunId>));
        let id2 = std::sync::Arc::clone(&id);
        let run = start_turn(&state, "c", "count to a thousand", max(4000), move |e| {
            // Stop after a few tokens, as the UI's Stop button does.
            if matches!(e, ChatEvent::Token { .. }) {
                if let Some(id) = *id2.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
                    engine.cancel(id);
                }
            }
            tx.send(e).is_ok()
        })
        .unwrap_or_else(|e| panic!("{e:?}"));
        *id.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(run);
        let events: Vec<ChatEvent> = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(60)).ok()).collect();
        assert!(events.contains(&ChatEvent::Finished { reason: FinishReason::Cancelled }), "{events:?}");
        let msgs = wait_for_status(&state, "c", 2);
        assert_eq!(msgs[1].status, MessageStatus::Interrupted);
        assert_eq!(msgs[1].stats.as_ref().map(|s| s.finish_reason), Some(FinishReason::Cancelled));
        assert!(msgs[1].stats.as_ref().is_some_and(|s| s.generated_tokens < 4000));
    }

    #[test]
    fn pressure_labels_keep_the_worst_known_level() {
        use PressureLevel::*;
        assert_eq!(worse(Normal, Critical), Critical);
        assert_eq!(worse(Warning, Normal), Warning);
        assert_eq!(worse(Unknown, Warning), Warning);
        assert_eq!(worse(Normal, Unknown), Normal);
        assert_eq!(worse(Unknown, Unknown), Unknown);
    }
}
