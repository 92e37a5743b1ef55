//! What the app shows of the service's streams: each memory sample goes to
//! the popover (the `memory` event, while it is visible) and the tray's
//! tooltip; each away notice (Headroom gave memory back) to the popover
//! (the `away` event) and, while the popover is hidden, a system notification.

use headroom_app::away::Notice;
use headroom_app::give_back::watch;
use headroom_app::memory::tooltip;
use headroom_core::away::Action;
use tauri::{AppHandle, Emitter, Manager, Runtime};

use crate::state::AppState;
use crate::tray::TRAY_ID;

/// The event each memory sample is emitted as.
pub const MEMORY_EVENT: &str = "memory";
/// The event each away notice is emitted as.
pub const AWAY_EVENT: &str = "away";

/// Starts the memory sampler (`headroom_app::memory::start`) with the
/// popover and the tray as where its samples show. Call once, from `setup`.
pub fn start_memory<R: Runtime>(app: &AppHandle<R>) -> Result<(), headroom_memory::MemoryError> {
    let state = app.state::<AppState>();
    let app = app.clone();
    let mut last_tooltip = String::new();
    headroom_app::memory::start(&state, move |sample, visible| {
        if visible {
            tracing::debug!(at_unix_ms = sample.at_unix_ms, "memory: a reading for the popover");
            if let Err(e) = app.emit(MEMORY_EVENT, sample) {
                tracing::debug!("could not emit the memory sample: {e}");
            }
        }
        let text = tooltip(sample);
        if text != last_tooltip {
            if let Some(tray) = app.tray_by_id(TRAY_ID) {
                if let Err(e) = tray.set_tooltip(Some(&text)) {
                    tracing::debug!("could not set the tray tooltip: {e}");
                }
            }
            last_tooltip = text;
        }
    })
}

/// Starts feeding the sampler's readings to the state machine and carrying
/// out its actions; call once, after the sampler has started.
pub fn start_away<R: Runtime>(app: &AppHandle<R>) {
    let state = AppState::clone(&app.state::<AppState>());
    let app = app.clone();
    let told = AppState::clone(&state);
    if !watch(state, move |notice| tell(&app, &told, notice)) {
        tracing::warn!("no memory readings: Headroom cannot react to memory pressure");
    }
}

/// Shows `notice` in the popover and, while it is hidden, as a system
/// notification. A desktop without a notification service (a Linux box
/// without a D-Bus notification daemon) just logs it: the popover still
/// has the notice when it opens.
fn tell<R: Runtime>(app: &AppHandle<R>, state: &AppState, notice: &Notice) {
    if let Err(e) = app.emit(AWAY_EVENT, notice) {
        tracing::debug!("could not emit the notice: {e}");
    }
    // The picker shows that nothing is loaded now.
    if matches!(notice.action, Action::Unload { .. }) {
        if let Err(e) = app.emit(crate::MODELS_CHANGED_EVENT, ()) {
            tracing::debug!("could not tell the UI about the models: {e}");
        }
    }
    if state.live.activity().visible {
        return;
    }
    let app = app.clone();
    let body = notice.message.clone();
    // Off the runtime: a session bus that is slow to answer must not hold the readings up.
    let spawned = std::thread::Builder::new().name("headroom-notify".into()).spawn(move || {
        use tauri_plugin_notification::NotificationExt;
        if let Err(e) = app.notification().builder().title("Headroom").body(body).show() {
            tracing::debug!("no system notification (no notification service?): {e}");
        }
    });
    if let Err(e) = spawned {
        tracing::debug!("could not start the notification thread: {e}");
    }
}
