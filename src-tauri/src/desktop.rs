//! The desktop conventions of a menu-bar app, wired in `run()`: one instance
//! per user (a second launch shows the first one's popover and exits),
//! links opened in the default browser, launch at login, a global shortcut
//! that shows or hides the popover; and the one-line refusal to start the
//! app where there is no desktop session.

use std::str::FromStr;
use std::sync::{Mutex, PoisonError};

use headroom_core::settings::Settings;
use serde::Serialize;
use tauri::{AppHandle, Builder, Manager, Runtime};
use tauri_plugin_autostart::AutoLaunchManager;
use tauri_plugin_global_shortcut::{GlobalShortcut, Shortcut, ShortcutState};

use crate::popover;

/// The Tauri plugins behind these conventions, in the order they must run.
pub fn with_plugins<R: Runtime>(builder: Builder<R>) -> Builder<R> {
    builder
        // First: a second launch is caught before anything else starts (the
        // engine, the database, a second tray icon, a second server). On
        // Linux it needs a D-Bus session; without one it lets the launch go on.
        .plugin(tauri_plugin_single_instance::init(|app, _argv, _cwd| second_launch(app)))
        // The UI hands links to it (`plugin:opener|open_url`, scoped in
        // capabilities/default.json); the popover itself never navigates.
        .plugin(tauri_plugin_opener::init())
        // A LaunchAgent on macOS (no permission prompt, unlike AppleScript
        // login items), an XDG autostart entry on Linux.
        .plugin(tauri_plugin_autostart::Builder::new().build())
        .plugin(
            tauri_plugin_global_shortcut::Builder::new()
                .with_handler(|app, _shortcut, event| {
                    if event.state == ShortcutState::Pressed {
                        if let Err(e) = popover::toggle(app) {
                            tracing::warn!("the global shortcut could not toggle the popover: {e}");
                        }
                    }
                })
                .build(),
        )
}

/// Another `headroom` (no subcommand) was started: it has exited; this one
/// shows its popover instead.
fn second_launch<R: Runtime>(app: &AppHandle<R>) {
    tracing::info!("Headroom was launched again: showing the running one's popover");
    if let Err(e) = popover::show(app, None) {
        tracing::warn!("could not show the popover for a second launch: {e}");
    }
}

/// Set on a launch that started over (see [`start_over_if_the_first_quit`]).
const STARTED_OVER_ENV: &str = "HEADROOM_STARTED_OVER";

/// A second launch found the running instance (its D-Bus name) and asked it
/// to show itself, but it quit at that very moment (no reply): the plugin
/// fails this launch, although it is now the only one. Started over, it
/// takes the lock. Linux only (macOS's lock is a socket that a quitting app
/// stops answering at once); once only, so it cannot loop. Returns only if
/// it did not start over.
pub fn start_over_if_the_first_quit(e: &tauri::Error) {
    if !should_start_over(e, std::env::var_os(STARTED_OVER_ENV).is_some()) {
        return;
    }
    tracing::info!("the running Headroom quit while this launch asked it to show itself ({e}); starting again");
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let Ok(exe) = std::env::current_exe() else { return };
        // Replaces this process: no second one lingers.
        let err = std::process::Command::new(exe).args(std::env::args_os().skip(1)).env(STARTED_OVER_ENV, "1").exec();
        tracing::warn!("could not start again: {err}");
    }
}

fn should_start_over(e: &tauri::Error, started_over_already: bool) -> bool {
    let lost = matches!(e, tauri::Error::PluginInitialization(name, _) if name == "single-instance");
    cfg!(target_os = "linux") && lost && !started_over_already
}

/// Why a desktop setting could not take effect; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    #[error("`{shortcut}` is not a shortcut Headroom can use: {reason}")]
    InvalidShortcut { shortcut: String, reason: String },
    /// (The OS's own words go to the log.)
    #[error("{shortcut} is already taken by another app or by the system, so it cannot open Headroom: pick another shortcut")]
    ShortcutTaken { shortcut: String },
    #[error("{shortcut} could not be set up as Headroom's shortcut ({reason}): pick another shortcut")]
    ShortcutFailed { shortcut: String, reason: String },
    #[error("launch at login could not be turned {}: {detail}", on_off(.enable))]
    LaunchAtLogin { enable: bool, detail: String },
}

fn on_off(on: &bool) -> &'static str {
    if *on {
        "on"
    } else {
        "off"
    }
}

/// A shortcut the user typed, checked: parsed as an accelerator
/// ("Alt+Space", "CmdOrCtrl+Shift+H") and holding at least one modifier,
/// since a bare key taken system-wide would stop working everywhere else.
pub fn parse_shortcut(text: &str) -> Result<Shortcut, DesktopError> {
    let invalid = |reason: String| DesktopError::InvalidShortcut { shortcut: text.to_owned(), reason };
    let shortcut = Shortcut::from_str(text.trim()).map_err(|e| invalid(e.to_string()))?;
    if shortcut.mods.is_empty() {
        return Err(invalid("it needs a modifier (⌥ Alt, ⌃ Ctrl, ⇧ Shift or ⌘ Cmd) and a key".to_owned()));
    }
    Ok(shortcut)
}

/// The global shortcut as it stands: what the settings ask for, whether it
/// is registered, and if not, why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct ShortcutStatus {
    pub shortcut: Option<String>,
    pub registered: bool,
    pub error: Option<String>,
}

/// The desktop state the Settings view shows.
#[derive(Debug, Default)]
pub struct DesktopState {
    shortcut: Mutex<ShortcutStatus>,
}

impl DesktopState {
    pub fn shortcut(&self) -> ShortcutStatus {
        self.shortcut.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn set_shortcut(&self, status: ShortcutStatus) {
        *self.shortcut.lock().unwrap_or_else(PoisonError::into_inner) = status;
    }
}

/// Registers `wanted` as the popover's shortcut in place of `current` (both
/// as stored in the settings). If it cannot be registered, `current` stays
/// registered and the error says why. Without the plugin (unit tests on a
/// mock runtime) only the parsing is checked.
fn set_shortcut<R: Runtime>(
    app: &AppHandle<R>,
    current: Option<&str>,
    wanted: Option<&str>,
) -> Result<(), DesktopError> {
    let parsed = wanted.map(parse_shortcut).transpose()?;
    let Some(plugin) = app.try_state::<GlobalShortcut<R>>() else { return Ok(()) };
    let state = app.try_state::<DesktopState>();
    let before = state.as_ref().map(|s| s.shortcut()).unwrap_or_default();
    if before.registered && before.shortcut.as_deref() == wanted {
        return Ok(());
    }
    let old = current.and_then(|c| parse_shortcut(c).ok());
    if let Some(old) = old.filter(|old| plugin.is_registered(*old)) {
        if let Err(e) = plugin.unregister(old) {
            tracing::warn!("could not unregister the global shortcut {old}: {e}");
        }
    }
    let Some((shortcut, text)) = parsed.zip(wanted) else {
        if let Some(s) = state {
            s.set_shortcut(ShortcutStatus::default());
        }
        return Ok(());
    };
    match plugin.register(shortcut) {
        Ok(()) => {
            if let Some(s) = state {
                s.set_shortcut(ShortcutStatus { shortcut: Some(text.to_owned()), registered: true, error: None });
            }
            Ok(())
        }
        Err(e) => {
            tracing::info!("the global shortcut {text} could not be registered: {e}");
            // The plugin hands global-hotkey's errors over as text; "already
            // registered" is the grab another client holds (X11's BadAccess).
            let reason = e.to_string();
            let err = if reason.contains("already registered") {
                DesktopError::ShortcutTaken { shortcut: text.to_owned() }
            } else {
                DesktopError::ShortcutFailed { shortcut: text.to_owned(), reason }
            };
            // Put the old one back, so a refused change leaves everything as it was.
            let restored = old.is_some_and(|old| plugin.register(old).is_ok());
            if let Some(s) = state {
                let error = if restored { None } else { before.error };
                s.set_shortcut(ShortcutStatus { shortcut: current.map(str::to_owned), registered: restored, error });
            }
            Err(err)
        }
    }
}

/// Whether Headroom starts at login, as the OS has it; `None` where that
/// cannot be read (no plugin, or the check failed).
pub fn launch_at_login<R: Runtime>(app: &AppHandle<R>) -> Option<bool> {
    app.try_state::<AutoLaunchManager>()?.is_enabled().ok()
}

fn set_launch_at_login<R: Runtime>(app: &AppHandle<R>, enable: bool) -> Result<(), DesktopError> {
    let Some(manager) = app.try_state::<AutoLaunchManager>() else { return Ok(()) };
    if manager.is_enabled().ok() == Some(enable) {
        return Ok(());
    }
    let done = if enable { manager.enable() } else { manager.disable() };
    done.map_err(|e| DesktopError::LaunchAtLogin { enable, detail: e.to_string() })
}

/// Makes the desktop settings that changed from `old` to `new` take effect
/// (only those: a stored shortcut another app holds must not block saving
/// an unrelated field). On an error nothing changed (a new shortcut that
/// could not be taken leaves the old one working), and the caller stores
/// nothing.
pub fn apply<R: Runtime>(app: &AppHandle<R>, old: &Settings, new: &Settings) -> Result<(), DesktopError> {
    let shortcut_changed = old.global_shortcut != new.global_shortcut;
    if shortcut_changed {
        set_shortcut(app, old.global_shortcut.as_deref(), new.global_shortcut.as_deref())?;
    }
    if old.launch_at_login != new.launch_at_login {
        if let Err(e) = set_launch_at_login(app, new.launch_at_login) {
            // Undo the shortcut change too: the settings are stored all or nothing.
            if shortcut_changed {
                if let Err(undo) = set_shortcut(app, new.global_shortcut.as_deref(), old.global_shortcut.as_deref()) {
                    tracing::warn!("could not restore the global shortcut: {undo}");
                }
            }
            return Err(e);
        }
    }
    Ok(())
}

/// At start: registers the stored shortcut (a failure is kept for the
/// Settings view and logged, the app runs on) and returns the settings
/// with `launch_at_login` as the OS has it (the user may have removed the
/// login item in System Settings since).
pub fn start<R: Runtime>(app: &AppHandle<R>, settings: &Settings) -> Settings {
    app.manage(DesktopState::default());
    let wanted = settings.global_shortcut.as_deref();
    if let Err(e) = set_shortcut(app, None, wanted) {
        tracing::warn!("the global shortcut is not available: {e}");
        if let Some(state) = app.try_state::<DesktopState>() {
            state.set_shortcut(ShortcutStatus {
                shortcut: wanted.map(str::to_owned),
                registered: false,
                error: Some(e.to_string()),
            });
        }
    }
    let mut settings = settings.clone();
    if let Some(enabled) = launch_at_login(app) {
        settings.launch_at_login = enabled;
    }
    settings
}

/// Where the app cannot open a window: Linux (and the other X11/Wayland
/// systems) with neither `DISPLAY` nor `WAYLAND_DISPLAY` set, e.g. over SSH.
/// GTK would panic deep inside tao; this says so in one line instead.
pub fn missing_desktop_session(display: Option<&str>, wayland_display: Option<&str>) -> Option<&'static str> {
    let set = |v: Option<&str>| v.is_some_and(|v| !v.is_empty());
    if cfg!(any(target_os = "macos", windows)) || set(display) || set(wayland_display) {
        return None;
    }
    Some(
        "headroom: the menu-bar app needs a desktop session, and neither DISPLAY nor WAYLAND_DISPLAY is set: \
         start it from a desktop, or under a virtual display (`xvfb-run make run`); \
         the command line works without one (`headroom --help`)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortcuts_parse_with_a_modifier_and_a_key_or_say_why_not() {
        let s = parse_shortcut("Alt+Space").unwrap();
        assert_eq!(
            s,
            Shortcut::new(
                Some(tauri_plugin_global_shortcut::Modifiers::ALT),
                tauri_plugin_global_shortcut::Code::Space
            )
        );
        assert!(parse_shortcut(" CmdOrCtrl+Shift+H ").is_ok());
        let bare = parse_shortcut("Space").unwrap_err().to_string();
        assert!(bare.contains("`Space`") && bare.contains("needs a modifier"), "{bare}");
        let junk = parse_shortcut("Alt+Nope").unwrap_err().to_string();
        assert!(junk.starts_with("`Alt+Nope` is not a shortcut Headroom can use"), "{junk}");
        assert!(parse_shortcut("").is_err());
    }

    #[test]
    fn the_app_refuses_to_start_without_a_display_in_one_line_that_points_to_the_cli() {
        let missing = missing_desktop_session(None, None);
        if cfg!(target_os = "linux") {
            let line = missing.unwrap();
            assert!(!line.contains('\n'));
            assert!(line.contains("xvfb-run make run") && line.contains("headroom --help"), "{line}");
            assert_eq!(missing_desktop_session(Some(""), Some("")), missing, "empty is unset");
        }
        assert_eq!(missing_desktop_session(Some(":0"), None), None);
        assert_eq!(missing_desktop_session(None, Some("wayland-0")), None);
    }

    #[test]
    fn a_launch_whose_first_instance_quit_meanwhile_starts_over_once() {
        let lost = || {
            tauri::Error::PluginInitialization(
                "single-instance".into(),
                "failed to forward arguments to the running instance: org.freedesktop.DBus.Error.NoReply".into(),
            )
        };
        assert_eq!(should_start_over(&lost(), false), cfg!(target_os = "linux"));
        assert!(!should_start_over(&lost(), true), "once only");
        let other = tauri::Error::PluginInitialization("global-shortcut".into(), "no X".into());
        assert!(!should_start_over(&other, false));
        assert!(!should_start_over(&tauri::Error::WindowNotFound, false));
    }

    #[test]
    fn without_the_plugins_desktop_settings_only_validate() {
        // A mock runtime has no global-shortcut or autostart plugin: a valid
        // change goes through, an invalid shortcut is still refused.
        let app = tauri::test::mock_app();
        let old = Settings::default();
        let new = Settings { global_shortcut: Some("Ctrl+Alt+H".into()), launch_at_login: true, ..Settings::default() };
        assert!(apply(app.handle(), &old, &new).is_ok());
        let bad = Settings { global_shortcut: Some("H".into()), ..Settings::default() };
        assert!(matches!(apply(app.handle(), &old, &bad), Err(DesktopError::InvalidShortcut { .. })));
        // Only what changed is applied: an unusable stored shortcut does not block other fields.
        let stored = Settings { global_shortcut: Some("H".into()), ..Settings::default() };
        let other = Settings { max_tokens: 64, ..stored.clone() };
        assert!(apply(app.handle(), &stored, &other).is_ok());
        assert_eq!(launch_at_login(app.handle()), None);
    }
}
