//! A streamed answer split as it arrives: reasoning (inside the think
//! block), content, and whole tool calls, never a tag in the content.

use super::parse::{parse_answer, ParsedCall};
use super::ToolFormat;
use crate::chat::Tool;

/// The thinking block's tags, and whether the prompt already opened it
/// (Qwen3's template leaves the model inside `<think>` unless told not to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinkTags {
    pub open: String,
    pub close: String,
    pub starts_inside: bool,
}

/// One piece of a streamed answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    Content(String),
    Reasoning(String),
    /// A whole call, the `index`-th of the answer.
    ToolCall {
        index: usize,
        call: ParsedCall,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before any answer text: a `<think>` may still open.
    Start,
    Thinking,
    Answer,
    /// Inside a call (after its trigger), gathering it whole.
    InCall,
    /// Llama's bare JSON: the answer opened with `{`, kept until the end.
    BareJson,
}

/// Splits streamed text into [`Delta`]s; text that may be the start of a tag
/// is held back until the next piece says what it is.
#[derive(Debug)]
pub struct StreamSplitter {
    format: Option<ToolFormat>,
    tools: Vec<Tool>,
    think: Option<ThinkTags>,
    state: State,
    pending: String,
    /// Whitespace between content and a call (or at the very start of the
    /// answer), sent only once content follows it.
    held_space: String,
    content_started: bool,
    calls: usize,
}

impl StreamSplitter {
    /// `format`: how calls to `tools` look (`None`: no tools in play, all
    /// answer text is content). `think`: the model's thinking tags.
    pub fn new(format: Option<ToolFormat>, tools: Vec<Tool>, think: Option<ThinkTags>) -> Self {
        let state = match &think {
            Some(t) if t.starts_inside => State::Thinking,
            _ => State::Start,
        };
        let format = format.filter(|_| !tools.is_empty());
        Self {
            format,
            tools,
            think,
            state,
            pending: String::new(),
            held_space: String::new(),
            content_started: false,
            calls: 0,
        }
    }

    /// Whether the text so far ends inside the thinking block.
    pub fn thinking(&self) -> bool {
        self.state == State::Thinking
    }

    /// How many calls have been sent.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// The deltas `text` completes.
    pub fn push(&mut self, text: &str) -> Vec<Delta> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        while self.step(&mut out) {}
        out
    }

    /// Everything still held back, at the end of the answer.
    pub fn finish(&mut self) -> Vec<Delta> {
        let mut out = Vec::new();
        while self.step(&mut out) {}
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            State::Thinking => push_reasoning(&mut out, rest),
            State::Start | State::Answer => self.content(&mut out, &rest),
            State::InCall | State::BareJson => {
                let text = match self.state {
                    State::InCall => format!("{}{rest}", self.trigger().unwrap_or_default()),
                    _ => rest,
                };
                let format = self.format.unwrap_or(ToolFormat::Hermes);
                let parsed = parse_answer(format, &text, &self.tools);
                self.content(&mut out, &parsed.content);
                for call in parsed.calls {
                    self.call(&mut out, call);
                }
            }
        }
        if self.calls == 0 && !self.held_space.is_empty() && self.content_started {
            out.push(Delta::Content(std::mem::take(&mut self.held_space)));
        }
        self.state = State::Answer;
        out
    }

    fn trigger(&self) -> Option<&'static str> {
        match self.format {
            Some(ToolFormat::Llama3Json) | None => None,
            Some(f) => Some(f.trigger()),
        }
    }

    /// One move of the state machine; false when it must wait for more text.
    fn step(&mut self, out: &mut Vec<Delta>) -> bool {
        match self.state {
            State::Start => {
                let lead = self.pending.trim_start();
                if lead.is_empty() {
                    return false;
                }
                if let Some(tags) = &self.think {
                    if let Some(after) = lead.strip_prefix(tags.open.as_str()) {
                        self.pending = after.to_owned();
                        self.state = State::Thinking;
                        return true;
                    }
                    if tags.open.starts_with(lead) {
                        return false;
                    }
                }
                if self.format == Some(ToolFormat::Llama3Json) && lead.starts_with('{') {
                    self.state = State::BareJson;
                    return false;
                }
                self.state = State::Answer;
                true
            }
            State::Thinking => {
                let Some(tags) = &self.think else {
                    self.state = State::Answer;
                    return true;
                };
                if let Some(at) = self.pending.find(tags.close.as_str()) {
                    let reasoning = self.pending[..at].to_owned();
                    self.pending.drain(..at + tags.close.len());
                    push_reasoning(out, reasoning);
                    self.state = State::Start;
                    // A think block is opened once; what follows is the answer.
                    self.think = None;
                    return true;
                }
                let keep = held_suffix(&self.pending, &tags.close);
                let send = self.pending[..self.pending.len() - keep].to_owned();
                self.pending.drain(..send.len());
                push_reasoning(out, send);
                false
            }
            State::Answer => {
                let Some(trigger) = self.trigger() else {
                    let text = std::mem::take(&mut self.pending);
                    self.content(out, &text);
                    return false;
                };
                if let Some(at) = self.pending.find(trigger) {
                    let before = self.pending[..at].to_owned();
                    self.pending.drain(..at + trigger.len());
                    self.content(out, &before);
                    self.state = State::InCall;
                    return true;
                }
                let keep = held_suffix(&self.pending, trigger);
                let send = self.pending[..self.pending.len() - keep].to_owned();
                self.pending.drain(..send.len());
                self.content(out, &send);
                false
            }
            State::InCall => {
                // Mistral's list has no closing tag: it is read at the end.
                if self.format == Some(ToolFormat::Mistral) {
                    return false;
                }
                const CLOSE: &str = "</tool_call>";
                let Some(end) = self.pending.find(CLOSE) else { return false };
                let block = format!("<tool_call>{}", &self.pending[..end + CLOSE.len()]);
                self.pending.drain(..end + CLOSE.len());
                let parsed = super::parse::parse_tagged(&block, &self.tools);
                self.content(out, &parsed.content);
                for call in parsed.calls {
                    self.call(out, call);
                }
                self.state = State::Answer;
                true
            }
            State::BareJson => false,
        }
    }

    /// Content, with whitespace runs held until something follows them, so
    /// the blank lines around calls and after thinking never arrive alone.
    fn content(&mut self, out: &mut Vec<Delta>, text: &str) {
        if text.is_empty() {
            return;
        }
        let body = text.trim_end();
        let trailing = &text[body.len()..];
        if body.is_empty() {
            self.held_space.push_str(trailing);
            return;
        }
        let mut piece = std::mem::take(&mut self.held_space);
        piece.push_str(body);
        let piece = if self.content_started { piece } else { piece.trim_start().to_owned() };
        self.content_started = true;
        out.push(Delta::Content(piece));
        self.held_space.push_str(trailing);
    }

    fn call(&mut self, out: &mut Vec<Delta>, call: ParsedCall) {
        self.held_space.clear();
        out.push(Delta::ToolCall { index: self.calls, call });
        self.calls += 1;
    }
}

fn push_reasoning(out: &mut Vec<Delta>, text: String) {
    if !text.is_empty() {
        out.push(Delta::Reasoning(text));
    }
}

/// The length of the longest end of `text` that begins `tag` (and could
/// still become it), at a character boundary.
fn held_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}
