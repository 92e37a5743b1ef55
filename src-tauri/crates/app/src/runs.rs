//! Every run the user can stop, in one registry in the app state: a chat
//! turn (local or cloud, or an answer replayed from the cache), a benchmark,
//! a download. Each gets the id the UI holds and a way to stop it; the
//! entry goes when the run ends (its [`Registered`] is dropped).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use headroom_cloud::CancellationToken;
use headroom_engine::worker::{EngineHandle, RunId};

/// What kind of run an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    Chat,
    Bench,
    Pull,
}

/// How to stop a run.
#[derive(Debug, Clone)]
pub enum Stopper {
    /// A generation on the engine thread, after the token being computed.
    Engine { engine: EngineHandle, run: RunId },
    /// An async run (a cloud turn, a download).
    Token(CancellationToken),
    /// A loop that checks a flag (a benchmark, a cached answer's replay).
    Flag(Arc<AtomicBool>),
}

impl Stopper {
    fn stop(&self) -> bool {
        match self {
            Self::Engine { engine, run } => engine.cancel(*run),
            Self::Token(token) => {
                token.cancel();
                true
            }
            Self::Flag(flag) => {
                flag.store(true, Ordering::Relaxed);
                true
            }
        }
    }
}

/// A second run of a kind that runs one at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a {kind:?} run is already under way")]
pub struct AlreadyRunning {
    pub kind: RunKind,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    running: HashMap<u64, (RunKind, Stopper)>,
}

/// The registry; cheap to clone (one shared table).
#[derive(Debug, Clone, Default)]
pub struct Runs {
    inner: Arc<Mutex<Inner>>,
}

/// A run's entry; dropping it (the run ended, whichever way) removes it.
#[derive(Debug)]
pub struct Registered {
    id: u64,
    runs: Runs,
}

impl Registered {
    /// The id the UI holds (below 2^53, so JavaScript numbers hold it exactly).
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.runs.lock().running.remove(&self.id);
    }
}

impl Runs {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a run; its id is new for this process.
    pub fn register(&self, kind: RunKind, stopper: Stopper) -> Registered {
        let mut inner = self.lock();
        inner.next += 1;
        let id = inner.next;
        inner.running.insert(id, (kind, stopper));
        Registered { id, runs: self.clone() }
    }

    /// [`Self::register`] for a kind that runs one at a time (two
    /// benchmarks would measure each other; downloads share one cache).
    pub fn register_only(&self, kind: RunKind, stopper: Stopper) -> Result<Registered, AlreadyRunning> {
        let mut inner = self.lock();
        if inner.running.values().any(|(k, _)| *k == kind) {
            return Err(AlreadyRunning { kind });
        }
        inner.next += 1;
        let id = inner.next;
        inner.running.insert(id, (kind, stopper));
        Ok(Registered { id, runs: self.clone() })
    }

    /// Whether anything runs now (a turn, a benchmark, a download): the
    /// model is in use and must not be taken away (`crate::away`).
    pub fn any(&self) -> bool {
        !self.lock().running.is_empty()
    }

    /// Stops run `id`; false if it is over (or never was).
    pub fn cancel(&self, id: u64) -> bool {
        let stopper = self.lock().running.get(&id).map(|(_, s)| s.clone());
        stopper.is_some_and(|s| s.stop())
    }

    /// Stops every run of `kind`; false if none was running.
    pub fn cancel_kind(&self, kind: RunKind) -> bool {
        let stoppers: Vec<Stopper> =
            self.lock().running.values().filter(|(k, _)| *k == kind).map(|(_, s)| s.clone()).collect();
        // Every one is stopped, not just the first.
        let mut any = false;
        for s in &stoppers {
            any |= s.stop();
        }
        any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_stopped_by_id_or_kind_and_leave_when_they_end() {
        let runs = Runs::default();
        assert!(!runs.cancel(1) && !runs.any(), "nothing runs yet");
        let flag = Arc::new(AtomicBool::new(false));
        let bench = runs.register_only(RunKind::Bench, Stopper::Flag(Arc::clone(&flag))).unwrap();
        assert_eq!(
            runs.register_only(RunKind::Bench, Stopper::Flag(Arc::default())).err(),
            Some(AlreadyRunning { kind: RunKind::Bench })
        );
        let token = CancellationToken::new();
        let chat = runs.register(RunKind::Chat, Stopper::Token(token.clone()));
        assert_ne!(chat.id(), bench.id());
        assert!(runs.any());
        assert!(runs.cancel(chat.id()) && token.is_cancelled());
        assert!(!flag.load(Ordering::Relaxed), "only that run");
        assert!(runs.cancel_kind(RunKind::Bench) && flag.load(Ordering::Relaxed));
        assert!(!runs.cancel_kind(RunKind::Pull));
        let id = chat.id();
        drop(chat);
        assert!(!runs.cancel(id), "an ended run is gone");
        drop(bench);
        assert!(!runs.any(), "every run ended");
        assert!(runs.register_only(RunKind::Bench, Stopper::Flag(Arc::default())).is_ok(), "free again");
    }
}
