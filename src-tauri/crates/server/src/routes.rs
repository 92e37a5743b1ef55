//! The HTTP surface: `/v1/models`, `/v1/chat/completions`, and the guard
//! every request passes first (Host for loopback servers, the API key when
//! one is set).

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::sse::Sse;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use headroom_engine::worker::{EngineEvent, EngineHandle, GenerateRequest};
use serde_json::{json, Value};

use headroom_core::chat_format::StreamSplitter;

use crate::api::{completion, parse_request, ChatRequest, Meta};
use crate::api_error::ApiError;
use crate::config::ServeConfig;
use crate::provider::{ModelCard, ModelProvider};
use crate::run::{bridge, ended_early, gather, CompletionStream, Gathered, RunGuard, Tally};

/// What the handlers share.
#[derive(Clone)]
pub struct Ctx {
    pub engine: EngineHandle,
    pub provider: Arc<dyn ModelProvider>,
    pub config: Arc<ServeConfig>,
    /// Held from "make the model ready" until its run is queued, so another
    /// request's load cannot slip in between (the engine runs jobs in order).
    pub turn: Arc<tokio::sync::Mutex<()>>,
    /// Places for chat completions (`ServeConfig::max_requests`), running or queued.
    pub admission: Arc<tokio::sync::Semaphore>,
    pub tally: Arc<Tally>,
    /// Only Host headers naming a loopback address are served.
    pub loopback_only: bool,
    /// Makes completion ids unique across restarts (run ids start at 0).
    pub epoch: u64,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").field("loopback_only", &self.loopback_only).finish_non_exhaustive()
    }
}

pub fn router(ctx: Ctx) -> Router {
    Router::new()
        .route("/v1/models", get(list_models))
        // Repo ids hold a slash (org/name).
        .route("/v1/models/{*id}", get(get_model))
        .route("/v1/chat/completions", post(chat))
        .fallback(unknown_url)
        .method_not_allowed_fallback(wrong_method)
        .layer(middleware::from_fn_with_state(ctx.clone(), guard))
        .with_state(ctx)
}

async fn guard(State(ctx): State<Ctx>, mut request: Request, next: Next) -> Response {
    let tenant =
        match check_host(ctx.loopback_only, request.headers()).and_then(|()| check_key(&ctx, request.headers())) {
            Ok(tenant) => tenant,
            Err(e) => return e.into_response(),
        };
    request.extensions_mut().insert(tenant);
    next.run(request).await
}

/// Whose prompt-cache partition a request reads and writes: its API key's
/// (`None` on a server without keys).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tenant(pub Option<String>);

impl Tenant {
    /// A key's partition name: a hash of the key, so the key itself is not
    /// copied into the engine's cache, and the same key names the same
    /// partition whichever order the keys were given in.
    fn of(key: &str) -> Self {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        Self(Some(format!("api-key-{:016x}", h.finish())))
    }
}

/// A page on any website can make the browser send requests to
/// 127.0.0.1; with DNS rebinding it can even read the answers. Its requests
/// name the attacker's host, so a loopback server answers only requests
/// addressed to a loopback name.
fn check_host(loopback_only: bool, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(host) = headers.get(header::HOST) else { return Ok(()) };
    if !loopback_only {
        return Ok(());
    }
    let host = host.to_str().unwrap_or_default();
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.split(':').next().unwrap_or_default(),
    };
    let loopback = name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if loopback {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "invalid_request_error",
            format!("This server only answers requests addressed to localhost, not `{host}`."),
        )
        .code("host_not_allowed"))
    }
}

/// The tenant of the key the request sent, if it is one of the server's
/// (none needed on a server without keys).
fn check_key(ctx: &Ctx, headers: &HeaderMap) -> Result<Tenant, ApiError> {
    let keys = &ctx.config.api_keys;
    if keys.is_empty() {
        return Ok(Tenant::default());
    }
    let given =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    // Every key is compared, whichever matches: the time says nothing of which.
    let matched = given.and_then(|given| {
        keys.iter()
            .fold(None, |found, key| if same(given.trim().as_bytes(), key.as_bytes()) { Some(key) } else { found })
    });
    match (given, matched) {
        (None, _) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "You didn't provide an API key. Send it in an Authorization header using Bearer auth \
             (Authorization: Bearer YOUR_KEY).",
        )
        .code("missing_api_key")),
        (Some(_), Some(key)) => Ok(Tenant::of(key)),
        (Some(_), None) => {
            Err(ApiError::new(StatusCode::UNAUTHORIZED, "invalid_request_error", "Incorrect API key provided.")
                .code("invalid_api_key"))
        }
    }
}

/// Compares in time that depends on the lengths only, not on where they
/// differ (`subtle`'s constant-time equality).
fn same(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(a.ct_eq(b))
}

async fn unknown_url(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("Invalid URL ({method} {}): this server has GET /v1/models and POST /v1/chat/completions.", uri.path()),
    )
    .code("unknown_url")
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        format!("{} does not accept {method}.", uri.path()),
    )
    .code("method_not_allowed")
}

fn card(c: &ModelCard) -> Value {
    json!({ "id": c.id, "object": "model", "created": c.created, "owned_by": c.owned_by })
}

async fn cards(ctx: &Ctx) -> Result<Vec<ModelCard>, ApiError> {
    let provider = Arc::clone(&ctx.provider);
    // Listing reads folders: off the async threads.
    tokio::task::spawn_blocking(move || provider.models())
        .await
        .map_err(|e| ApiError::server(format!("Listing the models stopped unexpectedly: {e}")))
}

async fn list_models(State(ctx): State<Ctx>) -> Result<Json<Value>, ApiError> {
    let cards = cards(&ctx).await?;
    Ok(Json(json!({ "object": "list", "data": cards.iter().map(card).collect::<Vec<_>>() })))
}

async fn get_model(State(ctx): State<Ctx>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let cards = cards(&ctx).await?;
    match cards.iter().find(|c| c.id == id) {
        Some(c) => Ok(Json(card(c))),
        None => Err(crate::error::ProvideError::NotFound { model: id }.into()),
    }
}

/// The largest request body read (a long conversation is well under it).
pub const MAX_BODY_BYTES: usize = 8 << 20;
/// How long a client has to send its whole body once its headers are in.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// What a 429 asks the client to wait: about one short answer.
const RETRY_AFTER_SECS: u64 = 2;

async fn chat(State(ctx): State<Ctx>, request: Request) -> Response {
    // Admission first, before the body is read: a full queue costs nothing.
    let admitted = Arc::clone(&ctx.admission).try_acquire_owned();
    // Counted once admission is decided, so a count of n says n requests
    // hold a place or were refused (tests wait on it instead of sleeping).
    ctx.tally.requests.fetch_add(1, Ordering::Relaxed);
    let Ok(permit) = admitted else {
        ctx.tally.refused.fetch_add(1, Ordering::Relaxed);
        let mut response = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            format!(
                "This server runs one answer at a time and already has {} requests running or waiting. Retry after {RETRY_AFTER_SECS} s.",
                ctx.config.max_requests
            ),
        )
        .code("server_busy")
        .into_response();
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        response.headers_mut().insert("x-should-retry", HeaderValue::from_static("true"));
        return response;
    };
    let (parts, body) = request.into_parts();
    let tenant = parts.extensions.get::<Tenant>().cloned().unwrap_or_default();
    // A declared length over the limit is refused before a byte is read.
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let body =
        if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) { Err(too_large()) } else { read_body(body).await };
    match chat_response(&ctx, &parts.headers, body, tenant, permit).await {
        Ok(response) => response,
        Err(e) => {
            tracing::debug!(status = e.status.as_u16(), code = e.code, "{}", e.message);
            e.into_response()
        }
    }
}

/// The whole body, within [`BODY_TIMEOUT`] and [`MAX_BODY_BYTES`].
async fn read_body(body: axum::body::Body) -> Result<Bytes, ApiError> {
    match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if is_too_large(&e) => Err(too_large()),
        Ok(Err(e)) => Err(ApiError::invalid(format!("The request body could not be read: {e}."))),
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!("The request body did not arrive within {} s.", BODY_TIMEOUT.as_secs()),
        )
        .code("body_timeout")),
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "invalid_request_error",
        format!("The request body is over {} MB.", MAX_BODY_BYTES >> 20),
    )
    .code("body_too_large")
}

/// Whether reading the body stopped at [`MAX_BODY_BYTES`].
fn is_too_large(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

async fn chat_response(
    ctx: &Ctx,
    headers: &HeaderMap,
    body: Result<Bytes, ApiError>,
    tenant: Tenant,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Result<Response, ApiError> {
    // Requiring JSON also keeps browsers from posting here without a CORS
    // preflight (which this server never approves).
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !content_type.to_ascii_lowercase().starts_with("application/json") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            format!("Send the body as JSON with Content-Type: application/json (got `{content_type}`)."),
        )
        .code("unsupported_media_type"));
    }
    let body = body?;
    let request = parse_request(&body, ctx.config.default_max_tokens)?;
    let ChatRequest { model, stream, include_usage, mut generate, think, .. } = request;
    // The answer is read for calls to these, whatever the template did with them.
    let tools = generate.tools.clone();
    generate.speculative = ctx.config.speculative;
    generate.tenant = tenant.0;

    let run = {
        let _turn = ctx.turn.lock().await;
        let provider = Arc::clone(&ctx.provider);
        let context_limit = ctx.config.context_limit;
        let kv = generate.kv;
        let ready = tokio::task::spawn_blocking(move || provider.ensure_loaded(&model, context_limit, kv))
            .await
            .map_err(|e| ApiError::server(format!("Loading the model stopped unexpectedly: {e}")))??;
        // The request's reasoning_effort over the model's own setting.
        let thinking = headroom_core::thinking::apply(think, ready.think, ready.thinks, &mut generate.template_kwargs);
        let run = ctx.engine.generate(GenerateRequest { load: Some(ready.load), thinking, ..generate })?;
        (ready, run)
    };
    let (ready, run) = run;
    let mut guard = RunGuard::new(ctx.engine.clone(), run.id, Arc::clone(&ctx.tally));
    guard.hold(permit);
    let meta = Meta { id: format!("chatcmpl-{:x}{:04x}", ctx.epoch, run.id.0), created: unix_now(), model: ready.id };
    let mut rx = bridge(run, ctx.engine.clone());

    // Wait for the run to start before answering: a prompt over the context
    // limit (or any refusal) then gets its own status, streamed or not.
    let format = match rx.recv().await {
        Some(EngineEvent::Started { format, .. }) => format,
        Some(EngineEvent::Error(e)) => {
            guard.finish();
            return Err(e.into());
        }
        Some(EngineEvent::Finished { reason }) => {
            guard.finish();
            return Err(ended_early(Some(reason)));
        }
        Some(other) => {
            guard.finish();
            return Err(ApiError::server(format!("The engine sent {other:?} before starting the run.")));
        }
        None => {
            guard.finish();
            return Err(ended_early(None));
        }
    };
    let splitter = StreamSplitter::new(Some(format.tools), tools, format.think);
    if stream {
        return Ok(Sse::new(CompletionStream::new(rx, guard, meta, include_usage, splitter)).into_response());
    }
    let gathered = gather(&mut rx, splitter, &meta).await;
    guard.finish();
    match gathered {
        Gathered::Done { answer, reason, usage } => {
            Ok(Json(completion(&meta, &answer, reason, &usage)).into_response())
        }
        Gathered::Failed(e) => Err(e),
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn host(h: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(h).unwrap());
        headers
    }

    #[test]
    fn a_loopback_server_answers_only_loopback_host_names() {
        for ok in ["localhost", "LOCALHOST:8080", "127.0.0.1:1234", "127.1.2.3", "[::1]:8080", "[::1]"] {
            assert!(check_host(true, &host(ok)).is_ok(), "{ok}");
        }
        for bad in ["evil.example:8080", "192.168.1.2:8080", "[fe80::1]:80", "localhost.evil.example"] {
            let e = check_host(true, &host(bad)).err().unwrap_or_else(|| panic!("{bad} passed"));
            assert_eq!((e.status, e.code), (StatusCode::FORBIDDEN, Some("host_not_allowed")), "{bad}");
        }
        assert!(check_host(false, &host("evil.example")).is_ok(), "a remote server names itself as it likes");
        assert!(check_host(true, &HeaderMap::new()).is_ok(), "HTTP/1.0 sends no Host");
    }

    #[test]
    fn keys_compare_whole() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }
}
