//! The lender against hostile hosts, on loopback: a real lender (this
//! module's service, in this process) and hand-made requests. Each refusal
//! names the field, and the lender answers the next host after it.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use headroom_core::kv::{KvFormat, KvQuant};
use headroom_engine::peer::protocol::{Conn, VERSION};
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
        // No test here gets as far as a session.
        program: "/nonexistent/headroom".into(),
    };
    (start(config, Box::new(|_| {})).unwrap(), data)
}

fn ask(lending: &Lending, request: &Request) -> Reply {
    ask_from(lending, request, None)
}

/// One request from `source` (a loopback address of this machine), its answer.
fn ask_from(lending: &Lending, request: &Request, source: Option<IpAddr>) -> Reply {
    let to: SocketAddr = lending.status.address.parse().unwrap();
    let stream = match source {
        None => TcpStream::connect(to).unwrap(),
        Some(ip) => {
            let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            socket.bind(&SocketAddr::new(ip, 0).into()).unwrap();
            socket.connect(&to.into()).unwrap();
            socket.into()
        }
    };
    let mut conn = Conn::new(stream);
    conn.send(request).unwrap();
    conn.receive(Duration::from_secs(15)).unwrap()
}

fn budget_answered(lending: &Lending) -> bool {
    matches!(ask(lending, &Request::Budget { version: VERSION, token: None }), Reply::Budget { .. })
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
        host_ring: "127.0.0.1:5000".into(),
    }
}

fn place(p: Placement) -> Request {
    Request::Place { version: VERSION, placement: p, token: None }
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
    let to: SocketAddr = lending.status.address.parse().unwrap();
    // Several hosts that each send a byte of a request every 200 ms, never the end.
    let drippers: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(to).unwrap();
                let mut sent = 0;
                for b in b"{\"kind\": \"budget\", \"version\": 2".iter().cycle().take(100) {
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
    let code = lending.status.code.clone();
    let wrong = if code == "000000" { "111111" } else { "000000" };
    let pair = |code: &str| Request::Pair { version: VERSION, code: code.to_owned() };
    let guesser = Some(IpAddr::from([127, 0, 0, 2]));
    for _ in 0..pairing::PAIRING_ATTEMPTS {
        assert_eq!(refusal(ask_from(&lending, &pair(wrong), guesser)), "wrong pairing code");
    }
    assert!(refusal(ask_from(&lending, &pair(&code), guesser)).contains("pairing is off for that address"));
    let Reply::Paired { token, .. } = ask(&lending, &pair(&code)) else { panic!("another host could not pair") };
    let answered = ask(&lending, &Request::Budget { version: VERSION, token: Some(token) });
    assert!(matches!(answered, Reply::Budget { .. }), "{answered:?}");
    let unpaired = refusal(ask(&lending, &Request::Budget { version: VERSION, token: None }));
    assert!(unpaired.contains("not paired"), "{unpaired}");
}
