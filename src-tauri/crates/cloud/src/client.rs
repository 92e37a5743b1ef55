//! The HTTP side: one streamed `/chat/completions` turn (retries, timeouts,
//! cancellation, SSE decoding) and `/models`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::{Duration, Instant};

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use headroom_core::chat::FinishReason;
use headroom_core::gate::GatedMessages;
use reqwest::header::{HeaderMap, ACCEPT, RETRY_AFTER};
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{redact_url, ApiKey, CloudConfig, RetryPolicy, Timeouts};
use crate::error::{CloudError, Result, TimeoutPhase};
use crate::stats::{CloudStats, Usage};

/// How much of an error body goes into a message.
const BODY_EXCERPT_CHARS: usize = 300;

/// Sampling settings sent with a turn; `None` leaves the server's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatParams {
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
}

/// What a streamed turn reports, in order: `Started`, `Token`s, at most one
/// `Usage`, `Finished`; or an error, which ends the stream.
#[derive(Debug, Clone, PartialEq)]
pub enum CloudEvent {
    /// The server accepted the request (HTTP 200) on attempt `attempts`.
    Started {
        attempts: u32,
    },
    Token {
        text: String,
    },
    /// The token counts the server reported.
    Usage(Usage),
    Finished {
        reason: FinishReason,
        /// The server's own word when it is not plain "stop"/"length"
        /// ("tool_calls", "content_filter" …).
        server_reason: Option<String>,
        stats: CloudStats,
    },
}

/// A client for one endpoint. Cheap to clone (reqwest pools connections).
#[derive(Debug, Clone)]
pub struct CloudClient {
    http: reqwest::Client,
    config: CloudConfig,
}

impl CloudClient {
    pub fn new(config: CloudConfig) -> Result<Self> {
        config.normalized_base_url()?;
        if config.model.trim().is_empty() {
            return Err(CloudError::InvalidConfig { what: "the model name is empty".into() });
        }
        // No redirects: a POST carries the approved conversation, and a 307/308
        // would send it on to wherever the server says (status_error names it).
        let http = reqwest::Client::builder()
            .connect_timeout(config.timeouts.connect)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(CloudError::Client)?;
        Ok(Self { http, config })
    }

    pub fn config(&self) -> &CloudConfig {
        &self.config
    }

    /// The model ids `GET {base}/models` lists.
    pub async fn list_models(&self) -> Result<Vec<String>> {
        #[derive(Deserialize)]
        struct Models {
            data: Vec<ModelEntry>,
        }
        #[derive(Deserialize)]
        struct ModelEntry {
            id: String,
        }
        let url = self.config.endpoint("models")?;
        let mut req = self.http.get(&url);
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key.expose());
        }
        let timeout = self.config.timeouts.response;
        let resp = match tokio::time::timeout(timeout, req.send()).await {
            Err(_) => {
                return Err(CloudError::Timeout {
                    url: redact_url(&url),
                    phase: TimeoutPhase::Response,
                    after: timeout,
                })
            }
            Ok(Err(e)) => return Err(send_error(&url, &e, timeout)),
            Ok(Ok(resp)) => resp,
        };
        let status = resp.status();
        if status.is_redirection() {
            return Err(redirected(&url, &resp));
        }
        if !status.is_success() {
            let body = body_excerpt(resp, timeout).await;
            return Err(status_error(&url, &self.config.model, status, 1, body));
        }
        let text = tokio::time::timeout(timeout, resp.text())
            .await
            .map_err(|_| CloudError::Timeout { url: redact_url(&url), phase: TimeoutPhase::Idle, after: timeout })?
            .map_err(|e| CloudError::Connect { url: redact_url(&url), detail: error_chain(&e) })?;
        let models: Models = serde_json::from_str(&text).map_err(|e| CloudError::BadResponse {
            url: redact_url(&url),
            what: format!("not a model list ({e}): {}", excerpt(&text)),
        })?;
        Ok(models.data.into_iter().map(|m| m.id).collect())
    }

    /// Streams one chat turn. Nothing is sent until the stream is first
    /// polled; dropping the stream closes the connection; `cancel` ends it
    /// with `Finished { reason: Cancelled }` (keeping the text so far).
    /// The messages are [`GatedMessages`]: only the privacy gate
    /// (`headroom_core::gate`) makes them, so nothing reaches an endpoint
    /// without having passed it.
    pub fn chat_stream(
        &self,
        messages: &GatedMessages,
        params: &ChatParams,
        cancel: CancellationToken,
    ) -> impl Stream<Item = Result<CloudEvent>> + Send + 'static {
        let run = match self.config.endpoint("chat/completions") {
            Ok(url) => Run {
                http: self.http.clone(),
                url,
                model: self.config.model.clone(),
                key: self.config.api_key.clone(),
                body: request_body(&self.config.model, messages, params),
                timeouts: self.config.timeouts,
                retry: self.config.retry,
                cancel,
                phase: Phase::Connect,
                queue: VecDeque::new(),
                acc: Accounting::default(),
            },
            Err(e) => Run::failed(e, cancel, self.http.clone()),
        };
        futures_util::stream::unfold(run, |mut run| async move {
            let item = run.next_item().await?;
            Some((item, run))
        })
    }
}

/// The JSON body of a streamed chat request. Usage is asked for so that
/// tok/s come from the server's own token counts, not from chunk counts.
pub fn request_body(model: &str, messages: &GatedMessages, params: &ChatParams) -> Value {
    let mut body = serde_json::json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": { "include_usage": true },
    });
    let extra = [
        ("max_tokens", params.max_tokens.map(Value::from)),
        ("temperature", params.temperature.map(Value::from)),
        ("top_p", params.top_p.map(Value::from)),
        ("seed", params.seed.map(Value::from)),
    ];
    if let Some(obj) = body.as_object_mut() {
        for (name, value) in extra {
            if let Some(v) = value {
                obj.insert(name.to_owned(), v);
            }
        }
    }
    body
}

type SseStream = Pin<Box<dyn Stream<Item = std::result::Result<Event, EventStreamError<reqwest::Error>>> + Send>>;

enum Phase {
    Connect,
    Streaming(SseStream),
    Done,
}

/// What the stream has seen so far: the stats come from here.
#[derive(Debug, Default)]
struct Accounting {
    started: Option<Instant>,
    attempts: u32,
    /// SSE events seen (1-based position for error messages).
    events: usize,
    /// Chunks that carried text.
    chunks: usize,
    first_token_at: Option<Duration>,
    last_token_at: Option<Duration>,
    usage: Option<Usage>,
    finish: Option<String>,
}

struct Run {
    http: reqwest::Client,
    url: String,
    model: String,
    key: Option<ApiKey>,
    body: Value,
    timeouts: Timeouts,
    retry: RetryPolicy,
    cancel: CancellationToken,
    phase: Phase,
    queue: VecDeque<Result<CloudEvent>>,
    acc: Accounting,
}

enum Connected {
    Stream(reqwest::Response),
    Cancelled,
}

impl Run {
    fn failed(e: CloudError, cancel: CancellationToken, http: reqwest::Client) -> Self {
        Self {
            http,
            url: String::new(),
            model: String::new(),
            key: None,
            body: Value::Null,
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
            cancel,
            phase: Phase::Done,
            queue: VecDeque::from([Err(e)]),
            acc: Accounting::default(),
        }
    }

    async fn next_item(&mut self) -> Option<Result<CloudEvent>> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Done => return None,
                Phase::Connect => match self.connect().await {
                    Ok(Connected::Stream(resp)) => {
                        self.queue.push_back(Ok(CloudEvent::Started { attempts: self.acc.attempts }));
                        self.phase = Phase::Streaming(Box::pin(resp.bytes_stream().eventsource()));
                    }
                    Ok(Connected::Cancelled) => self.finish(FinishReason::Cancelled, None),
                    Err(e) => self.queue.push_back(Err(e)),
                },
                Phase::Streaming(mut events) => {
                    if self.step(&mut events).await {
                        self.phase = Phase::Streaming(events);
                    }
                }
            }
        }
    }

    /// Sends the request, retrying 429/5xx with backoff, until a 200 answer.
    async fn connect(&mut self) -> Result<Connected> {
        let started = Instant::now();
        // TTFT counts from the first attempt: retries are time the user waits.
        self.acc.started = Some(started);
        loop {
            self.acc.attempts += 1;
            let mut req = self.http.post(&self.url).header(ACCEPT, "text/event-stream").json(&self.body);
            if let Some(key) = &self.key {
                req = req.bearer_auth(key.expose());
            }
            let wait = self.timeouts.response;
            let sent = tokio::select! {
                () = self.cancel.cancelled() => return Ok(Connected::Cancelled),
                sent = tokio::time::timeout(wait, req.send()) => sent,
            };
            let resp = match sent {
                Err(_) => {
                    return Err(CloudError::Timeout {
                        url: redact_url(&self.url),
                        phase: TimeoutPhase::Response,
                        after: wait,
                    })
                }
                Ok(Err(e)) => return Err(send_error(&self.url, &e, wait)),
                Ok(Ok(resp)) => resp,
            };
            let status = resp.status();
            if status.is_success() {
                return Ok(Connected::Stream(resp));
            }
            if status.is_redirection() {
                return Err(redirected(&self.url, &resp));
            }
            let retriable = status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
            let retries_done = self.acc.attempts - 1;
            let retry_after = retry_after(resp.headers());
            let body = body_excerpt(resp, wait).await;
            if !retriable || retries_done >= self.retry.max_retries {
                return Err(status_error(&self.url, &self.model, status, self.acc.attempts, body));
            }
            let delay = match retry_after {
                // A server that asks for a longer pause than we would wait
                // gets a clear error now instead of a frozen chat.
                Some(d) if d > self.retry.max_delay => {
                    return Err(CloudError::RateLimited {
                        url: redact_url(&self.url),
                        attempts: self.acc.attempts,
                        retry_after: Some(d),
                    })
                }
                Some(d) => d,
                None => self.retry.backoff(retries_done, fastrand::f64()),
            };
            tracing::info!(url = %redact_url(&self.url), %status, ?delay, attempt = self.acc.attempts, "cloud request will be retried");
            tokio::select! {
                () = self.cancel.cancelled() => return Ok(Connected::Cancelled),
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Reads SSE events until one produces something for the caller (queued)
    /// or the stream ends. Returns whether the stream is still open.
    async fn step(&mut self, events: &mut SseStream) -> bool {
        loop {
            let idle = self.timeouts.idle;
            let next = tokio::select! {
                biased;
                () = self.cancel.cancelled() => {
                    self.finish(FinishReason::Cancelled, None);
                    return false;
                }
                next = tokio::time::timeout(idle, events.next()) => next,
            };
            let event = match next {
                Err(_) => {
                    self.queue.push_back(Err(CloudError::Timeout {
                        url: redact_url(&self.url),
                        phase: TimeoutPhase::Idle,
                        after: idle,
                    }));
                    return false;
                }
                Ok(None) => {
                    // Servers may close without `[DONE]` once they sent the
                    // finish reason; without one the answer is incomplete.
                    match self.acc.finish.clone() {
                        Some(reason) => self.finish_with_server_reason(&reason),
                        None => self.queue.push_back(Err(CloudError::StreamCut {
                            chunks: self.acc.chunks,
                            detail: "the server closed the connection before the end of the answer".into(),
                        })),
                    }
                    return false;
                }
                Ok(Some(Err(EventStreamError::Transport(e)))) => {
                    self.queue
                        .push_back(Err(CloudError::StreamCut { chunks: self.acc.chunks, detail: error_chain(&e) }));
                    return false;
                }
                Ok(Some(Err(e))) => {
                    self.queue.push_back(Err(CloudError::MalformedStream {
                        event: self.acc.events + 1,
                        what: format!("not valid server-sent events: {e}"),
                    }));
                    return false;
                }
                Ok(Some(Ok(event))) => event,
            };
            self.acc.events += 1;
            match self.on_event(&event) {
                Err(e) => {
                    self.queue.push_back(Err(e));
                    return false;
                }
                Ok(Flow::Done) => {
                    let reason = self.acc.finish.clone().unwrap_or_else(|| "stop".into());
                    self.finish_with_server_reason(&reason);
                    return false;
                }
                Ok(Flow::Continue) if !self.queue.is_empty() => return true,
                Ok(Flow::Continue) => {}
            }
        }
    }

    /// One SSE event: `[DONE]`, or a JSON chunk with text, a finish reason
    /// and/or usage.
    fn on_event(&mut self, event: &Event) -> Result<Flow> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        let n = self.acc.events;
        let malformed = |what: String| CloudError::MalformedStream { event: n, what };
        if data.is_empty() {
            // Keep-alive comments and empty events carry nothing.
            return Ok(Flow::Continue);
        }
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| malformed(format!("not a chat completion chunk ({e}): {}", excerpt(data))))?;
        if let Some(err) = chunk.error {
            let what = err.get("message").and_then(Value::as_str).map_or_else(|| err.to_string(), str::to_owned);
            return Err(CloudError::StreamCut {
                chunks: self.acc.chunks,
                detail: format!("the server reported an error mid-stream: {}", excerpt(&what)),
            });
        }
        if chunk.choices.is_none() && chunk.usage.is_none() {
            return Err(malformed(format!("a chunk with neither choices nor usage: {}", excerpt(data))));
        }
        for choice in chunk.choices.unwrap_or_default() {
            // One answer per request (n = 1): other indices are not ours.
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(text) = choice.delta.and_then(|d| d.content).filter(|t| !t.is_empty()) {
                let at = self.acc.started.map(|s| s.elapsed()).unwrap_or_default();
                self.acc.first_token_at.get_or_insert(at);
                self.acc.last_token_at = Some(at);
                self.acc.chunks += 1;
                self.queue.push_back(Ok(CloudEvent::Token { text }));
            }
            if let Some(reason) = choice.finish_reason {
                self.acc.finish = Some(reason);
            }
        }
        if let Some(usage) = chunk.usage {
            self.acc.usage = Some(usage);
        }
        Ok(Flow::Continue)
    }

    fn finish_with_server_reason(&mut self, reason: &str) {
        let (mapped, raw) = match reason {
            "stop" => (FinishReason::Stop, None),
            "length" => (FinishReason::Length, None),
            other => (FinishReason::Stop, Some(other.to_owned())),
        };
        self.finish(mapped, raw);
    }

    fn finish(&mut self, reason: FinishReason, server_reason: Option<String>) {
        let stats = CloudStats::new(
            self.acc.usage,
            self.acc.first_token_at,
            self.acc.last_token_at,
            self.acc.chunks,
            self.acc.attempts,
        );
        if let Some(usage) = self.acc.usage {
            self.queue.push_back(Ok(CloudEvent::Usage(usage)));
        }
        self.queue.push_back(Ok(CloudEvent::Finished { reason, server_reason, stats }));
    }
}

enum Flow {
    Continue,
    Done,
}

#[derive(Deserialize)]
struct Chunk {
    choices: Option<Vec<Choice>>,
    usage: Option<Usage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    index: Option<u32>,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
}

/// `Retry-After` in seconds. (The HTTP-date form is rare for APIs; it falls
/// back to our own backoff.)
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    value
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
        .or_else(|| value.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0).map(Duration::from_secs_f64))
}

/// The error for a 3xx, naming where it pointed.
fn redirected(url: &str, resp: &reqwest::Response) -> CloudError {
    let location = resp.headers().get(reqwest::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    CloudError::Redirected { url: redact_url(url), status: resp.status().as_u16(), location }
}

/// The error for a non-2xx status that is final.
fn status_error(url: &str, model: &str, status: StatusCode, attempts: u32, body: String) -> CloudError {
    let url = redact_url(url);
    match status {
        StatusCode::UNAUTHORIZED => CloudError::Unauthorized { url },
        StatusCode::NOT_FOUND => CloudError::NotFound { url, model: model.to_owned() },
        StatusCode::TOO_MANY_REQUESTS => CloudError::RateLimited { url, attempts, retry_after: None },
        s if s.is_server_error() => CloudError::Server { url, status: s.as_u16(), attempts, body },
        s => CloudError::Rejected { url, status: s.as_u16(), body },
    }
}

/// Classifies a failed send: refused, timed out or otherwise unreachable.
fn send_error(url: &str, e: &reqwest::Error, wait: Duration) -> CloudError {
    let url = redact_url(url);
    if e.is_timeout() {
        return CloudError::Timeout { url, phase: TimeoutPhase::Response, after: wait };
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return CloudError::ConnectionRefused { url };
            }
        }
        source = err.source();
    }
    CloudError::Connect { url, detail: error_chain(e) }
}

/// "outer: inner: root" — reqwest's own message alone is often just "error
/// sending request".
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(err) = source {
        let s = err.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        source = err.source();
    }
    parts.join(": ")
}

/// The useful part of an error body: the OpenAI-style `error.message` when
/// there is one, else the start of the text.
async fn body_excerpt(resp: reqwest::Response, wait: Duration) -> String {
    let text = match tokio::time::timeout(wait, resp.text()).await {
        Ok(Ok(text)) => text,
        Ok(Err(e)) => return format!("(the body could not be read: {e})"),
        Err(_) => return "(the body did not arrive in time)".into(),
    };
    let message = serde_json::from_str::<Value>(&text).ok().and_then(|v| {
        let e = v.get("error")?;
        e.get("message").and_then(Value::as_str).or_else(|| e.as_str()).map(str::to_owned)
    });
    let shown = excerpt(message.as_deref().unwrap_or(&text));
    if shown.is_empty() {
        "(empty body)".into()
    } else {
        shown
    }
}

/// One line, at most `BODY_EXCERPT_CHARS` characters.
fn excerpt(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(BODY_EXCERPT_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::chat::{Message, Role};
    use headroom_core::gate::{gate, Outbound, Part};
    use headroom_core::sensitive::ScanCache;
    use reqwest::header::HeaderValue;

    use super::*;

    #[test]
    fn request_asks_for_a_stream_with_usage_and_only_the_params_given() {
        let msgs =
            gate(vec![Outbound::new(Part::Message, Message::new(Role::User, "hi"))], false, &ScanCache::default())
                .unwrap()
                .messages;
        let body = request_body("m", &msgs, &ChatParams { max_tokens: Some(7), ..ChatParams::default() });
        assert_eq!(
            body,
            serde_json::json!({
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 7,
            })
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_ignores_dates() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static(" 2 "));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert(RETRY_AFTER, HeaderValue::from_static("0.25"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        h.insert(RETRY_AFTER, HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn final_statuses_map_to_their_plain_errors() {
        let e = status_error("http://h/v1/chat/completions", "m", StatusCode::NOT_FOUND, 1, String::new());
        assert!(e.to_string().contains("http://h/v1/chat/completions") && e.to_string().contains("\"m\""), "{e}");
        assert!(matches!(
            status_error("u", "m", StatusCode::UNAUTHORIZED, 1, String::new()),
            CloudError::Unauthorized { .. }
        ));
        assert!(matches!(
            status_error("u", "m", StatusCode::BAD_GATEWAY, 4, "x".into()),
            CloudError::Server { status: 502, attempts: 4, .. }
        ));
        assert!(matches!(
            status_error("u", "m", StatusCode::BAD_REQUEST, 1, "too long".into()),
            CloudError::Rejected { status: 400, .. }
        ));
    }

    #[test]
    fn excerpts_are_one_bounded_line() {
        assert_eq!(excerpt("a\n  b\tc "), "a b c");
        let long = "é".repeat(BODY_EXCERPT_CHARS + 10);
        let e = excerpt(&long);
        assert_eq!(e.chars().count(), BODY_EXCERPT_CHARS + 1);
        assert!(e.ends_with('…'));
    }
}
