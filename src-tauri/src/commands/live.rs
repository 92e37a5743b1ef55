//! The live graph in the popover: drawn on request (the UI asks at most once
//! a second while the graph is open), and the webview's visibility, which
//! sets the sampler's pace and whether memory events are sent at all.

use headroom_charts::{ChartStyle, Theme};
use tauri::State;

use crate::error::CommandError;
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
            "INVALID_INPUT",
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
    Ok(live::view(&state.store, live::live(), &req).await?)
}

/// The webview tells whether it is on screen (`document.visibilityState`):
/// hidden, nothing is sent to it and the sampler backs off; shown, a
/// reading is taken at once.
#[tauri::command]
pub fn live_visibility(visible: bool) {
    if live::live().set_visible(visible) {
        tracing::info!("live view: the popover is {}", if visible { "visible" } else { "hidden" });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};
    use tauri::ipc::{CallbackFn, InvokeBody};
    use tauri::test::{get_ipc_response, mock_builder, mock_context, noop_assets, INVOKE_KEY};
    use tauri::webview::InvokeRequest;
    use tauri::{WebviewUrl, WebviewWindowBuilder};

    #[test]
    fn the_graph_is_drawn_for_the_windows_it_offers_and_visibility_is_heard() {
        let state = crate::test_state("live-cmd");
        let app = crate::run_app(mock_builder(), mock_context(noop_assets()), Some(state.locations))
            .unwrap_or_else(|e| panic!("app: {e}"));
        let window = WebviewWindowBuilder::new(&app, crate::MAIN_WINDOW, WebviewUrl::default())
            .build()
            .unwrap_or_else(|e| panic!("window: {e}"));
        let invoke = |cmd: &str, args: Value| {
            let request = InvokeRequest {
                cmd: cmd.into(),
                callback: CallbackFn(0),
                error: CallbackFn(1),
                url: "tauri://localhost".parse().unwrap_or_else(|e| panic!("{e}")),
                body: InvokeBody::Json(args),
                headers: Default::default(),
                invoke_key: INVOKE_KEY.to_string(),
            };
            get_ipc_response(&window, request).map(|b| b.deserialize::<Value>().unwrap_or_else(|e| panic!("{e}")))
        };
        for minutes in super::WINDOWS_MIN {
            let view = invoke("live_chart", json!({ "minutes": minutes, "theme": "dark" }))
                .unwrap_or_else(|e| panic!("{minutes} min: {e}"));
            // No sampler in tests and an empty store: the "no readings yet" card.
            assert!(view["svg"].as_str().is_some_and(|s| s.contains("No readings yet")), "{view}");
            assert_eq!(
                view["plot"]["endMs"].as_u64().zip(view["plot"]["startMs"].as_u64()).map(|(e, s)| e - s),
                Some(u64::from(minutes) * 60_000)
            );
        }
        let err = invoke("live_chart", json!({ "minutes": 7, "theme": "dark" })).err();
        assert_eq!(err.as_ref().map(|e| e["code"].clone()), Some(json!("INVALID_INPUT")), "{err:?}");
        let err = invoke("live_chart", json!({ "minutes": 5, "theme": "sepia" })).err();
        assert_eq!(err.map(|e| e["code"].clone()), Some(json!("INVALID_INPUT")));
        let before = crate::live::live().activity().visible;
        assert_eq!(invoke("live_visibility", json!({ "visible": !before })).ok(), Some(Value::Null));
        assert_eq!(crate::live::live().activity().visible, !before);
        let _ = invoke("live_visibility", json!({ "visible": before }));
    }
}
