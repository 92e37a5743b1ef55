//! The popover window: shown from the tray, hidden (never closed) otherwise.

use tauri::{AppHandle, Manager, Runtime, Window, WindowEvent};

use crate::platform::{self, TrayAnchor};
use crate::MAIN_WINDOW;

fn main_window<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<tauri::WebviewWindow<R>> {
    app.get_webview_window(MAIN_WINDOW).ok_or(tauri::Error::WindowNotFound)
}

/// Shows the popover, placed under the tray icon where the platform knows where that is.
pub fn show<R: Runtime>(app: &AppHandle<R>, anchor: Option<TrayAnchor>) -> tauri::Result<()> {
    let window = main_window(app)?;
    platform::place(&window, anchor)?;
    window.show()?;
    window.unminimize()?;
    window.set_focus()
}

/// Shows a hidden popover, hides a visible one (a left click on the menu-bar icon on macOS).
pub fn toggle<R: Runtime>(app: &AppHandle<R>, anchor: Option<TrayAnchor>) -> tauri::Result<()> {
    let window = main_window(app)?;
    if window.is_visible()? {
        window.hide()
    } else {
        show(app, anchor)
    }
}

/// Closing the popover hides it: the app lives in the menu bar until Quit.
pub fn on_window_event<R: Runtime>(window: &Window<R>, event: &WindowEvent) {
    match event {
        WindowEvent::CloseRequested { api, .. } => {
            api.prevent_close();
            if let Err(e) = window.hide() {
                tracing::warn!("could not hide the popover: {e}");
            }
        }
        WindowEvent::Focused(false) if platform::HIDES_ON_BLUR => {
            if let Err(e) = window.hide() {
                tracing::warn!("could not hide the popover: {e}");
            }
        }
        _ => {}
    }
}
