//! The lender against hostile hosts, on loopback: a real lender (this
//! module's service, in this process) and hand-made requests. Each refusal
//! names the field, and the lender answers the next host after it.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use headroom_core::kv::{KvFormat, KvQuant};
use headroom_engine::peer::protocol::VERSION;
use headroom_engine::peer::secure::{self, Identity};
use headroom_engine::peer::{ModelCopy, Placement, Reply, Request};

use super::*;

const GIB: u64 = 1 << 30;

/// A lender on loopback, and its data folder (removed with it).
fn lender(allow: Vec<IpAddr>) -> (Lending, headroom_test_support::Scratch) {
    let data = headroom_test_support::scratch("lend-hostile");
    let config = LendConfig {
        bind: IpAddr::from([127, 0, 0, 1]),
        port: 0,
        allow,
        models: Vec::new(),
        budget: BudgetSource { available_bytes: Some(16 * GIB), ..BudgetSource::default() },
        data_dir: data.to_path_buf(),
        allow_pulls: false,
        advertise: false,
        allow_paired: false,
        // No test here gets as far as a session.
        program: "/nonexistent/headroom".into(),
    };
    (start(config, Box::new(|_| {})).unwrap(), data)
}

fn ask(lending: &Lending, request: &Request) -> Reply {
    ask_as(lending, request, None, &Identity::generate().unwrap())
}

/// A connection from `source` (a loopback address of this machine).
fn connect_from(lending: &Lending, source: Option<IpAddr>) -> TcpStream {
    let to = lending.address;
    match source {
        None => TcpStream::connect(to).unwrap(),
        Some(ip) => {
            let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            socket.bind(&SocketAddr::new(ip, 0).into()).unwrap();
            socket.connect(&to.into()).unwrap();
            socket.into()
        }
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(15)
}

/// One request from `source` as the host whose key is `me`, its answer.
fn ask_as(lending: &Lending, request: &Request, source: Option<IpAddr>, me: &Identity) -> Reply {
    let mut conn = secure::open(connect_from(lending, source), me, soon()).unwrap();
    conn.send(request).unwrap();
    conn.receive(Duration::from_secs(15)).unwrap()
}

/// Pairing from `source` as `me` with `code`: the lender's answer, or the error.
fn pair_as(lending: &Lending, code: &str, source: Option<IpAddr>, me: &Identity) -> Result<Reply, EngineError> {
    let mut conn = secure::pair(connect_from(lending, source), me, code, soon())?;
    conn.send(&Request::Pair { version: VERSION, machine: "Air".into() })?;
    conn.receive(Duration::from_secs(15))
}

fn budget() -> Request {
    Request::Budget { version: VERSION }
}

fn budget_answered(lending: &Lending) -> bool {
    matches!(ask(lending, &budget()), Reply::Budget { .. })
}

fn placement() -> Placement {
    Placement {
        model: ModelCopy {
            path: "/models/x".into(),
            repo: Some("org/x".into()),
            commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
            identity: "00".into(),
        },
        first_layer: 1,
        layers: 2,
        f32: false,
        kernel: "fused".into(),
        kv: KvFormat::Float,
        context: 512,
    }
}

fn place(p: Placement) -> Request {
    Request::Place { version: VERSION, placement: p }
}

fn refusal(reply: Reply) -> String {
    match reply {
        Reply::Refused { message } => message,
        other => panic!("answered {other:?}, not a refusal"),
    }
}

#[test]
fn hostile_placements_are_refused_by_field_and_the_lender_stays_up() {
    let (lending, _data) = lender(Vec::new());
    let quant = |bits, group_size| KvFormat::Quantized(KvQuant { bits, group_size, start: 0 });
    let cases = [
        ("kv", "group size", Placement { kv: quant(4, 0), ..placement() }),
        ("kv", "bits", Placement { kv: quant(99, 64), ..placement() }),
        ("context", "tokens", Placement { context: 1 << 63, ..placement() }),
    ];
    for (field, what, p) in cases {
        let message = refusal(ask(&lending, &place(p)));
        assert!(message.contains(&format!("`{field}`")) && message.contains(what), "{field}: {message}");
        assert!(budget_answered(&lending), "the lender stopped answering after a bad `{field}`");
    }
    // A hub model it has no copy of: pulled only where pulls are allowed.
    let message = refusal(ask(&lending, &place(placement())));
    assert!(message.contains("--allow-pulls"), "{message}");
    assert!(budget_answered(&lending));
}

#[test]
fn a_slow_drip_connection_holds_nothing_and_the_next_host_is_served_within_a_second() {
    let (lending, _data) = lender(Vec::new());
    let to = lending.address;
    // Several hosts that each send a byte of a request every 200 ms, never the end.
    let drippers: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(to).unwrap();
                let mut sent = 0;
                // A frame of 200 bytes announced, then a byte at a time.
                for b in [0u8, 0, 0, 200].iter().chain([b'S'; 96].iter()) {
                    if s.write_all(&[*b]).is_err() {
                        break;
                    }
                    sent += 1;
                    std::thread::sleep(Duration::from_millis(200));
                }
                sent
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    assert!(budget_answered(&lending));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "a real host waited {took:?} beside the drippers");
    // Each dripper is cut at the request's deadline, long before it could finish.
    for d in drippers {
        let sent = d.join().unwrap();
        assert!(sent < 100, "a dripper held its connection for all {sent} bytes");
    }
}

#[test]
fn five_wrong_codes_from_one_source_leave_pairing_on_for_another() {
    // Loopback is not allowed without pairing here.
    let (lending, _data) = lender(vec![IpAddr::from([10, 255, 255, 1])]);
    let code = lending.status().unwrap().code;
    let wrong = if code == "000000" { "111111" } else { "000000" };
    let guesser = (Some(IpAddr::from([127, 0, 0, 2])), Identity::generate().unwrap());
    for _ in 0..pairing::PAIRING_ATTEMPTS {
        // The lender closes a pairing whose code did not check: no answer to read.
        assert!(pair_as(&lending, wrong, guesser.0, &guesser.1).is_err());
    }
    let off = pair_as(&lending, &code, guesser.0, &guesser.1).unwrap_err();
    assert!(off.to_string().contains("pairing is off for that address"), "{off}");
    let host = Identity::generate().unwrap();
    let Reply::Paired { approved, .. } = pair_as(&lending, &code, None, &host).unwrap() else {
        panic!("another host could not pair")
    };
    assert!(!approved, "allowed before this Mac's owner said so");
    // Paired, not yet allowed: refused, saying why; allowed: answered.
    let waiting = refusal(ask_as(&lending, &budget(), None, &host));
    assert!(waiting.contains("has not allowed Air"), "{waiting}");
    let key = secure::to_hex(host.public());
    assert_eq!(lending.status().unwrap().waiting.len(), 1);
    assert!(pairing::answer(&lending.hosts_file(), &key, true).unwrap());
    assert!(lending.status().unwrap().waiting.is_empty());
    assert!(matches!(ask_as(&lending, &budget(), None, &host), Reply::Budget { .. }));
    // Another key (an unpaired host) is refused.
    let unpaired = refusal(ask(&lending, &budget()));
    assert!(unpaired.contains("not paired"), "{unpaired}");
    // Revoked: refused from the next connection.
    assert!(pairing::revoke(&lending.hosts_file(), &key).unwrap());
    let revoked = refusal(ask_as(&lending, &budget(), None, &host));
    assert!(revoked.contains("not paired"), "{revoked}");
}

#[test]
fn a_code_pairs_once_and_the_next_host_needs_the_new_one() {
    let (lending, _data) = lender(vec![IpAddr::from([10, 255, 255, 1])]);
    let code = lending.status().unwrap().code;
    let first = Identity::generate().unwrap();
    assert!(matches!(pair_as(&lending, &code, None, &first).unwrap(), Reply::Paired { .. }));
    let fresh = lending.status().unwrap().code;
    assert_ne!(fresh, code, "the code was spent and is still shown");
    // The same code again, from another host (or the same one): refused.
    let again = pair_as(&lending, &code, None, &Identity::generate().unwrap());
    assert!(again.is_err(), "a spent code paired again: {again:?}");
    assert!(matches!(pair_as(&lending, &fresh, None, &Identity::generate().unwrap()).unwrap(), Reply::Paired { .. }));
    assert_eq!(pairing::hosts(&lending.hosts_file()).len(), 2);
}

#[test]
fn the_host_checks_the_lenders_key_against_its_pin() {
    let (lending, _data) = lender(Vec::new());
    let addr = lending.address.to_string();
    let me = Identity::generate().unwrap();
    let code = lending.status().unwrap().code;
    let paired = headroom_engine::peer::host::pair(&addr, &code, &me, "Air").unwrap();
    let trust = headroom_engine::peer::Trust { identity: me.clone(), pinned: Some(paired.key) };
    // Loopback is allowed by address here, so the budget is answered before the owner says yes.
    assert!(headroom_engine::peer::host::peer_budget(&addr, &trust).is_ok());
    // Another Mac at that address (a key this host never pinned): refused here, before a request.
    let other = *Identity::generate().unwrap().public();
    let wrong = headroom_engine::peer::Trust { identity: me, pinned: Some(other) };
    let e = headroom_engine::peer::host::peer_budget(&addr, &wrong).unwrap_err();
    assert!(matches!(e, EngineError::PeerNotTrusted { .. }), "{e}");
    assert!(e.to_string().contains("not the Mac this one paired with"), "{e}");
}
