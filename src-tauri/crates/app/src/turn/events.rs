//! What a turn tells its front end (`ChatEvent`s, with the route and its
//! reasons), and the one loop that drives a run to its end: the run's events
//! in, the front end's events out, the recorder told as it goes. Local,
//! cloud and cached answers all come through [`drive`], so they start,
//! stream, stop and fail the same way for the UI, the CLI and the store.

use std::time::Instant;

use headroom_core::chat::FinishReason;
use headroom_core::router::Decision;
use headroom_engine::worker::{EngineEvent, TurnStats};
use serde::Serialize;

use super::record::TurnRecorder;
use crate::codes::{Coded, ErrorCode};

/// What the UI hears about a run, in order: `Started`, `Token`s, `Stats`,
/// `Finished`; or `Error`, which ends it.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(tag = "event", content = "data", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum ChatEvent {
    Started {
        run_id: u64,
        prompt_tokens: usize,
        reused_tokens: usize,
        route: RouteInfo,
    },
    Token {
        text: String,
    },
    /// A thinking model's thinking (its tags left out), streamed apart from
    /// the answer; `tokens`: the thinking tokens so far.
    Thinking {
        text: String,
        tokens: usize,
    },
    Stats {
        ttft_ms: Option<f64>,
        prefill_tps: Option<f64>,
        decode_tps: Option<f64>,
        e2e_tps: Option<f64>,
        prompt_tokens: usize,
        /// Of those, how many the prompt cache held (not prefilled again).
        reused_tokens: usize,
        /// Where they came from.
        reused_from: ReusedFrom,
        generated_tokens: usize,
        /// Of the generated tokens, how many were thinking (decode tok/s
        /// counts them all).
        thinking_tokens: usize,
        context_tokens: usize,
        batch: usize,
        peak_memory_bytes: usize,
        model: String,
        /// Set when memory slowed this answer down ("slowed by swap: 3.1 →
        /// 0.8 tok/s while swap grew 1.2 GB"); the live view decides.
        slowdown: Option<String>,
        /// What the KV cache was: "bf16", "8-bit (group 64)", … ("n/a (cloud)").
        kv_cache: String,
        /// What speculative decoding did ("lookup: 62% accepted, 2.5
        /// tok/pass"); `None` for plain decoding and cloud answers.
        speculation: Option<String>,
        /// Where the later layers ran when the model was split across two
        /// Macs, and what a hand-off cost; `None` on this Mac alone.
        two_macs: Option<String>,
    },
    Finished {
        reason: FinishReason,
    },
    Error {
        code: ErrorCode,
        #[serde(with = "crate::codes::ui_text")]
        #[ts(type = "string")]
        message: String,
    },
    /// The model called a tool (an MCP server's): the answer shows a card.
    /// With `asks`, nothing runs until the user answers (`tool_answer`).
    ToolCall {
        call_id: String,
        server: String,
        tool: String,
        /// The arguments as the model wrote them (JSON text).
        arguments: String,
        asks: bool,
    },
    /// How a call ended, and what the model reads back from it.
    ToolResult {
        call_id: String,
        outcome: ToolOutcome,
        /// The result, or why there is none (one sentence).
        text: String,
        /// From the start of the call to its end (0 when it never ran).
        ms: u64,
    },
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub enum ToolOutcome {
    /// It ran and returned its result.
    Done,
    /// It ran, and the tool said it failed (the model reads why).
    Failed,
    /// It was cut off or could not run (deadline, size, server gone).
    Error,
    /// The user said no.
    Denied,
    /// Stop ended it.
    Stopped,
    /// The turn's bound on calls was reached.
    Limit,
}

impl ChatEvent {
    /// The `Stats` event for a turn's figures (local and cloud turns alike).
    pub(crate) fn stats(s: &TurnStats, model: &str, slowdown: Option<String>, thinking_tokens: usize) -> Self {
        Self::Stats {
            ttft_ms: s.rates.ttft_ms,
            prefill_tps: s.rates.prefill_tps,
            decode_tps: s.rates.decode_tps,
            e2e_tps: s.rates.e2e_tps,
            prompt_tokens: s.prompt_tokens,
            reused_tokens: s.reused_tokens,
            reused_from: s.reused_from.into(),
            generated_tokens: s.generated_tokens,
            thinking_tokens,
            context_tokens: s.context_tokens,
            batch: s.batch,
            peak_memory_bytes: s.peak_memory_bytes,
            model: model.to_owned(),
            slowdown,
            kv_cache: s.kv_label.clone(),
            speculation: s.speculation.summary(),
            two_macs: s.peer.as_ref().map(headroom_engine::worker::PeerTurn::summary),
        }
    }
}

/// Where a turn's reused prompt tokens came from (the engine's
/// [`Reuse`](headroom_engine::prompt_cache::Reuse), as the UI reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum ReusedFrom {
    None,
    Memory,
    Disk,
}

impl From<headroom_engine::prompt_cache::Reuse> for ReusedFrom {
    fn from(r: headroom_engine::prompt_cache::Reuse) -> Self {
        use headroom_engine::prompt_cache::Reuse;
        match r {
            Reuse::None => Self::None,
            Reuse::Memory => Self::Memory,
            Reuse::Disk => Self::Disk,
        }
    }
}

/// Where an answer comes from, as the UI labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum RouteTarget {
    Local,
    Cloud,
    /// The cloud's earlier answer to the same request, from this Mac's cache.
    Cached,
}

/// One reason for the route, or a note about what was sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct RouteReason {
    pub code: &'static str,
    pub message: String,
}

impl From<&headroom_core::router::Reason> for RouteReason {
    fn from(r: &headroom_core::router::Reason) -> Self {
        Self { code: r.code(), message: r.explain() }
    }
}

/// Where a turn runs and why; sent with `Started`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct RouteInfo {
    pub target: RouteTarget,
    /// The local model's id, or the cloud model (for a cached answer too).
    pub model_or_provider: String,
    pub reasons: Vec<RouteReason>,
}

/// The reason added to a cache hit's route.
pub const CACHED_REASON: &str = "CACHED";

impl RouteInfo {
    /// The router's decision, answered by `model` at `target`.
    pub fn of(decision: &Decision, target: RouteTarget, model: &str) -> Self {
        let mut reasons: Vec<RouteReason> = decision.reasons.iter().map(RouteReason::from).collect();
        if target == RouteTarget::Cached {
            reasons.push(RouteReason {
                code: CACHED_REASON,
                message: format!(
                    "{model} answered this same request (same conversation and settings) before; \
                     this is that answer, from this Mac's cache, and nothing was sent."
                ),
            });
        }
        Self { target, model_or_provider: model.to_owned(), reasons }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnd {
    pub text: String,
    /// `None` when the run failed (or the engine went away mid-run).
    pub reason: Option<FinishReason>,
    /// The turn's figures, if the run got as far as reporting them.
    pub stats: Option<TurnStats>,
    /// Why it failed, as the user was told.
    pub error: Option<String>,
    /// Whether the run got as far as starting (a regenerate that never
    /// started took nothing back).
    pub started: bool,
    /// The live view's verdict when memory slowed the answer (local runs).
    pub slowdown: Option<String>,
}

/// A run's events, whatever runs it (the engine, a cloud endpoint, the cache).
// Stats, once per run, is the large one; it was as large before the
// error code became a one-byte enum (which is what tipped this lint).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum RunEvent {
    /// The run was accepted: from here on it is a turn (and a regenerate
    /// takes the old answer back).
    Started {
        prompt_tokens: usize,
        reused_tokens: usize,
    },
    Text(String),
    /// Thinking text (possibly empty) and how many more thinking tokens it took.
    Thinking {
        text: String,
        tokens: usize,
    },
    /// The figures, and the live view's slowdown verdict if memory slowed the run.
    Stats(TurnStats, Option<String>),
    Finished(FinishReason),
    Error {
        code: ErrorCode,
        message: String,
    },
    /// A tool call's card or its result, passed to the front end as it is.
    Tool(ChatEvent),
}

impl From<EngineEvent> for RunEvent {
    fn from(e: EngineEvent) -> Self {
        match e {
            EngineEvent::Started { prompt_tokens, reused_tokens, .. } => Self::Started { prompt_tokens, reused_tokens },
            EngineEvent::Token { text, .. } | EngineEvent::Text(text) => Self::Text(text),
            EngineEvent::Stats(s) => Self::Stats(s, None),
            EngineEvent::Finished { reason } => Self::Finished(reason),
            EngineEvent::Error(e) => Self::Error { code: e.code(), message: e.message() },
        }
    }
}

/// Where a turn's events go: the UI's Channel, the CLI's stdout, a test.
/// Returns false once nobody listens.
pub type Sink = Box<dyn FnMut(ChatEvent) -> bool + Send>;

/// Drives one run to its end: each event goes to `sink` as a `ChatEvent`
/// (the `Started` one with `route`), the recorder is told when the run
/// starts and sees the answer as it grows, and `stop` is called once if the
/// listener goes away (or the recorder cannot begin the turn). Events that
/// stop arriving without an end (the engine or the task went away) end it
/// as an error; nothing that arrived is lost.
pub(crate) fn drive(
    run_id: u64,
    route: &RouteInfo,
    events: impl IntoIterator<Item = RunEvent>,
    sink: &mut Sink,
    recorder: &mut TurnRecorder,
    stop: impl Fn(),
) -> TurnEnd {
    let model = route.model_or_provider.as_str();
    let mut end =
        TurnEnd { text: String::new(), reason: None, stats: None, error: None, started: false, slowdown: None };
    let mut out = Out { sink, listening: true, stopped: false, stop: &stop };
    let mut thinking_tokens = 0;
    for event in events {
        match event {
            RunEvent::Started { prompt_tokens, reused_tokens } => {
                if let Err(e) = recorder.started() {
                    // Nothing may run that cannot be kept: stop it, say why.
                    let (code, message) = (e.code(), e.message());
                    out.stop();
                    out.send(ChatEvent::Error { code, message: message.clone() });
                    end.error = Some(message);
                    return end;
                }
                end.started = true;
                out.send(ChatEvent::Started { run_id, prompt_tokens, reused_tokens, route: route.clone() });
            }
            RunEvent::Text(piece) => {
                if !piece.is_empty() {
                    end.text.push_str(&piece);
                    recorder.on_text(&end.text);
                    out.send(ChatEvent::Token { text: piece });
                }
            }
            RunEvent::Thinking { text, tokens } => {
                thinking_tokens += tokens;
                if !text.is_empty() || tokens > 0 {
                    out.send(ChatEvent::Thinking { text, tokens: thinking_tokens });
                }
            }
            RunEvent::Stats(s, slowdown) => {
                out.send(ChatEvent::stats(&s, model, slowdown.clone(), thinking_tokens));
                end.stats = Some(s);
                end.slowdown = slowdown;
            }
            RunEvent::Finished(reason) => {
                out.send(ChatEvent::Finished { reason });
                end.reason = Some(reason);
                return end;
            }
            RunEvent::Error { code, message } => {
                out.send(ChatEvent::Error { code, message: message.clone() });
                end.error = Some(message);
                return end;
            }
            RunEvent::Tool(event) => out.send(event),
        }
    }
    let e = headroom_engine::EngineError::EngineStopped;
    out.send(ChatEvent::Error { code: e.code(), message: e.message() });
    end.error = Some(e.message());
    end
}

/// The listening end of [`drive`]: once the sink says nobody listens, the
/// run is stopped (once) and the rest is drained quietly.
struct Out<'a> {
    sink: &'a mut Sink,
    listening: bool,
    stopped: bool,
    stop: &'a dyn Fn(),
}

impl Out<'_> {
    fn send(&mut self, event: ChatEvent) {
        if self.listening && !(self.sink)(event) {
            self.listening = false;
            self.stop();
        }
    }

    fn stop(&mut self) {
        if !self.stopped {
            self.stopped = true;
            (self.stop)();
        }
    }
}

/// The events of an answer replayed from the cache, in a live turn's
/// shape: `Started`, the text word by word, `Stats` (no tokens were spent:
/// the counts are 0 and the time is the replay's), `Finished`.
pub(crate) fn replay(answer: &str) -> Vec<RunEvent> {
    let began = Instant::now();
    let mut events = vec![RunEvent::Started { prompt_tokens: 0, reused_tokens: 0 }];
    let pieces: Vec<&str> = answer.split_inclusive(char::is_whitespace).collect();
    events.extend(pieces.iter().map(|p| RunEvent::Text((*p).to_owned())));
    let elapsed = Some(began.elapsed());
    let stats = headroom_cloud::CloudStats::new(None, elapsed, elapsed, pieces.len(), 0);
    events.push(RunEvent::Stats(super::cloud::turn_stats(&stats), None));
    events.push(RunEvent::Finished(FinishReason::Stop));
    events
}

#[cfg(test)]
mod tests {
    use headroom_engine::prompt_cache::Reuse;

    use super::ReusedFrom;

    /// The `stats` event says where reused tokens came from in the engine's
    /// own words (what `headroom generate` and the server print too).
    #[test]
    fn reused_from_is_sent_as_the_engine_names_it() {
        for r in [Reuse::None, Reuse::Memory, Reuse::Disk] {
            assert_eq!(serde_json::to_value(ReusedFrom::from(r)).unwrap(), r.as_str());
        }
    }
}
