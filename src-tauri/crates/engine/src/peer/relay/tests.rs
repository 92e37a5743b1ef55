use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use super::super::secure::{self, Hello, Identity};
use super::*;

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

/// A sealed link: (host's end, lender's end).
fn link() -> (Conn, Conn) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (b, _) = listener.accept().unwrap();
    let lender = Identity::generate().unwrap();
    let serving = std::thread::spawn(move || {
        let (framed, Hello::Session(first)) = secure::hello(b, soon()).unwrap() else { panic!("not a session") };
        secure::accept(framed, &first, &lender, soon()).unwrap()
    });
    let host = secure::open(a, &Identity::generate().unwrap(), soon()).unwrap();
    (host, serving.join().unwrap())
}

#[test]
fn a_ring_socket_on_one_side_reaches_the_ring_on_the_other_both_ways() {
    let (host, lender) = link();
    // Each side's "ring": a loopback listener.
    let host_ring = TcpListener::bind("127.0.0.1:0").unwrap();
    let lender_ring = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_relay = Relay::start(host, host_ring.local_addr().unwrap(), 0).unwrap();
    let lender_relay = Relay::start(lender, lender_ring.local_addr().unwrap(), 1).unwrap();
    assert!(host_relay.port.ip().is_loopback() && lender_relay.port.ip().is_loopback());
    // The host's ring connects to its relay; the lender's ring is connected to.
    let mut from_host = TcpStream::connect(host_relay.port).unwrap();
    let (mut at_lender, _) = lender_ring.accept().unwrap();
    let big: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    from_host.write_all(&big).unwrap();
    let mut got = vec![0u8; big.len()];
    at_lender.read_exact(&mut got).unwrap();
    assert_eq!(got, big);
    at_lender.write_all(b"back").unwrap();
    let mut back = [0u8; 4];
    from_host.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"back");
    // And the other way: the lender's ring connects to its relay.
    let mut from_lender = TcpStream::connect(lender_relay.port).unwrap();
    let (mut at_host, _) = host_ring.accept().unwrap();
    from_lender.write_all(b"hello host").unwrap();
    let mut hello = [0u8; 10];
    at_host.read_exact(&mut hello).unwrap();
    assert_eq!(&hello, b"hello host");
    // The other side gone (its relay dropped): this side's ring sockets end.
    drop(lender_relay);
    from_host.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = [0u8; 1];
    assert!(matches!(from_host.read(&mut rest), Ok(0) | Err(_)), "a ring socket outlived the link");
}

/// One pass's traffic at the default model's width (SmolLM2: 576 wide,
/// f32): the host sends the 5-int header and the hidden state, the lender
/// answers the last row's output and its compute time. The median of
/// `rounds` such exchanges between a "host" socket and a "lender" echo.
fn pass_median(host: &mut TcpStream, rounds: usize) -> Duration {
    const WIDTH: usize = 576 * 4;
    let (header, state) = (vec![1u8; 20], vec![7u8; WIDTH]);
    let mut back = vec![0u8; WIDTH + 4];
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        host.write_all(&header).unwrap();
        host.write_all(&state).unwrap();
        host.read_exact(&mut back).unwrap();
        times.push(started.elapsed());
    }
    times.sort();
    times[rounds / 2]
}

/// The lender's side: reads a pass, answers it, until the host goes.
fn echo_passes(mut lender: TcpStream) {
    std::thread::spawn(move || {
        let _ = lender.set_nodelay(true);
        let mut pass = vec![0u8; 20 + 576 * 4];
        let answer = vec![3u8; 576 * 4 + 4];
        while lender.read_exact(&mut pass).is_ok() {
            if lender.write_all(&answer).is_err() {
                return;
            }
        }
    });
}

/// What the relay adds to a pass, against the same pass on a plain
/// loopback socket (what MLX's ring did before): a measurement, printed
/// (docs/two-macs.md). `cargo test -p headroom-engine --lib relay -- --ignored --nocapture`
#[test]
#[ignore = "a measurement: run it by name"]
fn what_the_relay_adds_to_a_pass() {
    let rounds = 2000;
    let ring = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut plain = TcpStream::connect(ring.local_addr().unwrap()).unwrap();
    plain.set_nodelay(true).unwrap();
    echo_passes(ring.accept().unwrap().0);
    let (host, lender) = link();
    let lender_ring = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_relay = Relay::start(host, TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(), 0).unwrap();
    let _lender_relay = Relay::start(lender, lender_ring.local_addr().unwrap(), 1).unwrap();
    let mut relayed = TcpStream::connect(host_relay.port).unwrap();
    relayed.set_nodelay(true).unwrap();
    echo_passes(lender_ring.accept().unwrap().0);
    // Warm both, then alternate so that both see the same load.
    pass_median(&mut plain, 200);
    pass_median(&mut relayed, 200);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        a.push(pass_median(&mut plain, rounds / 5));
        b.push(pass_median(&mut relayed, rounds / 5));
    }
    a.sort();
    b.sort();
    let (plain_ms, relayed_ms) = (a[2].as_secs_f64() * 1e3, b[2].as_secs_f64() * 1e3);
    println!(
        "a pass at width 576 (f32): plain loopback {plain_ms:.3} ms, through the relays {relayed_ms:.3} ms, added {:.3} ms",
        relayed_ms - plain_ms
    );
    assert!(relayed_ms > 0.0);
}
