//! The one async runtime, Tauri's (the CLI shares it): plain threads (a
//! turn's thread, a blocking command, the CLI) run store calls on it.

/// Runs `future` to completion on Tauri's runtime from a plain thread.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tauri::async_runtime::block_on(future)
}
