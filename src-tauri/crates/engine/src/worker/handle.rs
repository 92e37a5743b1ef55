//! The engine's handle: cheap to clone, it queues jobs for the engine
//! thread (thread.rs) and waits for their replies where a caller needs one;
//! the last clone to go stops the thread and joins it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::api::{
    AfterUnload, GenerateRequest, LoadSettings, ModelInfo, PeerTurn, Run, RunId, SavedSessions, SessionsDropped,
    UnloadReport,
};
use super::thread::{spawn, Job, Metering, Shared};
use crate::error::{EngineError, Result};
use crate::meter::SharedMeter;
use crate::models::Model;
use crate::prompt_cache::disk::DiskTier;
use crate::prompt_cache::PromptCacheStats;

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
        let thread = spawn(Arc::clone(&shared), rx)
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
        self.send(Job::Load { dir: dir.to_owned(), settings: Box::new(settings), after_unload, reply })?;
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

    /// Where the loaded model's later layers run and what handing over cost
    /// since the last turn (or the last call): for runs that are not turns
    /// (the benchmark). `None` when the model runs on this Mac alone.
    pub fn peer_hand_offs(&self) -> Result<Option<PeerTurn>> {
        let (reply, rx) = mpsc::channel();
        self.with_model(move |model, _, _| {
            let turn = model.and_then(crate::peer::host::Link::of).map(PeerTurn::of);
            let _ = reply.send(turn);
        })?;
        rx.recv().map_err(|_| EngineError::EngineStopped)
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
