//! An OpenAI-compatible endpoint on loopback for tests (never a real one):
//! each connection gets the next scripted [`Reply`] (the last one repeats),
//! and every request is recorded, so a test can check what was sent. The
//! client's own tests script failures with it; the app's privacy tests check
//! that no sensitive value ever reaches it.
//!
//! It runs on its own thread and runtime, so sync tests (which run the
//! `headroom` binary, or the app through Tauri's mock runtime) and async
//! ones use it alike.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the stub does with one connection.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Writes these parts, pausing after each, then closes.
    Parts(Vec<(String, Duration)>),
    /// Writes the part, then keeps the connection open and silent.
    Stall(String),
}

/// Writes `text` at once and closes.
pub fn once(text: impl Into<String>) -> Reply {
    Reply::Parts(vec![(text.into(), Duration::ZERO)])
}

/// A JSON response with `status` (e.g. "401 Unauthorized").
pub fn json_reply(status: &str, extra_headers: &str, body: &str) -> Reply {
    once(format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra_headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ))
}

/// The head of a 200 server-sent-event response.
pub const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";

/// One streamed piece of the answer.
pub fn chunk(text: &str) -> String {
    let v = serde_json::json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
    format!("data: {v}\n\n")
}

/// The chunk that ends the answer.
pub fn finish(reason: &str) -> String {
    let v = serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]});
    format!("data: {v}\n\n")
}

/// The usage chunk (`stream_options.include_usage`).
pub fn usage(prompt: u32, completion: u32) -> String {
    let v = serde_json::json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}});
    format!("data: {v}\n\n")
}

/// A whole streamed answer made of `pieces`: chunks, `stop`, usage, `[DONE]`.
pub fn answer(pieces: &[&str]) -> Reply {
    let mut s = SSE_HEAD.to_owned();
    for p in pieces {
        s.push_str(&chunk(p));
    }
    s.push_str(&finish("stop"));
    s.push_str(&usage(11, u32::try_from(pieces.len()).unwrap_or(u32::MAX)));
    s.push_str("data: [DONE]\n\n");
    once(s)
}

/// The running stub; stops when dropped.
#[derive(Debug)]
pub struct Stub {
    /// The base URL to configure, `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    requests: Arc<Mutex<Vec<String>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Stub {
    /// Listens on a free loopback port.
    pub fn start(replies: Vec<Reply>) -> std::io::Result<Self> {
        if replies.is_empty() {
            return Err(std::io::Error::other("the stub needs at least one reply"));
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let thread = std::thread::Builder::new().name("cloud-stub".into()).spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = TcpListener::from_std(listener) else { return };
                tokio::select! {
                    _ = stopped => {}
                    () = accept_loop(listener, replies, seen) => {}
                }
            });
        })?;
        Ok(Self { base_url: format!("http://127.0.0.1:{port}/v1"), requests, stop: Some(stop), thread: Some(thread) })
    }

    /// Every request so far, headers and body, as text.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Every request body so far (the JSON the client sent).
    pub fn bodies(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| r.split_once("\r\n\r\n").map_or_else(String::new, |(_, body)| body.to_owned()))
            .collect()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, replies: Vec<Reply>, seen: Arc<Mutex<Vec<String>>>) {
    let mut n = 0;
    while let Ok((socket, _)) = listener.accept().await {
        let reply = replies[n.min(replies.len() - 1)].clone();
        n += 1;
        let seen = Arc::clone(&seen);
        tokio::spawn(async move { serve(socket, reply, &seen).await });
    }
}

async fn serve(mut socket: TcpStream, reply: Reply, seen: &Mutex<Vec<String>>) {
    let request = read_request(&mut socket).await;
    seen.lock().unwrap_or_else(PoisonError::into_inner).push(request);
    match reply {
        Reply::Parts(parts) => {
            for (part, pause) in parts {
                if socket.write_all(part.as_bytes()).await.is_err() {
                    return;
                }
                let _ = socket.flush().await;
                tokio::time::sleep(pause).await;
            }
            let _ = socket.shutdown().await;
        }
        Reply::Stall(part) => {
            let _ = socket.write_all(part.as_bytes()).await;
            let _ = socket.flush().await;
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
    }
}

/// Headers and body (by Content-Length) of one request, as text.
async fn read_request(socket: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let mut head_end = None;
    loop {
        if head_end.is_none() {
            head_end = buf.windows(4).position(|w| w == b"\r\n\r\n");
        }
        if let Some(end) = head_end {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                break;
            }
        }
        match socket.read(&mut tmp).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}
