//! Settings → Two Macs → "Lend this Mac": start and stop the lender
//! (crate::lend, in this process), and say where it listens.

use std::sync::PoisonError;

use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::lend::{self, LendStatus};
use crate::state::AppState;

/// Lends this Mac (on every interface, port 7070); if it is lent already, says where.
#[tauri::command]
pub async fn lend_start(state: State<'_, AppState>) -> Result<LendStatus, CommandError> {
    let state = AppState::clone(&state);
    tauri::async_runtime::spawn_blocking(move || {
        let mut slot = state.lending.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = slot.as_ref() {
            return Ok(l.status.clone());
        }
        let config = lend::LendConfig::for_app(&state.locations.data_dir, lend::LEND_PORT)
            .map_err(|e| CommandError::new(ErrorCode::LendFailed, e.to_string()))?;
        let lending = lend::start(config, Box::new(|event| tracing::info!("lend: {event:?}")))
            .map_err(|e| CommandError::new(ErrorCode::LendFailed, e.to_string()))?;
        let status = lending.status.clone();
        *slot = Some(lending);
        Ok(status)
    })
    .await
    .map_err(|e| CommandError::new(ErrorCode::LendFailed, format!("Lending stopped unexpectedly: {e}")))?
}

/// Stops lending (a session running ends); false if it was not lent.
#[tauri::command]
pub fn lend_stop(state: State<'_, AppState>) -> bool {
    state.lending.lock().unwrap_or_else(PoisonError::into_inner).take().is_some()
}

/// Where this Mac is lent, or null.
#[tauri::command]
pub fn lend_status(state: State<'_, AppState>) -> Option<LendStatus> {
    state.lending.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|l| l.status.clone())
}
