//! Regenerate never loses an answer: the old answer goes only once the new
//! turn has started. Refused for each reason (no model, a sensitive question
//! with the cloud forced, the key store, the fit, an endpoint that never
//! answers), the database is unchanged row for row, and the UI is told why.

use std::time::Duration;

use headroom_cloud::testserver::{answer, Stub};
use headroom_core::router::Force;
use headroom_core::settings::Settings;
use serde_json::json;

use super::*;

/// Asks `session`'s last question again through the command, as the UI does.
fn regenerate(app: &tauri::App<MockRuntime>, session: &str, force: Option<Force>) -> Result<Vec<Value>, String> {
    let (channel, events) = collecting();
    let id = block_on(crate::commands::chat::chat_regenerate(
        session.into(),
        Some(4),
        force,
        None,
        None,
        channel,
        app.state(),
    ));
    match id {
        Ok(_) => Ok(until_end(&events)),
        Err(e) => Err(e.code.as_str().to_owned()),
    }
}

#[test]
fn a_refused_regenerate_leaves_the_database_exactly_as_it_was() {
    let (app, window) = app_with_window_in("regenerate");
    let state = state_of(&app);
    stored_turns(&state.store, "s", &[("hello?".into(), "hi!".into()), ("what is a monad?".into(), "a monoid".into())]);
    stored_turns(&state.store, "id", &[("my id is 11010519491231002X".into(), "noted".into())]);
    let dump = || block_on(state.store.dump()).unwrap();
    let before = dump();

    // No model, no cloud.
    assert_eq!(regenerate(&app, "s", None).err().as_deref(), Some("NO_MODEL_LOADED"));
    assert_eq!(dump(), before);
    // Nothing to regenerate in a chat that does not end in an answer.
    let err = invoke(&window, "chat_regenerate", json!({ "sessionId": "none", "onEvent": CHANNEL })).err();
    assert_eq!(err.map(|e| e["code"].clone()), Some(json!("NOTHING_TO_REGENERATE")));

    // A sensitive question with the cloud forced, and nothing local to run it.
    let cloud = Stub::start(vec![answer(&["new answer"])]).unwrap();
    let settings = use_cloud(&state, &cloud);
    let before = dump();
    assert_eq!(regenerate(&app, "id", Some(Force::Cloud)).err().as_deref(), Some("ROUTE_NO_LOCAL_MODEL"));
    assert_eq!(dump(), before);

    // The key store cannot be read.
    let keys = state.locations.data_dir.join(headroom_cloud::keys::KEY_FILE_NAME);
    std::fs::write(&keys, "{ not json").unwrap();
    assert_eq!(regenerate(&app, "s", Some(Force::Cloud)).err().as_deref(), Some("CLOUD_KEY_STORE"));
    assert_eq!(dump(), before);
    std::fs::remove_file(&keys).unwrap();

    // The endpoint never answers: the run is handed out, then fails before
    // it starts; the old answer stays and the UI hears why.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).unwrap();
    let gone = Settings { cloud_base_url: Some(format!("http://{dead}/v1")), ..settings.clone() };
    block_on(state.save_settings(&gone)).unwrap();
    let before = dump();
    let events = regenerate(&app, "s", Some(Force::Cloud)).unwrap();
    assert_eq!(events.last().map(|e| e["data"]["code"].clone()), Some(json!("CLOUD_CONNECTION_REFUSED")), "{events:?}");
    assert!(events.iter().all(|e| e["event"] != "started"), "{events:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(dump(), before);

    // The local model would swap at the context the chat needs.
    block_on(state.save_settings(&Settings { cloud_base_url: None, cloud_model: None, ..settings.clone() })).unwrap();
    crate::models::ensure_default_model(&state).unwrap();
    let before = dump();
    state.apply_settings(&Settings { os_headroom_gb: 1024.0, ..Settings::default() });
    assert_eq!(regenerate(&app, "s", None).err().as_deref(), Some("TURN_WOULD_SWAP"));
    assert_eq!(dump(), before);

    // Allowed to run, it replaces the last exchange: same question, a new answer.
    block_on(state.save_settings(&settings)).unwrap();
    let events = regenerate(&app, "s", Some(Force::Cloud)).unwrap();
    assert_eq!(events.last().map(|e| e["event"].clone()), Some(json!("finished")), "{events:?}");
    let msgs = settled(&state.store, "s", 4);
    let texts: Vec<&str> = msgs.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["hello?", "hi!", "what is a monad?", "new answer"]);
}
