//! What the app is and runs on: the footer's facts, and `headroom backend`'s.

use serde::Serialize;

/// Version and platform facts.
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
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
