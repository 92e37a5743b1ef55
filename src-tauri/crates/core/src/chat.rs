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
