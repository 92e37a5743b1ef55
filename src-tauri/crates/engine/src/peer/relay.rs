//! The ring's hand-offs through the sealed link: MLX's ring cannot encrypt,
//! so each side's ring listens and connects on loopback only, to a relay
//! that carries its bytes over the control connection's channel (Noise's
//! ChaChaPoly, [`super::secure`]). No ring port is reachable from the
//! network: the host's ring connects to its relay's loopback port, which
//! the lender's relay answers by connecting to the lender's ring on its own
//! loopback, and the other way round.
//!
//! One link carries every ring socket, each a channel: a frame is a
//! channel's opening, some of its bytes, or its end. When the link fails
//! (the other Mac gone), every ring socket is shut down, so MLX fails the
//! pass as it does for a lost peer.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::secure::{Cipher, Conn, Framed};
use crate::error::{EngineError, Result};

/// What a frame does to its channel.
const OPEN: u8 = 1;
const DATA: u8 = 2;
const CLOSE: u8 = 3;
/// The most one frame carries of a ring socket's bytes.
const CHUNK: usize = 256 << 10;
/// How long a relay tries to reach this side's ring for a channel the other
/// side opened: the other rank connects as soon as it starts joining, a
/// moment before this one listens.
const LOCAL_CONNECT: Duration = Duration::from_secs(30);

/// A running relay: its loopback port (where this side's ring connects to
/// reach the other rank), until the link ends.
pub(crate) struct Relay {
    /// Where this side's ring connects to reach the other side (loopback).
    pub(crate) port: SocketAddr,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("port", &self.port).finish_non_exhaustive()
    }
}

struct Shared {
    /// The link's write half: the socket and its sealing cipher, one frame at a time.
    writer: Mutex<(TcpStream, Cipher)>,
    /// The ring sockets by channel.
    sockets: Mutex<HashMap<u32, TcpStream>>,
    /// This side's ring listens here (loopback): a channel the other side
    /// opens is connected to it.
    ring: SocketAddr,
}

impl Relay {
    /// Starts relaying over `link` (a control connection whose handshake is
    /// done and on which nothing else is said from now on). `ring` is where
    /// this side's ring listens (loopback); `first_channel` 0 on the host,
    /// 1 on the lender, so the two sides number their channels apart.
    pub(crate) fn start(link: Conn, ring: SocketAddr, first_channel: u32) -> Result<Self> {
        let relay_error = |e: std::io::Error| EngineError::Peer { reason: format!("the ring's relay: {e}") };
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).map_err(relay_error)?;
        let port = listener.local_addr().map_err(relay_error)?;
        // The frames the other side sent right behind its last answer (a
        // channel its ring opened already) stay in the framed reader's buffer.
        let (framed, channel) = link.into_framed();
        let (send, recv) = channel.into_ciphers();
        let _ = framed.stream().set_nodelay(true);
        let writer = framed.stream().try_clone().map_err(relay_error)?;
        let shared = Arc::new(Shared { writer: Mutex::new((writer, send)), sockets: Mutex::default(), ring });
        let reading = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("headroom-relay-link".into())
            .spawn(move || {
                let reason = read_link(&reading, framed, recv);
                tracing::info!("the ring's relay ended: {reason}");
                reading.end();
            })
            .map_err(relay_error)?;
        let accepting = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("headroom-relay-accept".into())
            .spawn(move || accept_ring(&listener, &accepting, first_channel))
            .map_err(relay_error)?;
        Ok(Self { port, shared })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.end();
    }
}

impl Shared {
    fn send(&self, op: u8, channel: u32, bytes: &[u8]) -> Result<()> {
        let mut frame = Vec::with_capacity(bytes.len() + 5);
        frame.push(op);
        frame.extend_from_slice(&channel.to_be_bytes());
        frame.extend_from_slice(bytes);
        let mut w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let sealed = w.1.seal(&frame)?;
        let mut out = Vec::with_capacity(sealed.len() + 4);
        out.extend_from_slice(&u32::try_from(sealed.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(&sealed);
        w.0.write_all(&out).map_err(|e| EngineError::Peer { reason: format!("the ring's relay: {e}") })
    }

    /// Shuts every ring socket and the link down: MLX sees its peer lost.
    fn end(&self) {
        for (_, s) in self.sockets.lock().unwrap_or_else(PoisonError::into_inner).drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
        let _ = self.writer.lock().unwrap_or_else(PoisonError::into_inner).0.shutdown(Shutdown::Both);
    }

    /// Carries what the ring writes on `socket` to the other side as `channel`.
    fn pump(self: &Arc<Self>, channel: u32, mut socket: TcpStream) {
        let me = Arc::clone(self);
        let _ = std::thread::Builder::new().name("headroom-relay-pump".into()).spawn(move || {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match socket.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if me.send(DATA, channel, &buf[..n]).is_err() {
                            me.end();
                            return;
                        }
                    }
                }
            }
            let _ = me.send(CLOSE, channel, &[]);
        });
    }
}

/// Each connection this side's ring makes to the relay's port becomes a
/// channel to the other side. Only loopback can reach the port; the other
/// side connects it to its own ring.
fn accept_ring(listener: &TcpListener, shared: &Arc<Shared>, first_channel: u32) {
    let mut next = first_channel;
    for socket in listener.incoming() {
        let Ok(socket) = socket else { continue };
        if Arc::strong_count(shared) == 1 {
            return;
        }
        let _ = socket.set_nodelay(true);
        let Ok(reader) = socket.try_clone() else { continue };
        let channel = next;
        next = next.wrapping_add(2);
        shared.sockets.lock().unwrap_or_else(PoisonError::into_inner).insert(channel, socket);
        if shared.send(OPEN, channel, &[]).is_err() {
            shared.end();
            return;
        }
        shared.pump(channel, reader);
    }
}

/// Connects to this side's ring, retrying until it listens (within [`LOCAL_CONNECT`]).
fn connect_soon(ring: SocketAddr) -> std::io::Result<TcpStream> {
    let deadline = Instant::now() + LOCAL_CONNECT;
    loop {
        match TcpStream::connect_timeout(&ring, Duration::from_secs(1)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Reads the link's frames until it ends: the reason it ended.
fn read_link(shared: &Arc<Shared>, mut framed: Framed, mut recv: Cipher) -> String {
    loop {
        // The link is idle between turns for as long as the host keeps its model.
        let sealed = match framed.read_frame_by(Instant::now() + Duration::from_secs(365 * 24 * 3600)) {
            Ok(f) => f,
            Err(e) => return e.to_string(),
        };
        let frame = match recv.open(&sealed) {
            Ok(f) => f,
            Err(e) => return e.to_string(),
        };
        let (Some(&op), Some(channel)) = (frame.first(), frame.get(1..5)) else {
            return "a frame too short".into();
        };
        let channel = u32::from_be_bytes([channel[0], channel[1], channel[2], channel[3]]);
        let bytes = &frame[5..];
        match op {
            OPEN => match connect_soon(shared.ring) {
                Ok(socket) => {
                    let _ = socket.set_nodelay(true);
                    let Ok(reader) = socket.try_clone() else { return "cannot read a ring socket".into() };
                    shared.sockets.lock().unwrap_or_else(PoisonError::into_inner).insert(channel, socket);
                    shared.pump(channel, reader);
                }
                Err(e) => return format!("this side's ring at {} does not answer: {e}", shared.ring),
            },
            DATA => {
                let socket = shared
                    .sockets
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&channel)
                    .and_then(|s| s.try_clone().ok());
                let Some(mut socket) = socket else { return format!("bytes for channel {channel}, never opened") };
                if socket.write_all(bytes).is_err() {
                    return format!("the ring's channel {channel} closed here");
                }
            }
            CLOSE => {
                if let Some(s) = shared.sockets.lock().unwrap_or_else(PoisonError::into_inner).remove(&channel) {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
            other => return format!("a frame of kind {other}"),
        }
    }
}

#[cfg(test)]
mod tests;
