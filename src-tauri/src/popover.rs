//! The popover window: shown from the tray, the global shortcut or a second
//! launch, hidden (never closed) otherwise. [`show`] and [`hide`] are the
//! only places its visibility changes.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tauri::{AppHandle, Manager, Runtime, Window, WindowEvent};

use crate::platform::{self, TrayAnchor};
use crate::MAIN_WINDOW;

/// On macOS the mouse-down on the menu-bar icon takes focus from an open
/// popover, which hides itself (blur), and only then does the click arrive:
/// a click this soon after a blur-hide was that very click, meant to close
/// the popover, and must not reopen it. Longer than a click (~100 ms from
/// press to release), shorter than a deliberate second click.
pub const REOPEN_GUARD: Duration = Duration::from_millis(400);

/// When the popover last hid itself because it lost focus.
#[derive(Debug, Default)]
pub struct PopoverState {
    blur_hidden_at: Mutex<Option<Instant>>,
}

impl PopoverState {
    fn record_blur_hide(&self) {
        *self.blur_hidden_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// How long ago the popover hid on blur, if it did since the last click.
    /// Taken, not read: only the click right after the blur is swallowed.
    fn take_since_blur_hide(&self) -> Option<Duration> {
        self.blur_hidden_at.lock().unwrap_or_else(PoisonError::into_inner).take().map(|at| at.elapsed())
    }
}

/// What a click on the menu-bar icon does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClickAction {
    Show,
    Hide,
    /// The click that just closed the popover by taking its focus.
    Nothing,
}

/// A tray click: hides a visible popover, shows a hidden one, unless it
/// hid itself on blur less than [`REOPEN_GUARD`] ago (`since_blur_hide`).
pub fn click_action(visible: bool, since_blur_hide: Option<Duration>) -> ClickAction {
    if visible {
        ClickAction::Hide
    } else if since_blur_hide.is_some_and(|d| d < REOPEN_GUARD) {
        ClickAction::Nothing
    } else {
        ClickAction::Show
    }
}

fn main_window<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<tauri::WebviewWindow<R>> {
    app.get_webview_window(MAIN_WINDOW).ok_or(tauri::Error::WindowNotFound)
}

/// Shows the popover with the focus, placed under the tray icon where the
/// platform knows where that is.
pub fn show<R: Runtime>(app: &AppHandle<R>, anchor: Option<TrayAnchor>) -> tauri::Result<()> {
    let window = main_window(app)?;
    platform::place(&window, anchor)?;
    window.show()?;
    window.unminimize()?;
    window.set_focus()
}

/// Hides the popover (the app stays in the menu bar).
pub fn hide<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<()> {
    main_window(app)?.hide()
}

/// Shows a hidden popover, hides a visible one (the global shortcut).
pub fn toggle<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<()> {
    if main_window(app)?.is_visible()? {
        hide(app)
    } else {
        show(app, None)
    }
}

/// A left click on the menu-bar icon (macOS; Linux trays send no clicks).
pub fn tray_click<R: Runtime>(app: &AppHandle<R>, anchor: TrayAnchor) -> tauri::Result<()> {
    let visible = main_window(app)?.is_visible()?;
    let since_blur_hide = app.try_state::<PopoverState>().and_then(|s| s.take_since_blur_hide());
    match click_action(visible, since_blur_hide) {
        ClickAction::Show => show(app, Some(anchor)),
        ClickAction::Hide => hide(app),
        ClickAction::Nothing => Ok(()),
    }
}

/// Closing the popover hides it: the app lives in the menu bar until Quit.
/// On macOS it also hides when it loses focus, like a system menu-bar extra.
pub fn on_window_event<R: Runtime>(window: &Window<R>, event: &WindowEvent) {
    if window.label() != MAIN_WINDOW {
        return;
    }
    let app = window.app_handle();
    let result = match event {
        WindowEvent::CloseRequested { api, .. } => {
            api.prevent_close();
            hide(app)
        }
        WindowEvent::Focused(false) if platform::HIDES_ON_BLUR => {
            if let Some(state) = app.try_state::<PopoverState>() {
                state.record_blur_hide();
            }
            hide(app)
        }
        _ => Ok(()),
    };
    if let Err(e) = result {
        tracing::warn!("could not hide the popover: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_click_on_the_icon_toggles_the_popover() {
        assert_eq!(click_action(true, None), ClickAction::Hide);
        assert_eq!(click_action(false, None), ClickAction::Show);
    }

    #[test]
    fn the_click_that_blurred_the_popover_does_not_reopen_it() {
        // Mouse-down blurs and hides the popover; the click arrives ~100 ms later.
        assert_eq!(click_action(false, Some(Duration::from_millis(0))), ClickAction::Nothing);
        assert_eq!(click_action(false, Some(Duration::from_millis(120))), ClickAction::Nothing);
        assert_eq!(click_action(false, Some(REOPEN_GUARD - Duration::from_millis(1))), ClickAction::Nothing);
        // A deliberate click later reopens it.
        assert_eq!(click_action(false, Some(REOPEN_GUARD)), ClickAction::Show);
        assert_eq!(click_action(false, Some(Duration::from_secs(5))), ClickAction::Show);
        // A visible popover is hidden whatever happened before.
        assert_eq!(click_action(true, Some(Duration::from_millis(50))), ClickAction::Hide);
    }

    #[test]
    fn only_the_first_click_after_a_blur_is_swallowed() {
        // The state is taken by the click it swallows: a second, quick click reopens.
        let state = PopoverState::default();
        assert_eq!(state.take_since_blur_hide(), None, "nothing hid yet");
        state.record_blur_hide();
        assert_eq!(click_action(false, state.take_since_blur_hide()), ClickAction::Nothing);
        assert_eq!(click_action(false, state.take_since_blur_hide()), ClickAction::Show);
    }
}
