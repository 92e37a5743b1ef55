//! A hub-like HTTP server on loopback for tests (never the real hub): the
//! revision API, resolve URLs (LFS files redirect to a CDN path, as the hub
//! does) with HEAD, Range and the `X-Linked-*` headers, and faults on demand:
//! a transfer cut off after N bytes, a stalled one, corrupted bytes; gated
//! repos that want a token, and LFS redirects to another server (a CDN).
//!
//! It runs on its own thread and runtime, so sync tests (which run the
//! `headroom` binary) and async ones use it alike.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::pull::sha256_hex;

/// A file served by the test hub.
#[derive(Debug, Clone)]
struct ServedFile {
    bytes: Arc<Vec<u8>>,
    /// Stored in LFS: served from `/cdn/<sha256>` after a redirect.
    lfs: bool,
    sha256: String,
}

#[derive(Debug, Clone)]
struct ServedRepo {
    commit: String,
    files: Vec<(String, ServedFile)>,
    /// A gated repo: its files need `Authorization: Bearer <this>` (the listing does not, as on the hub).
    gate: Option<String>,
}

/// Something to go wrong, once, on the next download of the file: a GET
/// with no Range or an open-ended one (`bytes=N-`). Header reads (closed
/// ranges) pass untouched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Send the headers (full length) and `after` body bytes, then close the connection.
    CloseAfter { file: String, after: u64 },
    /// Send `after` body bytes, then hang until the client gives up.
    Stall { file: String, after: u64 },
    /// Serve the file with one byte flipped (its hash no longer matches).
    Corrupt { file: String },
}

impl Fault {
    fn file(&self) -> &str {
        match self {
            Fault::CloseAfter { file, .. } | Fault::Stall { file, .. } | Fault::Corrupt { file } => file,
        }
    }
}

/// One request the server saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    /// The `Authorization` header as received (tests check where a token went).
    pub authorization: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    repos: HashMap<String, ServedRepo>,
    /// Faults still to fire, in order.
    faults: Vec<Fault>,
    log: Vec<Logged>,
    /// Body bytes written to clients so far (heads not counted).
    sent: u64,
    /// Base URL LFS redirects point at; `None`: this server's own `/cdn/`.
    cdn: Option<String>,
}

/// The running server; stops when dropped.
#[derive(Debug)]
pub struct TestHub {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl TestHub {
    /// Starts a server on 127.0.0.1 (a free port).
    pub fn start() -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new().name("test-hub".into()).spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = TcpListener::from_std(listener) else { return };
                tokio::select! {
                    _ = stopped => {}
                    () = accept_loop(listener, shared) => {}
                }
            });
        })?;
        Ok(Self { addr, state, stop: Some(stop), thread: Some(thread) })
    }

    /// The base URL to pass as `--endpoint` / `HF_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serves every file under `dir` as repo `id` at a commit derived from
    /// the contents; `*.safetensors` files are LFS files, as on the hub.
    /// Returns the commit sha.
    pub fn add_repo(&self, id: &str, dir: &Path) -> std::io::Result<String> {
        let mut paths = Vec::new();
        collect_files(dir, dir, &mut paths)?;
        paths.sort();
        let mut files = Vec::new();
        let mut fingerprint = String::new();
        for rel in paths {
            let bytes = std::fs::read(dir.join(&rel))?;
            let sha256 = sha256_hex(&bytes);
            fingerprint.push_str(&format!("{rel}:{sha256};"));
            let lfs = rel.ends_with(".safetensors");
            files.push((rel, ServedFile { bytes: Arc::new(bytes), lfs, sha256 }));
        }
        let commit = sha256_hex(fingerprint.as_bytes())[..40].to_owned();
        lock(&self.state).repos.insert(id.to_owned(), ServedRepo { commit: commit.clone(), files, gate: None });
        Ok(commit)
    }

    /// Serves `dir` as a gated repo: listed to anyone, its files only with
    /// `Authorization: Bearer <token>` (401 without one, 403 with another),
    /// with the hub's `X-Error-Code: GatedRepo`.
    pub fn add_gated_repo(&self, id: &str, dir: &Path, token: &str) -> std::io::Result<String> {
        let commit = self.add_repo(id, dir)?;
        if let Some(repo) = lock(&self.state).repos.get_mut(id) {
            repo.gate = Some(token.to_owned());
        }
        Ok(commit)
    }

    /// Points LFS redirects at `base` (another server's `endpoint()`, which
    /// must hold the same files), as the hub points them at its CDN.
    pub fn redirect_lfs_to(&self, base: &str) {
        lock(&self.state).cdn = Some(base.trim_end_matches('/').to_owned());
    }

    /// Queues a fault for the next GET of its file's bytes.
    pub fn add_fault(&self, fault: Fault) {
        lock(&self.state).faults.push(fault);
    }

    /// Every request so far.
    pub fn log(&self) -> Vec<Logged> {
        lock(&self.state).log.clone()
    }

    /// Body bytes this server has written so far, every request together
    /// (a test's measure of what a client downloaded).
    pub fn bytes_sent(&self) -> u64 {
        lock(&self.state).sent
    }
}

impl Drop for TestHub {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(serve(stream, Arc::clone(&state)));
    }
}

/// A parsed request: method, path, Range and Authorization headers.
async fn read_request(stream: &mut TcpStream) -> Option<Logged> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.ok()?;
        if n == 0 || buf.len() > 64 << 10 {
            return None;
        }
        buf.extend_from_slice(&byte[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(&str, &str)> = lines.filter_map(|l| l.split_once(':')).collect();
    let header = |name: &str| {
        headers.iter().find(|(k, _)| k.trim().eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_owned())
    };
    Some(Logged { method, path, range: header("range"), authorization: header("authorization") })
}

/// The response head and the body (a slice of a file, or a small text).
struct Reply {
    status: &'static str,
    headers: Vec<(String, String)>,
    body: Arc<Vec<u8>>,
    span: (usize, usize),
    fault: Option<Fault>,
}

impl Reply {
    fn text(status: &'static str, headers: Vec<(String, String)>, body: &str) -> Self {
        let body = Arc::new(body.as_bytes().to_vec());
        let len = body.len();
        Self { status, headers, body, span: (0, len), fault: None }
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let Some(req) = read_request(&mut stream).await else { return };
    let reply = {
        let mut s = lock(&state);
        s.log.push(req.clone());
        route(&mut s, &req)
    };
    let head_only = req.method == "HEAD";
    let (start, end) = reply.span;
    let mut head = format!("HTTP/1.1 {}\r\nConnection: close\r\nContent-Length: {}\r\n", reply.status, end - start);
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    if stream.write_all(head.as_bytes()).await.is_err() || head_only {
        return;
    }
    let body = &reply.body[start..end];
    // Counted as queued for writing: a fault's cut-off body counts whole,
    // which only makes the count an upper bound.
    lock(&state).sent += body.len() as u64;
    match reply.fault {
        Some(Fault::CloseAfter { after, .. }) => {
            let n = usize::try_from(after).unwrap_or(usize::MAX).min(body.len());
            let _ = stream.write_all(&body[..n]).await;
            let _ = stream.flush().await;
            // Dropping the stream closes it mid-body.
        }
        Some(Fault::Stall { after, .. }) => {
            let n = usize::try_from(after).unwrap_or(usize::MAX).min(body.len());
            let _ = stream.write_all(&body[..n]).await;
            let _ = stream.flush().await;
            std::future::pending::<()>().await;
        }
        Some(Fault::Corrupt { .. }) => {
            let mut bad = body.to_vec();
            if let Some(b) = bad.last_mut() {
                *b ^= 0xff;
            }
            let _ = stream.write_all(&bad).await;
        }
        None => {
            let _ = stream.write_all(body).await;
        }
    }
    let _ = stream.shutdown().await;
}

fn not_found(code: &str) -> Reply {
    Reply::text("404 Not Found", vec![("X-Error-Code".into(), code.into())], "{\"error\":\"not found\"}")
}

fn route(s: &mut State, req: &Logged) -> Reply {
    let path = req.path.split('?').next().unwrap_or_default();
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let Some((id, rev)) = rest.split_once("/revision/") else { return not_found("EntryNotFound") };
        let Some(repo) = s.repos.get(id) else { return not_found("RepoNotFound") };
        if rev != "main" && rev != repo.commit {
            return not_found("RevisionNotFound");
        }
        let siblings: Vec<String> = repo.files.iter().map(|(p, _)| format!("{{\"rfilename\":\"{p}\"}}")).collect();
        let json = format!("{{\"id\":\"{id}\",\"sha\":\"{}\",\"siblings\":[{}]}}", repo.commit, siblings.join(","));
        return Reply::text("200 OK", vec![("Content-Type".into(), "application/json".into())], &json);
    }
    if let Some(sha) = path.strip_prefix("/cdn/") {
        let found =
            s.repos.values().flat_map(|r| &r.files).find(|(_, f)| f.sha256 == sha).map(|(p, f)| (p.clone(), f.clone()));
        let Some((name, file)) = found else { return not_found("EntryNotFound") };
        return bytes_reply(s, req, &name, &file, Vec::new());
    }
    // /{org}/{name}/resolve/{rev}/{file}
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    let [org, name, "resolve", rev, file] = parts.as_slice() else { return not_found("EntryNotFound") };
    let Some(repo) = s.repos.get(&format!("{org}/{name}")).cloned() else { return not_found("RepoNotFound") };
    if *rev != "main" && *rev != repo.commit {
        return not_found("RevisionNotFound");
    }
    let file_name = file.replace("%20", " ");
    let Some((_, f)) = repo.files.iter().find(|(p, _)| *p == file_name) else { return not_found("EntryNotFound") };
    if let Some(gate) = &repo.gate {
        // The hub's answers for a gated repo's files: 401 without a token, 403 with one it refuses.
        let status = match req.authorization.as_deref() {
            None => "401 Unauthorized",
            Some(a) if a.strip_prefix("Bearer ") != Some(gate.as_str()) => "403 Forbidden",
            Some(_) => "",
        };
        if !status.is_empty() {
            let code = ("X-Error-Code".to_owned(), "GatedRepo".to_owned());
            let message = ("X-Error-Message".to_owned(), format!("Access to model {org}/{name} is restricted."));
            return Reply::text(status, vec![code, message], "{\"error\":\"gated\"}");
        }
    }
    let commit = ("X-Repo-Commit".to_owned(), repo.commit.clone());
    if f.lfs {
        // The hub's answer for an LFS file: a redirect carrying the blob's sha256 and size.
        let mut r = Reply::text("302 Found", vec![commit], "");
        let cdn = s.cdn.as_deref().unwrap_or_default();
        r.headers.push(("Location".into(), format!("{cdn}/cdn/{}", f.sha256)));
        r.headers.push(("X-Linked-Etag".into(), format!("\"{}\"", f.sha256)));
        r.headers.push(("X-Linked-Size".into(), f.bytes.len().to_string()));
        r.headers.push(("ETag".into(), "\"pointer-file-etag\"".into()));
        return r;
    }
    // A regular git file: its ETag is the git blob id, as on the hub.
    let etag = ("ETag".to_owned(), format!("\"{}\"", git_blob_id(&f.bytes)));
    bytes_reply(s, req, &file_name, f, vec![commit, etag])
}

/// A file's bytes, honouring `Range: bytes=a-b` / `bytes=a-`, with the next fault for it.
fn bytes_reply(s: &mut State, req: &Logged, name: &str, f: &ServedFile, mut headers: Vec<(String, String)>) -> Reply {
    let total = f.bytes.len();
    let mut status = "200 OK";
    let mut span = (0, total);
    if let Some(spec) = req.range.as_deref().and_then(|r| r.strip_prefix("bytes=")) {
        let (a, b) = spec.split_once('-').unwrap_or((spec, ""));
        let start: usize = a.parse().unwrap_or(0);
        let end: usize = b.parse::<usize>().map_or(total, |e| (e + 1).min(total));
        if start >= total || start >= end {
            return Reply::text(
                "416 Range Not Satisfiable",
                vec![("Content-Range".into(), format!("bytes */{total}"))],
                "",
            );
        }
        status = "206 Partial Content";
        span = (start, end);
        headers.push(("Content-Range".into(), format!("bytes {start}-{}/{total}", end - 1)));
    }
    headers.push(("Accept-Ranges".into(), "bytes".into()));
    let download = req.range.as_deref().is_none_or(|r| r.ends_with('-'));
    let fault = if req.method == "GET" && download {
        s.faults.iter().position(|x| x.file() == name).map(|i| s.faults.remove(i))
    } else {
        None
    };
    Reply { status, headers, body: Arc::clone(&f.bytes), span, fault }
}

/// Git's id of a blob: the sha1 of `blob <size>\0` and the bytes (what the
/// hub sends as a regular file's ETag).
pub fn git_blob_id(bytes: &[u8]) -> String {
    use sha2::Digest;
    let mut hasher = sha1::Sha1::new();
    hasher.update(format!("blob {}\0", bytes.len()).as_bytes());
    hasher.update(bytes);
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}
