//! What the Settings view shows about the desktop integration: where the
//! log files are, whether the global shortcut works, whether Headroom
//! starts at login. (Changing them goes through `settings_set`.)

use serde::Serialize;
use tauri::{AppHandle, Manager, Runtime};

use crate::desktop::{self, DesktopState, ShortcutStatus};
use crate::logging::Logs;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct DesktopStatus {
    /// The folder the app writes its logs to; null: stderr only.
    pub log_dir: Option<String>,
    /// The newest log file in it.
    pub log_file: Option<String>,
    pub shortcut: ShortcutStatus,
    /// Whether the OS starts Headroom at login; null where that is unknown.
    pub launch_at_login: Option<bool>,
}

#[tauri::command]
pub fn desktop_status<R: Runtime>(app: AppHandle<R>) -> DesktopStatus {
    let logs = app.try_state::<Logs>().map(|l| Logs::clone(&l)).unwrap_or_default();
    let text = |p: std::path::PathBuf| p.display().to_string();
    DesktopStatus {
        log_dir: logs.dir.clone().map(text),
        log_file: logs.current_file().map(text),
        shortcut: app.try_state::<DesktopState>().map(|s| s.shortcut()).unwrap_or_default(),
        launch_at_login: desktop::launch_at_login(&app),
    }
}
