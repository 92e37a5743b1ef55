//! A load test of `headroom serve` on 127.0.0.1, bounded in clients and
//! time (about five seconds): more concurrent requests than
//! `--max-requests` admits, each refused one told to retry, each admitted
//! one answered in full; the process's peak memory within the budget
//! `headroom fit` reports for the model; and Ctrl-C stopping the server
//! within its deadline while a client holds a half-sent request body.
//! Each figure is printed (`--nocapture`), as docs/server.md quotes them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use headroom_server::STOP_DEADLINE;
use serde_json::Value;

use crate::common::headroom;

/// Requests admitted at once (`--max-requests`).
const ADMITTED: usize = 2;
/// Concurrent clients: three times the bound.
const CLIENTS: usize = 6;
/// Tokens each answer is asked for: the tiny demo model decodes about 700
/// a second here, so the first run lasts a good fraction of a second, far
/// longer than the clients take to arrive (they start together).
const MAX_TOKENS: usize = 400;
const CONTEXT: &str = "1024";
/// What the stop may take beyond its stated deadline: the engine's shutdown
/// and the process's exit, on a shared 2-core machine.
const STOP_SLACK: Duration = Duration::from_secs(2);

/// Kills the server if the test fails before it stops it.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// One reply: status, headers (lower-cased names) and body.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

fn request(addr: &str, body: &str) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Sends `raw` and reads the reply to the end (`Connection: close`, so the
/// end of the stream is the end of the body: a short body is caught by the
/// length check below).
fn exchange(addr: &str, raw: &str) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(raw.as_bytes()).unwrap();
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no end of headers: {text}"));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let reply = Reply { status, headers, body: body.to_owned() };
    // A whole body: exactly the length the server declared.
    let declared = reply.header("content-length").and_then(|v| v.parse::<usize>().ok());
    assert_eq!(declared, Some(reply.body.len()), "a cut body: {reply:?}");
    reply
}

/// VmHWM (the peak resident set) of process `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status"));
    kb * 1024
}

/// `headroom fit MODEL --json` at the server's context, on its data folder:
/// (the budget, the predicted peak), in bytes.
fn fit(model: &Path, data: &Path) -> (u64, u64) {
    let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .arg("fit")
        .arg(model)
        .args(["--context", CONTEXT, "--json"])
        .env("HEADROOM_DATA_DIR", data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let budget = v["budget"]["budget_bytes"].as_u64().unwrap_or_else(|| panic!("no budget: {v}"));
    let peak = v["estimate"]["predicted_peak_bytes"].as_u64().unwrap_or_else(|| panic!("no peak: {v}"));
    (budget, peak)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

#[test]
fn headroom_serve_under_load_refuses_beyond_its_bound_stays_in_budget_and_stops_in_time() {
    let root = headroom_test_support::scratch("serve-load");
    let model = root.join("demo-tiny");
    let data = root.join("data");
    let out = headroom(&["demo-model", &model.to_string_lossy(), "--preset", "tiny"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let max_requests = ADMITTED.to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["serve", "--port", "0", "--context", CONTEXT, "--max-requests", &max_requests, "--model"])
        .arg(&model)
        .env("HEADROOM_DATA_DIR", &data)
        .env("HF_HUB_CACHE", root.join("empty-hub"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = Running(child);
    let mut stdout = BufReader::new(server.0.stdout.take().unwrap());
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    let addr = url.trim().trim_start_matches("http://").trim_end_matches("/v1").to_owned();
    assert!(addr.starts_with("127.0.0.1:"), "first line: {url:?}");
    let pid = server.0.id();
    // stderr read as it comes (a full pipe would stall the server's logging).
    let stderr = server.0.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(stderr).read_to_string(&mut text);
        text
    });

    // CLIENTS requests at once, each asking for a long answer.
    let body = serde_json::json!({
        "model": "demo-tiny",
        "messages": [{"role": "user", "content": "Tell me everything about memory."}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    })
    .to_string();
    let start = Arc::new(Barrier::new(CLIENTS));
    let began = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (addr, raw, start) = (addr.clone(), request(&addr, &body), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                let sent = Instant::now();
                let reply = exchange(&addr, &raw);
                (reply, sent.elapsed())
            })
        })
        .collect();
    let replies: Vec<(Reply, Duration)> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let load_took = began.elapsed();

    let (mut accepted, mut refused) = (Vec::new(), Vec::new());
    for (reply, took) in &replies {
        match reply.status {
            200 => {
                let Ok(v) = serde_json::from_str::<Value>(&reply.body) else { panic!("not JSON: {reply:?}") };
                let choice = &v["choices"][0];
                assert!(choice["message"]["content"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
                let tokens = v["usage"]["completion_tokens"].as_u64().unwrap_or(0);
                // Ran to its end: every token asked for, or the model's own stop.
                let reason = choice["finish_reason"].as_str();
                assert!(
                    (reason == Some("length") && tokens == MAX_TOKENS as u64) || (reason == Some("stop") && tokens > 0),
                    "{v}"
                );
                accepted.push((tokens, *took));
            }
            429 => {
                assert_eq!(reply.header("retry-after"), Some("2"), "{reply:?}");
                let v: Value = serde_json::from_str(&reply.body).unwrap();
                assert_eq!(v["error"]["code"], "server_busy", "{v}");
                refused.push(*took);
            }
            other => panic!("status {other}: {reply:?}"),
        }
    }
    let slowest_refusal = refused.iter().max().copied().unwrap_or_default();
    let slowest_answer = accepted.iter().map(|a| a.1).max().unwrap_or_default();
    eprintln!(
        "load: {CLIENTS} clients at once, --max-requests {ADMITTED}: {} answered 200 ({} tokens each, the last after {:.2} s), \
         {} refused 429 with Retry-After (the slowest refusal in {:.0} ms); all done in {:.2} s",
        accepted.len(),
        accepted.iter().map(|a| a.0.to_string()).collect::<Vec<_>>().join("/"),
        slowest_answer.as_secs_f64(),
        refused.len(),
        slowest_refusal.as_secs_f64() * 1e3,
        load_took.as_secs_f64(),
    );
    // The first answer takes far longer than the clients take to arrive, so
    // exactly the bound's worth are admitted and the rest turned away.
    assert_eq!((accepted.len(), refused.len()), (ADMITTED, CLIENTS - ADMITTED));
    assert!(slowest_refusal < slowest_answer, "a refusal waits for nothing: {slowest_refusal:?}");

    // Memory: the process's peak stays within what the fit calls this Mac's budget.
    let hwm = peak_rss(pid);
    let (budget, predicted) = fit(&model, &data);
    eprintln!(
        "memory: headroom serve's VmHWM {:.1} MiB; headroom fit: budget {:.1} MiB, predicted peak of the model {:.1} MiB",
        mib(hwm),
        mib(budget),
        mib(predicted)
    );
    assert!(hwm <= budget, "VmHWM {hwm} over the fit's budget {budget}");

    // A client holds a half-sent body (its headers, half its JSON), then Ctrl-C.
    let raw = request(&addr, &body);
    let split = raw.find("\r\n\r\n").unwrap() + 4 + body.len() / 2;
    let mut holder = TcpStream::connect(&addr).unwrap();
    holder.write_all(&raw.as_bytes()[..split]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(matches!(server.0.try_wait(), Ok(None)), "the server is running");
    let sent = Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap();
    assert!(sent.success());
    let signalled = Instant::now();
    let limit = STOP_DEADLINE + STOP_SLACK;
    let status = loop {
        match server.0.try_wait().unwrap() {
            Some(status) => break status,
            None if signalled.elapsed() < limit + Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            None => panic!("headroom serve still runs {:?} after Ctrl-C", signalled.elapsed()),
        }
    };
    let stopped = signalled.elapsed();
    drop(holder);
    let stderr = log.join().unwrap();
    eprintln!(
        "stop: SIGINT with a half-sent body open: exited ({status}) after {:.2} s (deadline {} s)",
        stopped.as_secs_f64(),
        STOP_DEADLINE.as_secs()
    );
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stopped <= limit, "stopped after {stopped:?}, over {STOP_DEADLINE:?} + {STOP_SLACK:?}: {stderr}");
}
