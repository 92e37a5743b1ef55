//! The door to the cloud: every message a cloud request would carry (the
//! new one, every history message with it, any system prompt, any summary
//! made for it) passes [`door`] just before the request is built, and the
//! request is built only from what comes out (`GatedMessages`, which only
//! the gate's rule in `headroom_core::gate` can make). Sensitive content in
//! the new message blocks the request unless the user allowed it for this
//! message; sensitive earlier exchanges and a sensitive summary are left out
//! and the answer's route note says so.

use headroom_core::chat::Message;
use headroom_core::gate::{gate, GatedMessages, Outbound, Part};
use headroom_core::router::Reason;

use super::events::RouteReason;
use super::TurnError;
use crate::state::AppState;

/// The note added when the summary made for the cloud was left out.
pub const SUMMARY_WITHHELD: &str = "SUMMARY_WITHHELD";

/// What may go, and the notes on what was left out, for the route.
#[derive(Debug)]
pub struct Passed {
    pub messages: GatedMessages,
    pub notes: Vec<RouteReason>,
}

/// The one door; see the module docs.
pub fn door(state: &AppState, outbound: Vec<Outbound>, allow_sensitive: bool) -> Result<Passed, TurnError> {
    let gated = gate(outbound, allow_sensitive, &state.scans)?;
    let history: Vec<usize> = gated
        .withheld
        .iter()
        .filter_map(|w| match w.part {
            Part::History(i) => Some(i),
            _ => None,
        })
        .collect();
    let mut notes = Vec::new();
    if !history.is_empty() {
        notes.push(RouteReason::from(&Reason::HistoryWithheld { messages: history }));
    }
    if gated.withheld.iter().any(|w| w.part == Part::Summary) {
        notes.push(RouteReason {
            code: SUMMARY_WITHHELD,
            message: "The summary of the earlier conversation held sensitive content, so the cloud gets the \
                      conversation without it."
                .to_owned(),
        });
    }
    if !gated.allowed.is_empty() {
        tracing::info!(findings = gated.allowed.len(), "sensitive content sent to the cloud: the user allowed it");
    }
    Ok(Passed { messages: gated.messages, notes })
}

/// The history indices the door would leave out: the summary is made only
/// from the rest, so it never condenses what may not go.
pub fn left_out(state: &AppState, history: &[Message], allow_sensitive: bool) -> Vec<usize> {
    if allow_sensitive {
        return Vec::new();
    }
    let found: Vec<_> = history.iter().map(|m| state.scans.scan(&m.content)).collect();
    let found: Vec<&[_]> = found.iter().map(|f| &**f).collect();
    headroom_core::gate::history_to_withhold(history, &found)
}

/// The outgoing list for `text` after `history`: every history message
/// tagged with its index (the door decides what stays), then the message.
pub fn conversation(history: &[Message], text: &str) -> Vec<Outbound> {
    let mut out: Vec<Outbound> =
        history.iter().enumerate().map(|(i, m)| Outbound::new(Part::History(i), m.clone())).collect();
    out.push(Outbound::new(Part::Message, Message::new(headroom_core::chat::Role::User, text)));
    out
}
