//! End to end over real sockets: a real engine thread on a tiny demo model
//! (random weights, real tokenizer), the real router, and a plain HTTP/1.1
//! client written against the wire so nothing of ours sits between.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use headroom_core::fit::{check, BudgetInputs, GIB};
use headroom_core::kv::KvFormat;
use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
use headroom_engine::worker::{EngineHandle, LoadSettings, DEFAULT_CONTEXT_LIMIT};
use serde_json::{json, Value};

use crate::{ModelCard, ModelProvider, ProvideError, ReadyModel, ServeConfig, Server, ServerError};

/// The context limit the tests load with: small, so "too long" is cheap to send.
const CONTEXT: usize = 256;
/// What the prompt cache may keep besides the latest request's state.
const PROMPT_CACHE_BYTES: usize = 64 << 20;

fn demo_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../target/test-tmp")
            .join(format!("server-demo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).unwrap();
        dir
    })
}

/// The demo whose chat template thinks (it opens `<think>`, as Qwen3's
/// thinking releases do); its random weights never close the block, so its
/// thinking setting here ([`THINKER_BUDGET`]) does.
fn thinker_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../target/test-tmp")
            .join(format!("server-thinker-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let spec = DemoSpec { thinking: true, ..DemoSpec::new(Arch::Qwen3, Preset::Tiny, Bits::Four) };
        write_demo_model(&dir, &spec).unwrap();
        dir
    })
}

/// The `thinker` model's thinking setting, as the app's settings would give it.
const THINKER_BUDGET: u32 = 8;

/// Two ids on the same folder: `demo` against a roomy budget, `huge`
/// against none, so the refusal carries real numbers from the fit check.
struct DemoProvider {
    engine: EngineHandle,
    /// The id loaded, and the engine's load of it.
    loaded: std::sync::Mutex<Option<(String, u64)>>,
    loads: AtomicU64,
    /// Loads the model again right after making it ready, as the popover
    /// switching models just then would: the request's load is gone.
    switch_behind: std::sync::atomic::AtomicBool,
}

impl DemoProvider {
    fn new(engine: EngineHandle) -> Self {
        Self { engine, loaded: Default::default(), loads: AtomicU64::new(0), switch_behind: Default::default() }
    }
}

impl ModelProvider for DemoProvider {
    fn models(&self) -> Vec<ModelCard> {
        ["demo", "huge", "thinker"]
            .map(|id| ModelCard { id: id.into(), created: 1, owned_by: "headroom".into() })
            .to_vec()
    }

    fn ensure_loaded(
        &self,
        id: &str,
        context_limit: Option<usize>,
        kv: Option<KvFormat>,
    ) -> Result<ReadyModel, ProvideError> {
        let available = match id {
            "demo" | "thinker" => 64 * GIB,
            "huge" => 0,
            _ => return Err(ProvideError::NotFound { model: id.into() }),
        };
        let context_limit = context_limit.unwrap_or(DEFAULT_CONTEXT_LIMIT);
        let mut loaded = self.loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, load)) = loaded.as_ref().filter(|(l, _)| l == id) {
            let ready = ReadyModel { id: id.into(), load: *load, think: think_of(id), thinks: id == "thinker" };
            if self.switch_behind.load(Ordering::Relaxed) {
                let settings = LoadSettings { context_limit, ..LoadSettings::default() };
                let info = self.engine.load(demo_dir(), settings).expect("the switch behind the server's back");
                *loaded = Some((id.into(), info.load));
            }
            return Ok(ready);
        }
        let failed =
            |e: headroom_engine::EngineError| ProvideError::LoadFailed { model: id.into(), reason: e.to_string() };
        let dir = if id == "thinker" { thinker_dir() } else { demo_dir() };
        let footprint = headroom_engine::inspect_model(dir).map_err(failed)?;
        let report = check(&footprint, context_limit as u64, kv.unwrap_or_default(), BudgetInputs::new(available));
        if report.verdict.refuses() {
            return Err(ProvideError::WouldNotFit { model: id.into(), report: Box::new(report) });
        }
        // Room for states besides the latest (as the app's fit gives), so
        // partitions can each keep theirs.
        let settings =
            LoadSettings { context_limit, prompt_cache_bytes: PROMPT_CACHE_BYTES, ..LoadSettings::default() };
        let info = self.engine.load(dir, settings).map_err(failed)?;
        self.loads.fetch_add(1, Ordering::Relaxed);
        *loaded = Some((id.into(), info.load));
        Ok(ReadyModel { id: id.into(), load: info.load, think: think_of(id), thinks: info.thinks })
    }
}

/// Each model's thinking setting (the app's `Settings::thinking`).
fn think_of(id: &str) -> Option<headroom_core::thinking::Think> {
    (id == "thinker").then_some(headroom_core::thinking::Think::Budget(THINKER_BUDGET))
}

fn serve(config: ServeConfig) -> (Server, Arc<DemoProvider>) {
    let engine = EngineHandle::spawn().unwrap();
    let provider = Arc::new(DemoProvider::new(engine.clone()));
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let config = ServeConfig { context_limit: config.context_limit.or(Some(CONTEXT)), ..config };
    let server = Server::bind(addr, config, engine, provider.clone()).unwrap();
    (server, provider)
}

/// A response as read off the socket.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: String,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The `data:` payloads of an SSE body, in order.
    fn sse_data(&self) -> Vec<String> {
        self.body.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_owned).collect()
    }
}

fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut r =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    r.push_str(body);
    r
}

fn send_raw(addr: SocketAddr, raw: &str) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(raw.as_bytes()).unwrap();
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no header end: {text}"));
    let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{status_line}"));
    let chunked = headers.to_ascii_lowercase().contains("transfer-encoding: chunked");
    let body = if chunked { dechunk(body) } else { body.to_owned() };
    Reply { status, headers: headers.to_owned(), body }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn post(addr: SocketAddr, body: &Value) -> Reply {
    send_raw(addr, &request(addr, "POST", "/v1/chat/completions", &[JSON], &body.to_string()))
}

fn chat(model: &str, text: &str, extra: &Value) -> Value {
    let mut body = json!({ "model": model, "messages": [{"role": "user", "content": text}], "temperature": 0 });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    body
}

fn assert_error(reply: &Reply, status: u16, code: Option<&str>, param: Option<&str>) -> Value {
    assert_eq!(reply.status, status, "{reply:?}");
    let v = reply.json();
    let e = &v["error"];
    for key in ["message", "type", "param", "code"] {
        assert!(e.get(key).is_some(), "{key} missing in {v}");
    }
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert_eq!(e["code"].as_str(), code, "{v}");
    assert_eq!(e["param"].as_str(), param, "{v}");
    v
}

#[test]
fn models_then_a_plain_completion_with_usage_and_our_stats() {
    let (server, provider) = serve(ServeConfig::default());
    let addr = server.addr();
    let list = send_raw(addr, &request(addr, "GET", "/v1/models", &[], ""));
    assert_eq!(list.status, 200, "{list:?}");
    let v = list.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0], json!({"id": "demo", "object": "model", "created": 1, "owned_by": "headroom"}));
    let one = send_raw(addr, &request(addr, "GET", "/v1/models/huge", &[], ""));
    assert_eq!(one.json()["id"], "huge");

    let reply = post(addr, &chat("demo", "Hello there", &json!({"max_tokens": 6})));
    assert_eq!(reply.status, 200, "{reply:?}");
    let v = reply.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "demo");
    assert!(v["id"].as_str().is_some_and(|id| id.starts_with("chatcmpl-")), "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert!(choice["message"]["content"].is_string(), "{v}");
    let u = &v["usage"];
    let (prompt, completion) =
        (u["prompt_tokens"].as_u64().unwrap_or(0), u["completion_tokens"].as_u64().unwrap_or(99));
    assert!(prompt > 3 && (1..=6).contains(&completion), "{u}");
    assert_eq!(u["total_tokens"].as_u64(), Some(prompt + completion));
    assert_eq!(choice["finish_reason"], if completion == 6 { "length" } else { "stop" }, "{v}");
    let h = &u["headroom"];
    assert_eq!((h["batch"].as_u64(), h["context_tokens"].as_u64()), (Some(1), Some(prompt)), "{u}");
    assert!(h["ttft_ms"].as_f64().is_some_and(|t| t > 0.0), "{u}");
    assert!(h["prefill_tps"].as_f64().is_some_and(|t| t > 0.0), "{u}");
    assert!(h["e2e_tps"].as_f64().is_some_and(|t| t > 0.0), "{u}");

    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 0, "{u}");
    assert_eq!((h["reused_tokens"].as_u64(), h["reused_from"].as_str()), (Some(0), Some("none")), "{u}");

    // Same model again: no second load. The same greedy request, same
    // answer, every prompt token but the last (which must be fed) cached.
    let again = post(addr, &chat("demo", "Hello there", &json!({"max_tokens": 6})));
    assert_eq!(again.json()["choices"][0]["message"], choice["message"]);
    let u = &again.json()["usage"];
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"].as_u64(), Some(prompt - 1), "{u}");
    assert_eq!(u["headroom"]["reused_from"], "memory", "{u}");
    assert_eq!(provider.loads.load(Ordering::Relaxed), 1);
    let stats = server.stats();
    assert_eq!((stats.requests, stats.completed, stats.cancelled, stats.active), (2, 2, 0, 0));
    server.stop().unwrap();
}

#[test]
fn a_streamed_completion_is_chunks_then_usage_then_done() {
    let (server, _) = serve(ServeConfig::default());
    let addr = server.addr();
    let body = chat(
        "demo",
        "Tell me a story",
        &json!({"max_tokens": 8, "stream": true, "stream_options": {"include_usage": true}}),
    );
    let plain = post(addr, &chat("demo", "Tell me a story", &json!({"max_tokens": 8}))).json();
    let reply = post(addr, &body);
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    let data = reply.sse_data();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    let chunks: Vec<Value> =
        data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).expect("a JSON chunk")).collect();
    assert!(chunks.len() >= 2, "at least the finish and the usage chunk: {chunks:?}");
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"]), "{chunks:?}");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let usage_chunk = chunks.last().expect("no chunks");
    assert_eq!(usage_chunk["choices"], json!([]));
    let finish = &chunks[chunks.len() - 2]["choices"][0];
    assert!(finish["finish_reason"].is_string(), "{chunks:?}");
    // The pieces add up to what the same greedy request returns in one piece.
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, plain["choices"][0]["message"]["content"].as_str().unwrap_or_default());
    assert_eq!(finish["finish_reason"], plain["choices"][0]["finish_reason"]);
    let (u, pu) = (&usage_chunk["usage"], &plain["usage"]);
    assert_eq!((&u["prompt_tokens"], &u["completion_tokens"]), (&pu["prompt_tokens"], &pu["completion_tokens"]));
    assert!(u["headroom"]["ttft_ms"].as_f64().is_some(), "{u}");

    // Without include_usage there is no usage chunk.
    let reply = post(addr, &chat("demo", "Tell me a story", &json!({"max_tokens": 3, "stream": true})));
    let data = reply.sse_data();
    assert!(data.len() >= 2, "a chunk and [DONE]: {data:?}");
    assert!(data.iter().all(|d| !d.contains("\"usage\"")), "{data:?}");
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
}

#[test]
fn bad_requests_get_the_right_status_and_an_openai_error_body() {
    let (server, provider) = serve(ServeConfig::default());
    let addr = server.addr();
    let raw = |body: &str, headers: &[(&str, &str)]| {
        send_raw(addr, &request(addr, "POST", "/v1/chat/completions", headers, body))
    };

    let v = assert_error(&raw("{\"model\": \"demo\", \"messages\": [", &[JSON]), 400, None, None);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_error(&raw("{\"messages\": []}", &[JSON]), 400, Some("missing_required_parameter"), Some("model"));
    assert_error(&raw("{}", &[("Content-Type", "text/plain")]), 415, Some("unsupported_media_type"), None);
    assert_error(&raw("{}", &[]), 415, Some("unsupported_media_type"), None);
    assert_error(
        &post(addr, &chat("demo", "x", &json!({"temperature": 3}))),
        400,
        Some("invalid_value"),
        Some("temperature"),
    );

    let v = assert_error(
        &post(addr, &chat("nobody/nothing", "x", &json!({}))),
        404,
        Some("model_not_found"),
        Some("model"),
    );
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("nobody/nothing")), "{v}");
    assert_error(
        &send_raw(addr, &request(addr, "GET", "/v1/models/nobody/nothing", &[], "")),
        404,
        Some("model_not_found"),
        Some("model"),
    );

    // Over the context limit, plain and streamed: a 400 before any chunk.
    let long = "lorem ipsum dolor sit amet ".repeat(100);
    for stream in [false, true] {
        let v = assert_error(
            &post(addr, &chat("demo", &long, &json!({"stream": stream}))),
            400,
            Some("context_length_exceeded"),
            Some("messages"),
        );
        assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains(&format!("{CONTEXT} tokens"))), "{v}");
    }

    // A model over the budget: 507 with the numbers, nothing loaded for it.
    let loads = provider.loads.load(Ordering::Relaxed);
    let reply = post(addr, &chat("huge", "x", &json!({})));
    assert_eq!(reply.header("x-should-retry"), Some("false"));
    let v = assert_error(&reply, 507, Some("model_cannot_fit"), Some("model"));
    let fit = &v["error"]["fit"];
    assert_eq!(fit["budget_bytes"], 0);
    assert_eq!(fit["context_tokens"], CONTEXT);
    assert!(
        fit["weight_bytes"].as_u64().is_some_and(|b| b > 0) && fit["over_by_bytes"].as_u64().is_some_and(|b| b > 0),
        "{v}"
    );
    assert_eq!(provider.loads.load(Ordering::Relaxed), loads);

    assert_error(&send_raw(addr, &request(addr, "GET", "/v1/completions", &[], "")), 404, Some("unknown_url"), None);
    assert_error(
        &send_raw(addr, &request(addr, "GET", "/v1/chat/completions", &[], "")),
        405,
        Some("method_not_allowed"),
        None,
    );
    let rebinding =
        request(addr, "GET", "/v1/models", &[], "").replace(&format!("Host: {addr}"), "Host: evil.example:8080");
    assert_error(&send_raw(addr, &rebinding), 403, Some("host_not_allowed"), None);
}

#[test]
fn a_key_guards_every_route_once_set() {
    let (server, _) = serve(ServeConfig { api_keys: vec!["s3cret".into()], ..ServeConfig::default() });
    let addr = server.addr();
    let get = |headers: &[(&str, &str)]| send_raw(addr, &request(addr, "GET", "/v1/models", headers, ""));
    assert_error(&get(&[]), 401, Some("missing_api_key"), None);
    assert_error(&get(&[("Authorization", "Bearer nope")]), 401, Some("invalid_api_key"), None);
    assert_eq!(get(&[("Authorization", "Bearer s3cret")]).status, 200);
}

/// Each key's clients are a partition of the prompt cache: the same long
/// prompt sent with another key reuses nothing (its `cached_tokens` is 0, as
/// a cold prompt's), while the same key sending it again reuses all of it.
#[test]
fn two_keys_never_share_a_cached_state() {
    let (server, _) =
        serve(ServeConfig { api_keys: vec!["alpha-key".into(), "beta-key".into()], ..ServeConfig::default() });
    let addr = server.addr();
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(6);
    let body = chat("demo", &long, &json!({"max_tokens": 2})).to_string();
    let ask = |key: &str| {
        let auth = format!("Bearer {key}");
        let reply =
            send_raw(addr, &request(addr, "POST", "/v1/chat/completions", &[JSON, ("Authorization", &auth)], &body));
        assert_eq!(reply.status, 200, "{reply:?}");
        let usage = reply.json()["usage"].clone();
        let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or_else(|| panic!("{usage}"));
        (cached, usage["prompt_tokens"].as_u64().unwrap_or(0))
    };
    let (first, prompt) = ask("alpha-key");
    assert!(prompt > 64, "a long prompt: {prompt} tokens");
    assert_eq!(first, 0, "nothing cached yet");
    // The same key again: every token but the last (which is fed) is reused.
    assert_eq!(ask("alpha-key"), (prompt - 1, prompt));
    // The other key, the very same prompt: nothing of alpha's is reused.
    assert_eq!(ask("beta-key"), (0, prompt));
    // Each keeps its own: both reuse from here on.
    assert_eq!(ask("beta-key"), (prompt - 1, prompt));
    assert_eq!(ask("alpha-key"), (prompt - 1, prompt));
    server.stop().unwrap();
}

#[test]
fn only_loopback_unless_allowed_and_keyed() {
    let engine = || EngineHandle::spawn().unwrap();
    let provider = || -> Arc<dyn ModelProvider> { Arc::new(DemoProvider::new(engine())) };
    let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let err = Server::bind(any, ServeConfig::default(), engine(), provider()).err();
    assert!(matches!(err, Some(ServerError::NonLoopback { .. })), "{err:?}");
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("0.0.0.0") && msg.contains("--allow-remote") && msg.contains("API key"), "{msg}");
    let allowed = ServeConfig { allow_non_loopback: true, ..ServeConfig::default() };
    let err = Server::bind(any, allowed.clone(), engine(), provider()).err();
    assert!(matches!(err, Some(ServerError::RemoteWithoutKey { .. })), "{err:?}");
    let blank = ServeConfig { api_keys: vec!["k".into(), "  ".into()], ..allowed };
    assert!(matches!(blank.check(any), Err(ServerError::EmptyApiKey)));
    let keyed = ServeConfig { api_keys: vec!["k".into()], ..blank };
    assert!(keyed.check(any).is_ok());

    // A port in use is the caller's error, with the address.
    let (first, _) = serve(ServeConfig::default());
    let err = Server::bind(first.addr(), ServeConfig::default(), engine(), provider()).err();
    assert!(matches!(&err, Some(ServerError::Bind { addr, .. }) if *addr == first.addr()), "{err:?}");
}

/// Enough tokens that the run cannot end by itself before the server sees
/// the closed socket.
const HANG_UP_TOKENS: usize = 2000;

/// Hanging up after the first chunks cancels the run: the guard counts it
/// cancelled (a run that ended by itself counts completed), and the engine
/// is free at once for the next request.
#[test]
fn a_client_that_hangs_up_mid_stream_cancels_the_run() {
    let (server, _) = serve(ServeConfig { context_limit: Some(HANG_UP_TOKENS + 64), ..ServeConfig::default() });
    let addr = server.addr();
    let body = chat("demo", "Go on", &json!({"max_tokens": HANG_UP_TOKENS, "stream": true}));
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(request(addr, "POST", "/v1/chat/completions", &[JSON], &body.to_string()).as_bytes()).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 512];
    while seen.windows(6).filter(|w| w == b"data: ").count() < 3 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    drop(s);
    let started = Instant::now();
    while server.stats().cancelled == 0 && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = server.stats();
    assert_eq!((stats.cancelled, stats.completed, stats.active), (1, 0, 0), "{stats:?}");

    // The engine really stopped: a short request queued now does not wait
    // for the rest of the hung-up run, which would take HANG_UP_TOKENS
    // tokens at (at best) the decode rate this very request measures.
    let asked = Instant::now();
    let v = post(addr, &chat("demo", "Go on", &json!({"max_tokens": 8}))).json();
    let waited = asked.elapsed().as_secs_f64();
    let tps = v["usage"]["headroom"]["decode_tps"].as_f64().unwrap_or_else(|| panic!("no decode rate: {v}"));
    let rest_of_run = HANG_UP_TOKENS as f64 / tps;
    assert!(waited < rest_of_run / 2.0, "waited {waited:.2} s; the hung-up run alone would take {rest_of_run:.2} s");
}

/// What every chat client does: resend the whole conversation. Each turn
/// reports the prefix the engine's prompt cache held as OpenAI's
/// `cached_tokens`, streamed (the usage chunk) and not.
#[test]
fn a_resent_conversation_reports_its_cached_prefix() {
    let (server, _provider) = serve(ServeConfig::default());
    let addr = server.addr();
    let mut messages = vec![json!({"role": "user", "content": "Tell me about caches."})];
    let mut previous_prompt = 0;
    for turn in 0..3 {
        let body = json!({"model": "demo", "messages": messages, "temperature": 0, "max_tokens": 6,
            "stream": true, "stream_options": {"include_usage": true}});
        let reply = post(addr, &body);
        assert_eq!(reply.status, 200, "{reply:?}");
        let data = reply.sse_data();
        let chunks: Vec<Value> =
            data.iter().filter(|d| *d != "[DONE]").map(|d| serde_json::from_str(d).unwrap_or(Value::Null)).collect();
        let text: String =
            chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect::<Vec<_>>().concat();
        let usage = &chunks.last().expect("no chunks")["usage"];
        let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(u64::MAX);
        let prompt = usage["prompt_tokens"].as_u64().unwrap_or(0);
        if turn == 0 {
            assert_eq!(cached, 0, "{usage}");
        } else {
            // At least everything the previous request was sent.
            assert!(cached >= previous_prompt && cached < prompt, "turn {turn}: {usage}");
        }
        assert_eq!(usage["headroom"]["reused_tokens"].as_u64(), Some(cached));
        previous_prompt = prompt;
        messages.push(json!({"role": "assistant", "content": text}));
        messages.push(json!({"role": "user", "content": format!("And question {turn}?")}));
    }
    server.stop().unwrap();
}

/// Sends a chat request's headers and the first half of its body, and
/// returns the open connection (the rest is `rest`).
fn half_sent(addr: SocketAddr, text: &str) -> (TcpStream, String) {
    let raw = request(
        addr,
        "POST",
        "/v1/chat/completions",
        &[JSON],
        &chat("demo", text, &json!({"max_tokens": 4})).to_string(),
    );
    let split = raw.find("\r\n\r\n").unwrap() + 4 + 10;
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(&raw.as_bytes()[..split]).unwrap();
    (s, raw[split..].to_owned())
}

#[test]
fn beyond_its_bound_the_server_answers_429_admitted_requests_complete_and_a_stop_beats_a_half_sent_body() {
    let (server, _provider) = serve(ServeConfig { max_requests: 2, ..ServeConfig::default() });
    let addr = server.addr();
    // Two clients take both places and hold them, their bodies half sent.
    let (mut first, first_rest) = half_sent(addr, "one");
    let (_second, _) = half_sent(addr, "two");
    let waited = Instant::now();
    while server.stats().requests < 2 {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "the two clients were never admitted: {:?}",
            server.stats()
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    // A third is turned away at once, told when to come back; so is a fourth.
    for _ in 0..2 {
        let t = Instant::now();
        let busy = post(addr, &chat("demo", "three", &json!({"max_tokens": 4})));
        assert_error(&busy, 429, Some("server_busy"), None);
        assert_eq!(busy.header("retry-after"), Some("2"), "{busy:?}");
        assert!(t.elapsed() < Duration::from_secs(5), "refused without waiting: {:?}", t.elapsed());
    }
    assert_eq!(server.stats().refused, 2);

    // The first finishes its body: it is answered in full.
    first.write_all(first_rest.as_bytes()).unwrap();
    let mut bytes = Vec::new();
    first.read_to_end(&mut bytes).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    // Its place is free again: the next request is admitted and completes.
    let next = post(addr, &chat("demo", "four", &json!({"max_tokens": 4})));
    assert_eq!(next.status, 200, "{next:?}");

    // The second still holds its half-sent body: the stop does not wait for it.
    let t = Instant::now();
    server.stop().unwrap();
    assert!(t.elapsed() < crate::STOP_DEADLINE + Duration::from_secs(3), "stopped after {:?}", t.elapsed());
}

#[test]
fn a_connection_that_never_finishes_its_headers_is_closed_at_its_deadline() {
    let (server, _provider) = serve(ServeConfig { header_timeout: Duration::from_secs(1), ..ServeConfig::default() });
    let addr = server.addr();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap();
    let t = Instant::now();
    let mut bytes = Vec::new();
    let _ = s.read_to_end(&mut bytes);
    assert!(t.elapsed() < Duration::from_secs(5), "closed after {:?}", t.elapsed());
    // A request that sends its headers in time is served as ever.
    let list = send_raw(addr, &request(addr, "GET", "/v1/models", &[], ""));
    assert_eq!(list.status, 200, "{list:?}");
}

#[test]
fn a_body_over_the_limit_is_413_before_it_is_read() {
    let (server, _provider) = serve(ServeConfig::default());
    let addr = server.addr();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{",
        crate::routes::MAX_BODY_BYTES + 1
    );
    let reply = send_raw(addr, &head);
    assert_error(&reply, 413, Some("body_too_large"), None);
}

/// The popover (or anything else in the app) switching models between a
/// request's load and its run: the request fails with its own status and
/// code, it is not answered by whatever model is loaded then.
#[test]
fn a_request_whose_model_was_switched_before_it_ran_is_refused_not_answered_by_another() {
    let (server, provider) = serve(ServeConfig::default());
    let addr = server.addr();
    assert_eq!(post(addr, &chat("demo", "Hello", &json!({"max_tokens": 2}))).status, 200);
    provider.switch_behind.store(true, Ordering::Relaxed);
    let reply = post(addr, &chat("demo", "Hello", &json!({"max_tokens": 2})));
    let v = assert_error(&reply, 503, Some("model_changed"), None);
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("send it again")), "{v}");
    provider.switch_behind.store(false, Ordering::Relaxed);
    assert_eq!(post(addr, &chat("demo", "Hello", &json!({"max_tokens": 2}))).status, 200, "the next one runs");
    server.stop().unwrap();
}

/// A thinking model's `<think>` text arrives in `reasoning_content`, never
/// in `content`, streamed as its own deltas; the model's thinking setting
/// (a budget) closes the block and the answer follows; `reasoning_effort:
/// "none"` asks the template for no thinking, and none comes. On the demo
/// whose template thinks: random weights, so this checks the path (the
/// split, the budget, the switch), not any thought.
#[test]
fn a_thinking_models_reasoning_arrives_apart_and_reasoning_effort_none_turns_it_off() {
    let (server, _) = serve(ServeConfig::default());
    let addr = server.addr();
    let extra = json!({"max_tokens": 40});
    let reply = post(addr, &chat("thinker", "Hello there", &extra));
    assert_eq!(reply.status, 200, "{reply:?}");
    let v = reply.json();
    let message = &v["choices"][0]["message"];
    let reasoning = message["reasoning_content"].as_str().unwrap_or_else(|| panic!("no reasoning_content: {v}"));
    let content = message["content"].as_str().unwrap_or_default();
    assert!(!reasoning.trim().is_empty(), "{v}");
    for tag in ["<think>", "</think>"] {
        assert!(!reasoning.contains(tag) && !content.contains(tag), "{tag} in {v}");
    }
    // The budget's tokens and the close tag's, then the answer.
    assert!(v["usage"]["completion_tokens"].as_u64().is_some_and(|n| n > u64::from(THINKER_BUDGET)), "{v}");

    // Streamed: the reasoning as its own deltas, the same split.
    let streamed = post(addr, &chat("thinker", "Hello there", &json!({"max_tokens": 40, "stream": true})));
    assert_eq!(streamed.status, 200, "{streamed:?}");
    let deltas: Vec<Value> = streamed
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .map(|c| c["choices"][0]["delta"].clone())
        .collect();
    let joined = |key: &str| deltas.iter().filter_map(|d| d[key].as_str()).collect::<String>();
    assert_eq!(joined("reasoning_content"), reasoning, "greedy: the same thinking streamed");
    assert_eq!(joined("content"), content, "greedy: the same answer streamed");

    // reasoning_effort none: the template is asked for no thinking.
    let off = post(addr, &chat("thinker", "Hello there", &json!({"max_tokens": 20, "reasoning_effort": "none"})));
    assert_eq!(off.status, 200, "{off:?}");
    let v = off.json();
    assert!(v["choices"][0]["message"].get("reasoning_content").is_none(), "{v}");
}
