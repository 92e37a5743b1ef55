//! The OpenAI wire format: parsing and checking a chat-completions request
//! into an engine request, and the response, chunk and usage objects.

use headroom_core::chat::{FinishReason, Message, Role, Tool, ToolCall};
use headroom_core::chat_format::{Delta, ToolChoice};
use headroom_core::kv::{KvFormat, KvFormatError};
use headroom_core::thinking::Think;
use headroom_engine::grammar::{self, Constraint, Grammar, GrammarError};
use headroom_engine::worker::{GenerateRequest, OverflowPolicy, TurnStats};
use headroom_engine::SamplingParams;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api_error::ApiError;

/// The most tokens one request may ask for (the engine caps it at the context anyway).
pub const MAX_TOKENS_LIMIT: usize = 1 << 20;

/// The body as sent; every field optional so that a missing one gets
/// OpenAI's "Missing required parameter" with its name, not a serde message.
#[derive(Debug, Deserialize)]
struct RawRequest {
    model: Option<String>,
    messages: Option<Vec<RawMessage>>,
    stream: Option<bool>,
    stream_options: Option<RawStreamOptions>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: Option<u64>,
    n: Option<u64>,
    // Headroom's own: the KV cache's quantization (mlx-lm's names).
    kv_bits: Option<u64>,
    kv_group_size: Option<u64>,
    quantized_kv_start: Option<u64>,
    // Accepted by OpenAI, not implemented here: refused when they would
    // change the answer, so a client never gets silently different output.
    stop: Option<Value>,
    tools: Option<Value>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    functions: Option<Value>,
    logprobs: Option<bool>,
    response_format: Option<Value>,
    reasoning_effort: Option<String>,
    chat_template_kwargs: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct RawStreamOptions {
    include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct RawMessage {
    role: Option<String>,
    content: Option<RawContent>,
    tool_calls: Option<Vec<RawToolCall>>,
    tool_call_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawToolCall {
    id: Option<String>,
    function: Option<RawFunction>,
}

#[derive(Debug, Deserialize)]
struct RawFunction {
    name: Option<String>,
    arguments: Option<Value>,
}

/// What the answer must be (`response_format`).
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON valid against `schema`.
    JsonSchema {
        name: String,
        schema: Value,
        strict: bool,
    },
}

/// The most stop sequences a request may set, as OpenAI allows.
pub const MAX_STOPS: usize = 4;

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawContent {
    Text(String),
    Parts(Vec<RawPart>),
}

#[derive(Debug, Deserialize)]
struct RawPart {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

/// A checked request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with `usage`.
    pub include_usage: bool,
    /// `generate.kv`, as asked: the model must be ready for it (a format
    /// that needs more memory than the loaded one was approved for is a reload).
    /// Also carries the request's `tool_choice`, `parallel_tool_calls` and
    /// `stop`, and its `response_format` as the constraint.
    pub generate: GenerateRequest,
    /// `response_format` as asked (the engine gets it as `generate.constraint`).
    pub response_format: ResponseFormat,
    /// `reasoning_effort` as a thinking ask; `None`: the model's setting.
    pub think: Option<Think>,
}

fn missing(param: &str) -> ApiError {
    ApiError::invalid(format!("Missing required parameter: '{param}'.")).param(param).code("missing_required_parameter")
}

fn unsupported(param: &str, why: &str) -> ApiError {
    ApiError::invalid(format!("'{param}' is not supported by this server: {why}."))
        .param(param)
        .code("unsupported_parameter")
}

fn present(v: Option<&Value>) -> bool {
    v.is_some_and(|v| !v.is_null() && v != &Value::Array(Vec::new()))
}

/// Parses and checks a body. `default_max_tokens` applies when the client sets none.
pub fn parse_request(body: &[u8], default_max_tokens: usize) -> Result<ChatRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(format!(
            "We could not parse the JSON body of your request ({e}). The body must be a JSON object sent with \
             Content-Type: application/json."
        ))
    })?;
    if !value.is_object() {
        return Err(ApiError::invalid("The request body must be a JSON object."));
    }
    let raw: RawRequest = serde_json::from_value(value)
        .map_err(|e| ApiError::invalid(format!("Invalid request body: {e}.")).code("invalid_type"))?;

    let model = raw.model.filter(|m| !m.trim().is_empty()).ok_or_else(|| missing("model"))?;
    let raw_messages = raw.messages.ok_or_else(|| missing("messages"))?;
    if raw_messages.is_empty() {
        return Err(ApiError::invalid("'messages' must hold at least one message.")
            .param("messages")
            .code("empty_array"));
    }
    let messages = raw_messages.into_iter().enumerate().map(|(i, m)| message(i, m)).collect::<Result<Vec<_>, _>>()?;

    if raw.n.is_some_and(|n| n != 1) {
        return Err(unsupported("n", "it generates one choice per request"));
    }
    if present(raw.functions.as_ref()) {
        return Err(unsupported("functions", "use 'tools', which replaced it"));
    }
    if raw.logprobs == Some(true) {
        return Err(unsupported("logprobs", "log probabilities are not returned"));
    }
    let stop = stops(raw.stop)?;
    let tools = tools(raw.tools)?;
    let tool_choice = tool_choice(raw.tool_choice, &tools)?;
    let response_format = response_format(raw.response_format)?;
    let template_kwargs = match raw.chat_template_kwargs {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(ApiError::invalid("'chat_template_kwargs' must be an object.")
                .param("chat_template_kwargs")
                .code("invalid_type"))
        }
    };
    if let Some(name) =
        template_kwargs.keys().find(|k| headroom_engine::tokenizer::RESERVED_TEMPLATE_KWARGS.contains(&k.as_str()))
    {
        return Err(ApiError::invalid(format!(
            "'chat_template_kwargs' may not set '{name}': the server sets it from the request."
        ))
        .param("chat_template_kwargs")
        .code("invalid_value"));
    }
    // reasoning_effort: `none` off, `high` unbounded, the others a thinking
    // budget (headroom_core::thinking); applied with the model's own
    // setting once the model is known.
    let think = match raw.reasoning_effort.as_deref() {
        None => None,
        Some(effort) => Some(Think::from_effort(effort).map_err(|_| {
            ApiError::invalid(format!(
                "Invalid value for 'reasoning_effort': '{effort}'. Supported: none, minimal, low, medium, high."
            ))
            .param("reasoning_effort")
            .code("invalid_value")
        })?),
    };

    // max_completion_tokens is the newer name; OpenAI refuses both at once.
    let (max_name, max) = match (raw.max_completion_tokens, raw.max_tokens) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("Set 'max_completion_tokens' or 'max_tokens', not both.").param("max_tokens"))
        }
        (Some(n), None) => ("max_completion_tokens", Some(n)),
        (None, n) => ("max_tokens", n),
    };
    let max_tokens = match max {
        None => default_max_tokens,
        Some(n) => match usize::try_from(n) {
            Ok(n) if (1..=MAX_TOKENS_LIMIT).contains(&n) => n,
            _ => {
                return Err(ApiError::invalid(format!(
                    "'{max_name}' must be between 1 and {MAX_TOKENS_LIMIT}, got {n}."
                ))
                .param(max_name)
                .code("invalid_value"))
            }
        },
    };
    // OpenAI's ranges and defaults (temperature 1, top_p 1): a client that
    // sets nothing gets sampling, as it would from OpenAI.
    let temperature = raw.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(format!("'temperature' must be between 0 and 2, got {temperature}."))
            .param("temperature")
            .code("invalid_value"));
    }
    let top_p = raw.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(format!("'top_p' must be greater than 0 and at most 1, got {top_p}."))
            .param("top_p")
            .code("invalid_value"));
    }
    // A quantized KV cache for this request (Headroom's extension, mlx-lm's
    // names): `kv_bits` 2–8, `kv_group_size` 32/64/128 (default 64),
    // `quantized_kv_start` tokens (default mlx-lm's 5000).
    let kv = match KvFormat::from_parts(raw.kv_bits, raw.kv_group_size, raw.quantized_kv_start) {
        Ok(KvFormat::Float) => None,
        Ok(format) => Some(format),
        Err(e) => {
            let param = match e {
                KvFormatError::GroupSize(_) => "kv_group_size",
                KvFormatError::Start(_) => "quantized_kv_start",
                _ => "kv_bits",
            };
            return Err(ApiError::invalid(format!("{e}.")).param(param).code("invalid_value"));
        }
    };
    let sampling = SamplingParams {
        temperature: temperature as f32,
        top_p: top_p as f32,
        seed: raw.seed,
        ..SamplingParams::default()
    };
    // tool_choice "none": the model is not shown the tools at all.
    let tools = if tool_choice == ToolChoice::None { Vec::new() } else { tools };
    let parallel_tool_calls = raw.parallel_tool_calls.unwrap_or(true);
    let constraint = format_constraint(&response_format)?;
    Ok(ChatRequest {
        response_format,
        think,
        model,
        stream: raw.stream.unwrap_or(false),
        include_usage: raw.stream_options.and_then(|o| o.include_usage).unwrap_or(false),
        generate: GenerateRequest {
            // No session: the engine's prompt cache finds the longest
            // cached prefix of whatever conversation a client resends,
            // among the states of the caller's own key (set by the handler).
            session: None,
            tenant: None,
            messages,
            tools,
            template_kwargs,
            sampling,
            max_tokens,
            // A server answers what it was sent or says why not; dropping
            // turns silently would answer a different conversation.
            overflow: OverflowPolicy::Error,
            ignore_eos: false,
            kv,
            prompt_cache_room: None,
            // The server's setting (`ServeConfig::speculative`), set where it runs.
            speculative: headroom_core::speculative::SpeculativeMode::None,
            // The load `ensure_loaded` made ready, set where it runs.
            load: None,
            constraint,
            stop,
            thinking: None,
            tool_choice,
            parallel_tool_calls,
        },
    })
}

fn message(i: usize, m: RawMessage) -> Result<Message, ApiError> {
    let role = match m.role.as_deref() {
        None => return Err(missing(&format!("messages[{i}].role"))),
        // "developer" is what newer OpenAI models call the system prompt.
        Some("system" | "developer") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => Role::Tool,
        Some("function") => {
            return Err(unsupported(&format!("messages[{i}].role"), "'function' messages were replaced by 'tool'"))
        }
        Some(other) => {
            return Err(ApiError::invalid(format!(
            "Invalid value for 'messages[{i}].role': '{other}'. Supported: system, developer, user, assistant, tool."
        ))
            .param(format!("messages[{i}].role"))
            .code("invalid_value"))
        }
    };
    let content = match m.content {
        // An assistant turn that only called tools has no text.
        None if role == Role::Assistant => String::new(),
        None => return Err(missing(&format!("messages[{i}].content"))),
        Some(RawContent::Text(t)) => t,
        Some(RawContent::Parts(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.into_iter().enumerate() {
                match (part.kind.as_str(), part.text) {
                    ("text", Some(t)) => text.push_str(&t),
                    ("text", None) => return Err(missing(&format!("messages[{i}].content[{j}].text"))),
                    (kind, _) => {
                        return Err(unsupported(
                            &format!("messages[{i}].content[{j}].type"),
                            &format!("'{kind}' parts need a multimodal model; only text is accepted"),
                        ))
                    }
                }
            }
            text
        }
    };
    let mut calls = Vec::new();
    for (j, c) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
        if role != Role::Assistant {
            return Err(ApiError::invalid(format!("'messages[{i}].tool_calls' is only for assistant messages."))
                .param(format!("messages[{i}].tool_calls"))
                .code("invalid_value"));
        }
        let at = format!("messages[{i}].tool_calls[{j}]");
        let f = c.function.ok_or_else(|| missing(&format!("{at}.function")))?;
        let name = f.name.ok_or_else(|| missing(&format!("{at}.function.name")))?;
        // Arguments are JSON text on the wire; an object is taken too.
        let arguments = match f.arguments {
            None | Some(Value::Null) => "{}".to_owned(),
            Some(Value::String(s)) => s,
            Some(v) => v.to_string(),
        };
        calls.push(ToolCall { id: c.id.unwrap_or_else(|| format!("call_{i}_{j}")), name, arguments });
    }
    if role == Role::Tool && m.tool_call_id.is_none() {
        return Err(missing(&format!("messages[{i}].tool_call_id")));
    }
    let tool_call_id = if role == Role::Tool { m.tool_call_id } else { None };
    Ok(Message { tool_calls: calls, tool_call_id, ..Message::new(role, content) })
}

fn invalid_at(param: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("Invalid '{param}': {why}.")).param(param).code("invalid_value")
}

/// `stop`: a string or up to [`MAX_STOPS`] non-empty strings.
fn stops(raw: Option<Value>) -> Result<Vec<String>, ApiError> {
    let list = match raw {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![Value::String(s)],
        Some(Value::Array(a)) => a,
        Some(_) => return Err(invalid_at("stop", "it must be a string or an array of strings")),
    };
    if list.len() > MAX_STOPS {
        return Err(invalid_at("stop", format!("at most {MAX_STOPS} sequences, got {}", list.len())));
    }
    list.into_iter()
        .map(|v| match v {
            Value::String(s) if !s.is_empty() => Ok(s),
            _ => Err(invalid_at("stop", "every sequence must be a non-empty string")),
        })
        .collect()
}

/// `tools`: function tools with unique names and object schemas.
/// `tools` as OpenAI sends them (an array of function tools), checked: names
/// unique and well formed, each schema one the engine can hold a call to.
/// Public for `headroom generate --tools`, which reads the same array.
pub fn tools(raw: Option<Value>) -> Result<Vec<Tool>, ApiError> {
    let list = match raw {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(invalid_at("tools", "it must be an array")),
    };
    let mut tools: Vec<Tool> = Vec::with_capacity(list.len());
    for (i, t) in list.into_iter().enumerate() {
        let at = format!("tools[{i}]");
        match t.get("type").and_then(Value::as_str) {
            Some("function") => {}
            Some(other) => {
                return Err(unsupported(&format!("{at}.type"), &format!("'{other}' tools; only 'function'")))
            }
            None => return Err(missing(&format!("{at}.type"))),
        }
        let f = t.get("function").ok_or_else(|| missing(&format!("{at}.function")))?;
        let name = f.get("name").and_then(Value::as_str).ok_or_else(|| missing(&format!("{at}.function.name")))?;
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if !valid_name {
            return Err(invalid_at(
                &format!("{at}.function.name"),
                format!("'{name}' must be 1 to 64 letters, digits, '_', '-' or '.'"),
            ));
        }
        if tools.iter().any(|t| t.name == name) {
            return Err(invalid_at(&format!("{at}.function.name"), format!("'{name}' is named twice")));
        }
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => headroom_core::chat::empty_object_schema(),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => return Err(invalid_at(&format!("{at}.function.parameters"), "it must be a JSON schema object")),
        };
        // A call's arguments are held to this schema: one the engine cannot
        // compile is refused here, by name, not in the middle of a run.
        checked_schema(&format!("{at}.function.parameters"), &parameters)?;
        let description = f.get("description").and_then(Value::as_str).map(str::to_owned);
        tools.push(Tool { name: name.to_owned(), description, parameters });
    }
    Ok(tools)
}

/// `schema` as the engine's grammar, refused with what is wrong (an invalid
/// schema, or a feature the engine does not implement, named).
fn checked_schema(param: &str, schema: &Value) -> Result<Grammar, ApiError> {
    let grammar = Grammar::JsonSchema(schema.clone());
    grammar::validate(&grammar).map_err(|e| {
        let code = match e {
            GrammarError::Unsupported { .. } => "unsupported_schema",
            _ => "invalid_schema",
        };
        ApiError::invalid(format!("Invalid '{param}': {e}.")).param(param).code(code)
    })?;
    Ok(grammar)
}

/// What `format` asks of the answer, as the engine's constraint; `None` for text.
fn format_constraint(format: &ResponseFormat) -> Result<Option<Constraint>, ApiError> {
    let grammar = match format {
        ResponseFormat::Text => return Ok(None),
        ResponseFormat::JsonObject => Grammar::JsonSchema(serde_json::json!({"type": "object"})),
        ResponseFormat::JsonSchema { schema, .. } => checked_schema("response_format.json_schema.schema", schema)?,
    };
    Ok(Some(Constraint::whole(grammar)))
}

/// `tool_choice`: "auto" (the default), "none", "required", or one named function.
pub fn tool_choice(raw: Option<Value>, tools: &[Tool]) -> Result<ToolChoice, ApiError> {
    let choice = match raw {
        None | Some(Value::Null) => return Ok(if tools.is_empty() { ToolChoice::None } else { ToolChoice::Auto }),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(invalid_at("tool_choice", format!("'{other}'; use auto, none, required or a function")))
            }
        },
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(name) => ToolChoice::Named(name.to_owned()),
            None => return Err(missing("tool_choice.function.name")),
        },
    };
    match &choice {
        ToolChoice::Required if tools.is_empty() => {
            Err(invalid_at("tool_choice", "'required' needs at least one tool in 'tools'"))
        }
        ToolChoice::Named(name) if !tools.iter().any(|t| &t.name == name) => {
            Err(invalid_at("tool_choice", format!("the function '{name}' is not among 'tools'")))
        }
        _ => Ok(choice),
    }
}

/// `response_format`: text, json_object, or json_schema with its schema.
fn response_format(raw: Option<Value>) -> Result<ResponseFormat, ApiError> {
    let Some(v) = raw.filter(|v| !v.is_null()) else { return Ok(ResponseFormat::Text) };
    match v.get("type").and_then(Value::as_str) {
        Some("text") => Ok(ResponseFormat::Text),
        Some("json_object") => Ok(ResponseFormat::JsonObject),
        Some("json_schema") => {
            let spec = v.get("json_schema").ok_or_else(|| missing("response_format.json_schema"))?;
            let name = spec.get("name").and_then(Value::as_str).unwrap_or("response").to_owned();
            let schema = match spec.get("schema") {
                Some(s @ (Value::Object(_) | Value::Bool(_))) => s.clone(),
                None => return Err(missing("response_format.json_schema.schema")),
                Some(_) => {
                    return Err(invalid_at("response_format.json_schema.schema", "it must be a JSON schema object"))
                }
            };
            let strict = spec.get("strict").and_then(Value::as_bool).unwrap_or(false);
            Ok(ResponseFormat::JsonSchema { name, schema, strict })
        }
        Some(other) => {
            Err(invalid_at("response_format.type", format!("'{other}'; use text, json_object or json_schema")))
        }
        None => Err(missing("response_format.type")),
    }
}

/// OpenAI's finish reasons; a cancelled run never reaches a client as a
/// finished one (it is an error, or the client is gone). An answer that
/// ended on its own after calling tools finished for `tool_calls`.
pub fn finish_reason(reason: FinishReason, called: bool) -> &'static str {
    match reason {
        FinishReason::Stop if called => "tool_calls",
        FinishReason::Stop | FinishReason::Cancelled => "stop",
        FinishReason::Length => "length",
    }
}

/// A whole answer, split: what the user reads, what the model thought, the calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    pub content: String,
    pub reasoning: String,
    pub calls: Vec<ToolCall>,
}

impl Answer {
    /// Gathers a splitter's deltas (`meta` names the calls).
    pub fn from_deltas(meta: &Meta, deltas: impl IntoIterator<Item = Delta>) -> Self {
        let mut a = Answer::default();
        for d in deltas {
            match d {
                Delta::Content(t) => a.content.push_str(&t),
                Delta::Reasoning(t) => a.reasoning.push_str(&t),
                Delta::ToolCall { index, call } => {
                    a.calls.push(ToolCall { id: call_id(meta, index), name: call.name, arguments: call.arguments })
                }
            }
        }
        a
    }
}

/// A call's id: unique in the server's run (the completion's id) and answer.
pub fn call_id(meta: &Meta, index: usize) -> String {
    format!("call_{}_{index}", meta.id.trim_start_matches("chatcmpl-"))
}

/// One streamed delta in OpenAI's shape (`reasoning_content` as vLLM and
/// DeepSeek send it).
pub fn delta_json(meta: &Meta, delta: &Delta) -> Value {
    match delta {
        Delta::Content(t) => serde_json::json!({ "content": t }),
        Delta::Reasoning(t) => serde_json::json!({ "reasoning_content": t }),
        Delta::ToolCall { index, call } => serde_json::json!({ "tool_calls": [{
            "index": index,
            "id": call_id(meta, *index),
            "type": "function",
            "function": { "name": call.name, "arguments": call.arguments },
        }]}),
    }
}

/// `usage`, with our measured figures in `headroom` (null when undefined:
/// a decode rate needs two tokens).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    /// OpenAI's place for prompt-cache reuse, as mlx_lm.server reports it.
    pub prompt_tokens_details: PromptTokensDetails,
    pub headroom: HeadroomStats,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens the engine's prompt cache already held (not prefilled).
    pub cached_tokens: usize,
}

/// The definitions are `headroom_core::stats`'s.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadroomStats {
    pub ttft_ms: Option<f64>,
    pub prefill_tps: Option<f64>,
    pub decode_tps: Option<f64>,
    pub e2e_tps: Option<f64>,
    pub context_tokens: usize,
    /// Of the prompt, tokens the prompt cache already held (as `cached_tokens`).
    pub reused_tokens: usize,
    /// Where they came from: "memory", "disk" or "none".
    pub reused_from: &'static str,
    pub batch: usize,
    pub peak_memory_bytes: usize,
    /// What the request's KV cache was: "bf16", "8-bit (group 64)", …
    pub kv_cache: String,
    /// Split across two Macs (`serve --peer`): where, and what handing over cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub two_macs: Option<headroom_engine::worker::PeerReport>,
}

impl Usage {
    pub fn from_stats(s: &TurnStats) -> Self {
        Self {
            prompt_tokens: s.prompt_tokens,
            completion_tokens: s.generated_tokens,
            total_tokens: s.prompt_tokens + s.generated_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens: s.reused_tokens },
            headroom: HeadroomStats {
                ttft_ms: s.rates.ttft_ms,
                prefill_tps: s.rates.prefill_tps,
                decode_tps: s.rates.decode_tps,
                e2e_tps: s.rates.e2e_tps,
                context_tokens: s.context_tokens,
                reused_tokens: s.reused_tokens,
                reused_from: s.reused_from.as_str(),
                batch: s.batch,
                peak_memory_bytes: s.peak_memory_bytes,
                kv_cache: s.kv_label.clone(),
                two_macs: s.peer.as_ref().map(headroom_engine::worker::PeerTurn::report),
            },
        }
    }
}

/// What every response and chunk of one completion shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// The non-streamed response.
pub fn completion(meta: &Meta, answer: &Answer, reason: FinishReason, usage: &Usage) -> Value {
    let mut message = serde_json::json!({ "role": "assistant", "content": answer.content });
    if !answer.reasoning.is_empty() {
        message["reasoning_content"] = Value::from(answer.reasoning.as_str());
    }
    if !answer.calls.is_empty() {
        // OpenAI sends null content beside calls when the model said nothing.
        if answer.content.is_empty() {
            message["content"] = Value::Null;
        }
        message["tool_calls"] = answer
            .calls
            .iter()
            .map(|c| {
                serde_json::json!({
                    "id": c.id, "type": "function",
                    "function": { "name": c.name, "arguments": c.arguments },
                })
            })
            .collect();
    }
    serde_json::json!({
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(reason, !answer.calls.is_empty()),
        }],
        "usage": usage,
    })
}

/// One streamed chunk: a delta, or (with `usage`) the closing usage chunk with no choices.
pub fn chunk(meta: &Meta, delta: &Value, reason: Option<&'static str>) -> Value {
    serde_json::json!({
        "id": meta.id,
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "delta": delta,
            "logprobs": null,
            "finish_reason": reason,
        }],
    })
}

pub fn usage_chunk(meta: &Meta, usage: &Usage) -> Value {
    serde_json::json!({
        "id": meta.id,
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "choices": [],
        "usage": usage,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(v: &Value) -> Result<ChatRequest, ApiError> {
        parse_request(v.to_string().as_bytes(), 64)
    }

    fn err(v: &Value) -> ApiError {
        parse(v).expect_err("accepted")
    }

    #[test]
    fn a_full_request_maps_onto_the_engine_request() {
        let r = parse(&json!({
            "model": "m",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},
                {"role": "assistant", "content": null},
                {"role": "user", "content": "again"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_completion_tokens": 7,
            "temperature": 0,
            "top_p": 0.5,
            "seed": 3,
            "n": 1,
            "stop": null,
            "user": "ignored",
        }))
        .unwrap();
        assert_eq!((r.model.as_str(), r.stream, r.include_usage), ("m", true, true));
        let g = &r.generate;
        assert_eq!(g.max_tokens, 7);
        assert_eq!((g.sampling.temperature, g.sampling.top_p, g.sampling.seed), (0.0, 0.5, Some(3)));
        assert_eq!(g.overflow, OverflowPolicy::Error);
        let roles: Vec<Role> = g.messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::User]);
        assert_eq!(g.messages[1].content, "Hello");

        let r = parse(&json!({"model": "m", "messages": [{"role": "user", "content": "x"}]})).unwrap();
        assert_eq!((r.stream, r.include_usage, r.generate.max_tokens), (false, false, 64));
        assert_eq!(r.generate.sampling.temperature, 1.0);
    }

    #[test]
    fn answers_with_calls_and_reasoning_take_openais_shape() {
        use headroom_core::chat_format::{StreamSplitter, ThinkTags, ToolFormat};
        let meta = Meta { id: "chatcmpl-ab0001".into(), created: 1, model: "m".into() };
        let tools = vec![Tool { name: "now".into(), description: None, parameters: json!({}) }];
        let think = ThinkTags { open: "<think>".into(), close: "</think>".into(), starts_inside: false };
        let mut s = StreamSplitter::new(Some(ToolFormat::Hermes), tools, Some(think));
        let mut deltas = s.push("<think>hm</think>\n\n<tool_call>\n{\"name\": \"now\"}\n</tool_call>");
        deltas.extend(s.finish());
        let answer = Answer::from_deltas(&meta, deltas.clone());
        let usage = Usage {
            prompt_tokens: 1,
            completion_tokens: 1,
            total_tokens: 2,
            prompt_tokens_details: PromptTokensDetails { cached_tokens: 0 },
            headroom: HeadroomStats {
                ttft_ms: None,
                prefill_tps: None,
                decode_tps: None,
                e2e_tps: None,
                context_tokens: 1,
                reused_tokens: 0,
                reused_from: "none",
                batch: 1,
                peak_memory_bytes: 0,
                kv_cache: "bf16".into(),
                two_macs: None,
            },
        };
        let v = completion(&meta, &answer, FinishReason::Stop, &usage);
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], Value::Null);
        assert_eq!(choice["message"]["reasoning_content"], "hm");
        assert_eq!(
            choice["message"]["tool_calls"],
            json!([{"id": "call_ab0001_0", "type": "function", "function": {"name": "now", "arguments": "{}"}}])
        );
        // Out of tokens mid-call is still "length".
        assert_eq!(completion(&meta, &answer, FinishReason::Length, &usage)["choices"][0]["finish_reason"], "length");
        // Streamed: reasoning and the call as their own deltas.
        let shapes: Vec<Value> = deltas.iter().map(|d| delta_json(&meta, d)).collect();
        assert_eq!(shapes[0], json!({"reasoning_content": "hm"}));
        assert_eq!(
            shapes[1],
            json!({"tool_calls": [{"index": 0, "id": "call_ab0001_0", "type": "function",
                "function": {"name": "now", "arguments": "{}"}}]})
        );
        assert_eq!(shapes.len(), 2);
        let plain = Answer::from_deltas(&meta, [Delta::Content("hi".into())]);
        let v = completion(&meta, &plain, FinishReason::Stop, &usage);
        assert_eq!(
            (v["choices"][0]["finish_reason"].as_str(), v["choices"][0]["message"].get("tool_calls")),
            (Some("stop"), None)
        );
    }

    #[test]
    fn tools_tool_turns_and_thinking_switches_parse() {
        let body = json!({
            "model": "m",
            "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "12 C"}
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Now",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": false,
            "stop": "END",
            "reasoning_effort": "none",
            "chat_template_kwargs": {"custom": 1},
            "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": true}},
        });
        let r = parse(&body).expect("accepted");
        assert_eq!(r.generate.tool_choice, ToolChoice::Named("get_weather".into()));
        assert!(!r.generate.parallel_tool_calls);
        assert_eq!(r.generate.stop, ["END"]);
        assert_eq!(
            r.response_format,
            ResponseFormat::JsonSchema { name: "w".into(), schema: json!({"type": "object"}), strict: true }
        );
        let g = &r.generate;
        assert_eq!(g.tools.len(), 1);
        assert_eq!(g.tools[0].description.as_deref(), Some("Now"));
        // reasoning_effort none: thinking off, applied with the model's setting.
        assert_eq!(r.think, Some(Think::Off));
        assert_eq!(g.template_kwargs.get("custom"), Some(&json!(1)));
        let calls = &g.messages[1].tool_calls;
        assert_eq!((calls[0].id.as_str(), calls[0].arguments.as_str()), ("c1", r#"{"city": "Oslo"}"#));
        assert_eq!((calls[1].id.as_str(), calls[1].arguments.as_str()), ("call_1_1", r#"{"city":"Rome"}"#));
        assert_eq!((g.messages[2].role, g.messages[2].tool_call_id.as_deref()), (Role::Tool, Some("c1")));
        // A kwarg the client set wins over reasoning_effort for the template.
        let mut b = body.clone();
        b["chat_template_kwargs"] = json!({"enable_thinking": true});
        let mut r = parse(&b).expect("accepted");
        headroom_core::thinking::apply(r.think, None, true, &mut r.generate.template_kwargs);
        assert_eq!(r.generate.template_kwargs["enable_thinking"], json!(true));
        // Each effort has its budget.
        for (effort, think) in [("low", Think::Budget(1024)), ("medium", Think::Budget(4096)), ("high", Think::On)] {
            b["reasoning_effort"] = json!(effort);
            assert_eq!(parse(&b).expect("accepted").think, Some(think), "{effort}");
        }
        b["reasoning_effort"] = json!("none");
        // tool_choice none: the tools are not shown at all.
        b["tool_choice"] = json!("none");
        assert!(parse(&b).expect("accepted").generate.tools.is_empty());
    }

    #[test]
    fn each_bad_field_is_named() {
        let user = json!([{"role": "user", "content": "x"}]);
        let e = parse_request(b"{\"model\": \"m\", ", 8).expect_err("accepted");
        assert!(e.message.starts_with("We could not parse the JSON body"), "{}", e.message);
        assert_eq!((e.status.as_u16(), e.param.clone()), (400, None));
        assert_eq!(err(&json!([1])).message, "The request body must be a JSON object.");
        let weather = json!({"type": "function", "function": {"name": "get_weather"}});
        let cases = [
            (json!({"messages": user}), "model", "missing_required_parameter"),
            (json!({"model": "m"}), "messages", "missing_required_parameter"),
            (json!({"model": "m", "messages": []}), "messages", "empty_array"),
            (json!({"model": "m", "messages": [{"content": "x"}]}), "messages[0].role", "missing_required_parameter"),
            (
                json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]}),
                "messages[0].role",
                "invalid_value",
            ),
            (
                json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}),
                "messages[0].tool_call_id",
                "missing_required_parameter",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": []}, {"role": "user", "content": "y", "tool_calls": [{"function": {"name": "f"}}]}]}),
                "messages[1].tool_calls",
                "invalid_value",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user"}]}),
                "messages[0].content",
                "missing_required_parameter",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
                "messages[0].content[0].type",
                "unsupported_parameter",
            ),
            (json!({"model": "m", "messages": user, "temperature": 2.5}), "temperature", "invalid_value"),
            (json!({"model": "m", "messages": user, "top_p": 0}), "top_p", "invalid_value"),
            (json!({"model": "m", "messages": user, "max_tokens": 0}), "max_tokens", "invalid_value"),
            (json!({"model": "m", "messages": user, "n": 2}), "n", "unsupported_parameter"),
            (json!({"model": "m", "messages": user, "stop": ["a", "b", "c", "d", "e"]}), "stop", "invalid_value"),
            (json!({"model": "m", "messages": user, "stop": [""]}), "stop", "invalid_value"),
            (json!({"model": "m", "messages": user, "stop": 5}), "stop", "invalid_value"),
            (
                json!({"model": "m", "messages": user, "tools": [{"type": "function"}]}),
                "tools[0].function",
                "missing_required_parameter",
            ),
            (
                json!({"model": "m", "messages": user, "tools": [{"type": "retrieval"}]}),
                "tools[0].type",
                "unsupported_parameter",
            ),
            (
                json!({"model": "m", "messages": user, "tools": [weather.clone(), weather.clone()]}),
                "tools[1].function.name",
                "invalid_value",
            ),
            (
                json!({"model": "m", "messages": user, "tools": [{"type": "function", "function": {"name": "a b"}}]}),
                "tools[0].function.name",
                "invalid_value",
            ),
            (
                json!({"model": "m", "messages": user, "tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}),
                "tools[0].function.parameters",
                "invalid_value",
            ),
            (
                json!({"model": "m", "messages": user, "tools": [weather.clone()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
                "tool_choice",
                "invalid_value",
            ),
            (json!({"model": "m", "messages": user, "tool_choice": "required"}), "tool_choice", "invalid_value"),
            (json!({"model": "m", "messages": user, "tool_choice": "sometimes"}), "tool_choice", "invalid_value"),
            (
                json!({"model": "m", "messages": user, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
                "response_format.json_schema.schema",
                "missing_required_parameter",
            ),
            (
                json!({"model": "m", "messages": user, "response_format": {"type": "yaml"}}),
                "response_format.type",
                "invalid_value",
            ),
            (json!({"model": "m", "messages": user, "reasoning_effort": "max"}), "reasoning_effort", "invalid_value"),
            (
                json!({"model": "m", "messages": user, "chat_template_kwargs": {"messages": []}}),
                "chat_template_kwargs",
                "invalid_value",
            ),
            (
                json!({"model": "m", "messages": user, "chat_template_kwargs": 1}),
                "chat_template_kwargs",
                "invalid_type",
            ),
        ];
        for (body, param, code) in cases {
            let e = err(&body);
            assert_eq!(
                (e.status.as_u16(), e.param.as_deref(), e.code),
                (400, Some(param), Some(code)),
                "{body}: {e:?}"
            );
            assert_eq!(e.kind, "invalid_request_error");
        }
        let e = err(
            &json!({"model": "m", "messages": user, "tools": [weather, {"type": "function", "function": {"name": "a".repeat(65)}}]}),
        );
        assert!(e.message.contains("1 to 64"), "{}", e.message);
        let e = err(&json!({"model": "m", "messages": user, "temperature": "hot"}));
        assert_eq!(e.code, Some("invalid_type"));
        assert!(e.message.contains("invalid type"), "{}", e.message);
    }
}
