//! Errors as OpenAI's API writes them, `{"error":{"message","type","param","code"}}`,
//! with the status official clients map to their exception classes
//! (400 BadRequestError, 401 AuthenticationError, 404 NotFoundError …).

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use headroom_core::fit::{FitReport, Verdict, GIB};
use headroom_engine::grammar::GrammarError;
use headroom_engine::EngineError;
use serde_json::{json, Value};

use crate::error::ProvideError;

/// One error response.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, `server_error` …
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Our own numbers beside OpenAI's four fields (the fit report of a
    /// refusal); boxed, as errors travel by value through every handler.
    pub extra: Option<Box<(&'static str, Value)>>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), kind, param: None, code: None, extra: None }
    }

    /// 400 `invalid_request_error`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    pub fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// 500 `server_error`. Its message comes from inside (the engine, a
    /// load), so the folders it names are cut to their last part: a client
    /// learns what failed, not where this Mac keeps its files.
    pub fn server(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", without_paths(&message.into()))
    }

    /// The JSON body. Its message names paths under the user's home from
    /// `~` (every error the server sends passes here).
    pub fn body(&self) -> Value {
        let mut error = json!({
            "message": headroom_core::terminal::without_home(&self.message),
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        });
        if let (Some(extra), Some(obj)) = (&self.extra, error.as_object_mut()) {
            let (key, value) = &**extra;
            obj.insert((*key).to_owned(), value.clone());
        }
        json!({ "error": error })
    }

    /// How the error reads inside an SSE stream (the status line is gone by then).
    pub fn sse_data(&self) -> String {
        self.body().to_string()
    }
}

fn upper_first(s: &str) -> String {
    let mut chars = s.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// `message` with every absolute path (`/…`, `~/…`) cut to `…/` and its
/// last part. A path may hold spaces (`~/Library/Application Support/…`):
/// a following word that holds a `/` and does not start a path of its own
/// is taken as its continuation. Model ids (`org/name`) and URLs do not
/// start with `/` or `~/`, so they stay.
pub fn without_paths(message: &str) -> String {
    const OPENERS: &str = "`'\"([{<";
    const CLOSERS: &str = "`'\")]}>.,:;";
    let words: Vec<&str> = message.split(' ').collect();
    let starts_path = |w: &str| {
        let rest = w.trim_start_matches(|c| OPENERS.contains(c));
        (rest.starts_with('/') || rest.starts_with("~/")) && rest.matches('/').count() >= 2
    };
    let mut out: Vec<String> = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let word = words[i];
        i += 1;
        if !starts_path(word) {
            out.push(word.to_owned());
            continue;
        }
        let mut path = word.to_owned();
        while let Some(next) = words.get(i).filter(|w| w.contains('/') && !starts_path(w) && !w.contains("://")) {
            path.push(' ');
            path.push_str(next);
            i += 1;
        }
        let body = path.trim_start_matches(|c| OPENERS.contains(c));
        let before = &path[..path.len() - body.len()];
        let inner = body.trim_end_matches(|c| CLOSERS.contains(c));
        let after = &body[inner.len()..];
        let last = inner.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
        out.push(format!("{before}…/{last}{after}"));
    }
    out.join(" ")
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        // Official clients retry 409, 429 and 5xx unless told not to; none of
        // ours gets better by asking again at once (a refusal for memory
        // stays one until the user frees memory).
        response.headers_mut().insert("x-should-retry", HeaderValue::from_static("false"));
        response
    }
}

impl From<ProvideError> for ApiError {
    fn from(e: ProvideError) -> Self {
        match e {
            ProvideError::NotFound { model } => ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("The model `{model}` does not exist. GET /v1/models lists the models on this machine."),
            )
            .param("model")
            .code("model_not_found"),
            ProvideError::WouldNotFit { model, report } => would_not_fit(&model, &report),
            // `server` cuts the folders the reason names.
            ProvideError::LoadFailed { model, reason } => {
                ApiError::server(format!("The model `{model}` could not be loaded: {reason}")).code("model_load_failed")
            }
            e @ ProvideError::KvFormat { .. } => {
                ApiError::invalid(format!("{e}.")).param("kv_group_size").code("invalid_value")
            }
            e @ ProvideError::KvFormatInUse { .. } => ApiError::new(
                StatusCode::CONFLICT,
                "invalid_request_error",
                format!("{e}. Leave out kv_bits to use it as it is."),
            )
            .param("kv_bits")
            .code("kv_format_in_use"),
            e @ ProvideError::ModelInUse { .. } => ApiError::new(
                StatusCode::CONFLICT,
                "invalid_request_error",
                format!("{}.", upper_first(&e.to_string())),
            )
            .param("model")
            .code("model_in_use"),
        }
    }
}

/// 507 Insufficient Storage, not 409 Conflict: the request is fine and
/// nothing about the server's state is in the way that the client could
/// change; this machine lacks the memory (the "storage" of a loaded model)
/// to run it without swapping, which only its user can fix. The numbers are
/// under `error.fit`, in bytes.
fn would_not_fit(model: &str, report: &FitReport) -> ApiError {
    let e = &report.estimate;
    let (over, code) = match report.verdict {
        Verdict::WouldSwap { by_bytes } => (by_bytes, "model_would_swap"),
        Verdict::CannotFit { by_bytes } => (by_bytes, "model_cannot_fit"),
        // A provider refusing a model that fits: still say so with its numbers.
        Verdict::Fits | Verdict::Tight => (0, "model_would_swap"),
    };
    let gb = |b: u64| b as f64 / GIB as f64;
    let mut message = format!(
        "Loading `{model}` would push this machine into swap: it needs {:.2} GB at {} tokens of context \
         ({:.2} GB weights + {:.2} GB KV cache ({}) + {:.2} GB overhead) but the budget is {:.2} GB, {:.2} GB over.",
        gb(e.predicted_peak_bytes),
        e.context_tokens,
        gb(e.weight_bytes),
        gb(e.kv_peak_bytes()),
        report.kv_label,
        gb(e.overhead.total_bytes),
        gb(report.budget.budget_bytes),
        gb(over),
    );
    match report.largest_context_that_fits {
        Some(n) => message.push_str(&format!(" It fits with a context of up to {n} tokens.")),
        None => message.push_str(" It does not fit at any context: free memory or choose a smaller model."),
    }
    let fit = json!({
        "verdict": report.verdict,
        "context_tokens": e.context_tokens,
        "weight_bytes": e.weight_bytes,
        "kv_cache_bytes": e.kv_peak_bytes(),
        "kv_cache": report.kv_label,
        "overhead_bytes": e.overhead.total_bytes,
        "predicted_peak_bytes": e.predicted_peak_bytes,
        "budget_bytes": report.budget.budget_bytes,
        "over_by_bytes": over,
        "largest_context_that_fits": report.largest_context_that_fits,
    });
    ApiError {
        status: StatusCode::INSUFFICIENT_STORAGE,
        message,
        kind: "insufficient_memory",
        param: Some("model".into()),
        code: Some(code),
        extra: Some(Box::new(("fit", fit))),
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::ContextOverflow { prompt_tokens, limit } => ApiError::invalid(format!(
                "This model's maximum context length is {limit} tokens. However, your messages resulted in \
                 {prompt_tokens} tokens. Please reduce the length of the messages."
            ))
            .param("messages")
            .code("context_length_exceeded"),
            EngineError::InvalidSetting { name, .. } => {
                let param = name.to_owned();
                ApiError::invalid(e.to_string()).param(param).code("invalid_value")
            }
            EngineError::EmptyPrompt => ApiError::invalid(e.to_string()).param("messages"),
            // The model's heads cannot be quantized with this group size.
            EngineError::KvFormat { .. } => {
                ApiError::invalid(e.to_string()).param("kv_group_size").code("invalid_value")
            }
            // A tool's schema or a format the model's vocabulary cannot hold
            // (the request's schemas were checked before it was queued).
            EngineError::Grammar(ref g) if !matches!(g, GrammarError::Runtime { .. }) => {
                ApiError::invalid(e.to_string()).param("tools").code("invalid_schema")
            }
            // The template itself refused the conversation (roles out of order, …).
            EngineError::TemplateRender { .. } => {
                ApiError::invalid(e.to_string()).param("messages").code("chat_template")
            }
            // Its message names the model's folder (a path with the user's
            // name in it): a client gets the fact, not the folder.
            EngineError::NoChatTemplate { .. } => ApiError::invalid(
                "This model has no chat template (it is a base model?), so it cannot answer chat messages: \
                 use an instruct or chat model.",
            )
            .param("messages")
            .code("chat_template"),
            EngineError::NoModelLoaded => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "The model was unloaded before this request ran (the app switched models). Send it again.",
            )
            .code("model_not_loaded"),
            // The app switched models between this request's admission and its run.
            EngineError::ModelChanged => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", e.to_string()).code("model_changed")
            }
            EngineError::EngineStopped => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "The engine has stopped: Headroom is shutting down.",
            )
            .code("engine_stopped"),
            other => ApiError::server(format!("The engine failed: {other}")).code("engine_error"),
        }
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::fit::{check, BudgetInputs, ModelFootprint};

    use super::*;

    #[test]
    fn folders_in_a_server_error_are_cut_to_their_last_part() {
        let e = ApiError::server(
            "cannot read /Users/ana/Library/Application Support/app.headroom/models/x/config.json: denied \
             (`/home/ana/m/w.safetensors`, ~/private/notes.gguf.) for org/model at http://127.0.0.1:8080/v1",
        );
        assert_eq!(
            e.message,
            "cannot read …/config.json: denied \
             (`…/w.safetensors`, …/notes.gguf.) for org/model at http://127.0.0.1:8080/v1"
        );
        assert_eq!(without_paths("no path here, /v1 alone"), "no path here, /v1 alone");
    }

    #[test]
    fn a_model_without_a_chat_template_is_400_naming_no_folder() {
        let e = ApiError::from(EngineError::NoChatTemplate { dir: "/Users/ana/models/base-7b".into() });
        assert_eq!((e.status, e.code), (StatusCode::BAD_REQUEST, Some("chat_template")));
        assert!(e.message.contains("no chat template") && !e.message.contains("/Users") && !e.message.contains("ana"));
    }

    #[test]
    fn another_model_while_the_app_holds_one_is_409_model_in_use_naming_both() {
        let e = ApiError::from(ProvideError::ModelInUse { requested: "qwen-14b".into(), loaded: "qwen-7b".into() });
        assert_eq!((e.status, e.code, e.param.as_deref()), (StatusCode::CONFLICT, Some("model_in_use"), Some("model")));
        let body = e.body();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("The model `qwen-7b` is loaded") && message.contains("`qwen-14b`"), "{message}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }

    #[test]
    fn every_body_names_paths_under_home_from_a_tilde() {
        let home = headroom_core::terminal::home_folder().expect("HOME is set where the tests run");
        let e = ApiError::invalid(format!("cannot read {}/models/q/tokenizer.json", home.display()));
        assert_eq!(e.body()["error"]["message"], "cannot read ~/models/q/tokenizer.json");
    }

    #[test]
    fn bodies_have_openais_four_fields_and_no_retry_header() {
        let e = ApiError::invalid("bad").param("temperature").code("invalid_value");
        assert_eq!(
            e.body(),
            json!({"error":{"message":"bad","type":"invalid_request_error","param":"temperature","code":"invalid_value"}})
        );
        let r = ApiError::server("x").into_response();
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(r.headers().get("x-should-retry").and_then(|v| v.to_str().ok()), Some("false"));
        let e = ApiError::from(EngineError::ContextOverflow { prompt_tokens: 300, limit: 256 });
        assert_eq!(
            (e.status, e.code, e.param.as_deref()),
            (StatusCode::BAD_REQUEST, Some("context_length_exceeded"), Some("messages"))
        );
        assert!(e.message.contains("256") && e.message.contains("300"), "{}", e.message);
    }

    #[test]
    fn a_refusal_carries_the_fit_numbers() {
        let model = ModelFootprint {
            weight_bytes: 20 * GIB,
            layers: 48,
            attention_heads: 40,
            kv_heads: 8,
            head_dim: 128,
            hidden_size: 5120,
            intermediate_size: 13824,
            vocab_size: 152_064,
            kv_bytes_per_element: 2,
            max_context: Some(32_768),
            prefill_dequantizes: false,
            kv_layers: vec![headroom_core::fit::KvLayers::full(48, 8, 128)],
            ..ModelFootprint::default()
        };
        let report = check(&model, 8192, headroom_core::kv::KvFormat::Float, BudgetInputs::new(16 * GIB));
        assert!(report.verdict.refuses(), "{:?}", report.verdict);
        let e = ApiError::from(ProvideError::WouldNotFit { model: "big".into(), report: Box::new(report.clone()) });
        assert_eq!((e.status.as_u16(), e.kind, e.param.as_deref()), (507, "insufficient_memory", Some("model")));
        let body = e.body();
        let fit = &body["error"]["fit"];
        assert_eq!(fit["weight_bytes"], 20 * GIB);
        assert_eq!(fit["context_tokens"], 8192);
        assert_eq!(fit["budget_bytes"], report.budget.budget_bytes);
        assert_eq!(fit["predicted_peak_bytes"], report.estimate.predicted_peak_bytes);
        let (Verdict::WouldSwap { by_bytes } | Verdict::CannotFit { by_bytes }) = report.verdict else {
            unreachable!()
        };
        assert_eq!(fit["over_by_bytes"], by_bytes);
        assert!(
            body["error"]["message"].as_str().is_some_and(|m| m.contains("`big`") && m.contains("GB over")),
            "{body}"
        );
        assert_eq!(
            body["error"]["code"],
            if fit["verdict"]["kind"] == "cannot_fit" { "model_cannot_fit" } else { "model_would_swap" }
        );
    }
}
