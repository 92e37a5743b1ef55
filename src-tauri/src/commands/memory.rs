//! Live memory: the ring buffer behind the strip's first paint (each new
//! sample then arrives as the `memory` event).

use tauri::State;

use crate::memory::{self, MemorySample};
use crate::state::AppState;

/// The last minutes of samples, oldest first.
#[tauri::command]
pub fn memory_history(state: State<'_, AppState>) -> Vec<MemorySample> {
    memory::history(&state)
}
