//! The privacy gate from the app's side: `chat_send` and `chat_regenerate`
//! through the mock runtime, with a recording stub as the cloud and a chat
//! whose earlier turns hold one secret of each kind. Nothing sensitive ever
//! reaches the stub unless that message was allowed; a harmless message does
//! arrive, so the check fails both ways.

use headroom_cloud::summarize::SummaryPolicy;
use headroom_cloud::testserver::{answer, Stub};
use headroom_core::settings::Settings;
use headroom_store::Route;
use serde_json::{json, Value};
use tauri::test::MockRuntime;
use tauri::Manager;

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

/// A chat worth summarising, with the secrets among its turns, sent to the
/// cloud with the summary on; the events of that turn.
fn summarised_for_the_cloud(tag: &str) -> (tauri::App<MockRuntime>, AppState, Stub, Vec<Value>) {
    let (app, _window) = app_with_window_in(tag);
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
        None,
        None,
        channel,
        app.state(),
    ));
    assert!(sent.is_ok(), "{sent:?}");
    let events = until_end(&events);
    (app, state, cloud, events)
}

#[test]
fn a_summary_made_for_the_cloud_never_carries_an_earlier_secret() {
    let (_app, _state, cloud, events) = summarised_for_the_cloud("privacy-summary");
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

/// The summary's prompt opens with public words (its instructions, then
/// "Summarise this conversation:" and the first speaker); a local client of
/// the app's keyless server sends that opening followed by a guess at the
/// conversation. Were the summary's state in the keyless partition,
/// `cached_tokens` would confirm the guess token by token; in the app's own
/// partition it confirms nothing beyond what the client itself sent before.
#[test]
fn a_keyless_server_client_reads_nothing_of_the_summarys_prompt_through_cached_tokens() {
    let (app, state, _cloud, events) = summarised_for_the_cloud("privacy-summary-probe");
    let window = app.get_webview_window(crate::MAIN_WINDOW).unwrap();
    let codes = events[0]["data"]["route"]["reasons"].to_string();
    assert!(codes.contains("SUMMARISED"), "the summary ran locally: {events:?}");
    // The keyless partition is the one probed: the user turned the key off.
    let keyless = Settings { server_require_key: false, ..state.settings() };
    block_on(state.save_settings(&keyless)).unwrap();
    let info = invoke(&window, "server_start", json!({ "port": 0 })).unwrap();
    let url = info["url"].as_str().unwrap().to_owned();

    let opening = headroom_cloud::summarize::summary_prompt(&[], SummaryPolicy::default().max_summary_tokens);
    let system = opening[0].content.clone();
    let public = "Summarise this conversation:\n\nUser: question 0:";
    // The guess: exactly the conversation's first turn, as the summary saw it.
    let guess = format!("{public} {}", "lorem ipsum ".repeat(120).trim());
    let ask = |user: &str| -> Value {
        let body = json!({
            "model": crate::models::DEMO_MODEL_ID,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": 1,
        });
        let reply = server_post(&url, &body.to_string());
        assert_eq!(reply["object"], "chat.completion", "{reply}");
        reply["usage"].clone()
    };
    let probe = ask(&guess);
    let cached = probe["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    // The same probe again: the client's own state serves it, so the oracle
    // does answer in this setup (the assertion below is not vacuous).
    let again = ask(&guess)["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    let opening_tokens = ask(public)["prompt_tokens"].as_u64().unwrap();
    assert!(
        cached <= opening_tokens,
        "the probe read {cached} cached tokens, beyond the public {opening_tokens}: {probe}"
    );
    assert!(again > opening_tokens, "a client's own prefix is reported ({again} cached): the probe can see hits");
    assert_eq!(invoke(&window, "server_stop", json!({})).ok(), Some(json!(true)));
}

/// One POST to the app's server; the JSON answer.
fn server_post(url: &str, body: &str) -> Value {
    use std::io::{Read, Write};
    let authority = url.trim_start_matches("http://").trim_end_matches("/v1");
    let mut s = std::net::TcpStream::connect(authority).unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(format!("{head}{body}").as_bytes()).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let body = reply.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {reply}"))
}
