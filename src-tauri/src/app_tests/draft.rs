//! A draft model from the app's side (issue #27): the one the settings name
//! is counted in every other model's verdict, loaded beside the model the
//! picker loads, and drafts the popover's turns; one the app cannot find is
//! refused with its own code before anything is unloaded.

use headroom_core::calibration::{MeasuredKind, PeakMeasurement};
use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
use serde_json::{json, Value};

use super::*;
use crate::locations::MODELS_DIR;
use crate::models::DEMO_MODEL_ID;

const DRAFT: &str = "draft-demo";

fn set_draft(window: &WebviewWindow<MockRuntime>, draft: Option<&str>) {
    let mut settings = invoke(window, "settings_get", json!({})).unwrap();
    settings["draftModel"] = json!(draft);
    invoke(window, "settings_set", json!({ "settings": settings })).unwrap();
}

fn entry(window: &WebviewWindow<MockRuntime>, id: &str) -> Value {
    let list = invoke(window, "models_list", json!({})).unwrap();
    let found = list.as_array().into_iter().flatten().find(|m| m["id"] == id).cloned();
    found.unwrap_or_else(|| panic!("no {id} in {list}"))
}

#[test]
fn the_settings_draft_is_counted_loaded_beside_the_model_and_drafts_its_turns() {
    let (app, window) = app_with_window_in("draft");
    let state = state_of(&app);
    crate::models::ensure_default_model(&state).unwrap();
    // Another model of the demo's vocabulary, with other weights.
    let spec = DemoSpec { seed: 3, ..DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four) };
    write_demo_model(&state.locations.data_dir.join(MODELS_DIR).join(DRAFT), &spec).unwrap();
    let weights = |e: &Value| e["fit"]["estimate"]["weight_bytes"].as_u64().unwrap();
    let alone = weights(&entry(&window, DEMO_MODEL_ID));

    set_draft(&window, Some(DRAFT));
    let with = entry(&window, DEMO_MODEL_ID);
    assert_eq!(weights(&with), alone + weights(&entry(&window, DRAFT)), "{with}");
    assert!(with["fit"]["basis"].as_str().is_some_and(|b| b.ends_with("with the draft model draft-demo")), "{with}");

    // What this machine measured of the model alone, before the draft joins it.
    let alone_info = state.loaded_model().unwrap().info;
    assert_eq!(alone_info.draft, None);
    let measured = PeakMeasurement {
        fingerprint: alone_info.fingerprint.clone(),
        kind: MeasuredKind::Turn,
        kv: alone_info.kv_format,
        context_tokens: 300,
        prompt_tokens: 300,
        reused_tokens: 0,
        mlx_peak_bytes: 50 << 20,
        mlx_active_bytes: 20 << 20,
        resident_peak_bytes: None,
        cached_bytes: 0,
    };
    crate::runtime::block_on(state.store.add_peak_measurement(&measured)).unwrap();
    let route_measured = || {
        let routed = crate::turn::route::for_state(&state, None, "hi", &[], Default::default());
        routed.unwrap().basis.map(|b| b.measured.len())
    };
    assert_eq!(route_measured(), Some(1), "the router's fit of the model alone is calibrated");

    invoke(&window, "model_load", json!({ "id": DEMO_MODEL_ID })).unwrap();
    let loaded = state.loaded_model().unwrap();
    assert!(loaded.info.draft.as_ref().is_some_and(|d| d.ends_with(DRAFT)), "{:?}", loaded.info.draft);
    assert_eq!(loaded.info.fingerprint, alone_info.fingerprint, "the same model, so the same measurements");
    // With the draft beside it, the pair is weighed by the formula, as at its load.
    assert_eq!(route_measured(), Some(0), "the model's own measurement corrected the pair's fit");

    let events = local_turn(&app, "s", "Tell me about caches and what they hold.", 24);
    assert!(events.iter().any(|e| e["event"] == "finished"), "{events:?}");
    let said = events.iter().filter(|e| e.to_string().contains("\"draft: ")).count();
    assert_eq!(said, 1, "the turn's stats say it drafted: {events:?}");

    // A draft the app cannot find: refused by its code, the model still loaded.
    set_draft(&window, Some("nowhere"));
    let err = invoke(&window, "model_load", json!({ "id": DEMO_MODEL_ID })).unwrap_err();
    assert_eq!(err["code"], "DRAFT_MODEL", "{err}");
    assert!(state.loaded_model().is_some(), "nothing was unloaded");
    set_draft(&window, None);
    invoke(&window, "model_load", json!({ "id": DEMO_MODEL_ID })).unwrap();
    assert_eq!(state.loaded_model().unwrap().info.draft, None);
}
