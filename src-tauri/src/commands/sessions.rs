//! Sessions and settings: list, create, rename, delete, search, read (with
//! stats), export, import; read and write the settings.

use headroom_core::settings::Settings;
use headroom_store::{SearchHit, Session, SessionExport, SessionSummary, StoreError, StoredMessage};
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::state::AppState;

#[tauri::command]
pub async fn sessions_list(state: State<'_, AppState>) -> Result<Vec<SessionSummary>, CommandError> {
    Ok(state.store.list_sessions().await?)
}

/// A new session titled `title`, else after `first_message` (the store's
/// rule, as for sessions the CLI creates), else "New chat".
#[tauri::command]
pub async fn session_create(
    title: Option<String>,
    first_message: Option<String>,
    state: State<'_, AppState>,
) -> Result<Session, CommandError> {
    let title = title.or_else(|| first_message.as_deref().map(headroom_store::title_from));
    Ok(state.store.create_session(title.as_deref().unwrap_or("New chat")).await?)
}

#[tauri::command]
pub async fn session_rename(
    session_id: String,
    title: String,
    state: State<'_, AppState>,
) -> Result<Session, CommandError> {
    Ok(state.store.rename_session(&session_id, &title).await?)
}

/// Also frees the session's KV cache in the engine. False if there was none.
#[tauri::command]
pub async fn session_delete(session_id: String, state: State<'_, AppState>) -> Result<bool, CommandError> {
    let deleted = state.store.delete_session(&session_id).await?;
    // The engine may be stopped (app quitting); the rows are gone either way.
    let _ = state.engine.drop_session(&session_id);
    Ok(deleted)
}

#[tauri::command]
pub async fn session_search(text: String, state: State<'_, AppState>) -> Result<Vec<SearchHit>, CommandError> {
    Ok(state.store.search_sessions(&text).await?)
}

#[tauri::command]
pub async fn session_messages(
    session_id: String,
    state: State<'_, AppState>,
) -> Result<Vec<StoredMessage>, CommandError> {
    if state.store.session(&session_id).await?.is_none() {
        return Err(StoreError::SessionNotFound(session_id).into());
    }
    Ok(state.store.messages(&session_id).await?)
}

/// `format`: "md" or "json".
#[tauri::command]
pub async fn session_export(
    session_id: String,
    format: String,
    state: State<'_, AppState>,
) -> Result<String, CommandError> {
    match format.as_str() {
        "md" => Ok(state.store.export_markdown(&session_id).await?),
        "json" => Ok(state.store.export_json(&session_id).await?),
        other => {
            Err(CommandError::new(ErrorCode::InvalidInput, format!("Unknown export format `{other}`: use md or json.")))
        }
    }
}

/// `json`: the text of a JSON export. Returns the session as stored (its id
/// gets a suffix if taken).
#[tauri::command]
pub async fn session_import(json: String, state: State<'_, AppState>) -> Result<Session, CommandError> {
    let export = SessionExport::from_json(&json)?;
    Ok(state.store.import_session(&export).await?)
}

#[tauri::command]
pub async fn settings_get(state: State<'_, AppState>) -> Result<Settings, CommandError> {
    Ok(state.store.settings().await?)
}

/// Validates and stores every field; the context limit and the OS headroom
/// apply to the next fit check and load, the global shortcut and the login
/// item at once (a shortcut another app holds is refused, nothing stored).
#[tauri::command]
pub async fn settings_set<R: tauri::Runtime>(
    app: tauri::AppHandle<R>,
    settings: Settings,
    state: State<'_, AppState>,
) -> Result<Settings, CommandError> {
    save(&app, &state, settings).await
}

/// What `settings_set` does, for a command that changes a setting itself
/// (`peer_pair` names the peer it paired with): validate, apply the
/// desktop's, store, apply the rest; all or nothing.
pub(crate) async fn save<R: tauri::Runtime>(
    app: &tauri::AppHandle<R>,
    state: &AppState,
    settings: Settings,
) -> Result<Settings, CommandError> {
    settings.validate().map_err(headroom_store::StoreError::from)?;
    let old = state.store.settings().await?;
    crate::desktop::apply(app, &old, &settings)?;
    if let Err(e) = state.save_settings(&settings).await {
        if let Err(undo) = crate::desktop::apply(app, &settings, &old) {
            tracing::warn!("could not undo the desktop settings: {undo}");
        }
        return Err(e.into());
    }
    Ok(settings)
}
