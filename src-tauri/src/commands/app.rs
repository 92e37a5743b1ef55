//! What the app is and runs on; the foundation's round trip from the UI.

use serde::Serialize;
use tauri::State;

use crate::error::CommandError;
use crate::state::AppState;

/// Version and platform facts the UI shows in its footer.
#[derive(Debug, Clone, Serialize)]
pub struct AppInfo {
    pub version: &'static str,
    pub mlx_version: String,
    pub device: &'static str,
    pub platform: &'static str,
}

impl AppInfo {
    pub fn from_backend(backend: &headroom_engine::BackendInfo) -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION"),
            mlx_version: backend.mlx_version.clone(),
            device: backend.device.as_str(),
            platform: std::env::consts::OS,
        }
    }

    /// Asks MLX afresh (for the CLI, which has no AppState).
    pub fn current() -> Self {
        Self::from_backend(&headroom_engine::backend_info())
    }
}

#[tauri::command]
pub fn app_info(state: State<'_, AppState>) -> AppInfo {
    AppInfo::from_backend(&state.backend)
}

/// The Rust side's answer to a message while no model is loaded: proof that
/// the text made the trip, with the backend that will run the model.
#[derive(Debug, Clone, Serialize)]
pub struct PingReply {
    pub echo: String,
    pub chars: usize,
    pub version: &'static str,
    pub mlx_version: String,
    pub device: &'static str,
}

#[tauri::command]
pub fn ping(text: String, state: State<'_, AppState>) -> Result<PingReply, CommandError> {
    if text.trim().is_empty() {
        return Err(CommandError::new("EMPTY_MESSAGE", "Type a message first."));
    }
    let info = AppInfo::from_backend(&state.backend);
    Ok(PingReply {
        chars: text.chars().count(),
        echo: text,
        version: info.version,
        mlx_version: info.mlx_version,
        device: info.device,
    })
}
