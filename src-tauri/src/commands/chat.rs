//! Chat: send a message (the answer streams over a Channel), stop a run.

use headroom_engine::worker::RunId;
use tauri::ipc::Channel;
use tauri::State;

use crate::chat::{self, ChatEvent};
use crate::error::CommandError;
use crate::state::AppState;

/// Returns the run id at once; the events follow on `on_event`.
#[tauri::command]
pub fn chat_send(
    session_id: String,
    text: String,
    max_tokens: Option<usize>,
    on_event: Channel<ChatEvent>,
    state: State<'_, AppState>,
) -> Result<u64, CommandError> {
    let id = chat::start_turn(&state, &session_id, text, max_tokens, move |event| on_event.send(event).is_ok())?;
    Ok(id.0)
}

/// Stops a run after the token being computed; false if it was already over.
#[tauri::command]
pub fn chat_cancel(run_id: u64, state: State<'_, AppState>) -> bool {
    state.engine.cancel(RunId(run_id))
}
