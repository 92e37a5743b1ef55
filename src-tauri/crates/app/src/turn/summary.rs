//! "Summarise for the cloud": before a long conversation goes out, the local
//! model condenses its older turns into one message (`headroom_cloud::summarize`
//! decides which and how). Only what may go is condensed (exchanges the
//! privacy gate leaves out are never summarised, so no paraphrase of them
//! leaves either), and the summary itself passes the gate like everything
//! else. The stored conversation is untouched; any failure sends the
//! conversation as it is.

use std::collections::HashSet;

use headroom_cloud::summarize::{self, SummaryPolicy};
use headroom_core::chat::{Message, Role};
use headroom_core::gate::{Outbound, Part};
use headroom_engine::worker::{EngineEvent, GenerateRequest};
use headroom_engine::EngineError;

use super::events::RouteReason;
use super::gate;
use crate::state::AppState;

/// The note added to the route when older turns went as a summary.
pub const SUMMARISED: &str = "SUMMARISED";

/// The outgoing list for `text` after `history`, with the older turns that
/// may go condensed into a summary when that saves tokens; and the note
/// saying so. Without a loaded model (nothing to summarise with), or when a
/// summary would not help, it is [`gate::conversation`]'s list.
pub fn outbound(
    state: &AppState,
    history: &[Message],
    text: &str,
    allow: bool,
) -> (Vec<Outbound>, Option<RouteReason>) {
    let plain = || gate::conversation(history, text);
    let Some(model) = state.loaded_model() else { return (plain(), None) };
    let tokenizer = match model.tokenizer() {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("could not count tokens for the summary ({e}); sending the whole conversation");
            return (plain(), None);
        }
    };
    let count = |t: &str| tokenizer.encode(t, false).map_or(usize::MAX / 2, |ids| ids.len());
    let left_out: HashSet<usize> = gate::left_out(state, history, allow).into_iter().collect();
    let clean: Vec<(usize, &Message)> = history.iter().enumerate().filter(|(i, _)| !left_out.contains(i)).collect();
    let clean_messages: Vec<Message> = clean.iter().map(|(_, m)| (*m).clone()).collect();
    let policy = SummaryPolicy::default();
    let Some(plan) = summarize::plan(&clean_messages, &policy, count) else { return (plain(), None) };
    let made =
        summarize::apply(&clean_messages, &plan, |prompt| generate(state, prompt, policy.max_summary_tokens), count);
    let summarised = match made {
        Ok(s) if s.tokens_saved > 0 => s,
        Ok(_) => return (plain(), None),
        Err(e) => {
            tracing::warn!("could not summarise locally ({e}); sending the whole conversation");
            return (plain(), None);
        }
    };
    // The summary sits where the turns it replaces began.
    let replaced: HashSet<usize> = clean[plan.keep_head..plan.keep_from].iter().map(|(i, _)| *i).collect();
    let summary = summarised.messages[plan.keep_head].clone();
    let mut out = Vec::with_capacity(history.len() + 2);
    for (i, m) in history.iter().enumerate() {
        if replaced.contains(&i) {
            if out.iter().all(|o: &Outbound| o.part != Part::Summary) {
                out.push(Outbound::new(Part::Summary, summary.clone()));
            }
            continue;
        }
        out.push(Outbound::new(Part::History(i), m.clone()));
    }
    out.push(Outbound::new(Part::Message, Message::new(Role::User, text)));
    let note = RouteReason {
        code: SUMMARISED,
        message: format!(
            "The {} older messages went as a summary made on this Mac: {} tokens fewer.",
            summarised.messages_summarised, summarised.tokens_saved
        ),
    };
    (out, Some(note))
}

/// One local generation of `prompt` (a one-off: no session's cache is
/// touched), in the app's private partition: the prompt is the conversation,
/// and its opening is public, so in the server's keyless partition any local
/// client could read it back through `cached_tokens`.
fn generate(state: &AppState, prompt: &[Message], max_tokens: usize) -> Result<String, EngineError> {
    let run = state.engine.generate(GenerateRequest { max_tokens, ..GenerateRequest::internal(prompt.to_vec()) })?;
    let mut text = String::new();
    for event in &run.events {
        match event {
            EngineEvent::Token { text: piece, .. } | EngineEvent::Text(piece) => text.push_str(&piece),
            EngineEvent::Finished { .. } => return Ok(text),
            EngineEvent::Error(e) => return Err(e),
            EngineEvent::Started { .. } | EngineEvent::Stats(_) => {}
        }
    }
    Err(EngineError::EngineStopped)
}
