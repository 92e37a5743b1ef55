//! The server's accept loop: every connection is served by hyper's HTTP/1
//! builder with a timer, so its deadlines hold, and no more than
//! `max_connections` are open at once.
//!
//! axum's `serve` builds hyper without a timer, which leaves hyper's header
//! read timeout inert; the wrapper that replaced it stopped its clock at the
//! first "\r\n\r\n" seen anywhere, so a client that sent only "\r\n\r\n"
//! (httparse skips leading blank lines) or that dribbled its second request
//! on a keep-alive connection kept that connection for ever. hyper's timer
//! starts whenever the connection waits for a request head (the first, and
//! each one after a response) and stops only once a whole head is parsed,
//! so the same deadline is also the keep-alive idle timeout. A streamed
//! answer is not bounded by it (no head is being read then); bodies have
//! their own deadline (routes.rs).
//!
//! Every connection is a task and a file descriptor, in the app's process
//! too, where descriptors are what SQLite, model loads and logs need: beyond
//! the cap a connection is closed as it is accepted.

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// How long a connection has to send a request's headers: its first, and
/// each next one on a kept-alive connection (counted from the end of the
/// previous response).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once unless configured otherwise (also bounded by
/// half the process's descriptor limit, [`crate::limits`]).
pub const DEFAULT_MAX_CONNECTIONS: usize = 128;
/// At most one "connection cap reached" line this often: a flood of
/// connections must not become a flood of log lines.
const CAP_LOG_EVERY: Duration = Duration::from_secs(1);

/// Accepts until `stop` fires, then tells every open connection to finish
/// its response and close; returns once all have (the caller bounds that
/// wait with its own deadline).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    max_connections: usize,
    stop: impl std::future::Future<Output = ()>,
) {
    let places = Arc::new(Semaphore::new(max_connections));
    // Dropping `stopping` tells the connections to end gracefully; each holds
    // a `done` receiver, so `done_tx.closed()` resolves when the last is gone.
    let (stopping, _) = watch::channel(());
    let (done_tx, done_rx) = watch::channel(());
    let mut refusals = Refusals::default();
    let mut stop = pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: pause instead of spinning.
                Err(e) => {
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let Ok(place) = Arc::clone(&places).try_acquire_owned() else {
            refusals.note(max_connections, peer);
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        let mut stopping = stopping.subscribe();
        let done = done_rx.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(header_timeout).keep_alive(true);
            let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
            let mut stopped = false;
            loop {
                tokio::select! {
                    served = conn.as_mut() => {
                        if let Err(e) = served {
                            tracing::debug!("connection from {peer} ended: {e}");
                        }
                        break;
                    }
                    changed = stopping.changed(), if !stopped => {
                        // The sender is dropped: the server is stopping.
                        if changed.is_err() {
                            stopped = true;
                            conn.as_mut().graceful_shutdown();
                        }
                    }
                }
            }
            drop((place, done));
        });
    }
    drop(listener);
    drop(stopping);
    drop(done_rx);
    done_tx.closed().await;
}

/// Refused connections since the last "cap reached" line.
#[derive(Debug, Default)]
struct Refusals {
    since_logged: u64,
    logged_at: Option<Instant>,
}

impl Refusals {
    fn note(&mut self, max: usize, peer: SocketAddr) {
        self.since_logged += 1;
        if self.logged_at.is_some_and(|at| at.elapsed() < CAP_LOG_EVERY) {
            return;
        }
        tracing::warn!(
            "connection cap reached ({max} open): refused {} connection(s), the last from {peer}",
            self.since_logged
        );
        self.since_logged = 0;
        self.logged_at = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use axum::routing::get;

    use super::*;

    const TIMEOUT: Duration = Duration::from_millis(600);
    /// What closing may take beyond the deadline on a shared, busy machine.
    const SLACK: Duration = Duration::from_secs(3);

    /// Serves `GET /` ("ok") with [`TIMEOUT`] and `cap` connections on a
    /// runtime of its own; dropping the sender stops it.
    fn start(cap: usize) -> (SocketAddr, tokio::sync::oneshot::Sender<()>, std::thread::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = TcpListener::from_std(listener).unwrap();
                let app = Router::new().route("/", get(|| async { "ok" }));
                serve(listener, app, TIMEOUT, cap, async move {
                    let _ = stop_rx.await;
                })
                .await;
            });
        });
        (addr, stop_tx, thread)
    }

    /// Reads until the server closes the connection (or resets it); how long that took.
    fn until_closed(s: &mut TcpStream, limit: Duration) -> Duration {
        let t = Instant::now();
        s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let mut buf = [0u8; 1024];
        loop {
            assert!(t.elapsed() < limit, "still open after {:?}", t.elapsed());
            match s.read(&mut buf) {
                Ok(0) => return t.elapsed(),
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => return t.elapsed(),
            }
        }
    }

    fn get_ok(addr: SocketAddr) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        reply
    }

    #[test]
    fn a_connection_that_sends_only_blank_lines_is_closed_at_the_deadline() {
        let (addr, stop, thread) = start(8);
        let mut s = TcpStream::connect(addr).unwrap();
        // httparse skips leading blank lines: this is no request head at all.
        s.write_all(b"\r\n\r\n").unwrap();
        let took = until_closed(&mut s, TIMEOUT + SLACK);
        assert!(took + Duration::from_millis(100) >= TIMEOUT, "closed before its deadline: {took:?}");
        assert!(get_ok(addr).starts_with("HTTP/1.1 200"), "others are still served");
        drop(stop);
        thread.join().unwrap();
    }

    #[test]
    fn a_kept_alive_connection_that_dribbles_its_next_request_is_closed_at_the_deadline() {
        let (addr, stop, thread) = start(8);
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut first = [0u8; 512];
        let n = s.read(&mut first).unwrap();
        let first = String::from_utf8_lossy(&first[..n]);
        assert!(first.starts_with("HTTP/1.1 200") && first.ends_with("ok"), "{first}");
        // The next request, one header line every 100 ms: it never ends, and
        // the bytes keep coming, so only a deadline on the whole head closes it.
        s.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        let t = Instant::now();
        let mut buf = [0u8; 256];
        s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        loop {
            assert!(t.elapsed() < TIMEOUT + SLACK, "still open after {:?}", t.elapsed());
            if s.write_all(b"X-Drip: 1\r\n").is_err() {
                break;
            }
            match s.read(&mut buf) {
                Ok(0) => break,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                // A 408 or a reset: either way the server is done with it.
                _ => break,
            }
        }
        assert!(t.elapsed() + Duration::from_millis(100) >= TIMEOUT, "closed before its deadline: {:?}", t.elapsed());
        drop(stop);
        thread.join().unwrap();
    }

    #[test]
    fn an_idle_kept_alive_connection_is_closed_at_the_deadline() {
        let (addr, stop, thread) = start(8);
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut first = [0u8; 512];
        assert!(s.read(&mut first).unwrap() > 0);
        let took = until_closed(&mut s, TIMEOUT + SLACK);
        assert!(took + Duration::from_millis(100) >= TIMEOUT, "closed before its deadline: {took:?}");
        drop(stop);
        thread.join().unwrap();
    }

    #[test]
    fn connections_beyond_the_cap_are_closed_as_they_are_accepted() {
        let (addr, stop, thread) = start(2);
        let held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
        // Let the loop take both places before the third arrives.
        std::thread::sleep(Duration::from_millis(200));
        let mut third = TcpStream::connect(addr).unwrap();
        let took = until_closed(&mut third, TIMEOUT);
        assert!(took < TIMEOUT / 2, "the third waited {took:?}: it was not refused at accept");
        // Closing the held ones frees their places.
        drop(held);
        std::thread::sleep(Duration::from_millis(200));
        assert!(get_ok(addr).starts_with("HTTP/1.1 200"));
        drop(stop);
        thread.join().unwrap();
    }
}
