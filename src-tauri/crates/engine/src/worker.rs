//! The engine thread and its handle. One thread owns the loaded model, its
//! tokenizer and the per-session KV caches (MLX arrays are `Send`, not
//! `Sync`, so they must stay on one thread); everyone else talks to it
//! through a cloneable [`EngineHandle`] and gets each run's events on a
//! channel of its own.
//!
//! In three parts: the vocabulary callers use (api.rs), the handle
//! (handle.rs) and the thread (thread.rs).

mod api;
mod handle;
mod thread;

pub use api::{
    internal_tenant, memory_returned, AfterUnload, EngineEvent, GenerateRequest, LoadSettings, ModelInfo,
    OverflowPolicy, PeerReport, PeerTurn, Run, RunId, RunOutput, SavedSessions, SessionsDropped, TurnStats,
    UnloadReport, DEFAULT_CONTEXT_LIMIT, RETURN_TOLERANCE_BYTES,
};
pub use handle::EngineHandle;
pub(crate) use thread::Metering;

#[cfg(test)]
mod tests;
