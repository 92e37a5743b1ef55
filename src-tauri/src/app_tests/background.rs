//! Background network: with "Check the hub for updates" off, the app's
//! start-up shelf refresh (what the popover calls at start) sends nothing;
//! on, it asks the hub, anonymously for the shelf's public repos. The hub
//! is a counting stub on loopback.

use headroom_core::settings::Settings;
use headroom_hub::testserver::TestHub;
use serde_json::json;

use super::*;

#[test]
fn with_the_hub_switch_off_the_app_sends_no_request_and_on_only_anonymous_ones() {
    let hub = TestHub::start().unwrap();
    // The process's environment: every hub client in this test binary then
    // talks to the stub, never the real hub; the token must not be sent for
    // public repos.
    std::env::set_var("HF_ENDPOINT", hub.endpoint());
    std::env::set_var("HF_TOKEN", "hf_background_secret_token");
    // As app_with_window_in, with an HF cache folder the refresh can use.
    let mut locations = crate::test_state("hub-switch").locations;
    locations.hub.hf_hub_cache = Some(locations.data_dir.join("hf-cache").into_os_string());
    let app = crate::run_app(mock_builder(), mock_context(noop_assets()), Some(locations)).expect("app");
    let window = WebviewWindowBuilder::new(&app, crate::MAIN_WINDOW, WebviewUrl::default()).build().expect("window");
    let state = state_of(&app);
    let off = Settings { check_hub_updates: false, ..state.settings() };
    block_on(state.save_settings(&off)).unwrap();

    let listed = invoke(&window, "shelf_refresh", json!({})).unwrap();
    assert!(
        listed["entries"].as_array().is_some_and(|e| !e.is_empty()),
        "the recorded shelf is still listed: {listed}"
    );
    assert_eq!(hub.log(), Vec::new(), "a request left with the switch off");

    let on = Settings { check_hub_updates: true, ..off };
    block_on(state.save_settings(&on)).unwrap();
    invoke(&window, "shelf_refresh", json!({})).unwrap();
    let log = hub.log();
    assert!(!log.is_empty(), "with the switch on the refresh asks the hub (so the check above is not vacuous)");
    assert!(log.iter().all(|r| r.authorization.is_none()), "the token went to public repos: {log:?}");
}
