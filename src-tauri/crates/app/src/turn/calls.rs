//! A local turn with tools: the model is offered the enabled MCP tools
//! (through the engine's tool path: the template renders them, a call is
//! held to its tool's schema), its calls are parsed as they stream, and
//! each call waits for the user's answer (unless the tool is set to
//! always), runs with its deadline, and goes back to the model as a tool
//! message; then the model goes on, until it answers without a call, the
//! turn's bound on calls is reached, or Stop. Each result is kept in the
//! chat's context for the privacy rule (`crate::tools::Tools::note_result`).
//!
//! The loop runs on a thread of its own and hands the turn's thread its
//! [`RunEvent`]s, so [`super::events::drive`] streams, stops and records a
//! turn with tools as it does one without.

use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Instant;

use headroom_cloud::CancellationToken;
use headroom_core::chat::{FinishReason, Message, Role, ToolCall};
use headroom_core::chat_format::{Delta, StreamSplitter, ToolChoice};
use headroom_engine::worker::{EngineEvent, EngineHandle, GenerateRequest};

use super::events::{ChatEvent, RunEvent, ToolOutcome};
use crate::codes::Coded;
use crate::tools::{Approval, Offered, Tools};

/// What the loop needs besides the first request.
pub(crate) struct Loop {
    pub engine: EngineHandle,
    pub tools: Tools,
    pub offered: Vec<Offered>,
    pub session: String,
    /// The turn's id: approvals are answered by (turn, call id).
    pub turn: u64,
    pub max_calls: usize,
    /// The first run's choice (the user may force a tool); later runs are `Auto`.
    pub first_choice: ToolChoice,
    pub stop: CancellationToken,
}

/// Starts the loop on its own thread; its events arrive on the receiver.
pub(crate) fn start(l: Loop, request: GenerateRequest) -> Result<Receiver<RunEvent>, std::io::Error> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new().name(format!("headroom-tools-{}", l.turn)).spawn(move || run(&l, &request, &tx))?;
    Ok(rx)
}

/// One engine run's outcome.
struct Ran {
    reason: Option<FinishReason>,
    calls: Vec<headroom_core::chat_format::ParsedCall>,
    content: String,
}

fn run(l: &Loop, first: &GenerateRequest, tx: &Sender<RunEvent>) {
    let send = |e: RunEvent| tx.send(e).is_ok();
    let tool_list: Vec<_> = l.offered.iter().map(|o| o.tool.clone()).collect();
    let mut messages = first.messages.clone();
    let mut calls_made = 0usize;
    let mut n = 0usize;
    loop {
        let request = GenerateRequest {
            messages: messages.clone(),
            // Past the bound the model is still shown the tools (the
            // conversation holds calls to them) but may not call again.
            tools: tool_list.clone(),
            tool_choice: if calls_made >= l.max_calls {
                ToolChoice::None
            } else if n == 0 {
                l.first_choice.clone()
            } else {
                ToolChoice::Auto
            },
            ..first.clone()
        };
        let ran = match engine_run(l, request, n == 0, &tool_list, &send) {
            Some(ran) => ran,
            None => return,
        };
        n += 1;
        if l.stop.is_cancelled() {
            send(RunEvent::Finished(FinishReason::Cancelled));
            return;
        }
        if ran.calls.is_empty() || ran.reason != Some(FinishReason::Stop) {
            send(RunEvent::Finished(ran.reason.unwrap_or(FinishReason::Stop)));
            return;
        }
        let calls: Vec<ToolCall> = ran
            .calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: format!("call_{n}_{i}"),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .collect();
        messages.push(Message { tool_calls: calls.clone(), ..Message::new(Role::Assistant, ran.content) });
        for call in calls {
            calls_made += 1;
            let answer = if calls_made > l.max_calls {
                let text = format!("Not run: this turn's limit of {} tool calls was reached.", l.max_calls);
                if !send(call_event(l, &call, false)) {
                    return;
                }
                send(result_event(&call, ToolOutcome::Limit, &text, 0));
                text
            } else {
                match one_call(l, &call, &send) {
                    Some(text) => text,
                    None => return,
                }
            };
            messages.push(Message { tool_call_id: Some(call.id.clone()), ..Message::new(Role::Tool, answer) });
            if l.stop.is_cancelled() {
                send(RunEvent::Finished(FinishReason::Cancelled));
                return;
            }
        }
    }
}

fn call_event(l: &Loop, call: &ToolCall, asks: bool) -> RunEvent {
    let server = l.offered.iter().find(|o| o.tool.name == call.name).map(|o| o.server.clone()).unwrap_or_default();
    RunEvent::Tool(ChatEvent::ToolCall {
        call_id: call.id.clone(),
        server,
        tool: call.name.clone(),
        arguments: call.arguments.clone(),
        asks,
    })
}

fn result_event(call: &ToolCall, outcome: ToolOutcome, text: &str, ms: u64) -> RunEvent {
    RunEvent::Tool(ChatEvent::ToolResult { call_id: call.id.clone(), outcome, text: text.to_owned(), ms })
}

/// Asks (unless always allowed), runs one call, tells the UI; the text the
/// model reads back. `None`: nobody listens any more.
fn one_call(l: &Loop, call: &ToolCall, send: &dyn Fn(RunEvent) -> bool) -> Option<String> {
    let Some(offered) = l.offered.iter().find(|o| o.tool.name == call.name) else {
        // The grammar only lets offered names through; a fallback-format answer may not.
        let text = format!("There is no tool named {}.", call.name);
        send(call_event(l, call, false));
        send(result_event(call, ToolOutcome::Error, &text, 0));
        return Some(text);
    };
    let flags = l.tools.flags(&offered.server, &call.name).unwrap_or(offered.flags);
    let asks = !flags.always_allow;
    let pending = asks.then(|| l.tools.ask(l.turn, &call.id));
    if !send(call_event(l, call, asks)) {
        l.stop.cancel();
        return None;
    }
    if let Some(pending) = pending {
        let stop = l.stop.clone();
        match pending.wait(async move { stop.cancelled().await }) {
            None => {
                send(result_event(call, ToolOutcome::Stopped, "Stopped before it ran.", 0));
                return Some("The user stopped the turn before this call ran.".to_owned());
            }
            Some(Approval::Deny) => {
                let text = "The user denied this call; it was not run. Answer without it.";
                send(result_event(call, ToolOutcome::Denied, "Denied.", 0));
                return Some(text.to_owned());
            }
            Some(Approval::Always) => {
                if let Err(e) = l.tools.set_flags(
                    &offered.server,
                    &call.name,
                    crate::tools::ToolFlags { always_allow: true, ..flags },
                ) {
                    tracing::warn!("could not keep \"always allow\" for {}: {e}", call.name);
                }
            }
            Some(Approval::Once) => {}
        }
    }
    let began = Instant::now();
    let stop = l.stop.clone();
    let result = crate::runtime::block_on(
        l.tools.call(&offered.server, &call.name, &call.arguments, async move { stop.cancelled().await }),
    );
    let ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
    Some(match result {
        Ok(out) => {
            l.tools.note_result(&l.session, &call.name, &out.text, flags.private);
            let outcome = if out.is_error { ToolOutcome::Failed } else { ToolOutcome::Done };
            send(result_event(call, outcome, &out.text, ms));
            out.text
        }
        Err(e) => {
            let message = e.message();
            let outcome = if l.stop.is_cancelled() { ToolOutcome::Stopped } else { ToolOutcome::Error };
            send(result_event(call, outcome, &message, ms));
            format!("The call failed: {message}")
        }
    })
}

/// One engine run: its text streamed (calls split out), its stats passed
/// on. `None` when it ended the turn (an error, nobody listening).
fn engine_run(
    l: &Loop,
    request: GenerateRequest,
    first: bool,
    tools: &[headroom_core::chat::Tool],
    send: &dyn Fn(RunEvent) -> bool,
) -> Option<Ran> {
    let run = match l.engine.generate(request) {
        Ok(run) => run,
        Err(e) => {
            send(RunEvent::Error { code: e.code(), message: e.message() });
            return None;
        }
    };
    // Stop cancels whichever engine run is under way.
    let (engine, id, done) = (l.engine.clone(), run.id, CancellationToken::new());
    let (stop, finished) = (l.stop.clone(), done.clone());
    crate::runtime::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => { engine.cancel(id); }
            () = finished.cancelled() => {}
        }
    });
    let _done = done.drop_guard();
    let mut splitter: Option<StreamSplitter> = None;
    let mut ran = Ran { reason: None, calls: Vec::new(), content: String::new() };
    let take = |deltas: Vec<Delta>, ran: &mut Ran| -> bool {
        for d in deltas {
            match d {
                Delta::Content(t) => {
                    ran.content.push_str(&t);
                    if !send(RunEvent::Text(t)) {
                        return false;
                    }
                }
                // Thinking is shown apart and not sent back to the model.
                Delta::Reasoning(t) => {
                    if !send(RunEvent::Thinking { text: t, tokens: 0 }) {
                        return false;
                    }
                }
                Delta::ToolCall { call, .. } => ran.calls.push(call),
            }
        }
        true
    };
    for event in run.events {
        match event {
            EngineEvent::Started { prompt_tokens, reused_tokens, format } => {
                splitter = Some(StreamSplitter::new(Some(format.tools), tools.to_vec(), format.think));
                if first && !send(RunEvent::Started { prompt_tokens, reused_tokens }) {
                    l.stop.cancel();
                    return None;
                }
            }
            EngineEvent::Token { text, thinking, .. } => {
                // Each thinking token counted once, as the turn without tools does.
                let inside = thinking || splitter.as_ref().is_some_and(StreamSplitter::thinking);
                let deltas = splitter.as_mut().map_or_else(|| vec![Delta::Content(text.clone())], |s| s.push(&text));
                let counted = !inside || send(RunEvent::Thinking { text: String::new(), tokens: 1 });
                if !take(deltas, &mut ran) || !counted {
                    l.stop.cancel();
                    return None;
                }
            }
            EngineEvent::Text(text) => {
                let deltas = splitter.as_mut().map_or_else(|| vec![Delta::Content(text.clone())], |s| s.push(&text));
                if !take(deltas, &mut ran) {
                    l.stop.cancel();
                    return None;
                }
            }
            EngineEvent::Stats(s) => {
                send(RunEvent::Stats(s, None));
            }
            EngineEvent::Finished { reason } => {
                if let Some(s) = splitter.as_mut() {
                    let rest = s.finish();
                    take(rest, &mut ran);
                }
                ran.reason = Some(reason);
                return Some(ran);
            }
            EngineEvent::Error(e) => {
                send(RunEvent::Error { code: e.code(), message: e.message() });
                return None;
            }
        }
    }
    let e = headroom_engine::EngineError::EngineStopped;
    send(RunEvent::Error { code: e.code(), message: e.message() });
    None
}
