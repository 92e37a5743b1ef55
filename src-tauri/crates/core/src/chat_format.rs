//! Tool calls in the model's own words: which format a chat template speaks
//! (Hermes/Qwen `<tool_call>`, Llama 3.x JSON, Mistral `[TOOL_CALLS]`, or a
//! fixed fallback taught by a system prompt), the grammar that holds a call
//! to its tool's schema, the parser of a finished answer into content and
//! calls, and the streaming splitter into content, reasoning and call deltas.

mod grammar;
mod parse;
mod stream;

pub use grammar::{call_grammar, CallGrammar};
pub use parse::{parse_answer, ParsedAnswer, ParsedCall};
pub use stream::{Delta, StreamSplitter, ThinkTags};

use crate::chat::{Message, Role, Tool};

/// How a model writes a call, picked from its chat template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name": …, "arguments": …}</tool_call>` (Hermes, Qwen 2.5/3).
    Hermes,
    /// A bare `{"name": …, "parameters": …}` object (Llama 3.1–3.3).
    Llama3Json,
    /// `[TOOL_CALLS][{"name": …, "arguments": …}]` (Mistral).
    Mistral,
    /// A template that knows no tools: Hermes' syntax, taught by a system
    /// prompt, with tool results handed back as user messages (LM Studio's
    /// way), so every model accepts `tools`.
    Fallback,
}

/// How to read what a model writes: its call format and its thinking tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerFormat {
    pub tools: ToolFormat,
    /// `None` for a template that never closes a think block.
    pub think: Option<ThinkTags>,
}

impl AnswerFormat {
    /// The format of answers to a prompt that `template` rendered and that
    /// ends in `prompt_tail`: thinking starts inside the block when the
    /// prompt opened `<think>` itself (and not when it closed an empty one,
    /// as Qwen3's template does with `enable_thinking` false).
    pub fn of(template: Option<&str>, prompt_tail: &str) -> Self {
        let think = template.filter(|t| t.contains("</think>")).map(|_| ThinkTags {
            open: "<think>".into(),
            close: "</think>".into(),
            starts_inside: prompt_tail.trim_end().ends_with("<think>"),
        });
        Self { tools: ToolFormat::for_template(template), think }
    }
}

/// Which calls a request allows (OpenAI's `tool_choice`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides; prose stays free, a call is held to its schema once it starts.
    Auto,
    /// No call: the tools are not shown to the model.
    None,
    /// At least one call, from the first token.
    Required,
    /// A call of this one function, from the first token.
    Named(String),
}

impl ToolFormat {
    /// The format `template` renders calls in; `None` (no template) and a
    /// template that never mentions tools get the fallback.
    pub fn for_template(template: Option<&str>) -> Self {
        let Some(t) = template else { return ToolFormat::Fallback };
        if t.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if t.contains("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if t.contains("<|start_header_id|>") && t.contains("tools") && t.contains("parameters") {
            ToolFormat::Llama3Json
        } else {
            ToolFormat::Fallback
        }
    }

    /// The text that opens a call; `None` where a call opens with no marker
    /// of its own (Llama's bare JSON starts with `{"name"`, which is used).
    pub fn trigger(self) -> &'static str {
        match self {
            ToolFormat::Hermes | ToolFormat::Fallback => "<tool_call>",
            ToolFormat::Mistral => "[TOOL_CALLS]",
            ToolFormat::Llama3Json => "{\"name\"",
        }
    }

    /// The messages and tools to render for this format. Native formats get
    /// them as they are; the fallback gets its instructions in the system
    /// turn, earlier calls written out as the model would write them, and
    /// tool results as user messages, since its template knows neither.
    pub fn prepare(self, messages: &[Message], tools: &[Tool]) -> (Vec<Message>, Vec<Tool>) {
        if self != ToolFormat::Fallback || tools.is_empty() {
            return (messages.to_vec(), tools.to_vec());
        }
        let instructions = fallback_system_prompt(tools);
        let mut out = Vec::with_capacity(messages.len() + 1);
        let mut rest = messages;
        match messages.first() {
            Some(first) if first.role == Role::System => {
                out.push(Message::new(Role::System, format!("{}\n\n{instructions}", first.content)));
                rest = &messages[1..];
            }
            _ => out.push(Message::new(Role::System, instructions)),
        }
        for m in rest {
            out.push(match m.role {
                Role::Tool => Message::new(Role::User, format!("<tool_response>\n{}\n</tool_response>", m.content)),
                Role::Assistant if !m.tool_calls.is_empty() => {
                    let mut text = m.content.clone();
                    for c in &m.tool_calls {
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(&hermes_call_text(&c.name, &c.arguments));
                    }
                    Message::new(Role::Assistant, text)
                }
                _ => Message::new(m.role, m.content.clone()),
            });
        }
        (out, Vec::new())
    }
}

/// One call as Hermes writes it; `arguments` is JSON text, written as is.
fn hermes_call_text(name: &str, arguments: &str) -> String {
    let name = serde_json::Value::from(name);
    let arguments = if arguments.trim().is_empty() { "{}" } else { arguments };
    format!("<tool_call>\n{{\"name\": {name}, \"arguments\": {arguments}}}\n</tool_call>")
}

/// The instructions a model whose template knows no tools gets, in the
/// words of Hermes' own system prompt (the syntax the fallback parses).
pub fn fallback_system_prompt(tools: &[Tool]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        let spec = serde_json::json!({
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        });
        s.push('\n');
        s.push_str(&spec.to_string());
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments \
         within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \
         \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

#[cfg(test)]
mod tests;
