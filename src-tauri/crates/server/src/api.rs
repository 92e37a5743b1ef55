//! The OpenAI wire format: parsing and checking a chat-completions request
//! into an engine request, and the response, chunk and usage objects.

use headroom_core::chat::{FinishReason, Message, Role};
use headroom_core::kv::{KvFormat, KvFormatError};
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
    functions: Option<Value>,
    logprobs: Option<bool>,
    response_format: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct RawStreamOptions {
    include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct RawMessage {
    role: Option<String>,
    content: Option<RawContent>,
}

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
    pub generate: GenerateRequest,
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
    if present(raw.stop.as_ref()) {
        return Err(unsupported("stop", "stop sequences are not implemented yet"));
    }
    if present(raw.tools.as_ref()) || present(raw.functions.as_ref()) {
        return Err(unsupported("tools", "tool calling is not implemented"));
    }
    if raw.logprobs == Some(true) {
        return Err(unsupported("logprobs", "log probabilities are not returned"));
    }
    if let Some(format) = raw.response_format.as_ref().filter(|f| !f.is_null()) {
        if format.get("type").and_then(Value::as_str) != Some("text") {
            return Err(unsupported("response_format", "only {\"type\": \"text\"} is available"));
        }
    }

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
    Ok(ChatRequest {
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
            constraint: None,
            stop: Vec::new(),
            thinking: None,
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
        Some(other @ ("tool" | "function")) => {
            return Err(unsupported(&format!("messages[{i}].role"), &format!("'{other}' messages need tool calling")))
        }
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "Invalid value for 'messages[{i}].role': '{other}'. Supported: system, developer, user, assistant."
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
    Ok(Message::new(role, content))
}

/// OpenAI's finish reasons; a cancelled run never reaches a client as a
/// finished one (it is an error, or the client is gone).
pub fn finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop | FinishReason::Cancelled => "stop",
        FinishReason::Length => "length",
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
pub fn completion(meta: &Meta, text: &str, reason: FinishReason, usage: &Usage) -> Value {
    serde_json::json!({
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": text },
            "logprobs": null,
            "finish_reason": finish_reason(reason),
        }],
        "usage": usage,
    })
}

/// One streamed chunk: a delta, or (with `usage`) the closing usage chunk with no choices.
pub fn chunk(meta: &Meta, delta: &Value, reason: Option<FinishReason>) -> Value {
    serde_json::json!({
        "id": meta.id,
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "delta": delta,
            "logprobs": null,
            "finish_reason": reason.map(finish_reason),
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
    fn each_bad_field_is_named() {
        let user = json!([{"role": "user", "content": "x"}]);
        let e = parse_request(b"{\"model\": \"m\", ", 8).expect_err("accepted");
        assert!(e.message.starts_with("We could not parse the JSON body"), "{}", e.message);
        assert_eq!((e.status.as_u16(), e.param.clone()), (400, None));
        assert_eq!(err(&json!([1])).message, "The request body must be a JSON object.");
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
                "messages[0].role",
                "unsupported_parameter",
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
            (json!({"model": "m", "messages": user, "stop": ["\n"]}), "stop", "unsupported_parameter"),
            (
                json!({"model": "m", "messages": user, "tools": [{"type": "function"}]}),
                "tools",
                "unsupported_parameter",
            ),
            (
                json!({"model": "m", "messages": user, "response_format": {"type": "json_object"}}),
                "response_format",
                "unsupported_parameter",
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
        let e = err(&json!({"model": "m", "messages": user, "temperature": "hot"}));
        assert_eq!(e.code, Some("invalid_type"));
        assert!(e.message.contains("invalid type"), "{}", e.message);
    }
}
