//! Drives one streamed turn to its end for callers that want a callback and
//! a result rather than a `Stream`; the text that arrived is kept however
//! the turn ends.

use futures_util::StreamExt;
use headroom_core::chat::FinishReason;
use headroom_core::gate::GatedMessages;
use tokio_util::sync::CancellationToken;

use crate::client::{ChatParams, CloudClient, CloudEvent};
use crate::error::CloudError;
use crate::stats::CloudStats;

/// How a turn that reached its end ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub reason: FinishReason,
    pub server_reason: Option<String>,
    pub stats: CloudStats,
}

/// The whole turn: the text (complete or partial) and how it ended.
#[derive(Debug)]
pub struct TurnResult {
    pub text: String,
    pub end: Result<Finished, CloudError>,
}

/// Runs the turn, calling `on_event` with each event. When `on_event`
/// returns false (nobody listens any more) the turn is cancelled and the
/// rest drained without calling it again.
pub async fn run_turn(
    client: &CloudClient,
    messages: &GatedMessages,
    params: &ChatParams,
    cancel: CancellationToken,
    mut on_event: impl FnMut(&CloudEvent) -> bool,
) -> TurnResult {
    let stream = client.chat_stream(messages, params, cancel.clone());
    futures_util::pin_mut!(stream);
    let mut text = String::new();
    let mut chunks = 0;
    let mut listening = true;
    while let Some(item) = stream.next().await {
        let event = match item {
            Ok(event) => event,
            Err(e) => return TurnResult { text, end: Err(e) },
        };
        if let CloudEvent::Token { text: piece } = &event {
            text.push_str(piece);
            chunks += 1;
        }
        if listening && !on_event(&event) {
            listening = false;
            cancel.cancel();
        }
        if let CloudEvent::Finished { reason, server_reason, stats } = event {
            return TurnResult { text, end: Ok(Finished { reason, server_reason, stats }) };
        }
    }
    // The stream always ends with Finished or an error; this is a guard.
    TurnResult { text, end: Err(CloudError::StreamCut { chunks, detail: "the stream ended without a result".into() }) }
}
