//! Estimates that learn from this Mac (issue #18), from the app's side: a
//! turn in the popover is measured and kept, the picker's verdict for that
//! model then rests on it, and `headroom fit` on the same data folder says
//! the same: one rule, one store, every door.

use clap::Parser;
use headroom_core::calibration::MeasuredKind;
use headroom_core::router::Force;
use serde_json::{json, Value};

use super::*;
use crate::cli::{Cli, Command};

fn turn(app: &tauri::App<MockRuntime>, session: &str, text: &str) {
    let (channel, events) = collecting();
    let sent = block_on(crate::commands::chat::chat_send(
        session.into(),
        text.into(),
        Some(4),
        Some(Force::Local),
        Some(false),
        channel,
        app.state(),
    ));
    assert!(sent.is_ok(), "{sent:?}");
    let events = until_end(&events);
    assert!(events.iter().any(|e| e["event"] == "finished"), "{events:?}");
}

#[test]
fn a_turn_in_the_app_is_measured_and_the_picker_and_the_cli_rest_on_it() {
    let (app, window) = app_with_window_in("learned");
    let state = state_of(&app);
    crate::models::ensure_default_model(&state).unwrap();
    let demo = |window: &WebviewWindow<MockRuntime>| -> Value {
        let list = invoke(window, "models_list", json!({})).unwrap();
        let entries = list.as_array().cloned().unwrap_or_default();
        let entry = entries.into_iter().find(|m| m["id"] == crate::models::DEMO_MODEL_ID);
        entry.unwrap_or_else(|| panic!("no demo model in {list}"))["fit"].clone()
    };
    // Loaded, never run: the load is kept, but it is no point of the curve.
    assert_eq!(demo(&window)["basis"], "estimated");
    let loaded = state.loaded_model().expect("no model");
    let measured = || block_on(state.store.peak_measurements(&loaded.info.fingerprint)).unwrap();
    assert_eq!(measured().iter().map(|m| m.kind).collect::<Vec<_>>(), [MeasuredKind::Load]);

    turn(&app, "s", "Tell me about caches.");
    let rows = measured();
    assert_eq!(rows.iter().map(|m| m.kind).collect::<Vec<_>>(), [MeasuredKind::Turn, MeasuredKind::Load]);
    let first = rows[0].clone();
    assert_eq!(first.reused_tokens, 0);
    #[cfg(target_os = "linux")]
    assert!(first.resident_peak_bytes.is_some(), "the OS's view is read here: {first:?}");
    let fit = demo(&window);
    let label = format!("measured here at {}", first.context_tokens);
    assert!(fit["basis"].as_str().is_some_and(|b| b.starts_with(&label)), "{label}: {fit}");
    assert_eq!(fit["calibration"]["peak_bytes"].as_u64(), Some(first.peak_bytes()));

    // The CLI's fit, on the same data folder, rests on the same measurement.
    let context = state.context_limit().to_string();
    let dir = loaded.path.to_string_lossy().into_owned();
    let argv = ["headroom", "fit", &dir, "--context", &context, "--json"];
    let Some(Command::Fit(args)) = Cli::try_parse_from(argv).unwrap().command else { panic!("not fit") };
    let mut out = Vec::new();
    crate::cli::fit::fit(&args, &state.locations.hub, Some(&state.store), &mut out).unwrap();
    let cli: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(cli["basis"], fit["basis"]);
    assert_eq!(cli["estimate"]["predicted_peak_bytes"], fit["estimate"]["predicted_peak_bytes"]);

    // The chat's next turn reuses its prefix: kept, but it prefilled less
    // than its context, so the prediction still rests on the first.
    turn(&app, "s", "And how big do they get?");
    let rows = measured();
    assert_eq!(rows.len(), 3);
    assert!(rows[0].reused_tokens > 0, "{:?}", rows[0]);
    assert_eq!(demo(&window)["calibration"]["at_context"].as_u64(), Some(first.context_tokens));
}
