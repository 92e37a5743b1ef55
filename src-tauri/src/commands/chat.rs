//! Chat: send a message (routed local, cloud or cached; the answer streams
//! over a Channel), stop a run.

use headroom_core::router::Force;
use headroom_engine::worker::RunId;
use tauri::ipc::Channel;
use tauri::State;

use crate::chat::{self, ChatEvent, TurnOptions};
use crate::error::CommandError;
use crate::state::AppState;

/// Returns the run id at once; the events follow on `on_event`, the first
/// (`started`) saying where the answer comes from and why.
#[tauri::command]
#[allow(clippy::too_many_arguments)]
pub fn chat_send(
    session_id: String,
    text: String,
    max_tokens: Option<usize>,
    force: Option<Force>,
    allow_sensitive: Option<bool>,
    on_event: Channel<ChatEvent>,
    state: State<'_, AppState>,
) -> Result<u64, CommandError> {
    let options = TurnOptions { max_tokens, force, allow_sensitive: allow_sensitive.unwrap_or(false) };
    let id = chat::start_turn(&state, &session_id, &text, options, move |event| on_event.send(event).is_ok())?;
    Ok(id.0)
}

/// Asks the session's last question again: its last answer (and that
/// question) are taken out of the store, then the question is sent as a new
/// turn, routed like any other. Fails with `NOTHING_TO_REGENERATE` if the
/// session does not end in an answer.
#[tauri::command]
#[allow(clippy::too_many_arguments)]
pub fn chat_regenerate(
    session_id: String,
    max_tokens: Option<usize>,
    force: Option<Force>,
    allow_sensitive: Option<bool>,
    on_event: Channel<ChatEvent>,
    state: State<'_, AppState>,
) -> Result<u64, CommandError> {
    let Some(text) = chat::block_on(state.store.take_back_last_turn(&session_id))? else {
        return Err(CommandError::new("NOTHING_TO_REGENERATE", "This chat has no answer to regenerate yet."));
    };
    chat_send(session_id, text, max_tokens, force, allow_sensitive, on_event, state)
}

/// Stops a run, local or cloud, after the token being computed or received;
/// false if it was already over.
#[tauri::command]
pub fn chat_cancel(run_id: u64, state: State<'_, AppState>) -> bool {
    chat::cancel(&state, RunId(run_id))
}
