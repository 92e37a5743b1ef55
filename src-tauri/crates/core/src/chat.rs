//! The conversation types that cross crate and IPC boundaries.

use serde::{Deserialize, Serialize};

/// Who wrote a message, with the names chat templates expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self { role, content: content.into() }
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model produced an end-of-sequence token.
    Stop,
    /// The token budget (max new tokens or the context limit) ran out.
    Length,
    /// The user cancelled.
    Cancelled,
}

/// How a model's thinking block is read and bounded (Qwen3's `<think>` …
/// `</think>`): its tags, the most tokens it may hold before the engine
/// closes it, and whether the rendered prompt already opened it (a
/// template with `enable_thinking` ends the prompt inside the block).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thinking {
    pub open: String,
    pub close: String,
    /// After this many thinking tokens the close tag is forced; `None`: no limit.
    pub budget: Option<usize>,
    pub open_in_prompt: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_serialize_as_chat_templates_expect() {
        let m = Message::new(Role::Assistant, "hi");
        assert_eq!(serde_json::to_string(&m).unwrap_or_default(), r#"{"role":"assistant","content":"hi"}"#);
        let back: Message = serde_json::from_str(r#"{"role":"system","content":"x"}"#).unwrap();
        assert_eq!(back.role, Role::System);
    }
}
