//! The turn service end to end, below its front ends: a local turn on the
//! demo model streamed and stored with its stats, Stop, the router's choice
//! with a recording cloud stub on loopback (`headroom_cloud::testserver`),
//! the cloud-answer cache, and the drive loop's contract.

use std::sync::mpsc;
use std::time::Duration;

use headroom_cloud::testserver::{answer, chunk, finish, usage, Reply, Stub, SSE_HEAD};
use headroom_core::chat::{FinishReason, Role};
use headroom_core::router::Force;
use headroom_core::settings::Settings;
use headroom_engine::worker::TurnStats;
use headroom_store::{MessageStatus, Route, StoredMessage};

use super::events::{drive, RunEvent};
use super::record::TurnRecorder;
use super::*;
use crate::codes::{Coded, ErrorCode};
use crate::state::ModelLabels;

const MODEL: &str = "stub-model";
const SENSITIVE: &str = "my id is 11010519491231002X";

/// Greedy local sampling, and `stub` as the cloud when given.
pub(crate) fn settings(stub: Option<&Stub>) -> Settings {
    Settings {
        temperature: 0.0,
        cloud_base_url: stub.map(|s| s.base_url.clone()),
        cloud_model: stub.map(|_| MODEL.to_owned()),
        ..Settings::default()
    }
}

fn stub(reply: Reply) -> Stub {
    Stub::start(vec![reply]).expect("stub")
}

/// Starts a turn and collects its events (until its thread lets go of the sink).
fn turn(
    state: &AppState,
    settings: &Settings,
    session: &str,
    ask: Ask,
    options: TurnOptions,
) -> (Running, Vec<ChatEvent>) {
    let (tx, rx) = mpsc::channel();
    let request = TurnRequest { session: session.into(), ask, options };
    state.apply_settings(settings);
    let running = start(state, request, move |e| tx.send(e).is_ok()).unwrap();
    let events = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(60)).ok()).collect();
    (running, events)
}

fn new(text: &str) -> Ask {
    Ask::New(text.into())
}

fn max(n: usize) -> TurnOptions {
    TurnOptions { max_tokens: Some(n), ..TurnOptions::default() }
}

/// The session's messages once the turn's end is committed.
pub(crate) fn stored(state: &AppState, session: &str, running: &Running) -> Vec<StoredMessage> {
    let _ = running.done.recv_timeout(Duration::from_secs(60));
    block_on(state.store.messages(session)).unwrap_or_default()
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
fn events_serialize_tagged_and_camel_case() {
    let route = RouteInfo {
        target: RouteTarget::Cached,
        model_or_provider: "gpt-x".into(),
        reasons: vec![RouteReason { code: "CACHED", message: "m".into() }],
    };
    let v = serde_json::to_value(ChatEvent::Started { run_id: 3, prompt_tokens: 20, reused_tokens: 0, route })
        .unwrap_or_default();
    let route =
        serde_json::json!({"target":"cached","modelOrProvider":"gpt-x","reasons":[{"code":"CACHED","message":"m"}]});
    assert_eq!(
        v,
        serde_json::json!({"event":"started","data":{"runId":3,"promptTokens":20,"reusedTokens":0,"route":route}})
    );
    let v = serde_json::to_value(ChatEvent::Finished { reason: FinishReason::Cancelled }).unwrap_or_default();
    assert_eq!(v, serde_json::json!({"event":"finished","data":{"reason":"cancelled"}}));
}

#[test]
fn drive_maps_every_event_and_stops_the_run_once_when_nobody_listens() {
    let state = crate::test_state("drive");
    let timings = headroom_core::stats::TurnTimings {
        prompt_tokens: 20,
        prefill: Duration::from_millis(10),
        generated_tokens: 2,
        first_token_at: Some(Duration::from_millis(20)),
        last_token_at: Some(Duration::from_millis(30)),
    };
    let stats = TurnStats {
        prompt_tokens: 20,
        reused_tokens: 4,
        reused_from: headroom_engine::prompt_cache::Reuse::Memory,
        generated_tokens: 2,
        context_tokens: 20,
        batch: 1,
        rates: timings.rates(),
        timings,
        peak_memory_bytes: 1,
        kv_label: "8-bit (group 64)".into(),
        speculation: Default::default(),
        peer: None,
    };
    let route = RouteInfo { target: RouteTarget::Local, model_or_provider: "demo".into(), reasons: Vec::new() };
    let labels = ModelLabels::cloud("demo");
    let mut recorder = TurnRecorder::new(&state.store, "d", "hi", labels.clone(), Route::Local, None).unwrap();
    let (tx, rx) = mpsc::channel();
    let mut sink: Sink = Box::new(move |e| tx.send(e).is_ok());
    let events = vec![
        RunEvent::Started { prompt_tokens: 20, reused_tokens: 4 },
        RunEvent::Text("Hel".into()),
        RunEvent::Text(String::new()),
        RunEvent::Text("lo".into()),
        RunEvent::Stats(stats, None),
        RunEvent::Finished(FinishReason::Length),
    ];
    let end = drive(7, &route, events, &mut sink, &mut recorder, || panic!("still listening"));
    assert_eq!(
        (end.text.as_str(), end.reason, end.error.as_deref(), end.started),
        ("Hello", Some(FinishReason::Length), None, true)
    );
    assert_eq!(end.stats.as_ref().map(|s| s.reused_tokens), Some(4));
    let got: Vec<ChatEvent> = rx.try_iter().collect();
    assert_eq!(got.len(), 5, "{got:?}"); // the empty piece is not sent
    assert_eq!(got[0], ChatEvent::Started { run_id: 7, prompt_tokens: 20, reused_tokens: 4, route: route.clone() });
    assert!(
        matches!(&got[3], ChatEvent::Stats { generated_tokens: 2, batch: 1, model, kv_cache, .. } if model == "demo" && kv_cache == "8-bit (group 64)")
    );
    let ids = recorder.finish(&end).unwrap().expect("not stored");
    assert_eq!(block_on(state.store.message(ids.assistant)).map(|m| m.content).ok().as_deref(), Some("Hello"));

    // Nobody listens: the run is stopped once, the rest drained, the text kept.
    let mut recorder = TurnRecorder::new(&state.store, "d2", "hi", labels, Route::Local, None).unwrap();
    let mut deaf: Sink = Box::new(|_| false);
    let stops = std::cell::Cell::new(0);
    let events =
        vec![RunEvent::Text("a".into()), RunEvent::Text("b".into()), RunEvent::Finished(FinishReason::Cancelled)];
    let end = drive(1, &route, events, &mut deaf, &mut recorder, || stops.set(stops.get() + 1));
    assert_eq!((end.text.as_str(), end.reason, stops.get()), ("ab", Some(FinishReason::Cancelled), 1));

    // Events that stop without an end are an error, and what arrived is kept.
    let mut recorder =
        TurnRecorder::new(&state.store, "d3", "hi", ModelLabels::cloud("x"), Route::Local, None).unwrap();
    let mut sink: Sink = Box::new(|_| true);
    let end = drive(2, &route, vec![RunEvent::Text("part".into())], &mut sink, &mut recorder, || {});
    assert_eq!((end.text.as_str(), end.reason), ("part", None));
    assert!(end.error.is_some());
}

#[test]
fn a_local_turn_streams_from_the_demo_model_and_is_stored_with_its_stats() {
    let state = crate::test_state("turn");
    crate::models::ensure_default_model(&state).unwrap();
    let settings = settings(None);
    let (running, events) = turn(&state, &settings, "s1", new("hello"), max(5));
    let id = running.run_id;
    assert!(matches!(events.first(), Some(ChatEvent::Started { run_id, .. }) if *run_id == id), "{events:?}");
    assert!(matches!(events.last(), Some(ChatEvent::Finished { .. })), "{events:?}");
    assert!(events
        .iter()
        .any(|e| matches!(e, ChatEvent::Stats { model, .. } if model == crate::models::DEMO_MODEL_ID)));
    let streamed = text_of(&events);
    let msgs = stored(&state, "s1", &running);
    assert_eq!(msgs.iter().map(|m| m.role).collect::<Vec<_>>(), [Role::User, Role::Assistant]);
    assert_eq!((msgs[0].content.as_str(), msgs[1].content.as_str()), ("hello", streamed.as_str()));
    assert_eq!(msgs[1].status, MessageStatus::Complete);
    let stats = msgs[1].stats.clone().unwrap_or_else(|| panic!("no stats: {msgs:?}"));
    // The labels are the load's (quantization) and the turn's own (its KV cache).
    assert_eq!(
        (stats.model_id.as_str(), stats.batch, stats.quantization.as_deref(), stats.kv_dtype.as_str()),
        (crate::models::DEMO_MODEL_ID, 1, Some("4-bit, group 64"), "bf16")
    );
    assert!(stats.generated_tokens <= 5 && stats.prompt_tokens > 0, "{stats:?}");
    let kernel = state.loaded_model().and_then(|m| m.info.quant_kernel).map(|k| k.as_str().to_owned());
    assert_eq!(stats.quant_kernel, kernel, "the kernel the model was loaded with");
    assert!(stats.quant_kernel.is_some());
    let first_prompt = stats.prompt_tokens;

    // A second turn in the same session sees the whole conversation.
    let (running, events) = turn(&state, &settings, "s1", new("more"), max(5));
    assert!(matches!(events.last(), Some(ChatEvent::Finished { .. })), "second turn: {events:?}");
    let msgs = stored(&state, "s1", &running);
    let second = msgs[3].stats.clone().unwrap_or_else(|| panic!("no stats: {msgs:?}"));
    assert!(second.prompt_tokens > first_prompt, "{} then {}", first_prompt, second.prompt_tokens);

    let refused = |ask: Ask, options: TurnOptions| {
        let request = TurnRequest { session: "s1".into(), ask, options };
        state.apply_settings(&settings);
        start(&state, request, |_| true).err().map(|e| e.code())
    };
    assert_eq!(refused(new(" \n"), TurnOptions::default()), Some(ErrorCode::EmptyMessage));
    assert_eq!(refused(new("hi"), max(0)), Some(ErrorCode::InvalidSetting));
    assert_eq!(block_on(state.store.messages("s1")).map(|m| m.len()).ok(), Some(4), "refused turns store nothing");
}

/// A turn labelled with one load of the model never runs on another: here
/// the app's record of the loaded model is one load behind the engine's (as
/// when the local server reloads the model between the turn's start and its
/// run), and the turn ends with MODEL_CHANGED before any token.
#[test]
fn a_turn_never_runs_on_a_load_other_than_the_one_it_is_labelled_with() {
    let state = crate::test_state("turn-load");
    crate::models::ensure_default_model(&state).unwrap();
    let settings = settings(None);
    let mut stale = state.loaded_model().expect("the demo model is loaded");
    stale.info.load += 1;
    state.set_loaded(Some(stale));
    let (running, events) = turn(&state, &settings, "s1", new("hello"), max(3));
    assert!(!events.iter().any(|e| matches!(e, ChatEvent::Token { .. })), "{events:?}");
    // What the user wrote is kept, to be sent again.
    let msgs = stored(&state, "s1", &running);
    assert_eq!(msgs.first().map(|m| (m.role, m.content.as_str())), Some((Role::User, "hello")), "{msgs:?}");
    let error = events.iter().find_map(|e| match e {
        ChatEvent::Error { code, message } => Some((*code, message.clone())),
        _ => None,
    });
    assert!(matches!(&error, Some((ErrorCode::ModelChanged, m)) if m.contains("send it again")), "{events:?}");
}

/// A local answer's tokens reach the live view as per-second decode rates
/// of its model (what the live graph draws), and the live run ends with the
/// answer (nothing left counted as streaming).
#[test]
fn a_local_turn_reports_its_decode_rates_to_the_live_view() {
    let state = crate::test_state("turn-live");
    crate::models::ensure_default_model(&state).unwrap();
    // Each token 10 ms after the one before, whatever this machine's speed:
    // on the wall clock a point needs a quarter of a second of decoding,
    // which 400 tokens did not fill on a machine faster than 1,600 tok/s.
    let mut last: Option<std::time::Instant> = None;
    state.live.set_token_clock(move || {
        let t = last.map_or_else(std::time::Instant::now, |t| t + Duration::from_millis(10));
        last = Some(t);
        t
    });
    let options = TurnOptions { max_tokens: Some(400), ignore_eos: true, ..TurnOptions::default() };
    let (running, events) = turn(&state, &settings(None), "live", new("count"), options);
    assert!(matches!(events.last(), Some(ChatEvent::Finished { .. })), "{events:?}");
    let msgs = stored(&state, "live", &running);
    let stats = msgs[1].stats.clone().unwrap_or_else(|| panic!("no stats: {msgs:?}"));
    let (rates, _) = state.live.recent(0);
    assert!(rates.iter().all(|r| r.model_id == crate::models::DEMO_MODEL_ID), "{rates:?}");
    // Every token of the answer reached the live view (all but the first,
    // which opens the first interval), at the clock's 100 tok/s.
    let counted: u32 = rates.iter().map(|r| r.point.tokens).sum();
    assert!(stats.generated_tokens > 200, "{stats:?}");
    assert_eq!(i64::from(counted), stats.generated_tokens - 1, "{rates:?}");
    assert!(rates.iter().all(|r| (r.point.tps - 100.0).abs() < 1.0), "{rates:?}");
    assert_eq!(state.live.activity().runs, 0, "the answer's live run ended with it");
    // Nothing slowed a demo answer on an idle machine by memory; when the
    // live view does blame memory, the stats carry its sentence.
    let slowdown = events.iter().find_map(|e| match e {
        ChatEvent::Stats { slowdown, .. } => Some(slowdown.clone()),
        _ => None,
    });
    assert_eq!(slowdown.flatten(), stats.slowdown, "the event and the stored stats agree");
}

#[test]
fn a_stopped_turn_is_stored_interrupted_with_what_arrived() {
    let state = crate::test_state("cancel");
    crate::models::ensure_default_model(&state).unwrap();
    let (tx, rx) = mpsc::channel();
    let request = TurnRequest { session: "c".into(), ask: new("count to a thousand"), options: max(4000) };
    state.apply_settings(&settings(None));
    let running = start(&state, request, move |e| tx.send(e).is_ok()).unwrap();
    let mut events = Vec::new();
    while let Ok(e) = rx.recv_timeout(Duration::from_secs(60)) {
        let token = matches!(e, ChatEvent::Token { .. });
        events.push(e);
        if token {
            break;
        }
    }
    // As the UI's Stop does: through the one registry.
    assert!(state.runs.cancel(running.run_id), "the run was in flight: {events:?}");
    events.extend(std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(60)).ok()));
    assert!(events.contains(&ChatEvent::Finished { reason: FinishReason::Cancelled }), "{events:?}");
    let id = running.run_id;
    let msgs = stored(&state, "c", &running);
    assert_eq!(msgs[1].status, MessageStatus::Interrupted);
    assert_eq!(msgs[1].stats.as_ref().map(|s| s.finish_reason), Some(FinishReason::Cancelled));
    assert!(msgs[1].stats.as_ref().is_some_and(|s| s.generated_tokens < 4000));
    assert!(!state.runs.cancel(id), "over: nothing left to stop");
}

#[test]
fn short_or_sensitive_messages_stay_local_and_never_reach_the_cloud() {
    let state = crate::test_state("route-local");
    let stub = stub(answer(&["never"]));
    let settings = settings(Some(&stub));
    crate::models::ensure_default_model(&state).unwrap();

    let (running, events) = turn(&state, &settings, "short", new("hello"), max(3));
    let route = route_of(&events);
    assert_eq!((route.target, route.model_or_provider.as_str()), (RouteTarget::Local, crate::models::DEMO_MODEL_ID));
    assert_eq!(codes(&route), ["SHORT_INPUT"]);
    assert_eq!(stored(&state, "short", &running)[1].route, Route::Local);

    // Forcing the cloud is not an override of the privacy rule.
    let forced = TurnOptions { force: Some(Force::Cloud), ..max(3) };
    let (running, events) = turn(&state, &settings, "private", new(SENSITIVE), forced);
    let route = route_of(&events);
    assert_eq!(route.target, RouteTarget::Local);
    assert!(codes(&route).contains(&"CLOUD_REFUSED_SENSITIVE"), "{route:?}");
    assert!(
        route.reasons.iter().all(|r| !r.message.contains("11010519491231002X")),
        "the reason never repeats the secret"
    );
    assert_eq!(stored(&state, "private", &running)[1].route, Route::Local);
    assert!(stub.requests().is_empty(), "nothing reached the cloud");
}

#[test]
fn a_cloud_turn_streams_is_stored_and_the_same_request_is_answered_from_the_cache() {
    let state = crate::test_state("route-cloud");
    let stub = stub(answer(&["Hel", "lo there", "!"]));
    let settings = settings(Some(&stub));

    // No local model: a short message goes to the cloud.
    let (running, events) = turn(&state, &settings, "a", new("say hello"), TurnOptions::default());
    let route = route_of(&events);
    assert_eq!((route.target, route.model_or_provider.as_str()), (RouteTarget::Cloud, MODEL));
    assert!(codes(&route).contains(&"SHORT_INPUT") && codes(&route).contains(&"NO_LOCAL_MODEL"), "{route:?}");
    assert_eq!(text_of(&events), "Hello there!");
    assert!(
        events.iter().any(
            |e| matches!(e, ChatEvent::Stats { generated_tokens: 3, prompt_tokens: 11, model, .. } if model == MODEL)
        ),
        "{events:?}"
    );
    assert_eq!(events.last(), Some(&ChatEvent::Finished { reason: FinishReason::Stop }));
    let msgs = stored(&state, "a", &running);
    assert_eq!((msgs[0].role, msgs[0].content.as_str()), (Role::User, "say hello"));
    assert_eq!(
        (msgs[1].route, msgs[1].status, msgs[1].content.as_str()),
        (Route::Cloud, MessageStatus::Complete, "Hello there!")
    );
    let stats = msgs[1].stats.clone().unwrap_or_else(|| panic!("no stats: {msgs:?}"));
    assert_eq!((stats.model_id.as_str(), stats.generated_tokens, stats.prompt_tokens), (MODEL, 3, 11));
    assert_eq!(stub.bodies().len(), 1);
    assert!(stub.bodies()[0].contains("say hello") && stub.bodies()[0].contains(MODEL), "{:?}", stub.bodies());

    // The same request in a new chat (same empty history): from the cache,
    // with extra spaces that normalisation removes.
    let (running, events) = turn(&state, &settings, "b", new("say   hello  "), TurnOptions::default());
    let route = route_of(&events);
    assert_eq!((route.target, route.model_or_provider.as_str()), (RouteTarget::Cached, MODEL));
    assert_eq!(codes(&route).last(), Some(&events::CACHED_REASON));
    assert_eq!(text_of(&events), "Hello there!");
    assert_eq!(events.last(), Some(&ChatEvent::Finished { reason: FinishReason::Stop }));
    assert_eq!(stub.bodies().len(), 1, "a cache hit sends nothing");
    let msgs = stored(&state, "b", &running);
    assert_eq!(
        (msgs[1].route, msgs[1].status, msgs[1].content.as_str()),
        (Route::Cloud, MessageStatus::Complete, "Hello there!")
    );
    let stats = msgs[1].stats.clone().unwrap_or_else(|| panic!("no stats: {msgs:?}"));
    assert_eq!((stats.model_id.as_str(), stats.generated_tokens), ("cache:stub-model", 0));
    let cache = block_on(state.store.cache_stats()).unwrap();
    assert_eq!((cache.hits, cache.misses, cache.entries), (1, 1, 1));

    // The same words later in a conversation are another request.
    let (running, events) = turn(&state, &settings, "a", new("say hello"), TurnOptions::default());
    assert_eq!(route_of(&events).target, RouteTarget::Cloud);
    drop(stored(&state, "a", &running));
    assert_eq!(stub.bodies().len(), 2);
    assert!(stub.bodies()[1].contains("Hello there!"), "the history went along: {:?}", stub.bodies());
}

#[test]
fn sensitive_text_leaves_only_with_the_override_and_its_answer_is_not_cached() {
    let state = crate::test_state("route-sensitive");
    let stub = stub(answer(&["ok"]));
    let settings = settings(Some(&stub));
    let forced = TurnOptions { force: Some(Force::Cloud), ..TurnOptions::default() };

    // Must stay local, and nothing local runs: the router's error, nothing stored.
    let request = TurnRequest { session: "s".into(), ask: new(SENSITIVE), options: forced.clone() };
    state.apply_settings(&settings);
    let err = start(&state, request, |_| true).err();
    assert_eq!(err.as_ref().map(Coded::code), Some(ErrorCode::RouteNoLocalModel), "{err:?}");
    assert!(err.is_some_and(|e| e.message().contains("allow sensitive content")));
    assert_eq!(block_on(state.store.messages("s")).map(|m| m.len()).ok(), Some(0), "the UI gives the text back");
    assert!(stub.requests().is_empty());

    let allowed = TurnOptions { allow_sensitive: true, ..forced };
    let (running, events) = turn(&state, &settings, "s", new(SENSITIVE), allowed.clone());
    let route = route_of(&events);
    assert_eq!(route.target, RouteTarget::Cloud);
    assert!(codes(&route).contains(&"PRIVACY_OVERRIDDEN"), "{route:?}");
    assert_eq!(text_of(&events), "ok");
    assert_eq!(stored(&state, "s", &running)[1].route, Route::Cloud);
    assert!(stub.bodies()[0].contains("11010519491231002X"), "the override sends it: the stub sees what leaves");

    // The override was for that message, not for a copy on disk.
    let (running, events) = turn(&state, &settings, "t", new(SENSITIVE), allowed);
    assert_eq!(route_of(&events).target, RouteTarget::Cloud);
    drop(stored(&state, "t", &running));
    assert_eq!(stub.bodies().len(), 2, "not answered from a cache");
    let cache = block_on(state.store.cache_stats()).unwrap();
    assert_eq!((cache.entries, cache.hits), (0, 0));
}

#[test]
fn a_cloud_turn_stops_through_the_registry_and_keeps_what_arrived() {
    let state = crate::test_state("route-cancel");
    let mut parts = vec![(SSE_HEAD.to_owned(), Duration::ZERO)];
    parts.extend((0..40).map(|_| (chunk("tick "), Duration::from_millis(100))));
    parts.push((finish("stop") + &usage(9, 40) + "data: [DONE]\n\n", Duration::ZERO));
    let stub = stub(Reply::Parts(parts));
    let settings = settings(Some(&stub));
    let (tx, rx) = mpsc::channel();
    let request = TurnRequest { session: "c".into(), ask: new("count slowly"), options: TurnOptions::default() };
    state.apply_settings(&settings);
    let running = start(&state, request, move |e| tx.send(e).is_ok()).unwrap();
    let mut events = Vec::new();
    while let Ok(e) = rx.recv_timeout(Duration::from_secs(30)) {
        let first_token = matches!(e, ChatEvent::Token { .. });
        events.push(e);
        if first_token {
            break;
        }
    }
    let id = running.run_id;
    assert!(state.runs.cancel(id), "the cloud run was in flight: {events:?}");
    events.extend(std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(30)).ok()));
    assert_eq!(events.last(), Some(&ChatEvent::Finished { reason: FinishReason::Cancelled }), "{events:?}");
    let msgs = stored(&state, "c", &running);
    assert_eq!((msgs[1].route, msgs[1].status), (Route::Cloud, MessageStatus::Interrupted));
    assert!(msgs[1].content.starts_with("tick") && msgs[1].content.len() < 5 * 40, "{:?}", msgs[1].content);
    assert!(!state.runs.cancel(id), "over: nothing left to stop");
    let cache = block_on(state.store.cache_stats()).unwrap();
    assert_eq!(cache.entries, 0, "a cut answer is not cached");
}

/// Headroom's own unload (memory pressure here; idle the same way): the
/// chat caches go first, then the model; the next message loads it again
/// through the fit-checked load, and its route note says so with the load
/// time. A run in the registry keeps the model.
#[test]
fn a_model_headroom_unloaded_comes_back_for_the_next_message_with_its_load_time() {
    use headroom_core::away::{Action, Cause};
    use headroom_core::pressure::PressureLevel;

    let state = crate::test_state("away");
    crate::models::ensure_default_model(&state).unwrap();
    let settings = settings(None);
    let (running, _) = turn(&state, &settings, "s1", new("hello"), max(3));
    let _ = stored(&state, "s1", &running);

    let cause = Cause::Pressure { level: PressureLevel::Critical };
    let dropped =
        crate::give_back::carry_out(&state, Action::DropSessions { cause }).expect("the sessions were not dropped");
    assert!(
        dropped
            .message
            .starts_with("Memory pressure reached critical: Headroom dropped the cached chat states of 1 chat ("),
        "{}",
        dropped.message
    );
    assert!(state.loaded_model().is_some(), "the cheap step keeps the model");

    let unloaded = crate::give_back::carry_out(&state, Action::Unload { cause }).expect("the model was not unloaded");
    assert!(state.loaded_model().is_none());
    assert!(
        unloaded.message.contains(&format!("Headroom unloaded {}", crate::models::DEMO_MODEL_ID)),
        "{}",
        unloaded.message
    );
    // The figure is MLX's process-wide counters before and after: the other
    // tests of this binary load and free models on their own engines at the
    // same time, enough to hide the tiny demo model's 84 KB of weights (CI saw
    // "gave back 0 MB"). The engine's own test measures it, on a model tens
    // of MB large, under its lock; here it is only carried into the notice.
    assert!(unloaded.freed_bytes.is_some(), "{unloaded:?}");
    assert!(unloaded.message.contains(" and gave back "), "{}", unloaded.message);
    assert_eq!(state.away.notice(), Some(unloaded));
    assert_eq!(state.away.unloaded().map(|u| u.id), Some(crate::models::DEMO_MODEL_ID.to_owned()));

    let (running, events) = turn(&state, &settings, "s1", new("again"), max(3));
    let route = route_of(&events);
    let note = route
        .reasons
        .iter()
        .find(|r| r.code == crate::away::RELOADED_CODE)
        .unwrap_or_else(|| panic!("no reload note: {route:?}"));
    assert!(
        note.message
            .contains("was unloaded because memory pressure reached critical; it was loaded again for this message"),
        "{}",
        note.message
    );
    assert!(note.message.ends_with(" s."), "the load time: {}", note.message);
    assert!(matches!(events.last(), Some(ChatEvent::Finished { .. })), "{events:?}");
    let _ = stored(&state, "s1", &running);
    assert!(state.loaded_model().is_some() && state.away.unloaded().is_none(), "loaded, nothing left to reload");

    // The next turn on a loaded model says nothing about loading.
    let (running, events) = turn(&state, &settings, "s1", new("once more"), max(2));
    assert!(!codes(&route_of(&events)).contains(&crate::away::RELOADED_CODE));
    let _ = stored(&state, "s1", &running);

    // A run under way (a benchmark, say) keeps the model: the unload is not done.
    let run = state.runs.register(crate::runs::RunKind::Bench, crate::runs::Stopper::Flag(std::sync::Arc::default()));
    assert_eq!(crate::give_back::carry_out(&state, Action::Unload { cause }), None);
    assert_eq!(crate::give_back::carry_out(&state, Action::DropSessions { cause }), None);
    assert!(state.loaded_model().is_some());
    drop(run);
}

/// A thinking model's turn (the demo whose template opens `<think>`, as
/// Qwen3's thinking releases do; its random weights never close the block,
/// so the model's thinking budget closes it): the thinking arrives apart
/// from the answer, its tags in neither, counted apart in the stats; the
/// chat's Think switch off asks the template for no thinking, and none comes.
/// What this checks is the path, not any thought: the weights are random.
#[test]
fn a_thinking_models_thinking_streams_apart_and_the_switch_turns_it_off() {
    use headroom_core::thinking::Think;
    use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
    let state = crate::test_state("turn-think");
    let dir = state.locations.data_dir.join(crate::locations::MODELS_DIR).join("thinker");
    write_demo_model(&dir, &DemoSpec { thinking: true, ..DemoSpec::new(Arch::Qwen3, Preset::Tiny, Bits::Four) })
        .unwrap();
    let loaded =
        crate::models::load(&state, "thinker", None, Some(headroom_core::kv::KvFormat::Float), false, false).unwrap();
    assert!(loaded.entry.thinks, "the template's think block is seen at the load");
    let budget = 6;
    let settings =
        Settings { thinking: [("thinker".to_owned(), Think::Budget(budget))].into_iter().collect(), ..settings(None) };
    let options = TurnOptions { ignore_eos: true, ..max(24) };
    let (running, events) = turn(&state, &settings, "t1", new("hello"), options.clone());
    let thought: String = events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::Thinking { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let counts: Vec<usize> = events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::Thinking { tokens, .. } => Some(*tokens),
            _ => None,
        })
        .collect();
    let answer = text_of(&events);
    let Some(ChatEvent::Stats { thinking_tokens, generated_tokens, .. }) =
        events.iter().find(|e| matches!(e, ChatEvent::Stats { .. }))
    else {
        panic!("no stats: {events:?}")
    };
    // The budget's tokens, then the forced close tag's (counted as thinking, as the engine does).
    assert!(
        *thinking_tokens > budget as usize && *thinking_tokens < *generated_tokens,
        "{thinking_tokens} of {generated_tokens}"
    );
    assert_eq!(counts.last(), Some(thinking_tokens), "the running count ends at the stats' figure");
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    assert!(!thought.trim().is_empty(), "{events:?}");
    for tag in ["<think>", "</think>"] {
        assert!(!thought.contains(tag) && !answer.contains(tag), "{tag} in {thought:?} / {answer:?}");
    }
    // The stored answer is the answer alone.
    let msgs = stored(&state, "t1", &running);
    assert_eq!(msgs[1].content, answer);

    // The Think switch off: the template is asked for no thinking.
    let off = TurnOptions { think: Some(false), ..options };
    let (_, events) = turn(&state, &settings, "t2", new("hello"), off);
    assert!(!events.iter().any(|e| matches!(e, ChatEvent::Thinking { .. })), "{events:?}");
    assert!(
        events.iter().any(|e| matches!(e, ChatEvent::Stats { thinking_tokens: 0, generated_tokens: 24, .. })),
        "{events:?}"
    );
}

/// A state whose `mcp.json` starts the fake MCP server (headroom-test-support),
/// with deadlines short enough for a test; the demo model loaded.
fn state_with_tools(tag: &str) -> AppState {
    let mut state = crate::test_state(tag);
    std::fs::create_dir_all(&state.locations.data_dir).unwrap();
    std::fs::write(
        state.locations.data_dir.join(crate::tools::config::FILE),
        format!(r#"{{"mcpServers": {{"fake": {}}}}}"#, headroom_test_support::mcp::entry("ok")),
    )
    .unwrap();
    state.tools = crate::tools::Tools::new(state.locations.data_dir.clone())
        .with_deadlines(Duration::from_secs(10), Duration::from_secs(3));
    let view = block_on(state.tools.restart());
    assert_eq!(view.servers[0].state, crate::tools::ServerState::Running, "{view:?}");
    crate::models::ensure_default_model(&state).unwrap();
    state
}

/// Starts a turn whose sink answers each call that asks with `answer`, and
/// collects its events.
fn turn_answering(
    state: &AppState,
    settings: &Settings,
    session: &str,
    options: TurnOptions,
    answer: crate::tools::Approval,
) -> (Running, Vec<ChatEvent>) {
    let (tx, rx) = mpsc::channel();
    let tools = state.tools.clone();
    let mut run = 0;
    let request = TurnRequest { session: session.into(), ask: new("read the deploy configuration"), options };
    state.apply_settings(settings);
    let running = start(state, request, move |e| {
        match &e {
            ChatEvent::Started { run_id, .. } => run = *run_id,
            ChatEvent::ToolCall { call_id, asks: true, .. } => assert!(tools.answer(run, call_id, answer)),
            _ => {}
        }
        tx.send(e).is_ok()
    })
    .unwrap();
    let events = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(60)).ok()).collect();
    (running, events)
}

fn tool_results(events: &[ChatEvent]) -> Vec<(ToolOutcome, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ToolResult { outcome, text, .. } => Some((*outcome, text.clone())),
            _ => None,
        })
        .collect()
}

/// The privacy rule over tools: the model (forced to call `secret`) asks,
/// the user allows it, the result holds an API key; the next message, which
/// the router would send to the cloud for its length, stays on this Mac
/// (forced to the cloud, too), and the cloud stub receives nothing.
#[test]
fn a_tool_result_holding_a_secret_keeps_the_chat_local_and_the_cloud_receives_nothing() {
    let state = state_with_tools("tools-secret");
    let stub = stub(answer(&["never"]));
    // Every message is "long": the router would pick the cloud.
    let settings = Settings { local_threshold_tokens: 1, ..settings(Some(&stub)) };
    let forced_tool = TurnOptions { tool: Some("secret".into()), force: Some(Force::Local), ..max(128) };
    let (running, events) = turn_answering(&state, &settings, "t", forced_tool, crate::tools::Approval::Once);
    let call = events.iter().find_map(|e| match e {
        ChatEvent::ToolCall { server, tool, asks, .. } => Some((server.clone(), tool.clone(), *asks)),
        _ => None,
    });
    assert_eq!(call, Some(("fake".into(), "secret".into(), true)), "{events:?}");
    let results = tool_results(&events);
    assert_eq!(results.len(), 1, "{events:?}");
    assert_eq!(results[0].0, ToolOutcome::Done);
    assert!(results[0].1.contains(headroom_test_support::mcp::SECRET));
    assert!(matches!(events.last(), Some(ChatEvent::Finished { .. })), "{events:?}");
    let msgs = stored(&state, "t", &running);
    assert_eq!(msgs.len(), 2);
    assert!(!msgs[1].content.contains("<tool_call>"), "the call's markup is not the answer: {:?}", msgs[1].content);

    for force in [None, Some(Force::Cloud)] {
        let options = TurnOptions { force, ..max(3) };
        let (running, events) = turn(&state, &settings, "t", new("and what else is in there?"), options);
        let route = route_of(&events);
        assert_eq!(route.target, RouteTarget::Local, "{force:?}: {route:?}");
        assert!(codes(&route).contains(&"TOOL_RESULT_SENSITIVE"), "{route:?}");
        let chip = route.reasons.iter().find(|r| r.code == "TOOL_RESULT_SENSITIVE").unwrap();
        assert!(chip.message.starts_with("Kept local: a tool result holds a secret"), "{}", chip.message);
        assert!(route.reasons.iter().all(|r| !r.message.contains(headroom_test_support::mcp::SECRET)));
        let _ = stored(&state, "t", &running);
    }
    assert!(stub.requests().is_empty(), "nothing reached the cloud: {:?}", stub.requests());
    // Another chat, with no tool result, goes to the cloud as before.
    let (_running, events) = turn(&state, &settings, "other", new("hello there"), max(3));
    assert_eq!(route_of(&events).target, RouteTarget::Cloud);
    block_on(state.tools.stop_all());
}

/// A denied call is not run and the model is told; a hanging call is cut
/// off at the deadline with a message in its card, and the turn goes on.
#[test]
fn a_denied_call_is_not_run_and_a_hanging_one_ends_in_a_message() {
    let state = state_with_tools("tools-deny");
    let settings = settings(None);
    let options = TurnOptions { tool: Some("secret".into()), ..max(128) };
    let (_running, events) = turn_answering(&state, &settings, "d", options, crate::tools::Approval::Deny);
    assert_eq!(tool_results(&events), [(ToolOutcome::Denied, "Denied.".to_owned())], "{events:?}");
    assert!(state.tools.results_in("d").is_empty(), "a denied call leaves no result");
    assert!(matches!(events.last(), Some(ChatEvent::Finished { .. })), "{events:?}");

    let t0 = std::time::Instant::now();
    let options = TurnOptions { tool: Some("hang".into()), ..max(128) };
    let (_running, events) = turn_answering(&state, &settings, "h", options, crate::tools::Approval::Always);
    let results = tool_results(&events);
    assert_eq!(results.len(), 1, "{events:?}");
    assert_eq!(results[0].0, ToolOutcome::Error);
    assert!(results[0].1.contains("no answer within 3s"), "{results:?}");
    assert!(matches!(events.last(), Some(ChatEvent::Finished { .. })), "{events:?}");
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    // "Always" is kept: the next call of `hang` would not ask.
    assert!(state.tools.flags("fake", "hang").unwrap().always_allow);
    block_on(state.tools.stop_all());
}
