//! Where the app keeps and finds things: its data folder (the same one
//! for the app, the CLI and a lend child), the Hugging Face caches, the
//! bundled model.

use std::path::PathBuf;

use headroom_core::format::hf_cache::HubEnv;

/// The folder under the app's data folder that holds models Headroom owns.
pub const MODELS_DIR: &str = "models";

/// Where the app keeps and finds things.
#[derive(Debug, Clone)]
pub struct Locations {
    /// `$HEADROOM_DATA_DIR`, else Tauri's app data folder.
    pub data_dir: PathBuf,
    pub hub: HubEnv,
    /// The real model a fresh install starts with (`crate::default_model`);
    /// `None` where there is none, and in tests, which start from the
    /// random-weight demo model.
    pub default_model: Option<PathBuf>,
}

impl Locations {
    /// `$HEADROOM_DATA_DIR`, else `app_data_dir()`; the process's HF cache variables.
    pub fn from_env<E>(app_data_dir: impl FnOnce() -> Result<PathBuf, E>) -> Result<Self, E> {
        let data_dir = match std::env::var_os(crate::DATA_DIR_ENV).filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => app_data_dir()?,
        };
        Ok(Self { data_dir, hub: HubEnv::from_process(), default_model: crate::default_model::bundled() })
    }
}

/// The bundle identifier in tauri.conf.json, which names the app's folders.
pub fn app_identifier() -> String {
    let conf: serde_json::Value = serde_json::from_str(include_str!("../../../tauri.conf.json")).unwrap_or_default();
    conf["identifier"].as_str().unwrap_or_default().to_owned()
}

/// Tauri's app data folder without a running app (the CLI has none): the
/// platform data folder joined with the bundle identifier, which is what
/// `app.path().app_data_dir()` resolves to. `None` if the platform has none.
pub fn platform_app_data_dir() -> Option<PathBuf> {
    Some(dirs::data_dir()?.join(app_identifier()))
}
