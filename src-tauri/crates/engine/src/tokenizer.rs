//! A model folder's tokenizer as mlx-lm / transformers use it: `tokenizer.json`
//! through the `tokenizers` crate, the chat template rendered with minijinja
//! in HF's Jinja dialect, the union of every EOS id the folder declares, and
//! a streaming detokenizer that only ever hands out whole characters.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use headroom_core::chat::{Message, Tool};
use minijinja::value::Kwargs;
use minijinja::{context, Environment, ErrorKind, Value as JinjaValue};
use serde_json::Value;

use crate::error::{EngineError, Result};
use crate::source::{read_gguf_header, ModelFiles};

/// Where a chat template may live, in the order transformers looks.
const TEMPLATE_FILE: &str = "chat_template.jinja";

/// The work one render may do (minijinja's fuel: about one unit per
/// instruction), so a template that loops forever ends with an error. A
/// real chat template spends a few hundred units per message (the demo
/// models' ChatML and Llama 3 templates: see the tokenizer tests), so this
/// leaves a wide margin over any conversation that fits a context.
pub const TEMPLATE_FUEL_BASE: u64 = 200_000;
pub const TEMPLATE_FUEL_PER_MESSAGE: u64 = 20_000;
/// The most text one render may produce: far beyond any prompt that fits
/// the largest context (`MAX_CONTEXT_LIMIT` tokens), small enough that a
/// template that multiplies strings cannot exhaust memory.
pub const TEMPLATE_MAX_OUTPUT_BYTES: usize = 64 << 20;

/// A loaded tokenizer plus what the folder says about chat formatting and EOS.
#[derive(Debug)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    dir: PathBuf,
    /// `None` for base models: plain-text prompts still work.
    template: Option<String>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    eos_ids: Vec<u32>,
}

impl Tokenizer {
    /// The tokenizer of the model at `path`: a folder's tokenizer.json and
    /// chat template, or the one a GGUF file's metadata describes.
    pub fn for_model(path: &Path) -> Result<Self> {
        match ModelFiles::locate(path) {
            ModelFiles::Folder(dir) => Self::from_dir(&dir),
            ModelFiles::Gguf(file) => {
                let vocab = read_gguf_header(&file)?
                    .vocab()
                    .map_err(|source| EngineError::Weights { file: file.clone(), source })?;
                Self::from_gguf(&file, &vocab)
            }
        }
    }

    /// Loads `tokenizer.json`, the chat template and the EOS ids of `dir`.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(EngineError::MissingTokenizer { dir: dir.to_owned() });
        }
        // A malformed file must be an error, whatever the parser does with it.
        let parsed = std::panic::catch_unwind(|| tokenizers::Tokenizer::from_file(&path));
        let inner = match parsed {
            Ok(result) => result.map_err(|source| EngineError::Tokenizer { path: path.clone(), source })?,
            Err(_) => {
                let source = "the tokenizer library failed on this file (it panicked)".into();
                return Err(EngineError::Tokenizer { path, source });
            }
        };
        if inner.get_vocab_size(true) == 0 {
            return Err(EngineError::Tokenizer { path, source: "the vocabulary is empty".into() });
        }

        let tok_config = read_json_opt(&dir.join("tokenizer_config.json"))?;
        let template = find_template(dir, tok_config.as_ref())?;
        let bos_token = tok_config.as_ref().and_then(|c| special_token(c.get("bos_token")));
        let eos_token = tok_config.as_ref().and_then(|c| special_token(c.get("eos_token")));

        // Union, as mlx-lm's TokenizerWrapper ends up with: a Llama 3 config
        // says <|end_of_text|>, its generation config adds <|eot_id|>, and
        // chat turns end with the latter.
        let mut eos = BTreeSet::new();
        for file in ["config.json", "generation_config.json"] {
            if let Some(v) = read_json_opt(&dir.join(file))? {
                collect_ids(v.get("eos_token_id"), &mut eos);
            }
        }
        if let Some(id) = eos_token.as_deref().and_then(|t| inner.token_to_id(t)) {
            eos.insert(id);
        }

        Ok(Self { inner, dir: dir.to_owned(), template, bos_token, eos_token, eos_ids: eos.into_iter().collect() })
    }

    /// Token ids that end a turn, sorted.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    pub fn has_chat_template(&self) -> bool {
        self.template.is_some()
    }

    /// Tokens the tokenizer knows, special ones included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The largest id encoding can produce (special tokens included): it
    /// must have a row in the model's embedding.
    pub fn max_token_id(&self) -> u32 {
        self.inner.get_vocab(true).into_values().max().unwrap_or(0)
    }

    /// The token table constrained decoding masks over (its tokenizer.json
    /// form: a folder's file, or what a GGUF's metadata was built into),
    /// `n_vocab` wide: the model's output width.
    pub fn grammar_vocabulary(
        &self,
        n_vocab: usize,
    ) -> std::result::Result<crate::grammar::Vocabulary, crate::grammar::GrammarError> {
        crate::grammar::Vocabulary::new(&self.inner, &self.eos_ids, n_vocab)
    }

    /// Renders a one-message conversation, so a template that does not
    /// compile, refuses every conversation, or runs out of fuel is found
    /// when the model is loaded rather than at the first message.
    pub fn check_template(&self) -> Result<()> {
        if self.template.is_none() {
            return Ok(());
        }
        let probe = [Message::new(headroom_core::chat::Role::User, "Hello")];
        self.apply_chat_template(&probe, true).map(drop)
    }

    /// Encodes raw text; `add_special_tokens` applies the post-processor (a BOS for Llama 3).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, add_special_tokens).map_err(|source| self.error(source))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner.decode(ids, skip_special_tokens).map_err(|source| self.error(source))
    }

    /// The conversation as the chat template renders it.
    pub fn apply_chat_template(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.apply_chat_template_with(messages, TemplateExtras::default(), add_generation_prompt)
    }

    /// The conversation with tools and template keywords, as the chat
    /// template renders it.
    pub fn apply_chat_template_with(
        &self,
        messages: &[Message],
        extras: TemplateExtras<'_>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let source = self.template.as_deref().ok_or_else(|| EngineError::NoChatTemplate { dir: self.dir.clone() })?;
        render_template(
            source,
            messages,
            extras,
            add_generation_prompt,
            self.bos_token.as_deref(),
            self.eos_token.as_deref(),
        )
    }

    /// The chat template's source, if the folder has one (tool-call formats
    /// are picked from it).
    pub fn chat_template(&self) -> Option<&str> {
        self.template.as_deref()
    }

    /// The rendered conversation as token ids. Special tokens are not added:
    /// the template already wrote the BOS and the role markers, and a second
    /// BOS would change every logit after it.
    pub fn encode_chat(&self, messages: &[Message], add_generation_prompt: bool) -> Result<Vec<u32>> {
        self.encode_chat_with(messages, TemplateExtras::default(), add_generation_prompt)
    }

    /// [`Self::encode_chat`] with tools and template keywords.
    pub fn encode_chat_with(
        &self,
        messages: &[Message],
        extras: TemplateExtras<'_>,
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>> {
        let text = self.apply_chat_template_with(messages, extras, add_generation_prompt)?;
        self.encode(&text, false)
    }

    /// A fresh streaming detokenizer for one turn's generated ids. Special
    /// tokens are shown, as mlx-lm shows them: the EOS never reaches it, and
    /// anything else the model says should be visible.
    pub fn detokenizer(&self) -> Detokenizer<'_> {
        Detokenizer {
            tokenizer: self,
            stream: self.inner.decode_stream(false),
            ids: Vec::new(),
            emitted: String::new(),
        }
    }

    fn error(&self, source: tokenizers::Error) -> EngineError {
        // A GGUF file holds its tokenizer itself; a folder, in tokenizer.json.
        let path = if crate::source::is_gguf(&self.dir) { self.dir.clone() } else { self.dir.join("tokenizer.json") };
        EngineError::Tokenizer { path, source }
    }
}

type DecodeStream<'a> = tokenizers::DecodeStream<
    'a,
    tokenizers::ModelWrapper,
    tokenizers::NormalizerWrapper,
    tokenizers::PreTokenizerWrapper,
    tokenizers::PostProcessorWrapper,
    tokenizers::DecoderWrapper,
>;

/// Turns generated ids into text as they come. A character split across
/// tokens (CJK, emoji in a byte-level vocabulary) is held back until its last
/// byte arrives, so no chunk ever carries a U+FFFD that the full text lacks.
pub struct Detokenizer<'a> {
    tokenizer: &'a Tokenizer,
    stream: DecodeStream<'a>,
    ids: Vec<u32>,
    emitted: String,
}

impl std::fmt::Debug for Detokenizer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detokenizer").field("ids", &self.ids.len()).field("emitted", &self.emitted.len()).finish()
    }
}

impl Detokenizer<'_> {
    /// The text `id` completes; empty while a character is still incomplete.
    pub fn step(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = self.stream.step(id).map_err(|source| self.tokenizer.error(source))?.unwrap_or_default();
        self.emitted.push_str(&text);
        Ok(text)
    }

    /// What is still held back at the end of the turn (a character the model
    /// never finished becomes U+FFFD, as mlx-lm's detokenizer does).
    pub fn finish(&mut self) -> Result<String> {
        let full = self.tokenizer.decode(&self.ids, false)?;
        let tail = full.strip_prefix(self.emitted.as_str()).unwrap_or_default().to_owned();
        self.emitted.push_str(&tail);
        Ok(tail)
    }

    /// Everything emitted so far.
    pub fn text(&self) -> &str {
        &self.emitted
    }
}

/// What a chat template gets besides the messages, as transformers'
/// `apply_chat_template(tools=…, **kwargs)` passes it.
#[derive(Debug, Clone, Copy, Default)]
pub struct TemplateExtras<'a> {
    /// The functions the model may call; none renders as `tools = None`.
    pub tools: &'a [Tool],
    /// Keywords such as `enable_thinking`; they override `bos_token` and
    /// `eos_token` as transformers' do, never `messages`, `tools` or
    /// `add_generation_prompt`.
    pub kwargs: Option<&'a serde_json::Map<String, Value>>,
}

/// A message as transformers' callers hand it to templates (vLLM's shape):
/// calls as `{id, type, function: {name, arguments}}` with the arguments
/// parsed into an object (Llama's and Mistral's templates `tojson` them;
/// Qwen's accept either), kept as text when they are not JSON. Parsed into
/// minijinja's own ordered map so the model's key order survives.
fn template_message(m: &Message) -> JinjaValue {
    let mut fields: Vec<(&str, JinjaValue)> =
        vec![("role", JinjaValue::from(m.role.as_str())), ("content", JinjaValue::from(m.content.as_str()))];
    if !m.tool_calls.is_empty() {
        let calls: Vec<JinjaValue> = m
            .tool_calls
            .iter()
            .map(|c| {
                let arguments = serde_json::from_str::<JinjaValue>(&c.arguments)
                    .unwrap_or_else(|_| JinjaValue::from(c.arguments.as_str()));
                let function =
                    JinjaValue::from_iter([("name", JinjaValue::from(c.name.as_str())), ("arguments", arguments)]);
                JinjaValue::from_iter([
                    ("id", JinjaValue::from(c.id.as_str())),
                    ("type", JinjaValue::from("function")),
                    ("function", function),
                ])
            })
            .collect();
        fields.push(("tool_calls", JinjaValue::from(calls)));
    }
    if let Some(id) = &m.tool_call_id {
        fields.push(("tool_call_id", JinjaValue::from(id.as_str())));
    }
    JinjaValue::from_iter(fields)
}

/// A tool in OpenAI's request shape, which is what templates are written for.
fn template_tool(t: &Tool) -> JinjaValue {
    let mut function: Vec<(&str, JinjaValue)> = vec![("name", JinjaValue::from(t.name.as_str()))];
    if let Some(d) = &t.description {
        function.push(("description", JinjaValue::from(d.as_str())));
    }
    function.push(("parameters", JinjaValue::from_serialize(&t.parameters)));
    JinjaValue::from_iter([("type", JinjaValue::from("function")), ("function", JinjaValue::from_iter(function))])
}

/// The names transformers fills itself; a keyword may not replace them.
pub const RESERVED_TEMPLATE_KWARGS: [&str; 3] = ["messages", "tools", "add_generation_prompt"];

/// Renders `source` with the context transformers gives chat templates.
pub fn render_template(
    source: &str,
    messages: &[Message],
    extras: TemplateExtras<'_>,
    add_generation_prompt: bool,
    bos_token: Option<&str>,
    eos_token: Option<&str>,
) -> Result<String> {
    let mut env = template_env(source)?;
    let messages_n = u64::try_from(messages.len()).unwrap_or(u64::MAX);
    env.set_fuel(Some(TEMPLATE_FUEL_BASE.saturating_add(TEMPLATE_FUEL_PER_MESSAGE.saturating_mul(messages_n))));
    let template = env.get_template("chat").map_err(|source| EngineError::TemplateRender { source })?;
    let mut out = Bounded { bytes: Vec::new(), limit: TEMPLATE_MAX_OUTPUT_BYTES, exceeded: false };
    let rendered = template
        .render_captured_to(
            context! {
                messages => messages.iter().map(template_message).collect::<Vec<_>>(),
                tools => (!extras.tools.is_empty())
                    .then(|| extras.tools.iter().map(template_tool).collect::<Vec<_>>()),
                add_generation_prompt => add_generation_prompt,
                ..JinjaValue::from_iter(
                    [
                        ("bos_token".to_owned(), JinjaValue::from(bos_token.unwrap_or_default())),
                        ("eos_token".to_owned(), JinjaValue::from(eos_token.unwrap_or_default())),
                    ]
                    .into_iter()
                    .chain(
                        extras
                            .kwargs
                            .into_iter()
                            .flatten()
                            .filter(|(k, _)| !RESERVED_TEMPLATE_KWARGS.contains(&k.as_str()))
                            .map(|(k, v)| (k.clone(), JinjaValue::from_serialize(v))),
                    )
                    .collect::<Vec<_>>(),
                )
            },
            &mut out,
        )
        .map(drop);
    if out.exceeded {
        let message = format!("the rendered prompt exceeds {} MB", TEMPLATE_MAX_OUTPUT_BYTES >> 20);
        return Err(EngineError::TemplateRender {
            source: minijinja::Error::new(ErrorKind::InvalidOperation, message),
        });
    }
    rendered.map_err(|source| EngineError::TemplateRender { source })?;
    String::from_utf8(out.bytes).map_err(|_| EngineError::TemplateRender {
        source: minijinja::Error::new(ErrorKind::InvalidOperation, "the template produced text that is not UTF-8"),
    })
}

/// The environment transformers renders chat templates in, with `source` compiled.
fn template_env(source: &str) -> Result<Environment<'static>> {
    let mut env = Environment::new();
    // transformers renders with trim_blocks + lstrip_blocks; templates rely on it.
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    // Templates are Python-flavoured: message.content.strip(), dict.items() …
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
    env.add_template_owned("chat", source.to_owned()).map_err(|source| EngineError::TemplateRender { source })?;
    Ok(env)
}

/// A render's output, refused past `limit` bytes.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
    exceeded: bool,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.limit {
            self.exceeded = true;
            return Err(std::io::Error::other(format!("the rendered prompt exceeds {} MB", self.limit >> 20)));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// transformers' `raise_exception(msg)`: templates use it to reject a conversation.
fn raise_exception(msg: String) -> std::result::Result<JinjaValue, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

/// transformers' `strftime_now(format)`: today's date (UTC) as the template asks for it.
#[allow(clippy::needless_pass_by_value)] // minijinja hands arguments over by value
fn strftime_now(format: String) -> std::result::Result<JinjaValue, minijinja::Error> {
    clock::Moment::now()
        .format(&format)
        .map(JinjaValue::from)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e))
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=…)`,
/// i.e. Python's separators (", " and ": ") and no HTML escaping, unlike
/// minijinja's built-in one; tool schemas end up in the prompt byte for byte.
#[allow(clippy::needless_pass_by_value)] // minijinja hands keyword arguments over by value
fn tojson(value: &JinjaValue, kwargs: Kwargs) -> std::result::Result<JinjaValue, minijinja::Error> {
    // Templates only pass `indent`; transformers' other options keep their defaults.
    let indent: Option<usize> = kwargs.get("indent")?;
    // Straight from minijinja's ordered value: a detour through
    // serde_json::Value would sort the keys, and Python keeps their order.
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter::new(indent));
    serde::Serialize::serialize(value, &mut ser)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, "tojson failed").with_source(e))?;
    Ok(JinjaValue::from_safe_string(String::from_utf8_lossy(&out).into_owned()))
}

/// serde_json output shaped like Python's `json.dumps`.
struct PyFormatter {
    indent: Option<Vec<u8>>,
    depth: usize,
    has_value: bool,
}

impl PyFormatter {
    fn new(indent: Option<usize>) -> Self {
        Self { indent: indent.map(|n| vec![b' '; n]), depth: 0, has_value: false }
    }

    fn newline<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        if let Some(unit) = &self.indent {
            w.write_all(b"\n")?;
            for _ in 0..self.depth {
                w.write_all(unit)?;
            }
        }
        Ok(())
    }

    fn open<W: ?Sized + std::io::Write>(&mut self, w: &mut W, c: &[u8]) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(c)
    }

    fn close<W: ?Sized + std::io::Write>(&mut self, w: &mut W, c: &[u8]) -> std::io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        self.has_value = true;
        w.write_all(c)
    }

    fn item<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            // Python: ", " without indent, "," + newline with it.
            w.write_all(if self.indent.is_some() { b"," } else { b", " })?;
        }
        self.newline(w)
    }
}

impl serde_json::ser::Formatter for PyFormatter {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// `chat_template.jinja`, else tokenizer_config.json's `chat_template`
/// (a string, or a list of `{name, template}` of which "default" is used).
fn find_template(dir: &Path, tok_config: Option<&Value>) -> Result<Option<String>> {
    let file = dir.join(TEMPLATE_FILE);
    if file.is_file() {
        return fs::read_to_string(&file).map(Some).map_err(|source| EngineError::Io { path: file, source });
    }
    let path = dir.join("tokenizer_config.json");
    match tok_config.and_then(|c| c.get("chat_template")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(list)) => {
            let named = |name: &str| {
                list.iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
                    .and_then(|t| t.get("template").and_then(Value::as_str))
            };
            match named("default") {
                Some(t) => Ok(Some(t.to_owned())),
                None => Err(EngineError::InvalidConfig {
                    path,
                    reason: "chat_template is a list without a template named \"default\"".into(),
                }),
            }
        }
        Some(other) => Err(EngineError::InvalidConfig {
            path,
            reason: format!("chat_template must be a string or a list, found {other}"),
        }),
    }
}

/// A special token as tokenizer_config.json writes it: a string, or an
/// AddedToken object `{"content": …}` (older transformers).
fn special_token(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

fn collect_ids(v: Option<&Value>, into: &mut BTreeSet<u32>) {
    match v {
        Some(Value::Number(n)) => into.extend(n.as_u64().and_then(|n| u32::try_from(n).ok())),
        Some(Value::Array(list)) => list.iter().for_each(|x| collect_ids(Some(x), into)),
        _ => {}
    }
}

/// A JSON file that may be absent (every file but tokenizer.json is optional here).
fn read_json_opt(path: &Path) -> Result<Option<Value>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(EngineError::Io { path: path.to_owned(), source }),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| EngineError::InvalidConfig { path: path.to_owned(), reason: e.to_string() })
}

mod clock;
mod gguf;
#[cfg(test)]
mod tests;
