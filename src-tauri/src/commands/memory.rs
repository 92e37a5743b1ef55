//! Live memory: the ring buffer behind the strip's first paint (each new
//! sample then arrives as the `memory` event), and the latest thing
//! Headroom did to give memory back (each new one arrives as `away`).

use tauri::State;

use crate::memory::{self, MemorySample};
use crate::state::AppState;

/// What Headroom last did to give memory back (dropped the chat caches,
/// unloaded the model, blamed an answer), for a popover opened since.
#[tauri::command]
pub fn away_notice(state: State<'_, AppState>) -> Option<crate::away::Notice> {
    state.away.notice()
}

/// The last minutes of samples, oldest first.
#[tauri::command]
pub fn memory_history(state: State<'_, AppState>) -> Vec<MemorySample> {
    memory::history(&state)
}
