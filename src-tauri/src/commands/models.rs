//! The model picker: what is on this Mac, and loading one.

use headroom_core::kv::KvFormat;
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::models::{self, LoadResult, ModelEntry};
use crate::state::AppState;

/// Every model, each with its fit verdict at the app's context limit.
#[tauri::command]
pub async fn models_list(state: State<'_, AppState>) -> Result<Vec<ModelEntry>, CommandError> {
    // Reading headers and the OS's figures touches the disk: off the UI thread.
    let state = AppState::clone(&state);
    tauri::async_runtime::spawn_blocking(move || models::entries(&state)).await.map_err(|e| {
        CommandError::new(ErrorCode::EngineInternal, format!("Listing the models stopped unexpectedly: {e}"))
    })
}

/// Loading takes seconds: it runs on a blocking thread, not the UI's. A
/// model that would swap is refused (`MODEL_TOO_LARGE`, with the numbers in
/// `details`) unless `override` is true; `contextLimit` loads it with a
/// smaller (or larger) context than the app's, `kv` with another KV-cache
/// format (`{"kind":"quantized","bits":8,"group_size":64,"start":0}`).
#[tauri::command]
pub async fn model_load(
    id: String,
    context_limit: Option<usize>,
    kv: Option<KvFormat>,
    r#override: Option<bool>,
    across_peer: Option<bool>,
    state: State<'_, AppState>,
) -> Result<LoadResult, CommandError> {
    let state = AppState::clone(&state);
    let override_fit = r#override.unwrap_or(false);
    if let Some(kv) = kv {
        // Deserialized, so not yet checked against what MLX supports.
        let q = kv.quant();
        KvFormat::from_parts(q.map(|q| u64::from(q.bits)), q.map(|q| u64::from(q.group_size)), q.map(|q| q.start))
            .map_err(|e| CommandError::new(ErrorCode::InvalidSetting, e.to_string()))?;
    }
    tauri::async_runtime::spawn_blocking(move || {
        models::load(&state, &id, context_limit, kv, override_fit, across_peer.unwrap_or(false))
    })
    .await
    .map_err(|e| CommandError::new(ErrorCode::EngineInternal, format!("Loading stopped unexpectedly: {e}")))?
    .map_err(CommandError::from)
}
