//! The routed turn end to end: the router's choice, a stub OpenAI-compatible
//! server on loopback (which counts what reaches it), the store and the
//! cloud-answer cache.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;

use headroom_core::chat::Role;

use super::tests::wait_for_status;
use super::*;

const MODEL: &str = "stub-model";
const SENSITIVE: &str = "my id is 11010519491231002X";

/// A loopback chat-completions server: every request gets `pieces` as SSE
/// chunks, `delay` apart, then usage (9 prompt tokens, one per piece) and
/// `[DONE]`. Each request's body is recorded.
struct Stub {
    url: String,
    bodies: Arc<Mutex<Vec<String>>>,
}

impl Stub {
    fn start(pieces: &'static [&'static str], delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_else(|e| panic!("{e}"));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&bodies);
        // Lives as long as the test process; each connection is one request.
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || serve(&conn, pieces, delay, &seen));
            }
        });
        Self { url: format!("http://127.0.0.1:{port}/v1"), bodies }
    }

    fn requests(&self) -> usize {
        self.bodies.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    fn bodies(&self) -> Vec<String> {
        self.bodies.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

fn serve(conn: &std::net::TcpStream, pieces: &[&str], delay: Duration, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(conn);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    seen.lock().unwrap_or_else(PoisonError::into_inner).push(String::from_utf8_lossy(&body).into_owned());
    let mut out = conn;
    let chunk = |v: serde_json::Value| format!("data: {v}\n\n");
    let mut parts = vec!["HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n".to_owned()];
    parts.extend(pieces.iter().map(|p| chunk(serde_json::json!({"choices": [{"index": 0, "delta": {"content": p}}]}))));
    parts.push(chunk(serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})));
    let n = pieces.len();
    parts.push(chunk(serde_json::json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": n, "total_tokens": 9 + n}})));
    parts.push("data: [DONE]\n\n".to_owned());
    for (i, part) in parts.iter().enumerate() {
        if i > 1 {
            std::thread::sleep(delay);
        }
        // The client hung up (a cancelled turn): nothing more to say.
        if out.write_all(part.as_bytes()).and_then(|()| out.flush()).is_err() {
            return;
        }
    }
}

/// Greedy local sampling and `stub` as the cloud.
fn use_cloud(state: &AppState, stub: &Stub) {
    let settings = Settings {
        temperature: 0.0,
        cloud_base_url: Some(stub.url.clone()),
        cloud_model: Some(MODEL.into()),
        ..Settings::default()
    };
    block_on(state.store.set_settings(&settings)).unwrap_or_else(|e| panic!("{e}"));
}

/// Sends `text` and collects the turn's events (until its thread lets go).
fn turn(state: &AppState, session: &str, text: &str, options: TurnOptions) -> (RunId, Vec<ChatEvent>) {
    let (tx, rx) = mpsc::channel();
    let id = start_turn(state, session, text, options, move |e| tx.send(e).is_ok()).unwrap_or_else(|e| panic!("{e:?}"));
    let events = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(30)).ok()).collect();
    (id, events)
}

fn route_of(events: &[ChatEvent]) -> RouteInfo {
    match events.first() {
        Some(ChatEvent::Started { route, .. }) => route.clone(),
        _ => panic!("no Started first: {events:?}"),
    }
}

fn codes(route: &RouteInfo) -> Vec<&'static str> {
    route.reasons.iter().map(|r| r.code).collect()
}

fn text_of(events: &[ChatEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::Token { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn short_or_sensitive_messages_stay_local_and_never_reach_the_cloud() {
    let state = crate::test_state("route-local");
    let stub = Stub::start(&["never"], Duration::ZERO);
    use_cloud(&state, &stub);
    crate::models::ensure_demo_model(&state).unwrap_or_else(|e| panic!("{e:?}"));
    let few = TurnOptions { max_tokens: Some(3), ..TurnOptions::default() };

    let (id, events) = turn(&state, "short", "hello", few);
    let route = route_of(&events);
    assert_eq!((route.target, route.model_or_provider.as_str()), (RouteTarget::Local, crate::models::DEMO_MODEL_ID));
    assert_eq!(codes(&route), ["SHORT_INPUT"]);
    assert!(id.0 < CLOUD_RUN_BASE, "an engine run id");
    assert!(matches!(events.last(), Some(ChatEvent::Finished { .. })), "{events:?}");
    assert_eq!(wait_for_status(&state, "short", 2)[1].route, Route::Local);

    // Forcing the cloud is not an override of the privacy rule.
    let (_, events) = turn(&state, "private", SENSITIVE, TurnOptions { force: Some(Force::Cloud), ..few });
    let route = route_of(&events);
    assert_eq!(route.target, RouteTarget::Local);
    assert!(codes(&route).contains(&"CLOUD_REFUSED_SENSITIVE"), "{route:?}");
    assert!(
        route.reasons.iter().all(|r| !r.message.contains("11010519491231002X")),
        "the reason never repeats the secret"
    );
    assert_eq!(wait_for_status(&state, "private", 2)[1].route, Route::Local);
    assert_eq!(stub.requests(), 0, "nothing reached the cloud");
}

#[test]
fn a_cloud_turn_streams_is_stored_and_the_same_request_is_answered_from_the_cache() {
    let state = crate::test_state("route-cloud");
    let stub = Stub::start(&["Hel", "lo there", "!"], Duration::ZERO);
    use_cloud(&state, &stub);

    // No local model: a short message goes to the cloud.
    let (id, events) = turn(&state, "a", "say hello", TurnOptions::default());
    assert!(id.0 >= CLOUD_RUN_BASE, "cloud run ids never meet the engine's");
    let route = route_of(&events);
    assert_eq!((route.target, route.model_or_provider.as_str()), (RouteTarget::Cloud, MODEL));
    assert!(codes(&route).contains(&"SHORT_INPUT"), "{route:?}");
    assert_eq!(text_of(&events), "Hello there!");
    assert!(
        events.iter().any(
            |e| matches!(e, ChatEvent::Stats { generated_tokens: 3, prompt_tokens: 9, model, .. } if model == MODEL)
        ),
        "{events:?}"
    );
    assert_eq!(events.last(), Some(&ChatEvent::Finished { reason: FinishReason::Stop }));
    let msgs = wait_for_status(&state, "a", 2);
    assert_eq!((msgs[0].role, msgs[0].content.as_str()), (Role::User, "say hello"));
    assert_eq!(
        (msgs[1].route, msgs[1].status, msgs[1].content.as_str()),
        (Route::Cloud, MessageStatus::Complete, "Hello there!")
    );
    let stats = msgs[1].stats.clone().unwrap_or_else(|| panic!("no stats: {msgs:?}"));
    assert_eq!((stats.model_id.as_str(), stats.generated_tokens, stats.prompt_tokens), (MODEL, 3, 9));
    assert_eq!(stub.requests(), 1);
    assert!(stub.bodies()[0].contains("say hello") && stub.bodies()[0].contains(MODEL), "{:?}", stub.bodies());

    // The same request in a new chat (same empty history): from the cache,
    // with extra spaces that normalisation removes.
    let (_, events) = turn(&state, "b", "say   hello  ", TurnOptions::default());
    let route = route_of(&events);
    assert_eq!((route.target, route.model_or_provider.as_str()), (RouteTarget::Cached, MODEL));
    assert_eq!(codes(&route).last(), Some(&CACHED_REASON));
    assert_eq!(text_of(&events), "Hello there!");
    assert_eq!(events.last(), Some(&ChatEvent::Finished { reason: FinishReason::Stop }));
    assert_eq!(stub.requests(), 1, "a cache hit sends nothing");
    let msgs = wait_for_status(&state, "b", 2);
    assert_eq!(
        (msgs[1].route, msgs[1].status, msgs[1].content.as_str()),
        (Route::Cloud, MessageStatus::Complete, "Hello there!")
    );
    let stats = msgs[1].stats.clone().unwrap_or_else(|| panic!("no stats: {msgs:?}"));
    assert_eq!((stats.model_id.as_str(), stats.generated_tokens), ("cache:stub-model", 0));
    let cache = block_on(state.store.cache_stats()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((cache.hits, cache.misses, cache.entries), (1, 1, 1));

    // The same words later in a conversation are another request.
    let (_, events) = turn(&state, "a", "say hello", TurnOptions::default());
    assert_eq!(route_of(&events).target, RouteTarget::Cloud);
    assert_eq!(stub.requests(), 2);
    assert!(stub.bodies()[1].contains("Hello there!"), "the history went along: {:?}", stub.bodies());
}

#[test]
fn sensitive_text_leaves_only_with_the_override_and_its_answer_is_not_cached() {
    let state = crate::test_state("route-sensitive");
    let stub = Stub::start(&["ok"], Duration::ZERO);
    use_cloud(&state, &stub);
    let forced = TurnOptions { force: Some(Force::Cloud), ..TurnOptions::default() };

    // Must stay local, and nothing local runs: the router's error, nothing stored.
    let err = start_turn(&state, "s", SENSITIVE, forced, |_| true).err();
    assert_eq!(err.as_ref().map(|e| e.code), Some("ROUTE_NO_LOCAL_MODEL"), "{err:?}");
    assert!(err.is_some_and(|e| e.message.contains("allow sensitive content")));
    assert_eq!(block_on(state.store.messages("s")).map(|m| m.len()).ok(), Some(0), "the UI gives the text back");
    assert_eq!(stub.requests(), 0);

    let allowed = TurnOptions { allow_sensitive: true, ..forced };
    let (_, events) = turn(&state, "s", SENSITIVE, allowed);
    let route = route_of(&events);
    assert_eq!(route.target, RouteTarget::Cloud);
    assert!(codes(&route).contains(&"PRIVACY_OVERRIDDEN"), "{route:?}");
    assert_eq!(text_of(&events), "ok");
    assert_eq!(wait_for_status(&state, "s", 2)[1].route, Route::Cloud);
    assert_eq!(stub.requests(), 1);

    // The override was for that message, not for a copy on disk.
    let (_, events) = turn(&state, "t", SENSITIVE, allowed);
    assert_eq!(route_of(&events).target, RouteTarget::Cloud);
    assert_eq!(stub.requests(), 2, "not answered from a cache");
    let cache = block_on(state.store.cache_stats()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((cache.entries, cache.hits), (0, 0));
}

#[test]
fn a_cloud_turn_stops_on_chat_cancel_and_keeps_what_arrived() {
    let state = crate::test_state("route-cancel");
    static SLOW: [&str; 40] = ["tick "; 40];
    let stub = Stub::start(&SLOW, Duration::from_millis(100));
    use_cloud(&state, &stub);
    let (tx, rx) = mpsc::channel();
    let id = start_turn(&state, "c", "count slowly", TurnOptions::default(), move |e| tx.send(e).is_ok())
        .unwrap_or_else(|e| panic!("{e:?}"));
    let mut events = Vec::new();
    while let Ok(e) = rx.recv_timeout(Duration::from_secs(30)) {
        let first_token = matches!(e, ChatEvent::Token { .. });
        events.push(e);
        if first_token {
            break;
        }
    }
    assert!(cancel(&state, id), "the cloud run was in flight: {events:?}");
    events.extend(std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(30)).ok()));
    assert_eq!(events.last(), Some(&ChatEvent::Finished { reason: FinishReason::Cancelled }), "{events:?}");
    let msgs = wait_for_status(&state, "c", 2);
    assert_eq!((msgs[1].route, msgs[1].status), (Route::Cloud, MessageStatus::Interrupted));
    assert!(msgs[1].content.starts_with("tick") && msgs[1].content.len() < 5 * 40, "{:?}", msgs[1].content);
    assert!(!cancel(&state, id), "over: nothing left to stop");
    let cache = block_on(state.store.cache_stats()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cache.entries, 0, "a cut answer is not cached");
}
