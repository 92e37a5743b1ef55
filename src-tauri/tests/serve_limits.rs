//! `headroom serve` under a flood of idle connections with a low open-file
//! limit (`ulimit -n 256`, as a small process budget would be): the
//! connection cap refuses what is beyond it at accept (its log says so),
//! the idle connections are closed at the header deadline, and a real
//! request is still answered. The deadline is shortened with the test knob
//! `HEADROOM_SERVE_HEADER_TIMEOUT_MS` so this takes seconds, not minutes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Idle connections opened: more than the descriptor limit allows at once.
const IDLE: usize = 300;
const HEADER_TIMEOUT_MS: u64 = 1500;

/// Kills the server if the test fails before it is done.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get_models(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET /v1/models HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    reply.starts_with("HTTP/1.1 200").then_some(reply)
}

#[test]
fn headroom_serve_under_ulimit_256_caps_idle_connections_closes_them_and_still_answers() {
    let root = headroom_test_support::scratch("serve-limits");
    // `ulimit -n` in sh lowers both the soft and the hard limit, so the
    // server cannot raise it back: its cap is held to half of 256.
    let child = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -n 256 && exec "$0" serve --port 0"#)
        .arg(env!("CARGO_BIN_EXE_headroom"))
        .env("HEADROOM_DATA_DIR", root.join("data"))
        .env("HF_HUB_CACHE", root.join("empty-hub"))
        .env("HEADROOM_SERVE_HEADER_TIMEOUT_MS", HEADER_TIMEOUT_MS.to_string())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = Running(child);
    let stderr = Arc::new(Mutex::new(String::new()));
    let log = Arc::clone(&stderr);
    let pipe = server.0.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            log.lock().unwrap().push_str(&line);
            log.lock().unwrap().push('\n');
        }
    });
    let mut url = String::new();
    BufReader::new(server.0.stdout.take().unwrap()).read_line(&mut url).unwrap();
    let addr: SocketAddr = url
        .trim()
        .strip_prefix("http://")
        .and_then(|r| r.strip_suffix("/v1"))
        .unwrap_or_else(|| panic!("no URL: {url:?}; stderr: {}", stderr.lock().unwrap()))
        .parse()
        .unwrap();
    assert!(get_models(addr).is_some(), "answers before the flood");

    let t = Instant::now();
    let idle: Vec<TcpStream> =
        (0..IDLE).filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()).collect();
    println!("opened {} of {IDLE} idle connections in {:?}", idle.len(), t.elapsed());
    assert!(idle.len() > 256, "the flood did not reach the limit: {} connections", idle.len());

    let seen = |what: &str| stderr.lock().unwrap().contains(what);
    let waited = Instant::now();
    while !seen("connection cap reached") {
        assert!(waited.elapsed() < Duration::from_secs(10), "no cap in the log: {}", stderr.lock().unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    // A real request is answered once the idle connections' deadline frees
    // their places (it may be refused at accept until then).
    let asked = Instant::now();
    let answered = loop {
        if let Some(reply) = get_models(addr) {
            break reply;
        }
        assert!(asked.elapsed() < Duration::from_secs(20), "never answered; stderr: {}", stderr.lock().unwrap());
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("a real request answered {:?} after the flood", asked.elapsed());
    assert!(answered.contains("\"object\":\"list\""), "{answered}");
    // Every idle connection the server kept was closed by the deadline (or refused at once).
    for mut s in idle {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 64];
        assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)), "an idle connection is still open");
    }
    assert!(matches!(server.0.try_wait(), Ok(None)), "the server exited; stderr: {}", stderr.lock().unwrap());
    let log = stderr.lock().unwrap().clone();
    let cap_line = log.lines().find(|l| l.contains("connection cap reached")).unwrap_or_default();
    println!("{cap_line}");
    assert!(cap_line.contains("(128 open)"), "the cap is half of 256: {cap_line}");
}
