//! Settings → Two Macs on the host: find the Macs lending themselves on
//! this network (Bonjour) and pair with one by the code it shows, which
//! makes it the peer Mac (crate::peers); list the Macs it paired with and
//! forget one.

use std::time::Duration;

use headroom_core::settings::Settings;
use serde::Serialize;
use tauri::{AppHandle, Runtime, State};

use crate::error::{CommandError, ErrorCode};
use crate::peers::{self, Lender, PairedLender};
use crate::state::AppState;

/// How long the Settings listen for lenders: they answer within a second
/// on a LAN, and the user waits for the list.
const LISTEN: Duration = Duration::from_secs(2);

/// A pairing made from the Settings.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct PeerPaired {
    /// The lender's machine name.
    pub machine: String,
    /// Whether the lender's owner had allowed this Mac already (else they
    /// are asked there, and the split waits for their answer).
    pub allowed: bool,
    /// The settings as stored, the lender now the peer Mac.
    pub settings: Settings,
}

/// The Macs lending themselves on this network, each marked if this Mac paired with it.
#[tauri::command]
pub async fn peers_find(state: State<'_, AppState>) -> Result<Vec<Lender>, CommandError> {
    let dir = state.locations.data_dir.clone();
    let lending_on = state.lending_port();
    tauri::async_runtime::spawn_blocking(move || peers::find(&dir, LISTEN, lending_on))
        .await
        .map_err(|e| CommandError::new(ErrorCode::PeerFindFailed, format!("Looking for lending Macs stopped: {e}")))?
        .map_err(CommandError::from)
}

/// Pairs with the lender at `address` using the `code` it shows, pins its
/// key, and sets the peer Mac to that address.
#[tauri::command]
pub async fn peer_pair<R: Runtime>(
    app: AppHandle<R>,
    address: String,
    code: String,
    state: State<'_, AppState>,
) -> Result<PeerPaired, CommandError> {
    let (dir, at) = (state.locations.data_dir.clone(), address.clone());
    let paired = tauri::async_runtime::spawn_blocking(move || peers::pair(&dir, &at, &code))
        .await
        .map_err(|e| CommandError::new(ErrorCode::PeerPairFailed, format!("Pairing stopped: {e}")))??;
    let mut settings = state.store.settings().await?;
    settings.peer = Some(address);
    let settings = super::sessions::save(&app, &state, settings).await?;
    Ok(PeerPaired { machine: paired.machine, allowed: paired.allowed, settings })
}

/// The lenders this Mac paired with.
#[tauri::command]
pub fn peers_paired(state: State<'_, AppState>) -> Vec<PairedLender> {
    peers::list(&state.locations.data_dir)
}

/// Forgets the pairing with `address` (its key opens nothing from here);
/// false if there was none.
#[tauri::command]
pub fn peer_forget(address: String, state: State<'_, AppState>) -> Result<bool, CommandError> {
    peers::forget(&state.locations.data_dir, &address)
        .map_err(|e| CommandError::new(ErrorCode::PeerPairFailed, format!("The pairing could not be forgotten: {e}")))
}
