//! The popover window, as the UI asks for it (Esc hides it).

use crate::error::CommandError;

#[tauri::command]
pub fn hide_window<R: tauri::Runtime>(app: tauri::AppHandle<R>) -> Result<(), CommandError> {
    Ok(crate::popover::hide(&app)?)
}
