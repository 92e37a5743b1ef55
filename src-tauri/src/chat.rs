//! One chat turn from the app's side: keeps the session's history, starts
//! the engine run and forwards its events, as `ChatEvent`s, to whoever
//! listens (the UI's `ipc::Channel`; a closure in tests).

use std::sync::mpsc::Receiver;

use headroom_core::chat::{FinishReason, Message, Role};
use headroom_engine::worker::{EngineEvent, GenerateRequest, OverflowPolicy, RunId, TurnStats};
use serde::Serialize;

use crate::error::CommandError;
use crate::state::AppState;

/// Max new tokens when the UI asks for none (the default setting).
pub const DEFAULT_MAX_TOKENS: usize = 512;
/// The most the UI may ask for in one turn.
pub const MAX_TOKENS_LIMIT: usize = 32_768;

/// What the UI hears about a run, in order: `Started`, `Token`s, `Stats`,
/// `Finished`; or `Error`, which ends it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", content = "data", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum ChatEvent {
    Started { run_id: u64, prompt_tokens: usize, reused_tokens: usize },
    Token { text: String },
    Stats {
        ttft_ms: Option<f64>,
        prefill_tps: Option<f64>,
        decode_tps: Option<f64>,
        e2e_tps: Option<f64>,
        prompt_tokens: usize,
        generated_tokens: usize,
        context_tokens: usize,
        batch: usize,
        peak_memory_bytes: usize,
        model: String,
    },
    Finished { reason: FinishReason },
    Error { code: &'static str, message: String },
}

impl ChatEvent {
    fn stats(s: &TurnStats, model: &str) -> Self {
        Self::Stats {
            ttft_ms: s.rates.ttft_ms,
            prefill_tps: s.rates.prefill_tps,
            decode_tps: s.rates.decode_tps,
            e2e_tps: s.rates.e2e_tps,
            prompt_tokens: s.prompt_tokens,
            generated_tokens: s.generated_tokens,
            context_tokens: s.context_tokens,
            batch: s.batch,
            peak_memory_bytes: s.peak_memory_bytes,
            model: model.to_owned(),
        }
    }
}

/// How a forwarded run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnd {
    pub text: String,
    /// `None` when the run failed (or the engine went away mid-run).
    pub reason: Option<FinishReason>,
}

/// Turns a run's engine events into `ChatEvent`s for `send` until the run
/// ends. `send` returns false once nobody listens; `on_gone` is then called
/// once (to cancel the run) and the rest is drained quietly.
pub fn forward(
    run_id: RunId,
    events: &Receiver<EngineEvent>,
    model: &str,
    mut send: impl FnMut(ChatEvent) -> bool,
    mut on_gone: impl FnMut(),
) -> TurnEnd {
    let mut text = String::new();
    let mut listening = true;
    let mut emit = |event: ChatEvent| {
        if listening && !send(event) {
            listening = false;
            on_gone();
        }
    };
    for event in events {
        match event {
            EngineEvent::Started { prompt_tokens, reused_tokens } => {
                emit(ChatEvent::Started { run_id: run_id.0, prompt_tokens, reused_tokens });
            }
            EngineEvent::Token { text: piece, .. } | EngineEvent::Text(piece) => {
                if !piece.is_empty() {
                    text.push_str(&piece);
                    emit(ChatEvent::Token { text: piece });
                }
            }
            EngineEvent::Stats(stats) => emit(ChatEvent::stats(&stats, model)),
            EngineEvent::Finished { reason } => {
                emit(ChatEvent::Finished { reason });
                return TurnEnd { text, reason: Some(reason) };
            }
            EngineEvent::Error(e) => {
                let e = CommandError::from(e);
                emit(ChatEvent::Error { code: e.code, message: e.message });
                return TurnEnd { text, reason: None };
            }
        }
    }
    let e = CommandError::from(headroom_engine::EngineError::EngineStopped);
    emit(ChatEvent::Error { code: e.code, message: e.message });
    TurnEnd { text, reason: None }
}

/// Starts a turn in `session`: records the user's message, queues the run
/// and returns its id at once; a thread forwards the events to `send` and
/// then records the answer (or, on failure, takes the user's message back
/// out so the history matches what the UI shows).
pub fn start_turn(
    state: &AppState,
    session: &str,
    text: String,
    max_tokens: Option<usize>,
    send: impl FnMut(ChatEvent) -> bool + Send + 'static,
) -> Result<RunId, CommandError> {
    if text.trim().is_empty() {
        return Err(CommandError::new("EMPTY_MESSAGE", "Type a message first."));
    }
    let max_tokens = max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens == 0 || max_tokens > MAX_TOKENS_LIMIT {
        return Err(CommandError::new(
            "INVALID_SETTING",
            format!("Max new tokens must be between 1 and {MAX_TOKENS_LIMIT}."),
        ));
    }
    let model = state
        .loaded_model()
        .ok_or_else(|| CommandError::new("NO_MODEL_LOADED", "No model is loaded yet. Pick one from the list at the top."))?;
    let messages = state.with_session(session, |history| {
        history.push(Message::new(Role::User, text));
        history.clone()
    });
    let request = GenerateRequest {
        session: Some(session.to_owned()),
        max_tokens,
        // A long chat keeps going: the oldest turns make room.
        overflow: OverflowPolicy::TruncateOldest,
        ..GenerateRequest::new(messages)
    };
    let run = match state.engine.generate(request) {
        Ok(run) => run,
        Err(e) => {
            state.with_session(session, |history| history.pop());
            return Err(e.into());
        }
    };
    let id = run.id;
    let engine = state.engine.clone();
    let (state, session) = (state.clone(), session.to_owned());
    let spawned = std::thread::Builder::new().name(format!("headroom-chat-{}", id.0)).spawn(move || {
        let engine = state.engine.clone();
        let end = forward(id, &run.events, &model.id, send, || {
            engine.cancel(id);
        });
        state.with_session(&session, |history| match end.reason {
            Some(_) => history.push(Message::new(Role::Assistant, end.text)),
            None => {
                if history.last().is_some_and(|m| m.role == Role::User) {
                    history.pop();
                }
            }
        });
    });
    if let Err(e) = spawned {
        engine.cancel(id);
        return Err(CommandError::new("ENGINE_INTERNAL", format!("Could not start the chat thread: {e}")));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn events_serialize_tagged_and_camel_case() {
        let v = serde_json::to_value(ChatEvent::Started { run_id: 3, prompt_tokens: 20, reused_tokens: 0 })
            .unwrap_or_default();
        assert_eq!(v, serde_json::json!({"event":"started","data":{"runId":3,"promptTokens":20,"reusedTokens":0}}));
        let v = serde_json::to_value(ChatEvent::Finished { reason: FinishReason::Cancelled }).unwrap_or_default();
        assert_eq!(v, serde_json::json!({"event":"finished","data":{"reason":"cancelled"}}));
    }

    #[test]
    fn forward_maps_every_engine_event_and_stops_sending_when_nobody_listens() {
        let (tx, rx) = mpsc::channel();
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
            generated_tokens: 2,
            context_tokens: 20,
            batch: 1,
            rates: timings.rates(),
            timings,
            peak_memory_bytes: 1,
        };
        for e in [
            EngineEvent::Started { prompt_tokens: 20, reused_tokens: 4 },
            EngineEvent::Token { id: 1, text: "Hel".into() },
            EngineEvent::Token { id: 2, text: String::new() },
            EngineEvent::Text("lo".into()),
            EngineEvent::Stats(stats),
            EngineEvent::Finished { reason: FinishReason::Length },
        ] {
            tx.send(e).unwrap_or_else(|e| panic!("{e}"));
        }
        let mut got = Vec::new();
        let end = forward(RunId(7), &rx, "demo", |e| { got.push(e); true }, || panic!("still listening"));
        assert_eq!(end, TurnEnd { text: "Hello".into(), reason: Some(FinishReason::Length) });
        assert_eq!(got.len(), 5, "{got:?}"); // the empty token is not sent
        assert_eq!(got[0], ChatEvent::Started { run_id: 7, prompt_tokens: 20, reused_tokens: 4 });
        assert!(matches!(&got[3], ChatEvent::Stats { generated_tokens: 2, batch: 1, model, .. } if model == "demo"));

        let (tx, rx) = mpsc::channel();
        tx.send(EngineEvent::Token { id: 1, text: "a".into() }).unwrap_or_else(|e| panic!("{e}"));
        tx.send(EngineEvent::Error(headroom_engine::EngineError::NoModelLoaded)).unwrap_or_else(|e| panic!("{e}"));
        let mut gone = 0;
        let end = forward(RunId(1), &rx, "demo", |_| false, || gone += 1);
        assert_eq!((end.reason, gone), (None, 1));

        let (tx, rx) = mpsc::channel::<EngineEvent>();
        drop(tx);
        let mut got = Vec::new();
        forward(RunId(2), &rx, "demo", |e| { got.push(e); true }, || {});
        assert!(matches!(&got[..], [ChatEvent::Error { code: "ENGINE_INTERNAL", .. }]), "{got:?}");
    }

    #[test]
    fn a_turn_streams_from_the_demo_model_and_is_kept_in_the_history() {
        let state = crate::test_state("turn");
        crate::models::ensure_demo_model(&state).unwrap_or_else(|e| panic!("{e:?}"));
        let (tx, rx) = mpsc::channel();
        let id = start_turn(&state, "s1", "hello".into(), Some(5), move |e| tx.send(e).is_ok())
            .unwrap_or_else(|e| panic!("{e:?}"));
        let events: Vec<ChatEvent> = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(60)).ok()).collect();
        assert!(matches!(events.first(), Some(ChatEvent::Started { run_id, .. }) if *run_id == id.0), "{events:?}");
        assert!(matches!(events.last(), Some(ChatEvent::Finished { .. })), "{events:?}");
        assert!(events.iter().any(|e| matches!(e, ChatEvent::Stats { model, .. } if model == crate::models::DEMO_MODEL_ID)));
        // The thread records the answer right after the last event.
        for _ in 0..100 {
            if state.with_session("s1", |h| h.len()) == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let history = state.with_session("s1", |h| h.clone());
        assert_eq!(history.iter().map(|m| m.role).collect::<Vec<_>>(), [Role::User, Role::Assistant]);

        // A second turn in the same session sees the whole conversation.
        let (tx, rx) = mpsc::channel();
        start_turn(&state, "s1", "more".into(), Some(5), move |e| tx.send(e).is_ok()).unwrap_or_else(|e| panic!("{e:?}"));
        let events: Vec<ChatEvent> = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(60)).ok()).collect();
        assert!(matches!(events.last(), Some(ChatEvent::Finished { .. })), "second turn: {events:?}");

        let err = start_turn(&state, "s1", " \n".into(), None, |_| true).err();
        assert_eq!(err.map(|e| e.code), Some("EMPTY_MESSAGE"));
        let err = start_turn(&state, "s1", "hi".into(), Some(0), |_| true).err();
        assert_eq!(err.map(|e| e.code), Some("INVALID_SETTING"));
    }
}
