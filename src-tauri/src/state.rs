//! AppState: the cheap handles every command can reach.

use headroom_engine::BackendInfo;

/// Shared by all commands through `tauri::State`. Holds handles, not data
/// that needs locking; later issues add the engine handle, store and router.
#[derive(Debug, Clone)]
pub struct AppState {
    pub backend: BackendInfo,
}

impl AppState {
    pub fn new() -> Self {
        Self { backend: headroom_engine::backend_info() }
    }
}

impl Default for AppState {
    fn default() -> Self {
        Self::new()
    }
}
