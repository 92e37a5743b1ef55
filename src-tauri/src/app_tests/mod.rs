//! The app through its front ends, with Tauri's mock runtime: the Tauri
//! wiring (lib.rs's tests), the privacy gate from every path that can reach
//! the cloud (`privacy`), the app and the CLI deciding alike (`parity`),
//! regenerate never losing an answer (`regenerate`), pairing from the
//! Settings (`peers`), and the module layout (`layout`). The helpers here
//! are what they share.

mod background;
mod draft;
mod layout;
mod learned;
mod parity;
mod peers;
mod privacy;
mod regenerate;

use std::time::{Duration, Instant};

use headroom_cloud::testserver::Stub;
use headroom_core::sensitive::EXAMPLES;
use headroom_core::settings::Settings;
use headroom_store::{MessageStatus, Route, Store, StoredMessage, TurnOutcome};
use serde_json::Value;
use tauri::ipc::{CallbackFn, Channel, InvokeBody, InvokeResponseBody};
use tauri::test::{get_ipc_response, mock_builder, mock_context, noop_assets, MockRuntime, INVOKE_KEY};
use tauri::webview::InvokeRequest;
use tauri::{Manager, WebviewUrl, WebviewWindow, WebviewWindowBuilder};

use crate::runtime::block_on;
use crate::state::AppState;

pub(crate) fn app_with_window() -> (tauri::App<MockRuntime>, WebviewWindow<MockRuntime>) {
    app_with_window_in("mock")
}

/// The app on a fresh data folder of its own, with an empty HF cache.
pub(crate) fn app_with_window_in(tag: &str) -> (tauri::App<MockRuntime>, WebviewWindow<MockRuntime>) {
    let state = crate::test_state(tag);
    let app = crate::run_app(mock_builder(), mock_context(noop_assets()), Some(state.locations)).expect("app");
    let window = WebviewWindowBuilder::new(&app, crate::MAIN_WINDOW, WebviewUrl::default()).build().expect("window");
    (app, window)
}

/// The app's own pages are served from the `tauri://localhost` protocol.
const APP_ORIGIN: &str = "tauri://localhost";

/// Calls `cmd` the way the UI does (JSON arguments through the IPC).
pub(crate) fn invoke(window: &WebviewWindow<MockRuntime>, cmd: &str, args: Value) -> Result<Value, Value> {
    invoke_from(APP_ORIGIN, window, cmd, args)
}

pub(crate) fn invoke_from(
    origin: &str,
    window: &WebviewWindow<MockRuntime>,
    cmd: &str,
    args: Value,
) -> Result<Value, Value> {
    let request = InvokeRequest {
        cmd: cmd.into(),
        callback: CallbackFn(0),
        error: CallbackFn(1),
        url: origin.parse().unwrap(),
        body: InvokeBody::Json(args),
        headers: Default::default(),
        invoke_key: INVOKE_KEY.to_string(),
    };
    get_ipc_response(window, request).map(|body| body.deserialize::<Value>().unwrap())
}

/// A channel id as the UI's `new Channel()` serializes it (the mock
/// runtime drops what is sent on it; the store and the stub say what happened).
pub(crate) const CHANNEL: &str = "__CHANNEL__:0";

/// A Channel that collects the events sent on it, for calling a command
/// function directly (the mock runtime cannot hand events back through IPC).
pub(crate) fn collecting() -> (Channel<crate::turn::ChatEvent>, std::sync::mpsc::Receiver<Value>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let channel = Channel::new(move |body| {
        if let InvokeResponseBody::Json(json) = body {
            let _ = tx.send(serde_json::from_str(&json).unwrap_or(Value::Null));
        }
        Ok(())
    });
    (channel, rx)
}

/// The events up to the run's end (`finished` or `error`).
pub(crate) fn until_end(events: &std::sync::mpsc::Receiver<Value>) -> Vec<Value> {
    let mut got = Vec::new();
    while let Ok(e) = events.recv_timeout(Duration::from_secs(60)) {
        let end = matches!(e["event"].as_str(), Some("finished" | "error"));
        got.push(e);
        if end {
            break;
        }
    }
    got
}

/// Sends `text` in `session` on this Mac (at most `max_tokens`) as the
/// popover does, and returns the turn's events up to its end.
pub(crate) fn local_turn(app: &tauri::App<MockRuntime>, session: &str, text: &str, max_tokens: usize) -> Vec<Value> {
    let (channel, events) = collecting();
    let sent = block_on(crate::commands::chat::chat_send(
        session.into(),
        text.into(),
        Some(max_tokens),
        Some(headroom_core::router::Force::Local),
        Some(false),
        None,
        None,
        channel,
        app.state(),
    ));
    assert!(sent.is_ok(), "{sent:?}");
    until_end(&events)
}

/// The session's messages once nothing in it is streaming and it has `n`.
pub(crate) fn settled(store: &Store, session: &str, n: usize) -> Vec<StoredMessage> {
    settled_with(store, session, n, |_| true)
}

/// [`settled`], once `ready` also holds of the messages.
pub(crate) fn settled_with(
    store: &Store,
    session: &str,
    n: usize,
    ready: impl Fn(&[StoredMessage]) -> bool,
) -> Vec<StoredMessage> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let msgs = block_on(store.messages(session)).unwrap_or_default();
        if msgs.len() == n && msgs.iter().all(|m| m.status != MessageStatus::Streaming) && ready(&msgs) {
            return msgs;
        }
        assert!(Instant::now() < deadline, "the turn was not committed: {msgs:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `stub` as the cloud (model `gpt-x`), greedy local sampling.
pub(crate) fn use_cloud(state: &AppState, stub: &Stub) -> Settings {
    let settings = Settings {
        temperature: 0.0,
        cloud_base_url: Some(stub.base_url.clone()),
        cloud_model: Some("gpt-x".into()),
        ..Settings::default()
    };
    block_on(state.save_settings(&settings)).unwrap();
    settings
}

/// Stored turns: each question answered locally, as a chat that kept its
/// secrets on this Mac has them.
pub(crate) fn stored_turns(store: &Store, session: &str, turns: &[(String, String)]) {
    for (q, a) in turns {
        let t = block_on(store.begin_turn(session, q, Some("local"), Route::Local)).unwrap();
        let done = TurnOutcome { content: a.clone(), status: MessageStatus::Complete, error: None, stats: None };
        block_on(store.finish_turn(t.assistant_message_id, &done)).unwrap();
    }
}

/// A harmless opening exchange, then one secret of each kind across the
/// earlier turns (in questions and in an answer), then a harmless last one.
pub(crate) fn secret_turns() -> Vec<(String, String)> {
    let mut turns = vec![("what is a monad?".to_owned(), "A monoid in the category of endofunctors.".to_owned())];
    for (i, (_, example)) in EXAMPLES.iter().enumerate() {
        turns.push(if i % 3 == 2 {
            ("and where is it?".to_owned(), format!("It is {example}."))
        } else {
            (format!("please keep {example} for me"), "Kept, on this Mac.".to_owned())
        });
    }
    turns.push(("thanks!".to_owned(), "You are welcome.".to_owned()));
    turns
}

/// The examples found in what reached the stub (JSON doubles backslashes).
pub(crate) fn leaked(stub: &Stub) -> Vec<&'static str> {
    let bodies = stub.bodies();
    EXAMPLES
        .iter()
        .map(|(_, e)| *e)
        .filter(|e| bodies.iter().any(|b| b.contains(e) || b.contains(&e.replace('\\', "\\\\"))))
        .collect()
}

/// The state the app manages.
pub(crate) fn state_of(app: &tauri::App<MockRuntime>) -> AppState {
    AppState::clone(&app.state::<AppState>())
}
