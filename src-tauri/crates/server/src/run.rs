//! One engine run seen from async code: its events moved from the engine's
//! blocking channel onto a tokio one, a guard that cancels the run when the
//! request is dropped (the client went away), and the SSE body of a
//! streamed completion.

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::response::sse::Event;
use futures_core::Stream;
use headroom_engine::worker::{EngineEvent, EngineHandle, Run, RunId};
use serde_json::json;
use tokio::sync::mpsc;

use headroom_core::chat_format::StreamSplitter;

use crate::api::{chunk, delta_json, finish_reason, usage_chunk, Answer, Meta, Usage};
use crate::api_error::ApiError;

/// Counters and the runs in flight, shared by the handlers and the [`crate::Server`].
#[derive(Debug, Default)]
pub struct Tally {
    pub requests: AtomicU64,
    pub completed: AtomicU64,
    pub cancelled: AtomicU64,
    /// Answered 429: the admitted requests were all taken.
    pub refused: AtomicU64,
    active: Mutex<HashSet<RunId>>,
}

impl Tally {
    /// Cancels every run in flight (the server is stopping).
    pub fn cancel_all(&self, engine: &EngineHandle) {
        for id in self.active.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            engine.cancel(*id);
        }
    }

    pub fn active(&self) -> usize {
        self.active.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// Cancels its run when dropped before [`RunGuard::finish`]: hyper drops a
/// handler's future, or a response body, when its connection closes, so a
/// client that hangs up stops the run after the token being computed.
#[derive(Debug)]
pub struct RunGuard {
    engine: EngineHandle,
    id: RunId,
    tally: Arc<Tally>,
    finished: bool,
    /// The request's place among those admitted: held until its response
    /// ends (a streamed one's too), then given to the next.
    admitted: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl RunGuard {
    pub fn new(engine: EngineHandle, id: RunId, tally: Arc<Tally>) -> Self {
        tally.active.lock().unwrap_or_else(PoisonError::into_inner).insert(id);
        Self { engine, id, tally, finished: false, admitted: None }
    }

    /// Keeps `permit` until this guard is dropped.
    pub fn hold(&mut self, permit: tokio::sync::OwnedSemaphorePermit) {
        self.admitted = Some(permit);
    }

    /// The run ended on its own (finished or failed): nothing to cancel.
    pub fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.tally.completed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.engine.cancel(self.id);
            self.tally.cancelled.fetch_add(1, Ordering::Relaxed);
            tracing::info!(run = self.id.0, "client went away: run cancelled");
        }
        self.tally.active.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.id);
    }
}

/// The run's events on a tokio channel. A blocking task reads the engine's
/// channel; once the async side is gone it cancels the run and stops.
pub fn bridge(run: Run, engine: EngineHandle) -> mpsc::UnboundedReceiver<EngineEvent> {
    let (tx, rx) = mpsc::unbounded_channel();
    let Run { id, events } = run;
    tokio::task::spawn_blocking(move || {
        for event in events.iter() {
            if tx.send(event).is_err() {
                engine.cancel(id);
                return;
            }
        }
    });
    rx
}

/// What was gathered after the first event.
#[derive(Debug)]
pub enum Gathered {
    Done { answer: Box<Answer>, reason: headroom_core::chat::FinishReason, usage: Usage },
    Failed(ApiError),
}

/// The run's end as an error when it ended without stats (cancelled
/// before it started, or the engine went away).
pub fn ended_early(reason: Option<headroom_core::chat::FinishReason>) -> ApiError {
    match reason {
        Some(_) => ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "The run was cancelled before it finished: the server is stopping.",
        )
        .code("cancelled"),
        None => ApiError::from(headroom_engine::EngineError::EngineStopped),
    }
}

/// Reads a non-streamed run to its end, split by `splitter`.
pub async fn gather(
    rx: &mut mpsc::UnboundedReceiver<EngineEvent>,
    mut splitter: StreamSplitter,
    meta: &Meta,
) -> Gathered {
    let (mut text, mut usage) = (String::new(), None);
    while let Some(event) = rx.recv().await {
        match event {
            EngineEvent::Started { .. } => {}
            EngineEvent::Token { text: t, .. } | EngineEvent::Text(t) => text.push_str(&t),
            EngineEvent::Stats(s) => usage = Some(Usage::from_stats(&s)),
            EngineEvent::Finished { reason } => {
                return match usage {
                    Some(usage) if reason != headroom_core::chat::FinishReason::Cancelled => {
                        let mut deltas = splitter.push(&text);
                        deltas.extend(splitter.finish());
                        Gathered::Done { answer: Box::new(Answer::from_deltas(meta, deltas)), reason, usage }
                    }
                    _ => Gathered::Failed(ended_early(Some(reason))),
                };
            }
            EngineEvent::Error(e) => return Gathered::Failed(e.into()),
        }
    }
    Gathered::Failed(ended_early(None))
}

/// The SSE body of a streamed completion: a role chunk, a chunk per piece
/// of text, a closing chunk with the finish reason, the usage chunk if
/// asked, then `[DONE]`. An error after the headers went out is sent as an
/// OpenAI error object (the way OpenAI does) and the stream ends.
#[derive(Debug)]
pub struct CompletionStream {
    rx: mpsc::UnboundedReceiver<EngineEvent>,
    guard: RunGuard,
    meta: Meta,
    include_usage: bool,
    usage: Option<Usage>,
    pending: VecDeque<Event>,
    ended: bool,
    /// Content, reasoning and calls out of the model's text.
    splitter: StreamSplitter,
}

impl CompletionStream {
    pub fn new(
        rx: mpsc::UnboundedReceiver<EngineEvent>,
        guard: RunGuard,
        meta: Meta,
        include_usage: bool,
        splitter: StreamSplitter,
    ) -> Self {
        let first = chunk(&meta, &json!({ "role": "assistant", "content": "" }), None);
        let pending = VecDeque::from([Event::default().data(first.to_string())]);
        Self { rx, guard, meta, include_usage, usage: None, pending, ended: false, splitter }
    }

    fn send_deltas(&mut self, deltas: Vec<headroom_core::chat_format::Delta>) {
        for d in deltas {
            let v = chunk(&self.meta, &delta_json(&self.meta, &d), None);
            self.pending.push_back(Event::default().data(v.to_string()));
        }
    }

    fn end(&mut self) {
        self.guard.finish();
        self.ended = true;
    }

    /// The events one engine event becomes.
    fn on(&mut self, event: EngineEvent) {
        let data = |v: serde_json::Value| Event::default().data(v.to_string());
        match event {
            EngineEvent::Started { .. } => {}
            EngineEvent::Token { text, .. } | EngineEvent::Text(text) => {
                // Empty while a character is split across tokens: nothing to send.
                if !text.is_empty() {
                    let deltas = self.splitter.push(&text);
                    self.send_deltas(deltas);
                }
            }
            EngineEvent::Stats(s) => self.usage = Some(Usage::from_stats(&s)),
            EngineEvent::Finished { reason } if reason == headroom_core::chat::FinishReason::Cancelled => {
                self.pending.push_back(Event::default().data(ended_early(Some(reason)).sse_data()));
                self.end();
            }
            EngineEvent::Finished { reason } => {
                let deltas = self.splitter.finish();
                self.send_deltas(deltas);
                let reason = finish_reason(reason, self.splitter.calls() > 0);
                self.pending.push_back(data(chunk(&self.meta, &json!({}), Some(reason))));
                if let (true, Some(usage)) = (self.include_usage, &self.usage) {
                    self.pending.push_back(data(usage_chunk(&self.meta, usage)));
                }
                self.pending.push_back(Event::default().data("[DONE]"));
                self.end();
            }
            EngineEvent::Error(e) => {
                self.pending.push_back(Event::default().data(ApiError::from(e).sse_data()));
                self.end();
            }
        }
    }
}

impl Stream for CompletionStream {
    type Item = Result<Event, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(event) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(event)) => this.on(event),
                Poll::Ready(None) => {
                    this.pending.push_back(Event::default().data(ended_early(None).sse_data()));
                    this.end();
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
