//! What the app is and runs on.

use tauri::State;

use crate::about::AppInfo;
use crate::state::AppState;

#[tauri::command]
pub fn app_info(state: State<'_, AppState>) -> AppInfo {
    AppInfo::from_backend(&state.backend)
}
