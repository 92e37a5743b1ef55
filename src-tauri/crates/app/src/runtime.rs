//! The one async runtime every front end shares: the app hands it Tauri's
//! ([`share`], before anything runs), so commands, turns, the store and the
//! sampler are on one runtime; a process that shares none (the CLI, tests)
//! gets one of its own on first use. Plain threads (a turn's thread, a
//! blocking command, the CLI) run store calls on it with [`block_on`].

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::Handle;
pub use tokio::task::JoinHandle;

static HANDLE: OnceLock<Handle> = OnceLock::new();

/// Makes `handle` the runtime everything here runs on. Only the first call
/// counts, and only before anything has used the runtime: returns false
/// when it came too late (the work so far is on another runtime).
pub fn share(handle: Handle) -> bool {
    HANDLE.set(handle).is_ok()
}

/// The shared runtime's handle (its own, built now, if none was shared).
pub fn handle() -> &'static Handle {
    HANDLE.get_or_init(|| {
        static OWN: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
        OWN.get_or_init(|| {
            // Without a runtime nothing async can run at all: the process
            // cannot do its work, so this is the one place that may stop it.
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("headroom-async")
                .build()
                .expect("cannot start the async runtime")
        })
        .handle()
        .clone()
    })
}

/// Runs `future` to completion from a plain thread (never from inside the runtime).
pub fn block_on<F: Future>(future: F) -> F::Output {
    handle().block_on(future)
}

/// Runs `future` on the shared runtime.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    handle().spawn(future)
}

/// Runs `f` on the runtime's blocking threads.
pub fn spawn_blocking<F, R>(f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    handle().spawn_blocking(f)
}
