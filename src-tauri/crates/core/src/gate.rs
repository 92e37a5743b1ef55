//! The privacy gate's rule, and the only way to make the message list a
//! cloud endpoint is sent ([`GatedMessages`]).
//!
//! Everything that would leave this Mac goes through [`gate`] with where it
//! comes from ([`Part`]): the new message, every history message that goes
//! with it, any system prompt, any summary made for the cloud. Sensitive
//! content (see [`crate::sensitive`]) in the new message or a system
//! prompt blocks the request. An earlier exchange that holds some is left
//! out whole (the question with its answer, so neither half goes alone), and
//! so is a summary that holds some; the caller says so in the answer's route
//! note. Only the user's override for this one message (`allow_sensitive`,
//! given after seeing the findings) lets sensitive content through; forcing
//! the cloud is not an override.
//!
//! `GatedMessages` has no public constructor and the cloud client takes
//! nothing else, so no code path can reach a cloud endpoint without this
//! rule having passed what it sends.

use std::collections::HashMap;
use std::fmt;

use serde::{Serialize, Serializer};

use crate::chat::{Message, Role};
use crate::sensitive::{Finding, ScanCache};

/// Where an outgoing message comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// A system prompt.
    System,
    /// The summary of older turns, made on this Mac for the cloud.
    Summary,
    /// The stored conversation's message with this index (0-based).
    History(usize),
    /// The message being sent now.
    Message,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::System => f.write_str("the system prompt"),
            Self::Summary => f.write_str("the summary of the earlier conversation"),
            Self::History(i) => write!(f, "earlier message {}", i + 1),
            Self::Message => f.write_str("this message"),
        }
    }
}

/// One message that would go out, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound {
    pub part: Part,
    pub message: Message,
}

impl Outbound {
    pub fn new(part: Part, message: Message) -> Self {
        Self { part, message }
    }
}

/// Messages that passed [`gate`], in order. Only `gate` makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatedMessages(Vec<Message>);

impl GatedMessages {
    pub fn as_slice(&self) -> &[Message] {
        &self.0
    }
}

/// As the plain list of messages (the request body's `messages`).
impl Serialize for GatedMessages {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// A message left out, with what was found in it (none: it is the other
/// half of an exchange left out for its partner's findings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withheld {
    pub part: Part,
    pub findings: Vec<Finding>,
}

/// What [`gate`] lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gated {
    pub messages: GatedMessages,
    /// History messages and a summary left out, in order.
    pub withheld: Vec<Withheld>,
    /// Sensitive content that goes out because the user allowed it for this message.
    pub allowed: Vec<(Part, Finding)>,
}

/// The request may not go: the new message or a system prompt holds
/// sensitive content and the user has not allowed it for this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{part} contains {}: nothing was sent. Only allowing sensitive content for this one message sends it; forcing the cloud does not.", describe(findings))]
pub struct Blocked {
    pub part: Part,
    pub findings: Vec<Finding>,
}

/// "a phone number (138****5678) and an email address (j***@example.com)".
pub fn describe(findings: &[Finding]) -> String {
    let parts: Vec<String> = findings.iter().map(|f| format!("{} ({})", f.kind.noun(), f.masked)).collect();
    match parts.as_slice() {
        [] => "nothing sensitive".to_owned(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// Which history messages must stay behind: each one with findings, and the
/// other half of its exchange (a user message and the answer right after
/// it). `findings[i]` belongs to `history[i]`.
pub fn history_to_withhold(history: &[Message], findings: &[&[Finding]]) -> Vec<usize> {
    let items: Vec<(usize, Role, bool)> =
        history.iter().zip(findings).enumerate().map(|(i, (m, f))| (i, m.role, !f.is_empty())).collect();
    let leave = exchanges_to_leave(&items);
    items.iter().zip(leave).filter(|(_, leave)| *leave).map(|((i, ..), _)| *i).collect()
}

/// For history messages given as (stored index, role, has findings), in
/// any order and possibly with gaps: which to leave out. A message with
/// findings goes, with its partner if that is present (the answer at the
/// next index after a question, the question before an answer).
fn exchanges_to_leave(items: &[(usize, Role, bool)]) -> Vec<bool> {
    let at: HashMap<usize, usize> = items.iter().enumerate().map(|(pos, (i, ..))| (*i, pos)).collect();
    let mut leave = vec![false; items.len()];
    for (pos, &(i, role, found)) in items.iter().enumerate() {
        if !found {
            continue;
        }
        leave[pos] = true;
        let (partner, partner_role) = match role {
            Role::User => (i.checked_add(1), Role::Assistant),
            Role::Assistant => (i.checked_sub(1), Role::User),
            // A tool's result has no one partner among the question/answer
            // pairs; it goes alone.
            Role::System | Role::Tool => (None, role),
        };
        if let Some(&p) = partner.and_then(|j| at.get(&j)).filter(|&&p| items[p].1 == partner_role) {
            leave[p] = true;
        }
    }
    leave
}

/// The rule at the door: see the module docs. `scans` remembers findings
/// of texts already scanned (the history, unchanged from the last message).
pub fn gate(outbound: Vec<Outbound>, allow_sensitive: bool, scans: &ScanCache) -> Result<Gated, Blocked> {
    let findings: Vec<Vec<Finding>> = outbound.iter().map(|o| scans.scan(&o.message.content).to_vec()).collect();
    let mut allowed = Vec::new();
    if allow_sensitive {
        for (o, f) in outbound.iter().zip(&findings) {
            allowed.extend(f.iter().map(|f| (o.part, f.clone())));
        }
        let messages = GatedMessages(outbound.into_iter().map(|o| o.message).collect());
        return Ok(Gated { messages, withheld: Vec::new(), allowed });
    }
    if let Some((o, f)) =
        outbound.iter().zip(&findings).find(|(o, f)| matches!(o.part, Part::Message | Part::System) && !f.is_empty())
    {
        return Err(Blocked { part: o.part, findings: f.clone() });
    }
    // History messages are paired by their stored index, wherever they sit.
    let history: Vec<(usize, (usize, Role, bool))> = outbound
        .iter()
        .zip(&findings)
        .enumerate()
        .filter_map(|(at, (o, f))| match o.part {
            Part::History(i) => Some((at, (i, o.message.role, !f.is_empty()))),
            _ => None,
        })
        .collect();
    let items: Vec<(usize, Role, bool)> = history.iter().map(|(_, item)| *item).collect();
    let mut leave = vec![false; outbound.len()];
    for ((at, _), out) in history.iter().zip(exchanges_to_leave(&items)) {
        leave[*at] = out;
    }
    for (at, o) in outbound.iter().enumerate() {
        if o.part == Part::Summary && !findings[at].is_empty() {
            leave[at] = true;
        }
    }
    let mut withheld = Vec::new();
    let mut messages = Vec::new();
    for ((o, f), leave) in outbound.into_iter().zip(findings).zip(leave) {
        if leave {
            withheld.push(Withheld { part: o.part, findings: f });
        } else {
            messages.push(o.message);
        }
    }
    Ok(Gated { messages: GatedMessages(messages), withheld, allowed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(t: &str) -> Message {
        Message::new(Role::User, t)
    }

    fn assistant(t: &str) -> Message {
        Message::new(Role::Assistant, t)
    }

    fn conversation(history: &[Message], text: &str) -> Vec<Outbound> {
        let mut out: Vec<Outbound> =
            history.iter().enumerate().map(|(i, m)| Outbound::new(Part::History(i), m.clone())).collect();
        out.push(Outbound::new(Part::Message, user(text)));
        out
    }

    fn sent(g: &Gated) -> Vec<&str> {
        g.messages.as_slice().iter().map(|m| m.content.as_str()).collect()
    }

    #[test]
    fn a_sensitive_message_is_blocked_and_forcing_does_not_help_only_the_override_does() {
        let scans = ScanCache::default();
        let out = conversation(&[], "my id is 11010519491231002X");
        let err = gate(out.clone(), false, &scans).expect_err("sent");
        assert_eq!(err.part, Part::Message);
        let said = err.to_string();
        assert!(said.contains("PRC resident ID") && !said.contains("11010519491231002X"), "{said}");
        let g = gate(out, true, &scans).unwrap();
        assert_eq!(sent(&g), ["my id is 11010519491231002X"]);
        assert_eq!(g.allowed.len(), 1);

        let system = vec![Outbound::new(Part::System, Message::new(Role::System, "admin pwd=hunter22"))];
        assert_eq!(gate(system, false, &scans).err().map(|e| e.part), Some(Part::System));
    }

    #[test]
    fn sensitive_history_leaves_out_the_whole_exchange_and_says_which() {
        let scans = ScanCache::default();
        let history = [
            user("hi"),
            assistant("hello"),
            user("ssh to 10.0.0.5 please"),
            assistant("done"),
            user("thanks"),
            assistant("the host at build01.corp is fine"),
        ];
        let g = gate(conversation(&history, "what next?"), false, &scans).unwrap();
        assert_eq!(sent(&g), ["hi", "hello", "what next?"]);
        let parts: Vec<Part> = g.withheld.iter().map(|w| w.part).collect();
        assert_eq!(parts, [Part::History(2), Part::History(3), Part::History(4), Part::History(5)]);
        assert!(g.withheld[1].findings.is_empty(), "the answer goes with its question");
        assert_eq!(
            history_to_withhold(&history, &[&[], &[], &g.withheld[0].findings, &[], &[], &g.withheld[3].findings]),
            [2, 3, 4, 5]
        );

        // With the override for this message, everything goes, and what was found is listed.
        let g = gate(conversation(&history, "what next?"), true, &scans).unwrap();
        assert_eq!(g.messages.as_slice().len(), 7);
        assert_eq!(g.allowed.len(), 2);
    }

    #[test]
    fn a_summary_with_findings_is_left_out() {
        let scans = ScanCache::default();
        let out = vec![
            Outbound::new(Part::Summary, Message::new(Role::System, "Summary: they mailed a@b.co")),
            Outbound::new(Part::Message, user("go on")),
        ];
        let g = gate(out, false, &scans).unwrap();
        assert_eq!(sent(&g), ["go on"]);
        assert_eq!(g.withheld.first().map(|w| w.part), Some(Part::Summary));
        assert_eq!(
            serde_json::to_value(&g.messages).unwrap_or_default(),
            serde_json::json!([{"role": "user", "content": "go on"}])
        );
    }
}
