//! The engine thread: it owns the loaded model, its tokenizer, the prompt
//! cache and the disk tier, and runs the jobs the handle (handle.rs) queues,
//! one at a time, in order. Nothing here leaves the thread but replies and
//! events.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use headroom_core::chat::{FinishReason, Message, Role};
use headroom_core::kv::KvFormat;
use headroom_core::speculative::SpeculativeMode;

use super::api::{
    memory_returned, AfterUnload, EngineEvent, GenerateRequest, LoadSettings, ModelInfo, OverflowPolicy, PeerTurn,
    RunId, SavedSessions, SessionsDropped, TurnStats, UnloadReport,
};
use crate::backend::backend_info;
use crate::cache::KvCache;
use crate::config::read_config;
use crate::draft::Draft;
use crate::dtype::{dtype_name, short_dtype_name};
use crate::error::{EngineError, MlxContext, Result};
use crate::generate::{generate_with, GenerateOptions, Generation, WallClock};
use crate::grammar::{Constraint, Grammar, Guide};
use crate::inspect::check_vocab_rows;
use crate::loader::{materialize, stage};
use crate::lookup::Depth;
use crate::meter::{MeasuredKind, PeakMeasurement, SharedMeter};
use crate::mlx_memory::{mlx_memory, MlxMemory};
use crate::models::{check_kv_format, Model};
use crate::peer::{PeerPlacement, Placement};
use crate::prompt_cache::disk::{model_fingerprint, DiskTier, Part};
use crate::prompt_cache::{Entry, Owner, PromptCache, PromptCacheStats, Reuse};
use crate::sampler::Sampler;
use crate::sizes::PREFILL_CHUNK;
use crate::source::ModelFiles;
use crate::stops::StopScan;
use crate::tokenizer::{TemplateExtras, Tokenizer};
use crate::weights::{weight_files, ComputeDtype};
use headroom_core::chat::Thinking;
use headroom_core::chat_format::{call_grammar, AnswerFormat, ToolFormat};

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

pub(super) enum Job {
    Load {
        dir: PathBuf,
        // Boxed: the settings (a peer's keys among them) dwarf every other job.
        settings: Box<LoadSettings>,
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
pub(super) struct Shared {
    pub(super) next_run: AtomicU64,
    /// Cancel flags of runs queued or running; the worker removes finished ones.
    pub(super) cancels: Mutex<HashMap<RunId, Arc<AtomicBool>>>,
}

impl Shared {
    pub(super) fn flag(&self, id: RunId) -> Option<Arc<AtomicBool>> {
        self.cancels.lock().unwrap_or_else(PoisonError::into_inner).get(&id).cloned()
    }

    pub(super) fn forget(&self, id: RunId) {
        self.cancels.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
    }
}

/// Starts the engine thread on `jobs`, with no model loaded.
pub(super) fn spawn(shared: Arc<Shared>, jobs: Receiver<Job>) -> std::io::Result<JoinHandle<()>> {
    // Before MLX's first buffer: peaks that repeat (ffi.rs says why).
    crate::ffi::fix_mmap_threshold();
    let worker = Worker {
        shared,
        loaded: None,
        prompts: PromptCache::default(),
        disk: None,
        default_cache_limit: None,
        wired: None,
        meter: None,
        loads: 0,
    };
    std::thread::Builder::new().name("headroom-engine".into()).spawn(move || worker.run(&jobs))
}

struct Loaded {
    model: Model,
    tokenizer: Tokenizer,
    settings: LoadSettings,
    /// prompt_cache/disk.rs's `model_fingerprint`.
    fingerprint: String,
    /// Which load of this engine it is (`ModelInfo::load`).
    load: u64,
    /// What the process held before these weights were read (the meter's
    /// reading): a measurement's resident growth is counted from it.
    resident_before: Option<u64>,
    /// The folder it was loaded from (its weight files, for `state_key`).
    dir: PathBuf,
    /// What its saved states are filed under (`DiskTier::weights_key`):
    /// worked out at the first save or restore, not at the load, so a model
    /// that never meets the disk tier never has its weights hashed.
    state_key: std::sync::OnceLock<String>,
    /// What prompt lookup measured of this model on this machine (its pass
    /// costs and plain step), carried from one turn to the next so each
    /// answer does not pay to measure them again.
    lookup: std::cell::RefCell<Depth>,
    /// The draft model loaded beside it, if any, and what drafting measured
    /// (its passes cost the draft's steps too, so apart from lookup's).
    draft: Option<std::cell::RefCell<Draft>>,
    drafting: std::cell::RefCell<Depth>,
    /// The token table for constrained decoding, built at the first turn
    /// that needs it (`grammar::Vocabulary`).
    vocabulary: std::sync::OnceLock<crate::grammar::Vocabulary>,
}

impl Loaded {
    /// Whether what this process holds is this model alone, all of it: a
    /// measurement is then a point of its calibration curve.
    /// The grammar's token table, built once per load.
    fn vocabulary(&self) -> Result<&crate::grammar::Vocabulary> {
        if let Some(v) = self.vocabulary.get() {
            return Ok(v);
        }
        let width = usize::try_from(self.model.config().text.vocab_size).unwrap_or(0);
        let built = self.tokenizer.grammar_vocabulary(width)?;
        Ok(self.vocabulary.get_or_init(|| built))
    }

    fn measures_itself(&self) -> bool {
        self.model.later_layers().is_none() && self.draft.is_none()
    }

    /// The key this model's states are saved and restored under: its layout
    /// and its weights' content.
    fn state_key(&self, disk: &DiskTier) -> Result<&str> {
        if self.state_key.get().is_none() {
            let key = disk.weights_key(&self.fingerprint, &weight_files(&self.dir)?)?;
            let _ = self.state_key.set(key);
        }
        Ok(self.state_key.get().map_or("", String::as_str))
    }
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
    /// Loads so far: each gets the next number (`ModelInfo::load`).
    loads: u64,
}

impl Worker {
    fn run(mut self, jobs: &Receiver<Job>) {
        for job in jobs.iter() {
            match job {
                Job::Load { dir, settings, after_unload, reply } => {
                    let _ = reply.send(self.load(&dir, *settings, after_unload));
                }
                Job::Unload { reply } => {
                    let _ = reply.send(self.unload());
                }
                Job::DropSession { session } => {
                    self.prompts.remove_session(&session);
                    // Off or on: a deleted chat leaves no state behind.
                    if let Some(disk) = &self.disk {
                        if disk.delete(&session).is_err() {
                            self.prompts.disk_error();
                        }
                    }
                }
                Job::DropSessions { reply } => {
                    let _ = reply.send(self.drop_sessions());
                }
                Job::SetDiskTier(tier) => {
                    // Turned off: the states saved while it was on go too,
                    // or the conversations they hold would stay on disk.
                    if let Some(off) = tier.as_ref().filter(|t| !t.is_on()) {
                        match off.clear() {
                            Ok(0) => {}
                            Ok(n) => tracing::info!("the disk tier is off: deleted {n} saved chat state(s)"),
                            Err(e) => tracing::warn!(
                                "the disk tier is off, but its saved states could not all be deleted: {e}"
                            ),
                        }
                    }
                    self.disk = tier;
                }
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
        let out = write_states(self.disk.as_ref().filter(|d| d.is_on()), self.loaded.as_ref(), entries.iter_mut());
        self.count_disk_errors(out)
    }

    /// Writes chats' states unused for `idle` that the disk lacks; they stay in memory.
    fn save_sessions(&mut self, idle: Duration) -> SavedSessions {
        let out =
            write_states(self.disk.as_ref().filter(|d| d.is_on()), self.loaded.as_ref(), self.prompts.unsaved(idle));
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
        // A draft of another vocabulary is refused while the old model still answers.
        let draft_vocabulary = settings.draft.as_deref().map(|d| Draft::check_vocabulary(d, &tokenizer)).transpose()?;
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
            let mut model = match staged {
                Some(model) => model,
                None => stage(dir, settings.dtype, settings.kernel)?,
            };
            // Two Macs: only the host's layers are read here.
            if let Some(peer) = &settings.peer {
                model.keep_layers(0..peer.first_peer_layer)?;
            }
            materialize(&model, dir).map(|()| model)
        }))
        .unwrap_or_else(|panic| {
            Err(EngineError::Panicked { during: "reading the weights", message: panic_message(&*panic) })
        })
        .map_err(none_loaded)?;
        let model = match &settings.peer {
            Some(at) => attach_peer(model, dir, at, &settings).map_err(none_loaded)?,
            None => model,
        };
        let draft = match &draft_vocabulary {
            Some(checked) => Some(
                catch_unwind(AssertUnwindSafe(|| {
                    let how = (settings.dtype, settings.kernel, settings.kv);
                    Draft::load(checked, how, &model, PREFILL_CHUNK)
                }))
                .unwrap_or_else(|panic| {
                    Err(EngineError::Panicked { during: "loading the draft model", message: panic_message(&*panic) })
                })
                .map_err(none_loaded)?,
            ),
            None => None,
        };
        let config = model.config();
        // The limit in force, read once: the measurement knob's where it is set.
        let cache_limit_bytes = cache_limit_override().or(settings.cache_limit_bytes);
        self.loads += 1;
        let info = ModelInfo {
            load: self.loads,
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
            cache_limit_bytes,
            wired_limit_bytes: None,
            fingerprint: fingerprint.clone(),
            draft: settings.draft.clone(),
            thinks: headroom_core::thinking::template_thinks(tokenizer.chat_template()),
        };
        self.apply_cache_limit(cache_limit_bytes).map_err(none_loaded)?;
        let info = ModelInfo {
            wired_limit_bytes: self.apply_wired_limit(settings.wired_limit_bytes).map_err(none_loaded)?,
            ..info
        };
        self.prompts.set_limit(settings.prompt_cache_bytes);
        let measured = self.measured(MeasuredKind::Load, &fingerprint, settings.kv, resident_before, (0, 0, 0));
        self.loaded = Some(Loaded {
            model,
            tokenizer,
            settings,
            fingerprint,
            load: self.loads,
            resident_before,
            dir: dir.to_owned(),
            state_key: std::sync::OnceLock::new(),
            lookup: std::cell::RefCell::new(Depth::default()),
            draft: draft.map(std::cell::RefCell::new),
            drafting: std::cell::RefCell::new(Depth::default()),
            vocabulary: std::sync::OnceLock::new(),
        });
        let measured = measured.map_err(none_loaded)?;
        // A model split across two Macs, or one with a draft beside it, is
        // not this model's footprint here: never a calibration point for it.
        if self.loaded.as_ref().is_some_and(Loaded::measures_itself) {
            self.record(measured);
        }
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
        // A cancelled turn (Stop, a client that hung up) may have stopped in
        // its prefill: its peak is no whole prefill's, and recorded as one it
        // would teach the fit to predict too little. Only complete evidence is kept.
        if generation.finish_reason != FinishReason::Cancelled && loaded.measures_itself() {
            self.record(measured);
        }
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
        let (Some(session), Some(disk)) = (session, self.disk.as_ref().filter(|d| d.is_on())) else { return Ok(None) };
        if self.prompts.has_session(session) {
            return Ok(None);
        }
        let loaded = self.loaded()?;
        // Weights that cannot be read to file a state under: nothing to
        // restore, and the turn runs from the start.
        let key = match loaded.state_key(disk) {
            Ok(key) => key,
            Err(e) => {
                tracing::warn!("no saved state restored: {e}");
                self.prompts.disk_error();
                return Ok(None);
            }
        };
        let want = loaded.model.state_shape(format, loaded.settings.context_limit);
        let mut best: Option<(KvCache, usize)> = None;
        for part in [Part::State, Part::Prompt] {
            // Another model's, other settings', the wrong shapes: a miss, never a wrong answer.
            let Some(mut cache) = disk.load(session, part, key, &want) else {
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
        if request.load.is_some_and(|admitted| admitted != loaded.load) {
            return Err(EngineError::ModelChanged);
        }
        let limit = loaded.settings.context_limit;
        // A template that knows no tools gets them as the fallback's
        // system prompt, and tool turns as user turns.
        let template = loaded.tokenizer.chat_template();
        let (messages, tools) = ToolFormat::for_template(template).prepare(&request.messages, &request.tools);
        let prompt = encode_within(
            &loaded.tokenizer,
            &messages,
            TemplateExtras { tools: &tools, kwargs: Some(&request.template_kwargs) },
            limit,
            request.overflow,
        )?;
        // Enough tokens to hold `<think>` and what follows it where the
        // vocabulary has no single token for the tag (a small BPE spells it
        // in four or five).
        let tail = loaded.tokenizer.decode(&prompt[prompt.len().saturating_sub(16)..], false)?;
        let answer_format = AnswerFormat::of(template, &tail);
        let mut sampler = Sampler::new(request.sampling.clone())?;
        // Offered tools hold a call to its schema in the template's own call
        // format, once the call starts (or from the first token when a call is
        // required); a response format, when also given, describes the whole
        // answer and wins.
        let calls = match &request.constraint {
            Some(_) => None,
            None => {
                call_grammar(answer_format.tools, &request.tools, &request.tool_choice, request.parallel_tool_calls)
                    .map(|g| Constraint { grammar: Grammar::Lark(g.lark), trigger: g.trigger, stop_after: true })
            }
        };
        let constraint = request.constraint.as_ref().or(calls.as_ref());
        // A thinking model thinks freely first: a constraint starts after its
        // close tag (the template says whether the prompt opened the block).
        let thinking = match (&request.thinking, &answer_format.think) {
            (Some(asked), Some(tags)) => Some(Thinking { open_in_prompt: tags.starts_inside, ..asked.clone() }),
            (Some(asked), None) => Some(asked.clone()),
            (None, Some(tags)) if constraint.is_some() => Some(Thinking {
                open: tags.open.clone(),
                close: tags.close.clone(),
                budget: None,
                open_in_prompt: tags.starts_inside,
            }),
            (None, _) => None,
        };
        // A grammar the model's vocabulary cannot compile is refused before the run starts.
        let mut guide = match (constraint, &thinking) {
            (None, None) => None,
            (constraint, thinking) => Some(Guide::new(loaded.vocabulary()?, constraint, thinking.as_ref())?),
        };
        let format = request.kv.unwrap_or(loaded.settings.kv);
        loaded.model.check_kv_format(format)?;
        // Across two Macs every turn starts afresh: the peer's half of a
        // kept state would have to be kept and matched too (docs/two-macs.md).
        let alone = loaded.model.later_layers().is_none();

        // Room first (memory may be tighter than at the load), then the
        // cache that saves the most prefill: in memory, else this chat's
        // state on disk, else a fresh one.
        let room = request.prompt_cache_room.unwrap_or(usize::MAX);
        let dropped = self.prompts.make_room(room);
        self.spill(dropped);
        let session = request.session.as_deref();
        let owner = Owner { session, tenant: request.tenant.as_deref() };
        let kept = if alone { self.prompts.take(owner, &prompt, format) } else { None };
        let (mut cache, reused, from) = match kept {
            Some((cache, reused)) => (cache, reused, Reuse::Memory),
            None => match if alone { self.restore(session, &prompt, format)? } else { None } {
                Some((cache, reused)) => (cache, reused, Reuse::Disk),
                None => (self.loaded()?.model.new_cache_as(format)?, 0, Reuse::None),
            },
        };
        self.prompts.record(prompt.len(), reused, from);
        let loaded = self.loaded()?;
        let _ = events.send(EngineEvent::Started {
            prompt_tokens: prompt.len(),
            reused_tokens: reused,
            format: answer_format,
        });

        // The cache peaks at prompt + max_tokens - 1 positions (the last
        // token is sampled, never fed): keep that within the limit.
        let max_tokens = request.max_tokens.min(limit + 1 - prompt.len());
        let options = GenerateOptions {
            max_tokens,
            checkpoint: !cache.always_steps_back(),
            eos_ids: if request.ignore_eos { Vec::new() } else { loaded.tokenizer.eos_ids().to_vec() },
            speculative: request.speculative,
            depth: depth_for(loaded, request.speculative).borrow().carry_over(),
            ..GenerateOptions::default()
        };
        let mut draft = loaded.draft.as_ref().map(std::cell::RefCell::borrow_mut);
        self.start_measuring()?;
        let mut detok = loaded.tokenizer.detokenizer();
        let mut detok_error = None;
        // Stops apply to the answer: a thinking block's text is not scanned.
        let mut stops = StopScan::new(&request.stop);
        let clock = WallClock(accepted);
        let mut generation = generate_with(
            &loaded.model,
            &mut cache,
            &prompt,
            &options,
            draft.as_deref_mut(),
            guide.as_mut(),
            &mut sampler,
            &clock,
            cancel,
            |id, thinking| {
                match detok.step(id) {
                    Ok(text) => {
                        let text = if thinking { text } else { stops.push(&text) };
                        // A closed receiver means nobody listens: stop like a cancel.
                        events.send(EngineEvent::Token { id, text, thinking }).is_ok() && !stops.hit()
                    }
                    Err(e) => {
                        detok_error = Some(e);
                        false
                    }
                }
            },
        )?;
        drop(draft);
        *depth_for(loaded, request.speculative).borrow_mut() = generation.depth.clone();
        if let Some(e) = detok_error {
            return Err(e);
        }
        if stops.hit() {
            // Ended by a stop string (the loop saw it as a cancel).
            generation.finish_reason = FinishReason::Stop;
        }
        let tail = detok.finish()?;
        let tail = stops.push(&tail) + &stops.finish();
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
            speculation: generation.speculation,
            peer: crate::peer::host::Link::of(&loaded.model).map(PeerTurn::of),
        };
        // What this request leaves is the latest entry; what no longer fits
        // the allowance goes to disk (a chat's) or away. A cache that cannot
        // step back leaves its state at the end of the prompt too (older,
        // so evicted first): the next turn's prompt continues that one even
        // where it re-words this answer.
        if !alone {
            return Ok(vec![EngineEvent::Stats(stats), EngineEvent::Finished { reason }]);
        }
        let mut dropped = Vec::new();
        if let Some(checkpoint) = generation.checkpoint {
            dropped.extend(self.prompts.put(owner, checkpoint, room, true));
        }
        dropped.extend(self.prompts.put(owner, cache, room, false));
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
    // Unreadable weights: no state can be filed for them.
    let Ok(key) = loaded.state_key(disk) else {
        out.failed += entries.filter(|e| e.session.is_some() && !e.saved).count();
        return out;
    };
    for e in entries {
        let (Some(session), false) = (&e.session, e.saved) else { continue };
        match disk.save(session, Part::of(e.checkpoint), key, &e.cache, dtype) {
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

/// The conversation as prompt ids, within `limit` tokens per `policy`:
/// under `TruncateOldest`, the fewest oldest messages dropped (never the
/// system prompt, never the last message) that bring it within the limit.
/// Found by a search over how many to drop (the prompt shrinks as more go),
/// so a long chat is encoded about log2(n) times, not once per message.
pub(super) fn encode_within(
    tok: &Tokenizer,
    messages: &[Message],
    extras: TemplateExtras<'_>,
    limit: usize,
    policy: OverflowPolicy,
) -> Result<Vec<u32>> {
    let ids = tok.encode_chat_with(messages, extras, true)?;
    if ids.len() <= limit {
        return Ok(ids);
    }
    let first = usize::from(messages.first().is_some_and(|m| m.role == Role::System));
    // Never drop the last message: it is what the user just asked.
    let most = messages.len().saturating_sub(first + 1);
    if policy == OverflowPolicy::Error || most == 0 {
        return Err(EngineError::ContextOverflow { prompt_tokens: ids.len(), limit });
    }
    let without = |dropped: usize| {
        let kept: Vec<Message> = messages[..first].iter().chain(&messages[first + dropped..]).cloned().collect();
        tok.encode_chat_with(&kept, extras, true)
    };
    let mut fits = without(most)?;
    if fits.len() > limit {
        return Err(EngineError::ContextOverflow { prompt_tokens: fits.len(), limit });
    }
    // `fits` is the prompt with `hi` dropped; the fewest that fit lie in lo..=hi.
    let (mut lo, mut hi) = (1, most);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let ids = without(mid)?;
        if ids.len() <= limit {
            (hi, fits) = (mid, ids);
        } else {
            lo = mid + 1;
        }
    }
    Ok(fits)
}

/// What `mode` has measured of this model on this machine.
fn depth_for(loaded: &Loaded, mode: SpeculativeMode) -> &std::cell::RefCell<Depth> {
    match mode {
        SpeculativeMode::Draft => &loaded.drafting,
        SpeculativeMode::None | SpeculativeMode::Lookup => &loaded.lookup,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Places the later layers of `model` (already cut to the host's) on the
/// peer `at` names, which loads them from its own copy of `dir`.
fn attach_peer(mut model: Model, dir: &Path, at: &PeerPlacement, settings: &LoadSettings) -> Result<Model> {
    let placement = Placement {
        model: crate::peer::ModelCopy::of(dir)?,
        first_layer: at.first_peer_layer,
        layers: usize::try_from(model.config().text.num_hidden_layers).unwrap_or(0),
        f32: settings.dtype == ComputeDtype::F32,
        kernel: settings.kernel.as_str().to_owned(),
        kv: settings.kv,
        context: at.context,
    };
    let link = crate::peer::host::place(at, placement, model.activation_dtype(), model.config().text.hidden_size)?;
    model.attach(Box::new(link));
    Ok(model)
}

/// `HEADROOM_MLX_CACHE_LIMIT` (bytes), where set, replaces the buffer-cache
/// limit every load sets. A measurement knob, not a setting: what MLX's
/// cache costs in resident memory and in speed
/// (docs/fit-calibration.md, "A capped cache"). A value that is not a
/// number of bytes is ignored, with a warning.
fn cache_limit_override() -> Option<usize> {
    let value = std::env::var("HEADROOM_MLX_CACHE_LIMIT").ok()?;
    match value.trim().parse() {
        Ok(bytes) => Some(bytes),
        Err(_) => {
            tracing::warn!(%value, "HEADROOM_MLX_CACHE_LIMIT is not a number of bytes; ignored");
            None
        }
    }
}
