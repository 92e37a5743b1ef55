//! Chat: send a message, or ask the last question again (routed local,
//! cloud or cached; the answer streams over a Channel), stop a run. Thin
//! over `crate::turn`; the turn starts off the UI thread (it reads the
//! store, a tokenizer, maybe the keychain).

use headroom_core::router::Force;
use tauri::ipc::Channel;
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::state::AppState;
use crate::turn::{self, Ask, ChatEvent, TurnOptions, TurnRequest};

/// Starts `ask` in `session_id` and resolves to its run id; the events
/// follow on `on_event`, the first (`started`) saying where the answer
/// comes from and why.
async fn start_turn(
    state: &AppState,
    session_id: String,
    ask: Ask,
    options: TurnOptions,
    on_event: Channel<ChatEvent>,
) -> Result<u64, CommandError> {
    let state = AppState::clone(state);
    let request = TurnRequest { session: session_id, ask, options };
    let running = tauri::async_runtime::spawn_blocking(move || {
        turn::start(&state, request, move |event| on_event.send(event).is_ok())
    })
    .await
    .map_err(|e| CommandError::new(ErrorCode::EngineInternal, format!("The turn stopped unexpectedly: {e}")))??;
    Ok(running.run_id)
}

fn options(
    max_tokens: Option<usize>,
    force: Option<Force>,
    allow_sensitive: Option<bool>,
    think: Option<bool>,
) -> TurnOptions {
    TurnOptions {
        max_tokens,
        force,
        allow_sensitive: allow_sensitive.unwrap_or(false),
        think,
        ..TurnOptions::default()
    }
}

/// Sends `text`; see [`start_turn`]. `think`: the chat's Think switch
/// (`None`: the model's thinking setting). With `tool`, the model must call
/// that tool first (an enabled tool of a running MCP server).
#[tauri::command]
#[allow(clippy::too_many_arguments)]
pub async fn chat_send(
    session_id: String,
    text: String,
    max_tokens: Option<usize>,
    force: Option<Force>,
    allow_sensitive: Option<bool>,
    think: Option<bool>,
    tool: Option<String>,
    on_event: Channel<ChatEvent>,
    state: State<'_, AppState>,
) -> Result<u64, CommandError> {
    let options = TurnOptions { tool, ..options(max_tokens, force, allow_sensitive, think) };
    start_turn(&state, session_id, Ask::New(text), options, on_event).await
}

/// Asks the session's last question again, routed like any other. Its last
/// answer is replaced only once the new turn has started; refused (no model,
/// a sensitive question with the cloud forced, the key store, the fit), the
/// chat stays exactly as it was. `NOTHING_TO_REGENERATE` if the session does
/// not end in an answer.
#[tauri::command]
pub async fn chat_regenerate(
    session_id: String,
    max_tokens: Option<usize>,
    force: Option<Force>,
    allow_sensitive: Option<bool>,
    think: Option<bool>,
    on_event: Channel<ChatEvent>,
    state: State<'_, AppState>,
) -> Result<u64, CommandError> {
    start_turn(&state, session_id, Ask::Again, options(max_tokens, force, allow_sensitive, think), on_event).await
}

/// Stops a run, local or cloud, after the token being computed or received;
/// false if it was already over.
#[tauri::command]
pub fn chat_cancel(run_id: u64, state: State<'_, AppState>) -> bool {
    state.runs.cancel(run_id)
}
