//! What a model sees of a session, and the last exchange regenerate replaces.

use headroom_core::chat::{Message, Role};

use super::{MessageStatus, StoredMessage};

/// Whether a model sees this message: everything said is, in order. Failed
/// answers and answers still streaming are left out; an interrupted answer
/// stays (the user saw it).
pub fn in_context(m: &StoredMessage) -> bool {
    matches!(m.status, MessageStatus::Complete | MessageStatus::Interrupted)
        && !(m.role == Role::Assistant && m.content.is_empty())
}

/// The messages a model sees (see [`in_context`]).
pub(super) fn context_of(messages: &[StoredMessage]) -> Vec<Message> {
    messages.iter().filter(|m| in_context(m)).map(|m| Message::new(m.role, m.content.clone())).collect()
}

/// A session's last exchange: a question and the answer to it, the last two
/// rows. What regenerate replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastTurn {
    pub question_id: i64,
    pub answer_id: i64,
    pub question: String,
}

impl LastTurn {
    /// The last exchange of `messages` (a session's, in order); `None` if
    /// the session does not end in an answer to a question.
    pub fn of(messages: &[StoredMessage]) -> Option<Self> {
        match messages {
            [.., q, a] if q.role == Role::User && a.role == Role::Assistant => {
                Some(Self { question_id: q.id, answer_id: a.id, question: q.content.clone() })
            }
            _ => None,
        }
    }
}
