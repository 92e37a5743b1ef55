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
    let events = local_turn(app, session, text, 4);
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

/// `headroom fit` on the app's data folder, for the loaded model at the
/// app's context limit: (predicted peak, what it rests on).
fn cli_fit(state: &AppState) -> (u64, String) {
    let loaded = state.loaded_model().expect("no model");
    let context = state.context_limit().to_string();
    let dir = loaded.path.to_string_lossy().into_owned();
    let argv = ["headroom", "fit", &dir, "--context", &context, "--json"];
    let Some(Command::Fit(args)) = Cli::try_parse_from(argv).unwrap().command else { panic!("not fit") };
    let mut out = Vec::new();
    crate::cli::fit::fit(&args, &state.locations.hub, Some(&state.store), &mut out).unwrap();
    let fit: Value = serde_json::from_slice(&out).unwrap();
    let peak = fit["estimate"]["predicted_peak_bytes"].as_u64().unwrap_or_else(|| panic!("no peak in {fit}"));
    (peak, fit["basis"].as_str().unwrap_or_default().to_owned())
}

#[test]
fn after_a_turn_cancelled_in_its_prefill_headroom_fit_predicts_the_same_peak_as_before() {
    let (app, _window) = app_with_window_in("learned-cancel");
    let state = state_of(&app);
    crate::models::ensure_default_model(&state).unwrap();
    let loaded = state.loaded_model().expect("no model");
    let turns = || {
        let rows = block_on(state.store.peak_measurements(&loaded.info.fingerprint)).unwrap();
        rows.into_iter().filter(|m| m.kind == MeasuredKind::Turn).count()
    };
    // One whole prefill that ran to its end: the fit rests on it.
    turn(&app, "s", "Tell me about caches.");
    assert_eq!(turns(), 1);
    let before = cli_fit(&state);
    assert!(before.1.starts_with("measured here at "), "{before:?}");

    // A long prompt (more than one prefill chunk) in a new chat, stopped the
    // moment the engine starts on it (the Stop button; a server client that
    // hangs up ends its run the same way): it ends in its prefill, before
    // any token. Recorded, its short peak at a long context would be the
    // measurement nearest the limit and pull the prediction down.
    let cancelling = state_of(&app);
    let (tx, events) = std::sync::mpsc::channel();
    let channel = Channel::new(move |body| {
        if let InvokeResponseBody::Json(json) = body {
            let event: Value = serde_json::from_str(&json).unwrap_or(Value::Null);
            if event["event"] == "started" {
                let run = event["data"]["runId"].as_u64().unwrap_or_else(|| panic!("no run id in {event}"));
                assert!(cancelling.runs.cancel(run), "the run is live while it starts");
            }
            let _ = tx.send(event);
        }
        Ok(())
    });
    let long = "Caches grow with the context they hold. ".repeat(300);
    let sent = block_on(crate::commands::chat::chat_send(
        "long".into(),
        long,
        Some(64),
        Some(Force::Local),
        Some(false),
        None,
        None,
        channel,
        app.state(),
    ));
    assert!(sent.is_ok(), "{sent:?}");
    let events = until_end(&events);
    let started = events.iter().find(|e| e["event"] == "started").unwrap_or_else(|| panic!("{events:?}"));
    let prompt = started["data"]["promptTokens"].as_u64().unwrap_or_default();
    assert!(prompt > headroom_core::fit::PREFILL_CHUNK, "{prompt} tokens: one chunk only");
    assert!(!events.iter().any(|e| e["event"] == "token"), "stopped in its prefill: {events:?}");
    let last = events.last().unwrap_or_else(|| panic!("no events"));
    assert_eq!((&last["event"], &last["data"]["reason"]), (&json!("finished"), &json!("cancelled")), "{last}");

    // The fit says what it said before: nothing was recorded as a turn.
    assert_eq!(cli_fit(&state), before);
    assert_eq!(turns(), 1);
}
