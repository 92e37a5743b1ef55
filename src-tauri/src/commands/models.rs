//! The model picker: what is on this Mac, and loading one.

use tauri::State;

use crate::error::CommandError;
use crate::models::{self, ModelEntry};
use crate::state::AppState;

#[tauri::command]
pub fn models_list(state: State<'_, AppState>) -> Vec<ModelEntry> {
    models::entries(&state)
}

/// Loading takes seconds: it runs on a blocking thread, not the UI's.
#[tauri::command]
pub async fn model_load(id: String, state: State<'_, AppState>) -> Result<ModelEntry, CommandError> {
    let state = AppState::clone(&state);
    tauri::async_runtime::spawn_blocking(move || models::load(&state, &id))
        .await
        .map_err(|e| CommandError::new("ENGINE_INTERNAL", format!("Loading stopped unexpectedly: {e}")))?
}
