//! The client against tiny scripted HTTP servers on loopback: the happy
//! stream, and each failure a real endpoint can produce (401, 404, 429 then
//! 200, 500s, a cut stream, garbage events, a refused connection, silence).

// clippy.toml's allow-unwrap-in-tests covers `#[test]` functions only; the
// helpers of this test binary read as plainly as the tests they serve.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use headroom_cloud::testserver::{chunk, finish, json_reply, once, usage, Reply, Stub, SSE_HEAD};
use headroom_cloud::{
    ApiKey, ChatParams, CloudClient, CloudConfig, CloudError, CloudEvent, RetryPolicy, TimeoutPhase, Timeouts,
    NO_USAGE_NOTE,
};
use headroom_core::chat::{FinishReason, Message, Role};
use headroom_core::gate::{gate, GatedMessages, Outbound, Part};
use headroom_core::sensitive::ScanCache;
use tokio_util::sync::CancellationToken;

fn started(replies: Vec<Reply>) -> Stub {
    Stub::start(replies).expect("stub")
}

fn config(base_url: &str) -> CloudConfig {
    CloudConfig {
        api_key: Some(ApiKey::new("sk-test-key")),
        timeouts: Timeouts {
            connect: Duration::from_secs(2),
            response: Duration::from_secs(5),
            idle: Duration::from_secs(5),
        },
        retry: RetryPolicy { max_retries: 2, base_delay: Duration::from_millis(20), max_delay: Duration::from_secs(2) },
        ..CloudConfig::new(base_url, "test-model")
    }
}

/// A harmless system prompt and question, through the privacy gate as every request is.
fn history() -> GatedMessages {
    let out = vec![
        Outbound::new(Part::System, Message::new(Role::System, "be brief")),
        Outbound::new(Part::Message, Message::new(Role::User, "Say hello")),
    ];
    gate(out, false, &ScanCache::default()).unwrap().messages
}

/// Every event until the end, and the error that ended it, if any.
async fn run(cfg: CloudConfig, cancel: CancellationToken) -> (Vec<CloudEvent>, Option<CloudError>) {
    let client = CloudClient::new(cfg).expect("client");
    let stream = client.chat_stream(&history(), &ChatParams { max_tokens: Some(16), ..ChatParams::default() }, cancel);
    futures_util::pin_mut!(stream);
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(e) => {
                assert!(stream.next().await.is_none(), "an error must end the stream");
                return (events, Some(e));
            }
        }
    }
    (events, None)
}

fn text_of(events: &[CloudEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            CloudEvent::Token { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_stream_with_usage_gives_tokens_then_usage_then_stats_from_reported_counts() {
    let body = [chunk("Hel"), chunk("lo"), chunk(" there"), finish("stop"), usage(9, 5), "data: [DONE]\n\n".into()];
    // Each part is followed by its pause: headers, 30 ms, then chunks 20 ms apart.
    let parts = std::iter::once((SSE_HEAD.to_owned(), Duration::from_millis(30)))
        .chain(body.into_iter().map(|p| (p, Duration::from_millis(20))))
        .collect();
    let stub = started(vec![Reply::Parts(parts)]);
    let (events, err) = run(config(&stub.base_url), CancellationToken::new()).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(events.first(), Some(&CloudEvent::Started { attempts: 1 }));
    assert_eq!(text_of(&events), "Hello there");
    let usage = headroom_cloud::Usage { prompt_tokens: 9, completion_tokens: 5, total_tokens: Some(14) };
    assert_eq!(events[events.len() - 2], CloudEvent::Usage(usage));
    let Some(CloudEvent::Finished { reason, server_reason, stats }) = events.last() else {
        panic!("last event must be Finished: {events:?}");
    };
    assert_eq!((*reason, server_reason.as_deref()), (FinishReason::Stop, None));
    assert_eq!(stats.usage, Some(usage));
    assert_eq!((stats.chunks, stats.attempts, stats.timings.generated_tokens), (3, 1, 5));
    let (ttft, decode) = (stats.rates.ttft_ms.unwrap_or(0.0), stats.rates.decode_tps.unwrap_or(0.0));
    // The first text comes ≥ 30 ms after the headers, and decode tok/s is
    // (5 - 1) reported tokens over the ≥ 40 ms between first and last chunk.
    assert!(ttft >= 30.0 && decode > 0.0 && decode <= 4.0 / 0.040 + 1e-9, "ttft {ttft}, decode {decode}");
    assert_eq!(stats.note(), None);

    let requests = stub.requests();
    assert_eq!(requests.len(), 1);
    let req = &requests[0];
    assert!(req.starts_with("POST /v1/chat/completions "), "{req}");
    assert!(req.to_lowercase().contains("authorization: bearer sk-test-key"), "{req}");
    let body: serde_json::Value =
        serde_json::from_str(req.split("\r\n\r\n").nth(1).unwrap_or_default()).expect("request body");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["max_tokens"], 16);
    assert_eq!(body["messages"][1]["content"], "Say hello");
}

#[tokio::test]
async fn without_usage_the_stats_say_so_and_count_nothing() {
    let stub = started(vec![once(format!("{SSE_HEAD}{}{}data: [DONE]\n\n", chunk("a"), finish("length")))]);
    let (events, err) = run(config(&stub.base_url), CancellationToken::new()).await;
    assert!(err.is_none(), "{err:?}");
    let Some(CloudEvent::Finished { reason, stats, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!(*reason, FinishReason::Length);
    assert!(!events.iter().any(|e| matches!(e, CloudEvent::Usage(_))));
    assert_eq!(stats.note(), Some(NO_USAGE_NOTE));
    assert_eq!((stats.rates.decode_tps, stats.rates.e2e_tps, stats.timings.generated_tokens), (None, None, 0));
    assert!(stats.rates.ttft_ms.is_some());
}

#[tokio::test]
async fn unauthorized_says_to_check_the_key_and_is_not_retried() {
    let stub = started(vec![json_reply("401 Unauthorized", "", r#"{"error":{"message":"bad key"}}"#)]);
    let (events, err) = run(config(&stub.base_url), CancellationToken::new()).await;
    assert!(events.is_empty());
    let e = err.expect("expected an error");
    assert!(matches!(e, CloudError::Unauthorized { .. }), "{e:?}");
    assert!(e.to_string().contains("check the key"), "{e}");
    assert_eq!(stub.requests().len(), 1);
}

#[tokio::test]
async fn not_found_names_the_url_and_the_model() {
    let stub = started(vec![json_reply("404 Not Found", "", "{}")]);
    let (_, err) = run(config(&stub.base_url), CancellationToken::new()).await;
    let e = err.expect("expected an error");
    assert!(matches!(e, CloudError::NotFound { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&format!("{}/chat/completions", stub.base_url)) && msg.contains("test-model"), "{msg}");
}

#[tokio::test]
async fn rate_limit_is_retried_after_the_servers_retry_after() {
    let ok = format!("{SSE_HEAD}{}{}{}data: [DONE]\n\n", chunk("ok"), finish("stop"), usage(3, 1));
    let stub = started(vec![json_reply("429 Too Many Requests", "Retry-After: 1\r\n", "{}"), once(ok)]);
    let t0 = Instant::now();
    let (events, err) = run(config(&stub.base_url), CancellationToken::new()).await;
    assert!(err.is_none(), "{err:?}");
    // Our own backoff would be ≤ 20 ms; the server asked for 1 s.
    assert!(t0.elapsed() >= Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(events.first(), Some(&CloudEvent::Started { attempts: 2 }));
    assert_eq!(text_of(&events), "ok");
    assert_eq!(stub.requests().len(), 2);
}

#[tokio::test]
async fn a_retry_after_longer_than_we_wait_fails_at_once() {
    let stub = started(vec![json_reply("429 Too Many Requests", "Retry-After: 3600\r\n", "{}")]);
    let (_, err) = run(config(&stub.base_url), CancellationToken::new()).await;
    let e = err.expect("expected an error");
    assert!(
        matches!(e, CloudError::RateLimited { attempts: 1, retry_after: Some(d), .. } if d == Duration::from_secs(3600)),
        "{e:?}"
    );
    assert!(e.to_string().contains("3600 s"), "{e}");
}

#[tokio::test]
async fn server_errors_are_retried_then_reported_with_the_body() {
    let stub = started(vec![json_reply("500 Internal Server Error", "", r#"{"error":{"message":"model crashed"}}"#)]);
    let (events, err) = run(config(&stub.base_url), CancellationToken::new()).await;
    assert!(events.is_empty());
    let e = err.expect("expected an error");
    assert!(matches!(e, CloudError::Server { status: 500, attempts: 3, .. }), "{e:?}");
    assert!(e.to_string().contains("model crashed"), "{e}");
    // max_retries = 2: three attempts in all.
    assert_eq!(stub.requests().len(), 3);
}

#[tokio::test]
async fn a_stream_cut_midway_keeps_the_text_so_far_and_says_how_far_it_got() {
    // Close-delimited body: the server just hangs up after two chunks.
    let stub = started(vec![once(format!("{SSE_HEAD}{}{}", chunk("par"), chunk("tial")))]);
    let (events, err) = run(config(&stub.base_url), CancellationToken::new()).await;
    assert_eq!(text_of(&events), "partial");
    let e = err.expect("expected an error");
    assert!(matches!(e, CloudError::StreamCut { chunks: 2, .. }), "{e:?}");
    assert!(e.to_string().contains("after 2"), "{e}");
}

#[tokio::test]
async fn a_chunked_body_cut_midway_is_a_stream_cut_not_a_parse_error() {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    let c = chunk("one");
    // One whole HTTP chunk, then a chunk header promising more than is sent.
    let body = format!("{:x}\r\n{c}\r\n400\r\ndata: {{\"choi", c.len());
    let stub = started(vec![once(format!("{head}{body}"))]);
    let (events, err) = run(config(&stub.base_url), CancellationToken::new()).await;
    assert_eq!(text_of(&events), "one");
    let e = err.expect("expected an error");
    assert!(matches!(e, CloudError::StreamCut { chunks: 1, .. }), "{e:?}");
}

#[tokio::test]
async fn garbage_events_are_malformed_at_their_position() {
    let stub = started(vec![once(format!("{SSE_HEAD}{}data: {{not json\n\n", chunk("fine")))]);
    let (events, err) = run(config(&stub.base_url), CancellationToken::new()).await;
    assert_eq!(text_of(&events), "fine");
    let e = err.expect("expected an error");
    assert!(matches!(e, CloudError::MalformedStream { event: 2, .. }), "{e:?}");
    assert!(e.to_string().contains("{not json"), "{e}");

    let stub = started(vec![once(format!("{SSE_HEAD}data: {{\"id\": 1}}\n\n"))]);
    let (_, err) = run(config(&stub.base_url), CancellationToken::new()).await;
    assert!(matches!(err, Some(CloudError::MalformedStream { event: 1, .. })), "{err:?}");
}

#[tokio::test]
async fn an_error_object_mid_stream_ends_the_turn_with_its_message() {
    let err_event = "data: {\"error\": {\"message\": \"out of memory\"}}\n\n";
    let stub = started(vec![once(format!("{SSE_HEAD}{}{err_event}", chunk("a")))]);
    let (events, err) = run(config(&stub.base_url), CancellationToken::new()).await;
    assert_eq!(text_of(&events), "a");
    let e = err.expect("expected an error");
    assert!(matches!(e, CloudError::StreamCut { chunks: 1, .. }) && e.to_string().contains("out of memory"), "{e}");
}

#[tokio::test]
async fn a_server_that_is_down_is_connection_refused() {
    // Bind, learn the port, close: nothing listens there now.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().map(|a| a.port()).unwrap();
    drop(listener);
    let url = format!("http://127.0.0.1:{port}/v1");
    let (events, err) = run(config(&url), CancellationToken::new()).await;
    assert!(events.is_empty());
    let e = err.expect("expected an error");
    assert!(matches!(e, CloudError::ConnectionRefused { .. }), "{e:?}");
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");

    let client = CloudClient::new(config(&url)).unwrap();
    assert!(matches!(client.list_models().await, Err(CloudError::ConnectionRefused { .. })));
}

#[tokio::test]
async fn a_silent_stream_times_out_and_a_cancel_ends_the_turn_quickly() {
    let stalled = Reply::Stall(format!("{SSE_HEAD}{}", chunk("first")));
    let stub = started(vec![stalled]);
    let mut cfg = config(&stub.base_url);
    cfg.timeouts.idle = Duration::from_millis(300);
    let (events, err) = run(cfg.clone(), CancellationToken::new()).await;
    assert_eq!(text_of(&events), "first");
    assert!(matches!(err, Some(CloudError::Timeout { phase: TimeoutPhase::Idle, .. })), "{err:?}");

    cfg.timeouts.idle = Duration::from_secs(20);
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        canceller.cancel();
    });
    let t0 = Instant::now();
    let (events, err) = run(cfg, cancel).await;
    assert!(err.is_none(), "{err:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(text_of(&events), "first");
    assert!(matches!(events.last(), Some(CloudEvent::Finished { reason: FinishReason::Cancelled, .. })), "{events:?}");
}

#[tokio::test]
async fn models_are_listed_and_bad_config_is_refused() {
    let stub = started(vec![json_reply("200 OK", "", r#"{"object":"list","data":[{"id":"a"},{"id":"b/c"}]}"#)]);
    let client = CloudClient::new(config(&stub.base_url)).unwrap();
    let models = client.list_models().await.unwrap();
    assert_eq!(models, ["a", "b/c"]);
    assert!(stub.requests()[0].starts_with("GET /v1/models "));

    let e = CloudClient::new(CloudConfig::new("localhost:8080/v1", "m")).err();
    assert!(matches!(e, Some(CloudError::InvalidConfig { .. })), "{e:?}");
    let e = CloudClient::new(CloudConfig::new("http://h/v1", " ")).err();
    assert!(matches!(e, Some(CloudError::InvalidConfig { .. })), "{e:?}");
}

#[tokio::test]
async fn run_turn_keeps_the_partial_text_and_cancels_when_nobody_listens() {
    let stub = started(vec![once(format!("{SSE_HEAD}{}{}", chunk("kept "), chunk("text")))]);
    let client = CloudClient::new(config(&stub.base_url)).unwrap();
    let mut seen = 0;
    let r = headroom_cloud::run_turn(&client, &history(), &ChatParams::default(), CancellationToken::new(), |_| {
        seen += 1;
        true
    })
    .await;
    assert_eq!(r.text, "kept text");
    assert!(matches!(r.end, Err(CloudError::StreamCut { chunks: 2, .. })), "{:?}", r.end);
    assert_eq!(seen, 3, "Started and two tokens");

    // The listener goes away after the first token of a stream that would
    // otherwise stall for 30 s: the turn ends as cancelled, at once.
    let stub = started(vec![Reply::Stall(format!("{SSE_HEAD}{}", chunk("one")))]);
    let client = CloudClient::new(config(&stub.base_url)).unwrap();
    let t0 = Instant::now();
    let r = headroom_cloud::run_turn(&client, &history(), &ChatParams::default(), CancellationToken::new(), |e| {
        !matches!(e, CloudEvent::Token { .. })
    })
    .await;
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(r.text, "one");
    assert!(matches!(r.end, Ok(headroom_cloud::Finished { reason: FinishReason::Cancelled, .. })), "{:?}", r.end);
}

#[tokio::test]
async fn a_redirect_is_not_followed_and_the_error_names_where_it_pointed() {
    // Where a 307/308 would carry the approved conversation: it must get nothing.
    let elsewhere = started(vec![answer_reply()]);
    for status in ["307 Temporary Redirect", "308 Permanent Redirect", "302 Found"] {
        let target = format!("{}/chat/completions", elsewhere.base_url);
        let stub = started(vec![json_reply(status, &format!("Location: {target}\r\n"), "")]);
        let (events, err) = run(config(&stub.base_url), CancellationToken::new()).await;
        assert!(events.is_empty(), "{status}: {events:?}");
        match err {
            Some(CloudError::Redirected { status: code, location, .. }) => {
                assert_eq!(code.to_string(), status[..3]);
                assert_eq!(location.as_deref(), Some(target.as_str()));
            }
            other => panic!("{status}: expected Redirected, got {other:?}"),
        }
        assert_eq!(stub.requests().len(), 1, "{status}: asked once, not retried");
    }
    assert!(elsewhere.requests().is_empty(), "nothing reached the redirect's target");
}

fn answer_reply() -> Reply {
    headroom_cloud::testserver::answer(&["never"])
}
