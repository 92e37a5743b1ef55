//! The starter shelf: real models with their fit on this Mac, before any
//! download (`shelf_list`), and their records read again from the hub
//! (`shelf_refresh`). Pulling one is `model_pull`.

use headroom_hub::{Endpoint, HfToken, HubClient};
use serde::Serialize;
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::shelf::{self, Refreshed, ShelfEntry};
use crate::state::AppState;

/// The shelf, what fits first, each with its verdict at the app's context limit.
#[tauri::command]
pub async fn shelf_list(state: State<'_, AppState>) -> Result<Vec<ShelfEntry>, CommandError> {
    let state = AppState::clone(&state);
    tauri::async_runtime::spawn_blocking(move || shelf::for_app(&state))
        .await
        .map_err(|e| {
            CommandError::new(ErrorCode::EngineInternal, format!("Reading the shelf stopped unexpectedly: {e}"))
        })?
        .map_err(CommandError::from)
}

/// What `shelf_refresh` resolves to: the shelf read again, and the repos
/// the hub could not give (each keeps its older record).
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct ShelfRefresh {
    pub entries: Vec<ShelfEntry>,
    pub failed: Vec<CommandError>,
}

/// Reads each shelf repo's config and weight headers from the hub at
/// `$HF_ENDPOINT` (nothing else is downloaded), then lists the shelf. Unless
/// `force`, a repo read in the last week is not asked again (the popover
/// calls this at start, in the background), and nothing is asked at all
/// when "Check the hub for updates" (`check_hub_updates`) is off. The reads
/// are anonymous; the user's token goes only to a gated repo that refused.
#[tauri::command]
pub async fn shelf_refresh(force: Option<bool>, state: State<'_, AppState>) -> Result<ShelfRefresh, CommandError> {
    let state = AppState::clone(&state);
    let force = force.unwrap_or(false);
    let outcomes = if force || state.settings().check_hub_updates {
        let client = HubClient::new(Endpoint::from_env()?)?;
        let token = HfToken::from_env()?;
        let fresh_for = (!force).then_some(shelf::FRESH_FOR);
        let cache_root = crate::pull::cache_root(&state.locations.hub)?;
        shelf::refresh(&client, token.as_ref(), &state.locations.data_dir, &cache_root, fresh_for).await?
    } else {
        Vec::new()
    };
    let failed = outcomes
        .into_iter()
        .filter_map(|(_, r)| match r {
            Refreshed::Failed(e) => Some(CommandError::from(e)),
            Refreshed::Read { .. } | Refreshed::StillFresh => None,
        })
        .collect();
    let entries = tauri::async_runtime::spawn_blocking(move || shelf::for_app(&state)).await.map_err(|e| {
        CommandError::new(ErrorCode::EngineInternal, format!("Reading the shelf stopped unexpectedly: {e}"))
    })??;
    Ok(ShelfRefresh { entries, failed })
}
