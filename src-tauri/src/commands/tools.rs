//! Settings → Tools and the approval sheet: the MCP servers of `mcp.json`
//! (their state, their tools, each tool's switches), starting them again
//! after the file changed, and the user's answer to a call that waits.
//! Thin over `headroom_app::tools`.

use tauri::State;

use crate::error::CommandError;
use crate::state::AppState;
use headroom_app::tools::{Approval, ToolFlags, ToolsView};

/// Every configured server, its state and its tools.
#[tauri::command]
pub fn tools_list(state: State<'_, AppState>) -> ToolsView {
    state.tools.view()
}

/// Reads `mcp.json` again and starts its servers; resolves once each has
/// started or failed (each within its deadline).
#[tauri::command]
pub async fn tools_restart(state: State<'_, AppState>) -> Result<ToolsView, CommandError> {
    Ok(state.tools.restart().await)
}

/// Sets one tool's switches (on, always allow, results are private).
#[tauri::command]
pub fn tool_set_flags(
    server: String,
    tool: String,
    flags: ToolFlags,
    state: State<'_, AppState>,
) -> Result<ToolsView, CommandError> {
    Ok(state.tools.set_flags(&server, &tool, flags)?)
}

/// The user's answer to the call `call_id` of run `run_id`; false when
/// nothing waits for it (stopped, or answered already).
#[tauri::command]
pub fn tool_answer(run_id: u64, call_id: String, answer: Approval, state: State<'_, AppState>) -> bool {
    state.tools.answer(run_id, &call_id, answer)
}
