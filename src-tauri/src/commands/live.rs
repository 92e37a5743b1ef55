//! The live graph in the popover: drawn on request (the UI asks at most once
//! a second while the graph is open), and the webview's visibility, which
//! sets the sampler's pace and whether memory events are sent at all.

use headroom_charts::{ChartStyle, Theme};
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::live::{self, LiveChartError, LiveView, ViewRequest};
use crate::state::AppState;

/// The windows the graph offers, in minutes.
pub const WINDOWS_MIN: [u32; 3] = [5, 15, 60];

impl From<LiveChartError> for CommandError {
    fn from(e: LiveChartError) -> Self {
        match e {
            LiveChartError::Store(e) => e.into(),
            LiveChartError::Chart(e) => e.into(),
        }
    }
}

/// The last `minutes` (5, 15 or 60) of memory, pressure, swap and decode
/// tok/s, with the figures behind them, in `theme` ("light" or "dark").
#[tauri::command]
pub async fn live_chart(minutes: u32, theme: String, state: State<'_, AppState>) -> Result<LiveView, CommandError> {
    if !WINDOWS_MIN.contains(&minutes) {
        return Err(CommandError::new(
            ErrorCode::InvalidInput,
            format!("The live graph shows 5, 15 or 60 minutes, not {minutes}."),
        ));
    }
    let theme: Theme = theme.parse()?;
    let recent = crate::memory::history_points(&state);
    let req = ViewRequest {
        now_ms: live::unix_ms(),
        window_ms: u64::from(minutes) * 60_000,
        recent_memory: &recent,
        os_headroom_bytes: state.os_headroom_bytes(),
        style: ChartStyle::live(theme),
    };
    Ok(live::view(&state.store, &state.live, &req).await?)
}

/// The webview tells whether it is on screen (`document.visibilityState`):
/// hidden, nothing is sent to it and the sampler backs off; shown, a
/// reading is taken at once.
#[tauri::command]
pub fn live_visibility(visible: bool, state: State<'_, AppState>) {
    let word = if visible { "visible" } else { "hidden" };
    if state.live.set_visible(visible) {
        tracing::info!("live view: the popover is {word}");
    } else {
        tracing::debug!("live view: the popover is {word} (no change)");
    }
}
