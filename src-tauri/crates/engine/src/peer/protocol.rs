//! The control connection between a host and the Mac lent to it: one JSON
//! object per line, the host asking and the lender answering. It carries
//! only the pairing questions and the placement; hidden states go over
//! MLX's ring. Every read is bounded (by time and by line length), so a
//! silent or hostile peer cannot hang or flood either side.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use headroom_core::fit::BudgetInputs;
use headroom_core::kv::KvFormat;
use serde::{Deserialize, Serialize};

use super::copy::ModelCopy;
use crate::error::{EngineError, Result};

/// The protocol's version: a host and a lender of different versions refuse
/// each other up front rather than misreading a field.
pub const VERSION: u32 = 2;

/// The longest line either side reads: a placement is a few hundred bytes.
const MAX_LINE: u64 = 64 << 10;

/// What a host asks a lender.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Request {
    /// Pairs this host with the lender: `code` is the one `headroom lend`
    /// shows; the answer is a token the host presents from then on.
    Pair { version: u32, code: String },
    /// This Mac's budget for a model (what the fit here would use).
    Budget {
        version: u32,
        /// The pairing's token (none from a host the lender allows by address).
        #[serde(default)]
        token: Option<String>,
    },
    /// Run a layer range of a model for the host.
    Place {
        version: u32,
        placement: Placement,
        #[serde(default)]
        token: Option<String>,
    },
}

impl Request {
    /// The pairing token the request presents.
    pub fn token(&self) -> Option<&str> {
        match self {
            Self::Budget { token, .. } | Self::Place { token, .. } => token.as_deref(),
            Self::Pair { .. } => None,
        }
    }
}

/// A layer range of a model, as the host placed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// The model: where the host's copy came from and what it is; the
    /// lender runs its own copy with the same identity.
    pub model: ModelCopy,
    /// The first layer the lender runs; it runs every layer from there to the end.
    pub first_layer: usize,
    /// The model's layers in all (checked against the lender's copy).
    pub layers: usize,
    /// Whether floats are computed in f32 (the host's `--dtype`).
    pub f32: bool,
    /// The quantized-matmul kernel (`QuantKernel::as_str`); both sides must
    /// multiply alike for the output to be the one-Mac output.
    pub kernel: String,
    /// How the KV cache stores keys and values.
    pub kv: KvFormat,
    /// The context the split was fitted for (the lender checks its share at it).
    pub context: usize,
    /// Where the host's end of the ring listens (`ip:port`).
    pub host_ring: String,
}

/// The largest context a placement may name: the pass header carries
/// positions as `i32`.
pub const MAX_CONTEXT: usize = i32::MAX as usize;
/// The most layers a placement may name (the largest models have under 200).
pub const MAX_LAYERS: usize = 4096;
/// The longest path, repo, commit, identity or kernel name a placement may carry.
const MAX_FIELD: usize = 4096;

impl Placement {
    /// Every field checked and bounded before a lender reads or sizes
    /// anything from it (the KV format through the validator the host's
    /// settings go through); the error names the field.
    pub fn check(&self) -> Result<()> {
        let bad = |field: &'static str, reason: String| Err(EngineError::BadPlacement { field, reason });
        if !(1..=MAX_LAYERS).contains(&self.layers) {
            return bad("layers", format!("{} is not between 1 and {MAX_LAYERS}", self.layers));
        }
        if self.first_layer == 0 || self.first_layer >= self.layers {
            return bad("first_layer", format!("{} is not a split point of {} layers", self.first_layer, self.layers));
        }
        if !(1..=MAX_CONTEXT).contains(&self.context) {
            return bad("context", format!("{} tokens is not between 1 and {MAX_CONTEXT}", self.context));
        }
        if let KvFormat::Quantized(q) = self.kv {
            if let Err(e) = KvFormat::quantized(q.bits.into(), q.group_size.into(), q.start) {
                return bad("kv", e.to_string());
            }
        }
        if crate::quant::QuantKernel::from_name(&self.kernel).is_none() {
            return bad("kernel", format!("unknown kernel {:?}", self.kernel.chars().take(64).collect::<String>()));
        }
        if self.host_ring.parse::<std::net::SocketAddr>().is_err() {
            return bad("host_ring", "not an ip:port address".into());
        }
        let id = &self.model.identity;
        if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return bad("model.identity", "not a hex identity of at most 64 digits".into());
        }
        let long = [
            ("model.path", self.model.path.as_os_str().len()),
            ("model.repo", self.model.repo.as_ref().map_or(0, String::len)),
            ("model.commit", self.model.commit.as_ref().map_or(0, String::len)),
        ];
        if let Some((field, len)) = long.into_iter().find(|&(_, len)| len > MAX_FIELD) {
            return bad(field, format!("{len} bytes, over {MAX_FIELD}"));
        }
        Ok(())
    }
}

/// What a lender answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    /// Its budget now.
    Budget { version: u32, machine: String, budget: BudgetInputs },
    /// The range is loaded; the lender's end of the ring listens at `ring`.
    Placed { ring: String },
    /// The lender has no copy of the model and is pulling it from the hub
    /// (after checking that its share fits): sent every few seconds until
    /// the copy is complete, so the host knows the lender is alive.
    Pulling { done_bytes: u64, total_bytes: u64 },
    /// Paired: the token to present from now on.
    Paired { token: String, machine: String },
    /// Not placed, and why (its own fit verdict with its numbers, a missing
    /// copy of the model, another version).
    Refused { message: String },
}

/// One control connection, read through ONE buffer for its whole life: a
/// buffer made per message would swallow the bytes of a message that
/// arrived right behind the one it read.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl Conn {
    pub fn new(stream: TcpStream) -> Self {
        Self { stream, buffer: Vec::new() }
    }

    /// The socket (its addresses, its shutdown).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// The socket alone, to hand to a session; refused while bytes the peer
    /// sent ahead are still unread here (they would be lost on the way).
    pub fn into_stream(self) -> Result<TcpStream> {
        if self.buffer.is_empty() {
            Ok(self.stream)
        } else {
            Err(EngineError::Peer { reason: "the peer sent more before it was answered".into() })
        }
    }

    /// Writes `message` as one line.
    pub fn send<T: Serialize>(&mut self, message: &T) -> Result<()> {
        let mut line = serde_json::to_vec(message).map_err(|e| peer_error("encoding a message", e))?;
        line.push(b'\n');
        self.stream.write_all(&line).map_err(|e| peer_error("sending to the peer", e))
    }

    /// Reads one line within `timeout` and parses it.
    pub fn receive<T: for<'de> Deserialize<'de>>(&mut self, timeout: Duration) -> Result<T> {
        self.receive_by(Instant::now() + timeout)
    }

    /// Reads one line by `deadline`, the whole line (a peer that drips a
    /// byte at a time gets no more time than one that sends nothing), and
    /// parses it.
    pub fn receive_by<T: for<'de> Deserialize<'de>>(&mut self, deadline: Instant) -> Result<T> {
        let line = self.line_by(deadline)?;
        serde_json::from_slice(&line).map_err(|e| EngineError::Peer {
            reason: format!("the peer sent something this version does not read: {e}"),
        })
    }

    fn line_by(&mut self, deadline: Instant) -> Result<Vec<u8>> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let rest = self.buffer.split_off(end + 1);
                return Ok(std::mem::replace(&mut self.buffer, rest));
            }
            if self.buffer.len() as u64 > MAX_LINE {
                return Err(EngineError::Peer { reason: format!("the peer sent a line over {MAX_LINE} bytes") });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(silent());
            }
            self.stream.set_read_timeout(Some(left)).map_err(|e| peer_error("setting a read timeout", e))?;
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(EngineError::Peer { reason: "the peer closed the connection".into() }),
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return Err(silent()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(peer_error("reading from the peer", e)),
            }
        }
    }
}

fn silent() -> EngineError {
    EngineError::Peer { reason: "the peer did not answer in time".into() }
}

fn peer_error(what: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Peer { reason: format!("{what}: {e}") }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    fn pair() -> (Conn, Conn) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (b, _) = listener.accept().unwrap();
        (Conn::new(a), Conn::new(b))
    }

    pub(crate) fn placement() -> Placement {
        Placement {
            model: ModelCopy {
                path: "/models/x.gguf".into(),
                repo: Some("org/x".into()),
                commit: None,
                identity: "ab".into(),
            },
            first_layer: 15,
            layers: 30,
            f32: false,
            kernel: "fused".into(),
            kv: KvFormat::Float,
            context: 4096,
            host_ring: "127.0.0.1:5000".into(),
        }
    }

    #[test]
    fn a_request_and_its_reply_round_trip() {
        let (mut a, mut b) = pair();
        let request = Request::Place { version: VERSION, placement: placement(), token: Some("t".into()) };
        a.send(&request).unwrap();
        assert_eq!(b.receive::<Request>(Duration::from_secs(5)).unwrap(), request);
        b.send(&Reply::Placed { ring: "127.0.0.1:5001".into() }).unwrap();
        assert_eq!(
            a.receive::<Reply>(Duration::from_secs(5)).unwrap(),
            Reply::Placed { ring: "127.0.0.1:5001".into() }
        );
    }

    #[test]
    fn each_placement_field_out_of_bounds_is_refused_by_name() {
        placement().check().unwrap();
        let quant = |bits, group_size| KvFormat::Quantized(headroom_core::kv::KvQuant { bits, group_size, start: 0 });
        let cases: Vec<(&str, Placement)> = vec![
            ("kv", Placement { kv: quant(4, 0), ..placement() }),
            ("kv", Placement { kv: quant(99, 64), ..placement() }),
            ("context", Placement { context: 1 << 63, ..placement() }),
            ("context", Placement { context: 0, ..placement() }),
            ("layers", Placement { layers: 1 << 40, ..placement() }),
            ("first_layer", Placement { first_layer: 30, ..placement() }),
            ("kernel", Placement { kernel: "x".repeat(10_000), ..placement() }),
            ("host_ring", Placement { host_ring: "nowhere".into(), ..placement() }),
        ];
        for (field, p) in cases {
            let e = p.check().unwrap_err();
            assert!(matches!(&e, EngineError::BadPlacement { field: f, .. } if *f == field), "{field}: {e}");
            assert!(e.to_string().contains(&format!("`{field}`")), "{e}");
        }
    }

    #[test]
    fn a_message_right_behind_another_is_not_lost() {
        let (mut a, mut b) = pair();
        let first = Reply::Pulling { done_bytes: 1, total_bytes: 2 };
        let second = Reply::Placed { ring: "127.0.0.1:5001".into() };
        // One write: both lines arrive in the same segment.
        let mut both = serde_json::to_vec(&first).unwrap();
        both.push(b'\n');
        both.extend(serde_json::to_vec(&second).unwrap());
        both.push(b'\n');
        a.stream.write_all(&both).unwrap();
        assert_eq!(b.receive::<Reply>(Duration::from_secs(5)).unwrap(), first);
        assert!(b.into_stream().is_err(), "the second is still buffered and must not be dropped");
        let (mut a, mut b) = pair();
        a.stream.write_all(&both).unwrap();
        assert_eq!(b.receive::<Reply>(Duration::from_secs(5)).unwrap(), first);
        assert_eq!(b.receive::<Reply>(Duration::from_secs(5)).unwrap(), second);
    }

    #[test]
    fn a_silent_dripping_flooding_or_garbled_peer_is_a_typed_error_not_a_hang() {
        let (mut a, mut b) = pair();
        let silent = b.receive::<Reply>(Duration::from_millis(200)).unwrap_err();
        assert!(silent.to_string().contains("did not answer"), "{silent}");
        // A byte every 100 ms never ends a line: the deadline is the whole line's.
        let dripper = std::thread::spawn(move || {
            for _ in 0..15 {
                if a.stream.write_all(b" ").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            a
        });
        let started = Instant::now();
        let drip = b.receive::<Reply>(Duration::from_millis(500)).unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(1200), "{:?}", started.elapsed());
        assert!(drip.to_string().contains("did not answer"), "{drip}");
        let mut a = dripper.join().unwrap();
        b.buffer.clear();
        a.stream.write_all(b"{\"kind\": \"placed\"\n").unwrap();
        let garbled = b.receive::<Reply>(Duration::from_secs(5)).unwrap_err();
        assert!(garbled.to_string().contains("does not read"), "{garbled}");
        a.stream.write_all(&vec![b'x'; usize::try_from(MAX_LINE).unwrap() + 10]).unwrap();
        let flood = b.receive::<Reply>(Duration::from_secs(5)).unwrap_err();
        assert!(flood.to_string().contains("over"), "{flood}");
    }
}
