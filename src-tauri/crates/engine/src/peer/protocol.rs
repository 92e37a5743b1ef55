//! The control connection between a host and the Mac lent to it: one JSON
//! object per line, the host asking and the lender answering. It carries
//! only the pairing questions and the placement; hidden states go over
//! MLX's ring. Every read is bounded (by time and by line length), so a
//! silent or hostile peer cannot hang or flood either side.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

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

/// Writes `message` as one line.
pub fn send<T: Serialize>(stream: &mut TcpStream, message: &T) -> Result<()> {
    let mut line = serde_json::to_vec(message).map_err(|e| peer_error("encoding a message", e))?;
    line.push(b'\n');
    stream.write_all(&line).map_err(|e| peer_error("sending to the peer", e))
}

/// Reads one line within `timeout` and parses it.
pub fn receive<T: for<'de> Deserialize<'de>>(stream: &TcpStream, timeout: Duration) -> Result<T> {
    stream.set_read_timeout(Some(timeout)).map_err(|e| peer_error("setting a read timeout", e))?;
    let mut line = String::new();
    let read = BufReader::new(stream.take(MAX_LINE)).read_line(&mut line);
    match read {
        Ok(0) => Err(EngineError::Peer { reason: "the peer closed the connection".into() }),
        Ok(_) if !line.ends_with('\n') => {
            Err(EngineError::Peer { reason: format!("the peer sent a line over {MAX_LINE} bytes or cut short") })
        }
        Ok(_) => serde_json::from_str(&line).map_err(|e| EngineError::Peer {
            reason: format!("the peer sent something this version does not read: {e}"),
        }),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            Err(EngineError::Peer { reason: format!("the peer did not answer within {} s", timeout.as_secs()) })
        }
        Err(e) => Err(peer_error("reading from the peer", e)),
    }
}

fn peer_error(what: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Peer { reason: format!("{what}: {e}") }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (b, _) = listener.accept().unwrap();
        (a, b)
    }

    #[test]
    fn a_request_and_its_reply_round_trip() {
        let (mut a, mut b) = pair();
        let placement = Placement {
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
        };
        let request = Request::Place { version: VERSION, placement, token: Some("t".into()) };
        send(&mut a, &request).unwrap();
        assert_eq!(receive::<Request>(&b, Duration::from_secs(5)).unwrap(), request);
        send(&mut b, &Reply::Placed { ring: "127.0.0.1:5001".into() }).unwrap();
        assert_eq!(
            receive::<Reply>(&a, Duration::from_secs(5)).unwrap(),
            Reply::Placed { ring: "127.0.0.1:5001".into() }
        );
    }

    #[test]
    fn a_silent_flooding_or_garbled_peer_is_a_typed_error_not_a_hang() {
        let (mut a, b) = pair();
        let silent = receive::<Reply>(&b, Duration::from_millis(200)).unwrap_err();
        assert!(silent.to_string().contains("did not answer"), "{silent}");
        a.write_all(b"{\"kind\": \"placed\"\n").unwrap();
        let garbled = receive::<Reply>(&b, Duration::from_secs(5)).unwrap_err();
        assert!(garbled.to_string().contains("does not read"), "{garbled}");
        a.write_all(&vec![b'x'; usize::try_from(MAX_LINE).unwrap() + 10]).unwrap();
        let flood = receive::<Reply>(&b, Duration::from_secs(5)).unwrap_err();
        assert!(flood.to_string().contains("over"), "{flood}");
        drop(a);
    }
}
