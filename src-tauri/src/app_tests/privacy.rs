//! The privacy gate from the app's side: `chat_send` and `chat_regenerate`
//! through the mock runtime, with a recording stub as the cloud and a chat
//! whose earlier turns hold one secret of each kind. Nothing sensitive ever
//! reaches the stub unless that message was allowed; a harmless message does
//! arrive, so the check fails both ways.

use headroom_cloud::testserver::{answer, Stub};
use headroom_core::settings::Settings;
use headroom_store::Route;
use serde_json::json;

use super::*;

fn stub() -> Stub {
    Stub::start(vec![answer(&["fine"])]).expect("stub")
}

#[test]
fn the_app_sends_no_earlier_secret_forced_routed_or_regenerated_and_only_the_override_sends_one() {
    let (app, window) = app_with_window_in("privacy");
    let state = state_of(&app);
    let cloud = stub();
    use_cloud(&state, &cloud);
    let turns = secret_turns();
    stored_turns(&state.store, "s", &turns);
    let n = turns.len() * 2;

    // The cloud forced for a harmless message: it goes, the secrets stay.
    let sent = invoke(
        &window,
        "chat_send",
        json!({ "sessionId": "s", "text": "what is a functor?", "force": "cloud", "onEvent": CHANNEL }),
    );
    assert!(sent.is_ok(), "{sent:?}");
    let msgs = settled(&state.store, "s", n + 2);
    assert_eq!((msgs[n + 1].route, msgs[n + 1].content.as_str()), (Route::Cloud, "fine"));
    assert_eq!(cloud.bodies().len(), 1);
    assert!(cloud.bodies()[0].contains("what is a functor?") && cloud.bodies()[0].contains("what is a monad?"));
    assert_eq!(leaked(&cloud), Vec::<&str>::new(), "{:?}", cloud.bodies());

    // Routed (no local model is loaded, so the router picks the cloud).
    let sent = invoke(&window, "chat_send", json!({ "sessionId": "s", "text": "and a monoid?", "onEvent": CHANNEL }));
    assert!(sent.is_ok(), "{sent:?}");
    settled(&state.store, "s", n + 4);
    assert_eq!(cloud.bodies().len(), 2);
    assert!(cloud.bodies()[1].contains("and a monoid?"));
    assert_eq!(leaked(&cloud), Vec::<&str>::new());

    // Regenerated: the last question again, with the same history rules.
    let old_answer = block_on(state.store.messages("s")).unwrap()[n + 3].id;
    let again = invoke(&window, "chat_regenerate", json!({ "sessionId": "s", "force": "cloud", "onEvent": CHANNEL }));
    assert!(again.is_ok(), "{again:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while cloud.bodies().len() < 3 {
        assert!(std::time::Instant::now() < deadline, "the regenerated turn never reached the cloud");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The count of messages is n + 4 before, during and after the
    // regenerate: wait for the new answer itself, committed, before the
    // store is compared below (CI once compared it mid-commit).
    let msgs = settled_with(&state.store, "s", n + 4, |m| m[n + 3].id != old_answer);
    assert_eq!(msgs[n + 2].content, "and a monoid?", "the question asked again is stored once");
    assert!(cloud.bodies()[2].contains("and a monoid?"));
    assert_eq!(leaked(&cloud), Vec::<&str>::new());

    // A secret in the message itself, the cloud forced, nothing local to run it: refused, nothing sent or stored.
    let before = block_on(state.store.dump()).unwrap();
    let refused = invoke(
        &window,
        "chat_send",
        json!({ "sessionId": "s", "text": "my id is 11010519491231002X", "force": "cloud", "onEvent": CHANNEL }),
    );
    assert_eq!(refused.err().map(|e| e["code"].clone()), Some(json!("ROUTE_NO_LOCAL_MODEL")));
    assert_eq!(block_on(state.store.dump()).ok(), Some(before));
    assert_eq!(cloud.bodies().len(), 3);

    // The override, for this one message: its secret and the earlier ones go.
    let allowed = invoke(
        &window,
        "chat_send",
        json!({ "sessionId": "s", "text": "summarise it all", "force": "cloud", "allowSensitive": true, "onEvent": CHANNEL }),
    );
    assert!(allowed.is_ok(), "{allowed:?}");
    settled(&state.store, "s", n + 6);
    assert_eq!(leaked(&cloud).len(), EXAMPLES.len(), "the check sees secrets when they do leave");
}

#[test]
fn a_cache_hit_sends_nothing_and_a_chat_with_secrets_is_never_cached() {
    let (app, window) = app_with_window_in("privacy-cache");
    let state = state_of(&app);
    let cloud = stub();
    use_cloud(&state, &cloud);
    let send = |session: &str, text: &str| {
        let r = invoke(
            &window,
            "chat_send",
            json!({ "sessionId": session, "text": text, "force": "cloud", "onEvent": CHANNEL }),
        );
        assert!(r.is_ok(), "{r:?}");
    };
    send("a", "what is a monad?");
    settled(&state.store, "a", 2);
    send("b", "what is a monad?");
    let msgs = settled(&state.store, "b", 2);
    assert_eq!(cloud.bodies().len(), 1, "the second came from the cache");
    assert_eq!(msgs[1].stats.as_ref().map(|s| s.model_id.as_str()), Some("cache:gpt-x"));

    // After earlier secrets, the same question is not cached (nor answered from it).
    let turns = secret_turns();
    stored_turns(&state.store, "c", &turns);
    stored_turns(&state.store, "d", &turns);
    send("c", "what is a functor?");
    settled(&state.store, "c", turns.len() * 2 + 2);
    send("d", "what is a functor?");
    settled(&state.store, "d", turns.len() * 2 + 2);
    assert_eq!(cloud.bodies().len(), 3);
    assert_eq!(leaked(&cloud), Vec::<&str>::new());
}

#[test]
fn a_summary_made_for_the_cloud_never_carries_an_earlier_secret() {
    let (app, _window) = app_with_window_in("privacy-summary");
    let state = state_of(&app);
    crate::models::ensure_default_model(&state).unwrap();
    let cloud = stub();
    let settings = Settings { summarise_for_cloud: true, ..use_cloud(&state, &cloud) };
    block_on(state.save_settings(&settings)).unwrap();
    // Long harmless turns first (worth summarising), the secrets among them.
    let mut turns: Vec<(String, String)> = (0..4)
        .map(|i| {
            (
                format!("question {i}: {}", "lorem ipsum ".repeat(120)),
                format!("answer {i}: {}", "dolor sit amet ".repeat(90)),
            )
        })
        .collect();
    turns.extend(secret_turns());
    turns.extend((4..6).map(|i| (format!("question {i}?"), format!("answer {i}."))));
    stored_turns(&state.store, "s", &turns);

    let (channel, events) = collecting();
    let sent = block_on(crate::commands::chat::chat_send(
        "s".into(),
        "and then?".into(),
        Some(4),
        Some(headroom_core::router::Force::Cloud),
        None,
        channel,
        app.state(),
    ));
    assert!(sent.is_ok(), "{sent:?}");
    let events = until_end(&events);
    let codes: Vec<&str> = events[0]["data"]["route"]["reasons"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["code"].as_str())
        .collect();
    assert!(codes.contains(&"SUMMARISED") && codes.contains(&"HISTORY_WITHHELD"), "{events:?}");
    let body = cloud.bodies().concat();
    assert!(body.contains("Summary of the earlier conversation:"), "{body}");
    assert!(body.contains("and then?") && body.contains("question 5?"), "{body}");
    assert!(!body.contains("lorem ipsum lorem"), "the older turns went as the summary");
    assert_eq!(leaked(&cloud), Vec::<&str>::new(), "{body}");
}
