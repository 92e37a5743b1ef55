//! Settings → Two Macs → "Lend this Mac": start and stop the lender
//! (crate::lend, in this process), say where it listens and its code, and
//! answer "Allow <host> to use this Mac?" for a host that paired; list the
//! paired hosts and revoke one (`lend_answer` with allow false).

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
            return l.status().map_err(|e| CommandError::new(ErrorCode::LendFailed, e.to_string()));
        }
        let config = lend::LendConfig::for_app(&state.locations.data_dir, lend::LEND_PORT)
            .map_err(|e| CommandError::new(ErrorCode::LendFailed, e.to_string()))?;
        let lending = lend::start(config, Box::new(|event| tracing::info!("lend: {event:?}")))
            .map_err(|e| CommandError::new(ErrorCode::LendFailed, e.to_string()))?;
        let status = lending.status().map_err(|e| CommandError::new(ErrorCode::LendFailed, e.to_string()))?;
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

/// Where this Mac is lent, its code now and the hosts waiting for an
/// answer, or null.
#[tauri::command]
pub fn lend_status(state: State<'_, AppState>) -> Option<LendStatus> {
    state.lending.lock().unwrap_or_else(PoisonError::into_inner).as_ref().and_then(|l| l.status().ok())
}

/// The hosts this Mac paired with as a lender (allowed or waiting).
#[tauri::command]
pub fn lend_hosts(state: State<'_, AppState>) -> Vec<lend::pairing::PairedHost> {
    lend::pairing::hosts(&state.locations.data_dir.join(lend::LENT_TO_FILE))
}

/// The owner's answer for the paired host with `key`: allowed, or forgotten
/// (also how a host is revoked); false if no such host paired.
#[tauri::command]
pub fn lend_answer(key: String, allow: bool, state: State<'_, AppState>) -> Result<bool, CommandError> {
    lend::pairing::answer(&state.locations.data_dir.join(lend::LENT_TO_FILE), &key, allow)
        .map_err(|e| CommandError::new(ErrorCode::LendFailed, e.to_string()))
}
