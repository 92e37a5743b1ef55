//! The popover window, as the UI asks for it (Esc hides it).

use crate::error::CommandError;

#[tauri::command]
pub fn hide_window<R: tauri::Runtime>(window: tauri::WebviewWindow<R>) -> Result<(), CommandError> {
    Ok(window.hide()?)
}
