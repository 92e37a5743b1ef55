//! The engine thread and its handle. One thread owns the loaded model, its
//! tokenizer and the per-session KV caches (MLX arrays are `Send`, not
//! `Sync`, so they must stay on one thread); everyone else talks to it
//! through a cloneable [`EngineHandle`] and gets each run's events on a
//! channel of its own.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use headroom_core::chat::{FinishReason, Message, Role};
use headroom_core::kv::KvFormat;
use headroom_core::stats::{Rates, TurnTimings};

use crate::backend::backend_info;
use crate::cache::KvCache;
use crate::config::read_config;
use crate::dtype::{dtype_name, short_dtype_name};
use crate::error::{EngineError, MlxContext, Result};
use crate::generate::{generate, GenerateOptions, Generation, WallClock};
use crate::inspect::check_vocab_rows;
use crate::loader::{materialize, stage};
use crate::meter::{MeasuredKind, PeakMeasurement, SharedMeter};
use crate::mlx_memory::{mlx_memory, MlxMemory};
use crate::models::{check_kv_format, Model};
use crate::prompt_cache::disk::{model_fingerprint, DiskTier, Part};
use crate::prompt_cache::{Entry, PromptCache, PromptCacheStats, Reuse};
use crate::quant::QuantKernel;
use crate::sampler::{Sampler, SamplingParams};
use crate::source::ModelFiles;
use crate::tokenizer::Tokenizer;
use crate::weights::ComputeDtype;

/// The context limit when the caller sets none: what the fit verdict assumes.
pub const DEFAULT_CONTEXT_LIMIT: usize = 8192;

/// How a model is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadSettings {
    pub dtype: ComputeDtype,
    /// How quantized matrices multiply; the default suits this process's device.
    pub kernel: QuantKernel,
    /// Most positions a session's cache may hold (prompt + generated). The
    /// fit verdict was computed at this length, so the engine enforces it.
    pub context_limit: usize,
    /// Most bytes MLX may keep in its buffer cache (freed buffers kept for
    /// reuse) while this model is loaded: the caller's budget minus the
    /// predicted peak, so a long chat cannot grow the cache into swap
    /// (`headroom_core::fit::buffer_cache_limit`). `None`: MLX's default
    /// (its memory limit).
    pub cache_limit_bytes: Option<usize>,
    /// How sessions' KV caches store keys and values unless a request asks
    /// otherwise (the fit verdict was computed for this format).
    pub kv: KvFormat,
    /// MLX's wired limit while this model is loaded (Metal only;
    /// `headroom_core::fit::wired_limit` decides it). Applied only where MLX
    /// computes on the GPU, and never above the GPU's recommended working
    /// set: MLX refuses that and the process exits. `None`: nothing wired.
    pub wired_limit_bytes: Option<usize>,
    /// Bytes the prompt cache may keep besides the latest request's state
    /// (`headroom_core::fit::prompt_cache_limit`: out of what the verdict
    /// left over). 0 keeps only the latest.
    pub prompt_cache_bytes: usize,
}

impl Default for LoadSettings {
    fn default() -> Self {
        Self {
            dtype: ComputeDtype::Native,
            kernel: QuantKernel::for_device(backend_info().device),
            context_limit: DEFAULT_CONTEXT_LIMIT,
            cache_limit_bytes: None,
            kv: KvFormat::Float,
            wired_limit_bytes: None,
            prompt_cache_bytes: 0,
        }
    }
}

/// What unloading a model gave back, measured on the engine thread from
/// MLX's counters (active + cache) before dropping the model and after
/// clearing MLX's buffer cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UnloadReport {
    /// Whether a model was loaded.
    pub had_model: bool,
    /// Dropping the model and sessions and clearing MLX's cache.
    pub unload_time: Duration,
    /// MLX's active + cache bytes before minus after (0 if it grew:
    /// another thread of the process may allocate meanwhile).
    pub freed_bytes: u64,
    /// What the dropped arrays held: the weights plus every session's KV
    /// cache (their `nbytes`). MLX's active memory must fall by this much.
    pub expected_bytes: u64,
    /// Whether MLX's active memory fell by `expected_bytes` (within
    /// [`RETURN_TOLERANCE_BYTES`]): nothing still holds the old model, so the
    /// next one does not land on top of it.
    pub memory_returned: bool,
    pub before: MlxMemory,
    pub after: MlxMemory,
}

/// Slack for [`UnloadReport::memory_returned`]. MLX's counter is exact for
/// its own buffers and the worker holds no others, so the only error is what
/// other threads of the process allocate in the milliseconds between the two
/// readings (a test binary runs many engines at once); 16 MiB covers that
/// and is nothing next to the gigabytes the guard decides about.
pub const RETURN_TOLERANCE_BYTES: u64 = 16 << 20;

/// Whether active memory going from `before` to `after` gave back `expected` bytes.
pub fn memory_returned(before_active: u64, after_active: u64, expected: u64) -> bool {
    before_active.saturating_sub(after_active).saturating_add(RETURN_TOLERANCE_BYTES) >= expected
}

/// What dropping every session's KV cache gave back (the model stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionsDropped {
    /// How many sessions had a cache.
    pub sessions: usize,
    /// What their caches held (`nbytes`).
    pub cache_bytes: u64,
    /// MLX's active + cache bytes before minus after clearing the buffer cache.
    pub freed_bytes: u64,
    /// Chats' states written to disk first (their next turn reads them back).
    pub saved_to_disk: usize,
}

/// What writing chats' KV states to disk did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SavedSessions {
    /// States written, and their bytes.
    pub saved: usize,
    pub bytes: u64,
    /// States that could not be written (counted in the cache's stats too).
    pub failed: usize,
}

impl UnloadReport {
    /// Ok if the old model's memory is back (or there was none), else
    /// [`EngineError::MemoryNotReturned`]: loading now would stack two models.
    pub fn confirm(&self) -> Result<()> {
        if !self.had_model || self.memory_returned {
            return Ok(());
        }
        Err(EngineError::MemoryNotReturned {
            expected_bytes: self.expected_bytes,
            returned_bytes: self.before.active.saturating_sub(self.after.active),
        })
    }
}

/// What was loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    pub dir: PathBuf,
    /// config.json's `model_type`.
    pub model_type: String,
    /// `(bits, group_size)` of the default quantization; `None` if unquantized.
    pub quantization: Option<(i32, i32)>,
    /// The stats label for it ("4-bit, group 64"); `None` if unquantized.
    pub quantization_label: Option<String>,
    /// How quantized matrices multiply; `None` if unquantized.
    pub quant_kernel: Option<QuantKernel>,
    /// The KV cache's (and activations') element type, as MLX names it ("bfloat16", "float32").
    pub kv_dtype: &'static str,
    /// How sessions' KV caches store keys and values (as asked in [`LoadSettings`]).
    pub kv_format: KvFormat,
    /// That format in words: "bf16", "8-bit (group 64) from 5000 tokens".
    pub kv_label: String,
    /// Bytes of all weights as loaded.
    pub weight_bytes: usize,
    pub context_limit: usize,
    pub eos_ids: Vec<u32>,
    /// Time to check the files and read the weights and the tokenizer,
    /// the unload excluded (separate from any turn's TTFT).
    pub load_time: Duration,
    /// Unloading the model this load replaced (`had_model` false if none).
    pub replaced: UnloadReport,
    /// The buffer-cache limit set for this model, as asked in [`LoadSettings`].
    pub cache_limit_bytes: Option<usize>,
    /// The wired limit set for this model (`None`: none, e.g. off Metal).
    pub wired_limit_bytes: Option<usize>,
    /// What a saved KV state must have been computed with to be used for
    /// this model as loaded (prompt_cache/disk.rs).
    pub fingerprint: String,
}

/// What to do with a prompt longer than the context limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverflowPolicy {
    /// Refuse it with [`EngineError::ContextOverflow`].
    #[default]
    Error,
    /// Drop the oldest messages after the system prompt (never the last
    /// one) until it fits; still an error if the last message alone is too long.
    TruncateOldest,
}

/// One turn to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    /// Turns of one session share a KV cache, so a follow-up prefills only
    /// its new tokens. `None`: a one-off run with a cache of its own.
    pub session: Option<String>,
    /// The whole conversation so far, ending with the user's new message.
    pub messages: Vec<Message>,
    pub sampling: SamplingParams,
    pub max_tokens: usize,
    pub overflow: OverflowPolicy,
    /// Keep generating through EOS tokens: benchmarks and parity checks need
    /// a fixed number of tokens from models that may stop at once.
    pub ignore_eos: bool,
    /// How this turn's KV cache stores keys and values; `None`: the load's.
    /// A session whose cache has another format starts a fresh cache.
    pub kv: Option<KvFormat>,
    /// The most bytes the prompt cache may keep (besides this request's
    /// state) while this request runs: the room the caller's fit check
    /// found now; `None`: the load's allowance.
    pub prompt_cache_room: Option<usize>,
}

impl GenerateRequest {
    /// A one-off greedy request for `messages`, 256 tokens at most.
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            session: None,
            messages,
            sampling: SamplingParams::default(),
            max_tokens: 256,
            overflow: OverflowPolicy::Error,
            ignore_eos: false,
            kv: None,
            prompt_cache_room: None,
        }
    }
}

/// Identifies a run, for [`EngineHandle::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(pub u64);

/// The measured figures of one turn, with the labels they need.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnStats {
    /// Tokens of the whole templated conversation.
    pub prompt_tokens: usize,
    /// Of those, how many were already cached and not prefilled again.
    pub reused_tokens: usize,
    /// Where those came from (the prompt cache in memory, or on disk).
    pub reused_from: Reuse,
    /// Tokens generated (EOS excluded).
    pub generated_tokens: usize,
    /// Positions in context when generation started (= `prompt_tokens`).
    pub context_tokens: usize,
    /// Sequences decoded together; always 1 here.
    pub batch: usize,
    pub timings: TurnTimings,
    /// Computed once, by `headroom_core::stats`.
    pub rates: Rates,
    /// MLX's peak allocation during the turn (weights included), bytes.
    pub peak_memory_bytes: usize,
    /// What the KV cache was at the end of the turn: "bf16",
    /// "8-bit (group 64)", or "bf16 (8-bit from 5000 tokens)" before its conversion.
    pub kv_label: String,
}

/// What a run reports, in this order: `Started`, `Token`s (and possibly one
/// `Text`), `Stats`, `Finished`; or `Error` at any point, which ends the run.
#[derive(Debug)]
pub enum EngineEvent {
    Started {
        prompt_tokens: usize,
        reused_tokens: usize,
    },
    /// `text` is empty while a character is split across tokens.
    Token {
        id: u32,
        text: String,
    },
    /// Text not tied to a new token: a character left unfinished at the end.
    Text(String),
    Stats(TurnStats),
    Finished {
        reason: FinishReason,
    },
    Error(EngineError),
}

/// A run's id and its event stream. The stream ends after `Finished` or `Error`.
#[derive(Debug)]
pub struct Run {
    pub id: RunId,
    pub events: Receiver<EngineEvent>,
}

/// Everything a run produced, gathered (for the CLI's `--json`, and tests).
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutput {
    pub text: String,
    pub token_ids: Vec<u32>,
    pub finish_reason: FinishReason,
    pub stats: TurnStats,
}

impl Run {
    /// Blocks until the run ends. `on_event` sees every event first.
    pub fn collect_with(self, mut on_event: impl FnMut(&EngineEvent)) -> Result<RunOutput> {
        let (mut text, mut token_ids, mut stats) = (String::new(), Vec::new(), None);
        for event in self.events.iter() {
            on_event(&event);
            match event {
                EngineEvent::Started { .. } => {}
                EngineEvent::Token { id, text: t } => {
                    token_ids.push(id);
                    text.push_str(&t);
                }
                EngineEvent::Text(t) => text.push_str(&t),
                EngineEvent::Stats(s) => stats = Some(s),
                EngineEvent::Finished { reason } => {
                    // A run cancelled before it started has no stats.
                    let stats = stats.unwrap_or_else(|| empty_stats(token_ids.len()));
                    return Ok(RunOutput { text, token_ids, finish_reason: reason, stats });
                }
                EngineEvent::Error(e) => return Err(e),
            }
        }
        Err(EngineError::EngineStopped)
    }

    pub fn collect(self) -> Result<RunOutput> {
        self.collect_with(|_| {})
    }
}

fn empty_stats(generated: usize) -> TurnStats {
    let timings = TurnTimings {
        prompt_tokens: 0,
        prefill: Duration::ZERO,
        generated_tokens: u32::try_from(generated).unwrap_or(u32::MAX),
        first_token_at: None,
        last_token_at: None,
    };
    TurnStats {
        prompt_tokens: 0,
        reused_tokens: 0,
        reused_from: Reuse::None,
        generated_tokens: generated,
        context_tokens: 0,
        batch: 1,
        rates: timings.rates(),
        timings,
        peak_memory_bytes: 0,
        kv_label: String::new(),
    }
}

/// A [`Job::WithModel`] body: the loaded model (if any), how it was
/// loaded, and the engine's meter for the turns it runs.
type ModelJob = Box<dyn FnOnce(Option<&Model>, &LoadSettings, &Metering<'_>) + Send>;

/// Measures what a [`Job::WithModel`] body runs the way the engine measures
/// its own turns (`crate::meter`): the benchmark's passes are turns of the
/// model's context curve too, and a fill to a depth is a whole prefill.
pub(crate) struct Metering<'a> {
    worker: &'a Worker,
}

impl Metering<'_> {
    /// Starts a measurement: MLX's peak and the process's, from now.
    pub(crate) fn start(&self) -> Result<()> {
        self.worker.start_measuring().map(drop)
    }

    /// Ends it: hands the meter (if any) the turn that generated
    /// `generation` after `prompt`, with the cache in `kv`, and returns
    /// MLX's peak since [`Self::start`].
    pub(crate) fn finish_turn(&self, kv: KvFormat, prompt: &[u32], generation: &Generation) -> Result<usize> {
        self.worker.record_turn(kv, prompt, generation)
    }
}

/// Called on the engine thread right after a load unloaded the previous
/// model (the app reads the process's memory there).
pub type AfterUnload = Box<dyn FnOnce(&UnloadReport) + Send>;

enum Job {
    Load {
        dir: PathBuf,
        settings: LoadSettings,
        after_unload: Option<AfterUnload>,
        reply: Sender<Result<ModelInfo>>,
    },
    Unload {
        reply: Sender<Result<UnloadReport>>,
    },
    Generate {
        id: RunId,
        request: Box<GenerateRequest>,
        accepted: Instant,
        events: Sender<EngineEvent>,
    },
    DropSession {
        session: String,
    },
    DropSessions {
        reply: Sender<Result<SessionsDropped>>,
    },
    /// Where chats' KV states are kept on disk (`None`: nowhere).
    SetDiskTier(Option<DiskTier>),
    /// What measures loads and turns from now on (`None`: nothing).
    SetMeter(Option<SharedMeter>),
    /// Writes chats' states unused for `idle` that the disk lacks.
    SaveSessions {
        idle: Duration,
        reply: Sender<SavedSessions>,
    },
    PromptCacheStats {
        reply: Sender<PromptCacheStats>,
    },
    /// Work that needs the loaded model but is not a chat turn (the benchmark).
    WithModel(ModelJob),
    /// Drop everything and end the thread.
    Stop,
}

/// State shared by all clones of a handle.
#[derive(Debug, Default)]
struct Shared {
    next_run: AtomicU64,
    /// Cancel flags of runs queued or running; the worker removes finished ones.
    cancels: Mutex<HashMap<RunId, Arc<AtomicBool>>>,
}

impl Shared {
    fn flag(&self, id: RunId) -> Option<Arc<AtomicBool>> {
        self.cancels.lock().unwrap_or_else(PoisonError::into_inner).get(&id).cloned()
    }

    fn forget(&self, id: RunId) {
        self.cancels.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
    }
}

/// Owns the engine thread: when the last handle goes, the thread is told to
/// stop and joined, so the model's MLX buffers are freed before the drop
/// returns. A thread still freeing arrays while the process exits races
/// MLX's allocator teardown in the exit handlers and corrupts the heap (seen
/// as `malloc_consolidate(): unaligned fastbin chunk` at the end of a CLI run).
#[derive(Debug)]
struct Owner {
    jobs: Sender<Job>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Owner {
    fn stop_and_join(&self) {
        let _ = self.jobs.send(Job::Stop);
        let thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// A cheap, cloneable handle to the engine thread. The thread ends when the
/// last handle is dropped (after finishing the jobs already queued) or on
/// [`EngineHandle::shutdown`].
#[derive(Debug, Clone)]
pub struct EngineHandle {
    owner: Arc<Owner>,
    shared: Arc<Shared>,
}

impl EngineHandle {
    /// Starts the engine thread (no model loaded).
    pub fn spawn() -> Result<Self> {
        let (jobs, rx) = mpsc::channel();
        let shared = Arc::new(Shared::default());
        let worker = Worker {
            shared: Arc::clone(&shared),
            loaded: None,
            prompts: PromptCache::default(),
            disk: None,
            default_cache_limit: None,
            wired: None,
            meter: None,
        };
        let thread = std::thread::Builder::new()
            .name("headroom-engine".into())
            .spawn(move || worker.run(&rx))
            .map_err(|source| EngineError::Io { path: PathBuf::from("<engine thread>"), source })?;
        Ok(Self { owner: Arc::new(Owner { jobs, thread: Mutex::new(Some(thread)) }), shared })
    }

    /// Loads the model in `dir`, replacing the current one. Everything that
    /// can be checked without reading the weights (config, headers, every
    /// tensor's shape and dtype, the tokenizer against the embedding, the
    /// chat template) is checked first: a broken folder fails with the old
    /// model still loaded. Then the old model is dropped, so two models never
    /// share memory, and the weights are read. A failure after that point is
    /// [`EngineError::NothingLoaded`]. Blocks until done.
    pub fn load(&self, dir: &Path, settings: LoadSettings) -> Result<ModelInfo> {
        self.load_observed(dir, settings, None)
    }

    /// [`Self::load`], calling `after_unload` on the engine thread once the
    /// previous model is gone and before the new weights are read.
    pub fn load_observed(
        &self,
        dir: &Path,
        settings: LoadSettings,
        after_unload: Option<AfterUnload>,
    ) -> Result<ModelInfo> {
        let (reply, rx) = mpsc::channel();
        self.send(Job::Load { dir: dir.to_owned(), settings, after_unload, reply })?;
        rx.recv().map_err(|_| EngineError::EngineStopped)?
    }

    /// Drops the model and every session cache, clears MLX's buffer cache
    /// and says how much memory came back and how long it took.
    pub fn unload(&self) -> Result<UnloadReport> {
        let (reply, rx) = mpsc::channel();
        self.send(Job::Unload { reply })?;
        rx.recv().map_err(|_| EngineError::EngineStopped)?
    }

    /// Queues a turn and returns at once; the events arrive on the run's channel.
    pub fn generate(&self, request: GenerateRequest) -> Result<Run> {
        let accepted = Instant::now();
        let id = RunId(self.shared.next_run.fetch_add(1, Ordering::Relaxed));
        self.shared.cancels.lock().unwrap_or_else(PoisonError::into_inner).insert(id, Arc::new(AtomicBool::new(false)));
        let (events, rx) = mpsc::channel();
        if let Err(e) = self.send(Job::Generate { id, request: Box::new(request), accepted, events }) {
            self.shared.forget(id);
            return Err(e);
        }
        Ok(Run { id, events: rx })
    }

    /// Stops a run after the token being computed (or before it starts).
    /// Returns false if the run is unknown or already over.
    pub fn cancel(&self, run: RunId) -> bool {
        match self.shared.flag(run) {
            Some(flag) => {
                flag.store(true, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Frees a session's KV cache (the chat was closed or deleted).
    pub fn drop_session(&self, session: &str) -> Result<()> {
        self.send(Job::DropSession { session: session.to_owned() })
    }

    /// Frees every session's KV cache and MLX's buffer cache, keeping the
    /// model: the cheap step when memory is tight (`core::away`). The next
    /// turn of each chat prefills its prompt again. Blocks until done.
    pub fn drop_sessions(&self) -> Result<SessionsDropped> {
        let (reply, rx) = mpsc::channel();
        self.send(Job::DropSessions { reply })?;
        rx.recv().map_err(|_| EngineError::EngineStopped)?
    }

    /// Keeps chats' KV states in `tier` from now on (`None`: in memory
    /// only). The app's data folder has one; each state is for one model
    /// as loaded, so switching models and back finds it again.
    pub fn set_disk_tier(&self, tier: Option<DiskTier>) -> Result<()> {
        self.send(Job::SetDiskTier(tier))
    }

    /// Measures every load and turn from now on with `meter` and hands it
    /// what was measured (`crate::meter`); `None` stops.
    pub fn set_meter(&self, meter: Option<SharedMeter>) -> Result<()> {
        self.send(Job::SetMeter(meter))
    }

    /// Writes every chat's KV state that has been unused for `idle` and is
    /// not on disk as it is now (the app at idle and at quit, `headroom
    /// chat` at its end). Blocks until done.
    pub fn save_sessions(&self, idle: Duration) -> Result<SavedSessions> {
        let (reply, rx) = mpsc::channel();
        self.send(Job::SaveSessions { idle, reply })?;
        rx.recv().map_err(|_| EngineError::EngineStopped)
    }

    /// What the prompt cache holds and how well it served (Settings).
    pub fn prompt_cache_stats(&self) -> Result<PromptCacheStats> {
        let (reply, rx) = mpsc::channel();
        self.send(Job::PromptCacheStats { reply })?;
        rx.recv().map_err(|_| EngineError::EngineStopped)
    }

    /// Runs `job` on the engine thread with the loaded model (`None` if none)
    /// and its context limit, between other jobs; returns at once. For the
    /// benchmark (bench.rs), which drives `generate` itself on a cache of its own.
    pub(crate) fn with_model(
        &self,
        job: impl FnOnce(Option<&Model>, &LoadSettings, &Metering<'_>) + Send + 'static,
    ) -> Result<()> {
        self.send(Job::WithModel(Box::new(job)))
    }

    /// Frees the model and ends the engine thread, waiting for both; later
    /// calls on any clone get `EngineStopped`. For a process about to exit
    /// without dropping its handles (the app's Quit).
    pub fn shutdown(&self) {
        self.cancel_all();
        self.owner.stop_and_join();
    }

    /// Stops every run queued or running, after the token being computed
    /// (what a quit does first, so the jobs after them come soon).
    pub fn cancel_all(&self) {
        for flag in self.shared.cancels.lock().unwrap_or_else(PoisonError::into_inner).values() {
            flag.store(true, Ordering::Relaxed);
        }
    }

    fn send(&self, job: Job) -> Result<()> {
        self.owner.jobs.send(job).map_err(|_| EngineError::EngineStopped)
    }
}

struct Loaded {
    model: Model,
    tokenizer: Tokenizer,
    settings: LoadSettings,
    /// prompt_cache/disk.rs's `model_fingerprint`.
    fingerprint: String,
    /// What the process held before these weights were read (the meter's
    /// reading): a measurement's resident growth is counted from it.
    resident_before: Option<u64>,
}

/// The thread's state; it never leaves the thread.
struct Worker {
    shared: Arc<Shared>,
    loaded: Option<Loaded>,
    /// Every request's KV state worth keeping (prompt_cache.rs).
    prompts: PromptCache,
    /// Where chats' states go on disk, if anywhere.
    disk: Option<DiskTier>,
    /// MLX's cache limit before the first model set one, to restore for a
    /// model loaded without a limit.
    default_cache_limit: Option<usize>,
    /// The wired limit this thread set (and must take back at the unload).
    wired: Option<usize>,
    /// Measures loads and turns, if the app gave one.
    meter: Option<SharedMeter>,
}

impl Worker {
    fn run(mut self, jobs: &Receiver<Job>) {
        for job in jobs.iter() {
            match job {
                Job::Load { dir, settings, after_unload, reply } => {
                    let _ = reply.send(self.load(&dir, settings, after_unload));
                }
                Job::Unload { reply } => {
                    let _ = reply.send(self.unload());
                }
                Job::DropSession { session } => {
                    self.prompts.remove_session(&session);
                    if let Some(disk) = &self.disk {
                        if disk.delete(&session).is_err() {
                            self.prompts.disk_error();
                        }
                    }
                }
                Job::DropSessions { reply } => {
                    let _ = reply.send(self.drop_sessions());
                }
                Job::SetDiskTier(tier) => self.disk = tier,
                Job::SetMeter(meter) => self.meter = meter,
                Job::SaveSessions { idle, reply } => {
                    let _ = reply.send(self.save_sessions(idle));
                }
                Job::PromptCacheStats { reply } => {
                    let mut stats = self.prompts.stats();
                    if let Some(disk) = &self.disk {
                        let usage = disk.usage();
                        (stats.disk_files, stats.disk_bytes, stats.disk_limit_bytes) =
                            (usage.files, usage.bytes, disk.limit_bytes);
                    }
                    let _ = reply.send(stats);
                }
                Job::Stop => break,
                Job::WithModel(job) => {
                    let none = LoadSettings { context_limit: 0, ..LoadSettings::default() };
                    let settings = self.loaded.as_ref().map_or(&none, |l| &l.settings);
                    // The job owns its arrays and reports its own errors; a
                    // panic in MLX must not end the engine thread.
                    let metering = Metering { worker: &self };
                    let _ = catch_unwind(AssertUnwindSafe(|| {
                        job(self.loaded.as_ref().map(|l| &l.model), settings, &metering)
                    }));
                }
                Job::Generate { id, request, accepted, events } => {
                    let cancel = self.shared.flag(id).unwrap_or_default();
                    let session = request.session.clone();
                    // A panic inside MLX must not take the engine down with
                    // it; the session's cache may be half-written, so it goes.
                    let outcome =
                        catch_unwind(AssertUnwindSafe(|| self.generate(&request, accepted, &cancel, &events)));
                    // (The cache it was using is not put back.)
                    let outcome = outcome.unwrap_or_else(|panic| {
                        if let Some(s) = &session {
                            self.prompts.remove_session(s);
                        }
                        Err(EngineError::Panicked { during: "generate", message: panic_message(&*panic) })
                    });
                    // Forgotten before the last event goes out, so that once a
                    // caller has seen the end, cancel() says the run is over.
                    self.shared.forget(id);
                    let last = match outcome {
                        Ok(last) => last,
                        Err(e) => vec![EngineEvent::Error(e)],
                    };
                    for event in last {
                        let _ = events.send(event);
                    }
                }
            }
        }
    }

    /// Writes `entries` that are chats' and not yet on disk (they are about
    /// to leave memory), when there is a disk tier and a model they are for.
    fn spill(&mut self, mut entries: Vec<Entry>) -> SavedSessions {
        let out = write_states(self.disk.as_ref(), self.loaded.as_ref(), entries.iter_mut());
        self.count_disk_errors(out)
    }

    /// Writes chats' states unused for `idle` that the disk lacks; they stay in memory.
    fn save_sessions(&mut self, idle: Duration) -> SavedSessions {
        let out = write_states(self.disk.as_ref(), self.loaded.as_ref(), self.prompts.unsaved(idle));
        self.count_disk_errors(out)
    }

    fn count_disk_errors(&mut self, out: SavedSessions) -> SavedSessions {
        for _ in 0..out.failed {
            self.prompts.disk_error();
        }
        out
    }

    fn drop_sessions(&mut self) -> Result<SessionsDropped> {
        let before = mlx_memory()?;
        let sessions = self.prompts.len();
        let held = self.prompts.nbytes();
        // Kept on disk first (where there is a disk tier): the chats
        // continue without prefilling again once memory allows.
        let entries = self.prompts.drain();
        let saved_to_disk = self.spill(entries).saved;
        // Freed arrays go to MLX's buffer cache first; give them to the OS now.
        mlx_rs::memory::clear_cache().op("clear_cache")?;
        let after = mlx_memory()?;
        let total = |m: &MlxMemory| m.active.saturating_add(m.cache);
        Ok(SessionsDropped {
            sessions,
            cache_bytes: u64::try_from(held).unwrap_or(u64::MAX),
            freed_bytes: total(&before).saturating_sub(total(&after)),
            saved_to_disk,
        })
    }

    fn unload(&mut self) -> Result<UnloadReport> {
        let started = Instant::now();
        let had_model = self.loaded.is_some();
        let held = self.loaded.as_ref().map_or(0, |l| l.model.nbytes()) + self.prompts.nbytes();
        let expected_bytes = u64::try_from(held).unwrap_or(u64::MAX);
        // Chats' states outlive the model on disk (they are for this model:
        // loading it again finds them).
        let before = mlx_memory()?;
        let entries = self.prompts.drain();
        self.spill(entries);
        self.loaded = None;
        // Nothing may stay wired for a model that is gone.
        if self.wired.take().is_some() {
            mlx_rs::memory::set_wired_limit(0).op("set_wired_limit")?;
        }
        // Give the freed buffers back now rather than at the next allocation.
        mlx_rs::memory::clear_cache().op("clear_cache")?;
        let after = mlx_memory()?;
        let total = |m: &MlxMemory| m.active.saturating_add(m.cache);
        Ok(UnloadReport {
            had_model,
            unload_time: started.elapsed(),
            freed_bytes: total(&before).saturating_sub(total(&after)),
            expected_bytes,
            memory_returned: memory_returned(before.active, after.active, expected_bytes),
            before,
            after,
        })
    }

    /// Sets MLX's buffer-cache limit for the model about to be loaded:
    /// the caller's, else the one MLX had before any was set.
    fn apply_cache_limit(&mut self, limit: Option<usize>) -> Result<()> {
        match (limit, self.default_cache_limit) {
            (Some(limit), _) => {
                let previous = mlx_rs::memory::set_cache_limit(limit).op("set_cache_limit")?;
                self.default_cache_limit.get_or_insert(previous);
            }
            (None, Some(default)) => {
                mlx_rs::memory::set_cache_limit(default).op("set_cache_limit")?;
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// Raises MLX's wired limit to `limit` (the fit's rule decided it) where
    /// MLX computes on the GPU, capped at the GPU's recommended working set:
    /// MLX refuses a limit above it and the process exits (mlx-lm's
    /// `wired_limit` uses the working set itself). Where the working set
    /// cannot be read, nothing is set. Returns the limit in force.
    fn apply_wired_limit(&mut self, limit: Option<usize>) -> Result<Option<usize>> {
        let working_set = match crate::mlx_memory::gpu_working_set_bytes() {
            Some(ws) if backend_info().device == crate::backend::DeviceKind::Gpu => ws,
            _ => return Ok(None),
        };
        let Some(limit) = limit.filter(|&l| l > 0) else { return Ok(None) };
        let limit = limit.min(usize::try_from(working_set).unwrap_or(usize::MAX));
        mlx_rs::memory::set_wired_limit(limit).op("set_wired_limit")?;
        self.wired = Some(limit);
        Ok(Some(limit))
    }

    fn load(&mut self, dir: &Path, settings: LoadSettings, after_unload: Option<AfterUnload>) -> Result<ModelInfo> {
        if settings.context_limit == 0 {
            return Err(EngineError::InvalidSetting {
                name: "context_limit",
                value: "0".into(),
                reason: "must be at least 1",
            });
        }
        // Checked while the old model still answers; a panic in a library
        // on a hostile file is an error like any other.
        let started = Instant::now();
        let (staged, tokenizer) =
            catch_unwind(AssertUnwindSafe(|| check_and_stage(dir, &settings))).unwrap_or_else(|panic| {
                Err(EngineError::Panicked { during: "checking the model", message: panic_message(&*panic) })
            })?;
        // Headers only (read just above), so this is cheap.
        let fingerprint = model_fingerprint(dir, settings.dtype, settings.kernel)?;
        let staged_in = started.elapsed();
        // The old model goes now, so two models never share memory, and its
        // memory must be seen back before the new weights arrive.
        let none_loaded = |source: EngineError| EngineError::NothingLoaded { source: Box::new(source) };
        let replaced = self.unload().map_err(none_loaded)?;
        if let Some(f) = after_unload {
            f(&replaced);
        }
        replaced.confirm().map_err(none_loaded)?;
        let resident_before = self.start_measuring().map_err(none_loaded)?;
        let started = Instant::now();
        let model = catch_unwind(AssertUnwindSafe(|| {
            // A GGUF model is staged only now: MLX reads its tensors when it
            // opens the file, so staging it earlier would hold two models.
            let model = match staged {
                Some(model) => model,
                None => stage(dir, settings.dtype, settings.kernel)?,
            };
            materialize(&model, dir).map(|()| model)
        }))
        .unwrap_or_else(|panic| {
            Err(EngineError::Panicked { during: "reading the weights", message: panic_message(&*panic) })
        })
        .map_err(none_loaded)?;
        let config = model.config();
        let info = ModelInfo {
            dir: dir.to_owned(),
            model_type: config.model_type_name().to_owned(),
            quantization: config.quantization.as_ref().map(|q| (q.default.bits, q.default.group_size)),
            quantization_label: config.quantization.as_ref().map(|q| q.default.label()),
            quant_kernel: model.quant_kernel(),
            kv_dtype: dtype_name(model.activation_dtype()),
            kv_format: settings.kv,
            kv_label: settings.kv.label(short_dtype_name(model.activation_dtype())),
            weight_bytes: model.nbytes(),
            context_limit: settings.context_limit,
            eos_ids: tokenizer.eos_ids().to_vec(),
            load_time: staged_in + started.elapsed(),
            replaced,
            cache_limit_bytes: settings.cache_limit_bytes,
            wired_limit_bytes: None,
            fingerprint: fingerprint.clone(),
        };
        self.apply_cache_limit(settings.cache_limit_bytes).map_err(none_loaded)?;
        let info = ModelInfo {
            wired_limit_bytes: self.apply_wired_limit(settings.wired_limit_bytes).map_err(none_loaded)?,
            ..info
        };
        self.prompts.set_limit(settings.prompt_cache_bytes);
        let measured = self.measured(MeasuredKind::Load, &fingerprint, settings.kv, resident_before, (0, 0, 0));
        self.loaded = Some(Loaded { model, tokenizer, settings, fingerprint, resident_before });
        self.record(measured.map_err(none_loaded)?);
        Ok(info)
    }

    /// Starts a measurement: MLX's peak and the process's peak resident
    /// set from now; returns what the process holds now.
    fn start_measuring(&self) -> Result<Option<u64>> {
        mlx_rs::memory::reset_peak_memory().op("reset_peak_memory")?;
        Ok(self.meter.as_ref().and_then(|m| {
            m.reset_peak_resident();
            m.resident_bytes()
        }))
    }

    /// What a load or turn took since [`Self::start_measuring`]; `tokens`
    /// are the context, prompt and reused tokens.
    fn measured(
        &self,
        kind: MeasuredKind,
        fingerprint: &str,
        kv: KvFormat,
        resident_before: Option<u64>,
        (context, prompt, reused): (usize, usize, usize),
    ) -> Result<PeakMeasurement> {
        let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        // Active first: the peak read after it has seen it, so the pair is
        // consistent (peak ≥ active) whatever is allocated in between.
        let active = mlx_rs::memory::active_memory().op("active_memory")?;
        let peak = mlx_rs::memory::peak_memory().op("peak_memory")?;
        let resident_peak = self.meter.as_ref().and_then(|m| m.peak_resident_bytes());
        Ok(PeakMeasurement {
            fingerprint: fingerprint.to_owned(),
            kind,
            kv,
            context_tokens: as_u64(context),
            prompt_tokens: as_u64(prompt),
            reused_tokens: as_u64(reused),
            mlx_peak_bytes: as_u64(peak),
            mlx_active_bytes: as_u64(active),
            resident_peak_bytes: resident_peak.zip(resident_before).map(|(peak, before)| peak.saturating_sub(before)),
            // Exact for a turn that reused nothing (the only calibration
            // points): it took no entry, so none shares its arrays.
            cached_bytes: as_u64(self.prompts.nbytes()),
        })
    }

    /// Ends a turn's measurement on the loaded model: hands the meter (if
    /// any) the turn that generated `generation` after `prompt`, with the
    /// cache in `kv`; returns MLX's peak since [`Self::start_measuring`].
    fn record_turn(&self, kv: KvFormat, prompt: &[u32], generation: &Generation) -> Result<usize> {
        let loaded = self.loaded()?;
        // The positions it held (the prompt and what it generated), the prompt, the reused prefix.
        let tokens = (prompt.len() + generation.tokens.len(), prompt.len(), generation.reused_tokens);
        let measured = self.measured(MeasuredKind::Turn, &loaded.fingerprint, kv, loaded.resident_before, tokens)?;
        let peak = usize::try_from(measured.mlx_peak_bytes).unwrap_or(usize::MAX);
        self.record(measured);
        Ok(peak)
    }

    fn record(&self, measured: PeakMeasurement) {
        if let Some(meter) = &self.meter {
            meter.record(measured);
        }
    }

    fn loaded(&self) -> Result<&Loaded> {
        self.loaded.as_ref().ok_or(EngineError::NoModelLoaded)
    }

    /// `session`'s state from the disk tier, trimmed for `prompt`, when the
    /// memory holds none for it (a state in memory is always the newer) and
    /// the disk's is for this model as loaded and saves at least a token.
    fn restore(&mut self, session: Option<&str>, prompt: &[u32], format: KvFormat) -> Result<Option<(KvCache, usize)>> {
        let (Some(session), Some(disk)) = (session, &self.disk) else { return Ok(None) };
        if self.prompts.has_session(session) {
            return Ok(None);
        }
        let loaded = self.loaded()?;
        let kinds = loaded.model.layer_kinds();
        let mut best: Option<(KvCache, usize)> = None;
        for part in [Part::State, Part::Prompt] {
            // Another model's, other settings': a miss, never a wrong answer.
            let Some(mut cache) =
                disk.load(session, part, &loaded.fingerprint, &kinds, format, loaded.model.activation_dtype())
            else {
                continue;
            };
            let reused = cache.reuse_prefix(prompt);
            if reused > best.as_ref().map_or(0, |b| b.1) {
                best = Some((cache, reused));
            }
        }
        Ok(best)
    }

    /// Runs one turn, streaming `Started` and the tokens; returns the closing events.
    fn generate(
        &mut self,
        request: &GenerateRequest,
        accepted: Instant,
        cancel: &AtomicBool,
        events: &Sender<EngineEvent>,
    ) -> Result<Vec<EngineEvent>> {
        if cancel.load(Ordering::Relaxed) {
            return Ok(vec![EngineEvent::Finished { reason: FinishReason::Cancelled }]);
        }
        let loaded = self.loaded.as_ref().ok_or(EngineError::NoModelLoaded)?;
        let limit = loaded.settings.context_limit;
        let prompt = encode_within(&loaded.tokenizer, &request.messages, limit, request.overflow)?;
        let mut sampler = Sampler::new(request.sampling.clone())?;
        let format = request.kv.unwrap_or(loaded.settings.kv);
        loaded.model.check_kv_format(format)?;

        // Room first (memory may be tighter than at the load), then the
        // cache that saves the most prefill: in memory, else this chat's
        // state on disk, else a fresh one.
        let room = request.prompt_cache_room.unwrap_or(usize::MAX);
        let dropped = self.prompts.make_room(room);
        self.spill(dropped);
        let session = request.session.as_deref();
        let (mut cache, reused, from) = match self.prompts.take(session, &prompt, format) {
            Some((cache, reused)) => (cache, reused, Reuse::Memory),
            None => match self.restore(session, &prompt, format)? {
                Some((cache, reused)) => (cache, reused, Reuse::Disk),
                None => (self.loaded()?.model.new_cache_as(format)?, 0, Reuse::None),
            },
        };
        self.prompts.record(prompt.len(), reused, from);
        let loaded = self.loaded()?;
        let _ = events.send(EngineEvent::Started { prompt_tokens: prompt.len(), reused_tokens: reused });

        // The cache peaks at prompt + max_tokens - 1 positions (the last
        // token is sampled, never fed): keep that within the limit.
        let max_tokens = request.max_tokens.min(limit + 1 - prompt.len());
        let options = GenerateOptions {
            max_tokens,
            checkpoint: !cache.always_steps_back(),
            eos_ids: if request.ignore_eos { Vec::new() } else { loaded.tokenizer.eos_ids().to_vec() },
            ..GenerateOptions::default()
        };
        self.start_measuring()?;
        let mut detok = loaded.tokenizer.detokenizer();
        let mut detok_error = None;
        let generation =
            generate(&loaded.model, &mut cache, &prompt, &options, &mut sampler, &WallClock(accepted), cancel, |id| {
                match detok.step(id) {
                    // A closed receiver means nobody listens: stop like a cancel.
                    Ok(text) => events.send(EngineEvent::Token { id, text }).is_ok(),
                    Err(e) => {
                        detok_error = Some(e);
                        false
                    }
                }
            })?;
        if let Some(e) = detok_error {
            return Err(e);
        }
        let tail = detok.finish()?;
        if !tail.is_empty() {
            let _ = events.send(EngineEvent::Text(tail));
        }
        let peak_memory_bytes = self.record_turn(format, &prompt, &generation)?;
        // When the context limit cut the turn short this is `Length` too.
        let reason = generation.finish_reason;
        let stats = TurnStats {
            prompt_tokens: prompt.len(),
            reused_tokens: generation.reused_tokens,
            // `take` and `restore` find nothing rather than a state that saves no token.
            reused_from: from,
            generated_tokens: generation.tokens.len(),
            context_tokens: prompt.len(),
            batch: 1,
            rates: generation.timings.rates(),
            timings: generation.timings,
            peak_memory_bytes,
            kv_label: cache.label(short_dtype_name(loaded.model.activation_dtype())),
        };
        // What this request leaves is the latest entry; what no longer fits
        // the allowance goes to disk (a chat's) or away. A cache that cannot
        // step back leaves its state at the end of the prompt too (older,
        // so evicted first): the next turn's prompt continues that one even
        // where it re-words this answer.
        let mut dropped = Vec::new();
        if let Some(checkpoint) = generation.checkpoint {
            dropped.extend(self.prompts.put(request.session.clone(), checkpoint, room, true));
        }
        dropped.extend(self.prompts.put(request.session.clone(), cache, room, false));
        self.spill(dropped);
        Ok(vec![EngineEvent::Stats(stats), EngineEvent::Finished { reason }])
    }
}

/// Writes each chat's entry of `entries` that the disk lacks as it is now
/// (and marks it so), for the model `loaded` as loaded; nothing without a
/// disk tier or a model.
fn write_states<'a>(
    disk: Option<&DiskTier>,
    loaded: Option<&Loaded>,
    entries: impl Iterator<Item = &'a mut Entry>,
) -> SavedSessions {
    let mut out = SavedSessions::default();
    let (Some(disk), Some(loaded)) = (disk, loaded) else { return out };
    let dtype = dtype_name(loaded.model.activation_dtype());
    for e in entries {
        let (Some(session), false) = (&e.session, e.saved) else { continue };
        match disk.save(session, Part::of(e.checkpoint), &loaded.fingerprint, &e.cache, dtype) {
            Ok(bytes) => {
                e.saved = true;
                out.saved += 1;
                out.bytes += bytes;
            }
            Err(_) => out.failed += 1,
        }
    }
    out
}

/// Everything about the model that can be checked without reading its
/// weights: the tokenizer (its ids within the embedding, its template
/// compiling), the KV format, and for a folder the model built lazily
/// (config, headers, every tensor). A GGUF model is checked from its header
/// (the same tensor checks, by the format reader) and staged after the
/// unload (`None` here): MLX's GGUF reader is not lazy.
fn check_and_stage(dir: &Path, settings: &LoadSettings) -> Result<(Option<Model>, Tokenizer)> {
    let (model, config) = if ModelFiles::locate(dir).gguf().is_some() {
        (None, read_config(dir)?)
    } else {
        let model = stage(dir, settings.dtype, settings.kernel)?;
        let config = model.config().clone();
        (Some(model), config)
    };
    let tokenizer = Tokenizer::for_model(dir)?;
    tokenizer.check_template()?;
    check_kv_format(&config, settings.kv)?;
    check_vocab_rows(dir, tokenizer.max_token_id(), config.text.vocab_size)?;
    Ok((model, tokenizer))
}

/// The conversation as prompt ids, within `limit` tokens per `policy`.
fn encode_within(tok: &Tokenizer, messages: &[Message], limit: usize, policy: OverflowPolicy) -> Result<Vec<u32>> {
    let mut messages = messages.to_vec();
    loop {
        let ids = tok.encode_chat(&messages, true)?;
        if ids.len() <= limit {
            return Ok(ids);
        }
        let first_droppable = usize::from(messages.first().is_some_and(|m| m.role == Role::System));
        // Never drop the last message: it is what the user just asked.
        if policy == OverflowPolicy::Error || first_droppable + 1 >= messages.len() {
            return Err(EngineError::ContextOverflow { prompt_tokens: ids.len(), limit });
        }
        messages.remove(first_droppable);
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod tests;
