//! A finished answer split into what the user reads and the calls it made.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::ToolFormat;
use crate::chat::Tool;

/// One call found in the model's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCall {
    pub name: String,
    /// JSON text, as the model wrote it (`{}` when it wrote none).
    pub arguments: String,
}

/// An answer split into content and calls.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedAnswer {
    pub content: String,
    pub calls: Vec<ParsedCall>,
}

/// A call object as the formats write it; Llama says `parameters`.
#[derive(Deserialize)]
struct CallObject<'a> {
    name: String,
    #[serde(alias = "parameters", borrow, default)]
    arguments: Option<&'a RawValue>,
}

impl CallObject<'_> {
    /// The call, if it names a tool the request offered. Arguments given as
    /// a JSON string holding an object (some models do) are unwrapped.
    fn into_call(self, tools: &[Tool]) -> Option<ParsedCall> {
        if !tools.iter().any(|t| t.name == self.name) {
            return None;
        }
        let arguments = match self.arguments {
            None => "{}".to_owned(),
            Some(raw) => match serde_json::from_str::<String>(raw.get()) {
                Ok(inner) if serde_json::from_str::<&RawValue>(&inner).is_ok() => inner,
                _ => raw.get().to_owned(),
            },
        };
        let is_object = arguments.trim_start().starts_with('{');
        is_object.then_some(ParsedCall { name: self.name, arguments })
    }
}

/// Splits `text` (the answer after any thinking) into content and the calls
/// to `tools` it made in `format`. Text that looks like a call but is not a
/// well-formed call of an offered tool stays in the content, as written:
/// nothing the model said is dropped.
pub fn parse_answer(format: ToolFormat, text: &str, tools: &[Tool]) -> ParsedAnswer {
    if tools.is_empty() {
        return ParsedAnswer { content: text.to_owned(), calls: Vec::new() };
    }
    match format {
        ToolFormat::Hermes | ToolFormat::Fallback => parse_tagged(text, tools),
        ToolFormat::Llama3Json => parse_bare_json(text, tools),
        ToolFormat::Mistral => parse_mistral(text, tools),
    }
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

pub(super) fn parse_tagged(text: &str, tools: &[Tool]) -> ParsedAnswer {
    let mut out = ParsedAnswer::default();
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        out.content.push_str(&rest[..at]);
        let body_and_more = &rest[at + OPEN.len()..];
        let (body, after) = match body_and_more.find(CLOSE) {
            Some(end) => (&body_and_more[..end], &body_and_more[end + CLOSE.len()..]),
            // An unfinished last call (max_tokens ran out) is still read if whole.
            None => (body_and_more, ""),
        };
        let whole = &rest[at..rest.len() - after.len()];
        match serde_json::from_str::<CallObject>(body.trim()).ok().and_then(|c| c.into_call(tools)) {
            Some(call) => out.calls.push(call),
            None => out.content.push_str(whole),
        }
        rest = after;
    }
    out.content.push_str(rest);
    tidy(out)
}

/// Llama 3.x: the whole answer is one or more call objects (separated by
/// `;` or whitespace), after an optional `<|python_tag|>`.
fn parse_bare_json(text: &str, tools: &[Tool]) -> ParsedAnswer {
    let body = text.trim_start();
    let body = body.strip_prefix("<|python_tag|>").unwrap_or(body).trim();
    if !body.starts_with('{') {
        return ParsedAnswer { content: text.to_owned(), calls: Vec::new() };
    }
    let mut calls = Vec::new();
    for piece in split_objects(body).unwrap_or_default() {
        match serde_json::from_str::<CallObject>(piece).ok().and_then(|c| c.into_call(tools)) {
            Some(call) => calls.push(call),
            None => return ParsedAnswer { content: text.to_owned(), calls: Vec::new() },
        }
    }
    if calls.is_empty() {
        return ParsedAnswer { content: text.to_owned(), calls };
    }
    ParsedAnswer { content: String::new(), calls }
}

/// Top-level JSON values of `s` separated by `;` or whitespace, as text;
/// `None` if anything else lies between them.
fn split_objects(s: &str) -> Option<Vec<&str>> {
    let mut pieces = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches(|c: char| c == ';' || c.is_whitespace());
        if rest.is_empty() {
            return Some(pieces);
        }
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<&RawValue>();
        match stream.next() {
            Some(Ok(v)) => pieces.push(v.get()),
            _ => return None,
        }
        rest = &rest[stream.byte_offset()..];
    }
}

fn parse_mistral(text: &str, tools: &[Tool]) -> ParsedAnswer {
    const TAG: &str = "[TOOL_CALLS]";
    let Some(at) = text.find(TAG) else {
        return ParsedAnswer { content: text.to_owned(), calls: Vec::new() };
    };
    let after = &text[at + TAG.len()..];
    let mut stream = serde_json::Deserializer::from_str(after).into_iter::<Vec<CallObject>>();
    let parsed = match stream.next() {
        Some(Ok(list)) if !list.is_empty() => list.into_iter().map(|c| c.into_call(tools)).collect::<Option<Vec<_>>>(),
        _ => None,
    };
    match parsed {
        Some(calls) => {
            let end = stream.byte_offset();
            let content = format!("{}{}", &text[..at], &after[end..]);
            tidy(ParsedAnswer { content, calls })
        }
        None => ParsedAnswer { content: text.to_owned(), calls: Vec::new() },
    }
}

/// Content around calls loses the blank lines the format put between them;
/// content without calls is left exactly as written.
fn tidy(mut a: ParsedAnswer) -> ParsedAnswer {
    if !a.calls.is_empty() {
        a.content = a.content.trim().to_owned();
    }
    a
}
