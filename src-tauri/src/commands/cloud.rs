//! The cloud endpoint's API key: store, ask about, delete. Keys live in the
//! OS keychain, or, where none answers, in a file only the user can read;
//! the UI is told which.

use std::path::Path;

use headroom_cloud::{ApiKey, KeyStorage, KeyStore};
use serde::Serialize;
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::state::AppState;

/// Whether a key is stored for an endpoint, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct KeyStatus {
    pub stored: bool,
    /// `None` when no key is stored.
    pub storage: Option<KeyStorage>,
}

/// Stores `key` for `base_url`, replacing any earlier one; says where.
#[tauri::command]
pub async fn cloud_key_set(
    base_url: String,
    key: String,
    state: State<'_, AppState>,
) -> Result<KeyStorage, CommandError> {
    let dir = state.locations.data_dir.clone();
    blocking(move || set(&dir, &base_url, &key)).await
}

/// Whether a key is stored for `base_url` (the key itself never leaves the backend).
#[tauri::command]
pub async fn cloud_key_status(base_url: String, state: State<'_, AppState>) -> Result<KeyStatus, CommandError> {
    let dir = state.locations.data_dir.clone();
    blocking(move || status(&dir, &base_url)).await
}

/// Removes the key for `base_url`; false if none was stored.
#[tauri::command]
pub async fn cloud_key_delete(base_url: String, state: State<'_, AppState>) -> Result<bool, CommandError> {
    let dir = state.locations.data_dir.clone();
    blocking(move || Ok(KeyStore::new(&dir).delete(&base_url)?)).await
}

/// Keychain calls block (a D-Bus or Security-framework round trip).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CommandError> + Send + 'static,
) -> Result<T, CommandError> {
    tauri::async_runtime::spawn_blocking(f)
        .await
        .map_err(|e| CommandError::new(ErrorCode::EngineInternal, format!("The key store stopped unexpectedly: {e}")))?
}

fn set(data_dir: &Path, base_url: &str, key: &str) -> Result<KeyStorage, CommandError> {
    Ok(KeyStore::new(data_dir).set(base_url, &ApiKey::new(key.trim()))?)
}

fn status(data_dir: &Path, base_url: &str) -> Result<KeyStatus, CommandError> {
    let found = KeyStore::new(data_dir).get(base_url)?;
    Ok(KeyStatus { stored: found.is_some(), storage: found.map(|(_, storage)| storage) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_set_reported_and_deleted_per_endpoint() {
        let dir = crate::test_state("cloud-keys").locations.data_dir;
        let url = "http://127.0.0.1:9/v1";
        assert_eq!(status(&dir, url).ok(), Some(KeyStatus { stored: false, storage: None }));
        let storage = set(&dir, url, "  sk-test-123\n").unwrap();
        assert_eq!(status(&dir, url).ok(), Some(KeyStatus { stored: true, storage: Some(storage) }));
        let stored = KeyStore::new(&dir).get(url).ok().flatten().map(|(k, _)| k.expose().to_owned());
        assert_eq!(stored.as_deref(), Some("sk-test-123"), "stored trimmed");
        assert_eq!(status(&dir, "http://127.0.0.1:10/v1").map(|s| s.stored).ok(), Some(false), "keys are per endpoint");

        let err = set(&dir, url, "   ").err().map(|e| e.code);
        assert_eq!(err, Some(ErrorCode::CloudKeyEmpty));
        assert_eq!(KeyStore::new(&dir).delete(url).ok(), Some(true));
        assert_eq!(KeyStore::new(&dir).delete(url).ok(), Some(false));
        assert_eq!(status(&dir, url).map(|s| s.stored).ok(), Some(false));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
