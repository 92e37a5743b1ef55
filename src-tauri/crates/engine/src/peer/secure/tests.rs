use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use super::*;

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

fn sockets() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (b, _) = listener.accept().unwrap();
    (a, b)
}

/// A later connection between `host` and `lender`: (host's end, lender's end).
fn session(host: &Identity, lender: &Identity) -> (Conn, Conn) {
    let (a, b) = sockets();
    let lender = lender.clone();
    let serving = std::thread::spawn(move || {
        let (framed, hello) = hello(b, soon()).unwrap();
        let Hello::Session(first) = hello else { panic!("not a session") };
        accept(framed, &first, &lender, soon()).unwrap()
    });
    let host_end = open(a, host, soon()).unwrap();
    (host_end, serving.join().unwrap())
}

/// Pairing with `typed` against a lender showing `shown`.
fn pairing(host: &Identity, lender: &Identity, typed: &str, shown: &str) -> (Result<Conn>, Result<Conn>) {
    let (a, b) = sockets();
    let (lender, shown) = (lender.clone(), shown.to_owned());
    let serving = std::thread::spawn(move || {
        let (framed, hello) = hello(b, soon()).unwrap();
        let Hello::Pair(first) = hello else { panic!("not a pairing") };
        accept_pairing(framed, &first, &lender, &shown, soon())
    });
    let host_end = pair(a, host, typed, soon()).and_then(|mut conn| {
        // The lender's first sealed answer is what proves it knew the code.
        conn.receive_bytes_by(soon())?;
        Ok(conn)
    });
    let mut lender_end = serving.join().unwrap();
    if let Ok(conn) = &mut lender_end {
        conn.send_bytes(b"paired").unwrap();
    }
    (host_end, lender_end)
}

#[test]
fn pairing_with_the_code_gives_each_side_the_others_key() {
    let (host, lender) = (Identity::generate().unwrap(), Identity::generate().unwrap());
    let (a, b) = sockets();
    let lender_id = lender.clone();
    let serving = std::thread::spawn(move || {
        let (framed, Hello::Pair(first)) = hello(b, soon()).unwrap() else { panic!("not a pairing") };
        let mut conn = accept_pairing(framed, &first, &lender_id, "482913", soon()).unwrap();
        conn.send(&"hello host").unwrap();
        *conn.remote()
    });
    let mut conn = pair(a, &host, " 482913 ", soon()).unwrap();
    assert_eq!(conn.receive::<String>(Duration::from_secs(5)).unwrap(), "hello host");
    assert!(same_key(conn.remote(), lender.public()));
    assert!(same_key(&serving.join().unwrap(), host.public()));
}

#[test]
fn a_wrong_code_fails_on_both_sides() {
    let (host, lender) = (Identity::generate().unwrap(), Identity::generate().unwrap());
    let (host_end, lender_end) = pairing(&host, &lender, "111111", "482913");
    assert!(matches!(lender_end, Err(EngineError::PairingCode)), "{lender_end:?}");
    assert!(host_end.is_err());
}

#[test]
fn a_later_connection_is_sealed_both_ways_and_names_both_keys() {
    let (host, lender) = (Identity::generate().unwrap(), Identity::generate().unwrap());
    let (mut h, mut l) = session(&host, &lender);
    assert!(same_key(h.remote(), lender.public()) && same_key(l.remote(), host.public()));
    h.send(&vec![1, 2, 3]).unwrap();
    assert_eq!(l.receive::<Vec<i32>>(Duration::from_secs(5)).unwrap(), vec![1, 2, 3]);
    l.send(&"back").unwrap();
    assert_eq!(h.receive::<String>(Duration::from_secs(5)).unwrap(), "back");
}

#[test]
fn a_message_right_behind_another_is_not_lost_and_a_worker_continues_the_channel() {
    let (host, lender) = (Identity::generate().unwrap(), Identity::generate().unwrap());
    let (mut h, l) = session(&host, &lender);
    h.send(&1).unwrap();
    h.send(&2).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut l = l;
    assert_eq!(l.receive::<i32>(Duration::from_secs(5)).unwrap(), 1);
    // The second is buffered here: handing the socket on would lose it.
    assert!(l.into_parts().is_err());
    let (mut h, l) = session(&host, &lender);
    // A worker process continues from the parts (its channel as JSON, as
    // the lender hands it over).
    let (stream, channel) = l.into_parts().unwrap();
    let channel: Channel = serde_json::from_str(&serde_json::to_string(&channel).unwrap()).unwrap();
    let mut worker = Conn::resume(stream, channel);
    h.send(&"placed?").unwrap();
    assert_eq!(worker.receive::<String>(Duration::from_secs(5)).unwrap(), "placed?");
    worker.send(&"placed").unwrap();
    assert_eq!(h.receive::<String>(Duration::from_secs(5)).unwrap(), "placed");
}

/// Forwards a host's bytes to `to`, keeping a copy of what the host sent.
fn recording_proxy(to: std::net::SocketAddr) -> (std::net::SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&sent);
    std::thread::spawn(move || {
        let (mut client, _) = listener.accept().unwrap();
        let mut server = TcpStream::connect(to).unwrap();
        let (mut client_r, mut server_w) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        let upward = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = client_r.read(&mut buf) {
                if n == 0 || server_w.write_all(&buf[..n]).is_err() {
                    break;
                }
                keep.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let mut buf = [0u8; 4096];
        while let Ok(n) = server.read(&mut buf) {
            if n == 0 || client.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = upward.join();
    });
    (addr, sent)
}

#[test]
fn a_captured_handshake_and_request_replayed_get_nothing() {
    let (host, lender) = (Identity::generate().unwrap(), Identity::generate().unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let lender_addr = listener.local_addr().unwrap();
    let lender_id = lender.clone();
    // The lender serves two connections: the real host's, then the replay.
    let serving = std::thread::spawn(move || {
        let mut results = Vec::new();
        for _ in 0..2 {
            let (stream, _) = listener.accept().unwrap();
            let result = hello(stream, soon()).and_then(|(framed, hello)| {
                let Hello::Session(first) = hello else { panic!("not a session") };
                let mut conn = accept(framed, &first, &lender_id, soon())?;
                conn.receive::<String>(Duration::from_secs(2))
            });
            results.push(result);
        }
        results
    });
    let (proxy, captured) = recording_proxy(lender_addr);
    let mut conn = open(TcpStream::connect(proxy).unwrap(), &host, soon()).unwrap();
    conn.send(&"place layers 3..30".to_owned()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let bytes = captured.lock().unwrap().clone();
    assert!(!bytes.windows(6).any(|w| w == b"layers"), "the request crossed in clear");
    // An eavesdropper sends the same bytes again on a connection of its own.
    let mut replay = TcpStream::connect(lender_addr).unwrap();
    replay.write_all(&bytes).unwrap();
    let results = serving.join().unwrap();
    assert_eq!(results[0].as_deref().unwrap(), "place layers 3..30");
    let refused = results[1].as_ref().unwrap_err();
    assert!(refused.to_string().contains("did not check"), "{refused}");
}

#[test]
fn a_tampered_frame_is_refused() {
    let (host, lender) = (Identity::generate().unwrap(), Identity::generate().unwrap());
    let (mut h, mut l) = session(&host, &lender);
    let mut sealed = h.channel.send.seal(b"\"hello\"").unwrap();
    sealed[0] ^= 1;
    h.framed.write_frame(&sealed).unwrap();
    let e = l.receive::<String>(Duration::from_secs(5)).unwrap_err();
    assert!(e.to_string().contains("not sealed by the peer"), "{e}");
}

#[test]
fn a_silent_dripping_flooding_or_foreign_peer_is_a_typed_error_not_a_hang() {
    let (a, b) = sockets();
    let mut framed = Framed::new(b);
    let silent = framed.read_frame_by(Instant::now() + Duration::from_millis(200)).unwrap_err();
    assert!(silent.to_string().contains("did not answer"), "{silent}");
    // A byte every 100 ms never ends a frame: the deadline is the whole frame's.
    let dripper = std::thread::spawn(move || {
        let mut a = a;
        // A frame of 200 bytes announced, then a byte at a time.
        for byte in [0u8, 0, 0, 200].into_iter().chain([b'x'; 11]) {
            if a.write_all(&[byte]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        a
    });
    let started = Instant::now();
    let drip = framed.read_frame_by(Instant::now() + Duration::from_millis(500)).unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(1200), "{:?}", started.elapsed());
    assert!(drip.to_string().contains("did not answer"), "{drip}");
    drop(dripper.join().unwrap());
    let (mut a, b) = sockets();
    a.write_all(&u32::MAX.to_be_bytes()).unwrap();
    let flood = Framed::new(b).read_frame_by(soon()).unwrap_err();
    assert!(flood.to_string().contains("over"), "{flood}");
    // Someone speaking another protocol (the old JSON lines).
    let (mut a, b) = sockets();
    a.write_all(b"{\"kind\":\"budget\",\"version\":2}\n").unwrap();
    assert!(hello(b, Instant::now() + Duration::from_millis(500)).is_err());
}

#[test]
fn keys_are_kept_private_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("identity.key");
    let first = Identity::load_or_create(&path).unwrap();
    let again = Identity::load_or_create(&path).unwrap();
    assert!(same_key(first.public(), again.public()));
    assert!(!same_key(first.public(), Identity::generate().unwrap().public()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let code = pairing_code().unwrap();
    assert!(code.len() == 6 && code.bytes().all(|b| b.is_ascii_digit()), "{code}");
}
