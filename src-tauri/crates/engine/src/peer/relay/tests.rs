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
