//! The grammar that holds a call to its tool's schema, in llguidance's Lark
//! (`%json` embeds a JSON schema), for the engine's constraint: lazy under
//! `tool_choice: auto` (armed by the format's trigger, prose stays free),
//! from the first token under `required` or a named function.

use super::{ToolChoice, ToolFormat};
use crate::chat::Tool;

/// A grammar and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallGrammar {
    /// Lark source; its `start` rule covers what follows the trigger (or,
    /// without one, the whole answer).
    pub lark: String,
    /// `Some`: output is free until this text, and the grammar holds from
    /// the token after it. `None`: from the first answer token.
    pub trigger: Option<String>,
}

/// Which calls `choice` lets through `format`: `None` when no call is
/// allowed or no tool is offered. A named function not among `tools` gets
/// `None` too: the server refuses that request before it gets here.
pub fn call_grammar(format: ToolFormat, tools: &[Tool], choice: &ToolChoice, parallel: bool) -> Option<CallGrammar> {
    let chosen: Vec<&Tool> = match choice {
        ToolChoice::None => return None,
        ToolChoice::Auto | ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Named(name) => tools.iter().filter(|t| &t.name == name).collect(),
    };
    if chosen.is_empty() {
        return None;
    }
    let lazy = *choice == ToolChoice::Auto;
    let args_key = if format == ToolFormat::Llama3Json { "parameters" } else { "arguments" };
    let mut rules = String::new();
    let mut alternatives = Vec::new();
    for (i, tool) in chosen.iter().enumerate() {
        let head = format!("{{\"name\": {}, \"{args_key}\": ", serde_json::Value::from(tool.name.as_str()));
        // Lazy Llama calls start after `{"name"`, the trigger itself.
        let head = if lazy && format == ToolFormat::Llama3Json {
            head.strip_prefix("{\"name\"").unwrap_or(&head).to_owned()
        } else {
            head
        };
        rules.push_str(&format!("call_{i}: {} args_{i} \"}}\"\n", lark_str(&head)));
        rules.push_str(&format!("args_{i}: %json {}\n", tool.parameters));
        alternatives.push(format!("call_{i}"));
    }
    rules.push_str(&format!("call: {}\n", alternatives.join(" | ")));
    let many = |sep: &str, one: &str| {
        if parallel && !lazy {
            format!("{one} ({} {one})*", lark_str(sep))
        } else {
            one.to_owned()
        }
    };
    let start = match (format, lazy) {
        (ToolFormat::Hermes | ToolFormat::Fallback, true) => "\"\\n\" call \"\\n</tool_call>\"".to_owned(),
        (ToolFormat::Hermes | ToolFormat::Fallback, false) => {
            let one = "\"<tool_call>\\n\" call \"\\n</tool_call>\"";
            many("\n", &format!("({one})"))
        }
        (ToolFormat::Mistral, true) => "\"[\" call (\", \" call)* \"]\"".to_owned(),
        (ToolFormat::Mistral, false) => {
            let list = if parallel { "call (\", \" call)*" } else { "call" };
            format!("\"[TOOL_CALLS][\" {list} \"]\"")
        }
        (ToolFormat::Llama3Json, _) => many("; ", "call"),
    };
    let lark = format!("start: {start}\n{rules}");
    Some(CallGrammar { lark, trigger: lazy.then(|| format.trigger().to_owned()) })
}

/// `text` as a Lark string literal (JSON's escapes, which Lark reads).
fn lark_str(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}
