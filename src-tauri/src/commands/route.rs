//! The route preview (where the message being typed would run, local or
//! cloud, and why, before it is sent) and the cloud cache's counters. The
//! decision is the one a turn makes (`crate::turn::route`).

use headroom_core::router::{Decision, Force};
use headroom_store::cloud_cache::CacheStats;
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::state::AppState;
use crate::turn::route::{self, Choice};

/// The decision for `text` with the loaded model (its tokenizer counts the
/// tokens; its fit is checked at the needed context) and the cloud the
/// settings name. Without a loaded model, tokens are estimated
/// (`tokensExact: false`). With `session_id`, the stored conversation counts
/// too, as it will when the message is sent.
#[tauri::command]
pub async fn route_preview(
    text: String,
    session_id: Option<String>,
    needs_tools: Option<bool>,
    needs_web: Option<bool>,
    force: Option<Force>,
    allow_sensitive: Option<bool>,
    state: State<'_, AppState>,
) -> Result<Decision, CommandError> {
    let history = match &session_id {
        Some(id) => state.store.history(id).await?,
        None => Vec::new(),
    };
    let state = AppState::clone(&state);
    let choice = Choice {
        needs_tools: needs_tools.unwrap_or(false),
        needs_web: needs_web.unwrap_or(false),
        force,
        allow_sensitive: allow_sensitive.unwrap_or(false),
    };
    // Tokenizing and reading memory figures: off the UI thread.
    tauri::async_runtime::spawn_blocking(move || {
        route::for_state(&state, session_id.as_deref(), &text, &history, choice).map(|r| r.decision)
    })
    .await
    .map_err(|e| CommandError::new(ErrorCode::EngineInternal, format!("The route preview stopped unexpectedly: {e}")))?
    .map_err(CommandError::from)
}

/// Lifetime hits and misses of the cloud-answer cache, and what it holds now.
#[tauri::command]
pub async fn cloud_cache_stats(state: State<'_, AppState>) -> Result<CacheStats, CommandError> {
    Ok(state.store.cache_stats().await?)
}
