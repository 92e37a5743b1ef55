//! The conversation types that cross crate and IPC boundaries.

use serde::{Deserialize, Serialize};

/// Who wrote a message, with the names chat templates expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    /// A tool's result, answering the assistant's call `tool_call_id`.
    Tool,
}

impl Role {
    /// The name chat templates and the OpenAI API give the role.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// The calls an assistant message made (empty for every other message;
    /// absent from JSON written before tools existed, so that still reads).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Which call a `Role::Tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self { role, content: content.into(), tool_calls: Vec::new(), tool_call_id: None }
    }
}

/// One function call the model made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The id the tool's answer refers back to (`call_…`).
    pub id: String,
    pub name: String,
    /// The arguments as JSON text, as OpenAI's API carries them: the model
    /// wrote text, and re-serialising it would change what it wrote.
    pub arguments: String,
}

/// A function the model may call (OpenAI's function tool).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON schema of the arguments object.
    #[serde(default = "empty_object_schema")]
    pub parameters: serde_json::Value,
}

/// What a tool without `parameters` takes: any object.
pub fn empty_object_schema() -> serde_json::Value {
    serde_json::json!({"type": "object", "properties": {}})
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

    #[test]
    fn tool_fields_are_optional_both_ways() {
        // JSON written before tools existed reads, and a plain message
        // still writes without them.
        let old: Message = serde_json::from_str(r#"{"role":"user","content":"x"}"#).unwrap();
        assert_eq!(old, Message::new(Role::User, "x"));
        let call = ToolCall { id: "c1".into(), name: "f".into(), arguments: "{}".into() };
        let m = Message { tool_calls: vec![call], ..Message::new(Role::Assistant, "") };
        let back: Message = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
        let t: Message = serde_json::from_str(r#"{"role":"tool","content":"12","tool_call_id":"c1"}"#).unwrap();
        assert_eq!((t.role, t.tool_call_id.as_deref()), (Role::Tool, Some("c1")));
        let tool: Tool = serde_json::from_str(r#"{"name":"now"}"#).unwrap();
        assert_eq!(tool.parameters, empty_object_schema());
    }
}
