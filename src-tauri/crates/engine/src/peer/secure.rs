//! The link between two Macs, encrypted and mutually authenticated: each
//! Mac's identity is one long-term X25519 key ([`Identity`]); pairing runs a
//! PAKE (SPAKE2) on the code the lender shows and feeds its key to a Noise
//! handshake as the pre-shared key, so each side learns the other's key
//! only through someone who knew the code, and pins it; every later
//! connection is a Noise XX handshake whose keys each side checks against
//! its pins. After the handshake everything is ChaChaPoly frames
//! ([`Conn`]): the code never crosses the wire, nor anything in clear.
//!
//! Frames are a 4-byte big-endian length and that many bytes, each read
//! within a deadline and bounded in size, so a silent or hostile peer can
//! neither hang nor flood either side.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::ChaCha20Poly1305;
use serde::{Deserialize, Serialize};
use spake2::{Ed25519Group, Spake2};
use subtle::ConstantTimeEq;

use crate::error::{EngineError, Result};

/// Every later connection: both sides send their static keys, encrypted,
/// and check the other's against their pins.
const NOISE: &str = "Noise_XX_25519_ChaChaPoly_BLAKE2s";
/// Pairing: the same pattern with the PAKE's key mixed in, so the statics
/// exchanged are bound to knowing the code.
const NOISE_PAIR: &str = "Noise_XXpsk3_25519_ChaChaPoly_BLAKE2s";
/// The first frame's first byte: what the connection is for.
const HELLO_SESSION: u8 = b'S';
const HELLO_PAIR: u8 = b'P';
/// The lender's answer to a pairing hello: its PAKE message follows, or a
/// refusal (pairing off for that address) in words.
const PAIR_GOES_ON: u8 = b'K';
const PAIR_REFUSED: u8 = b'R';
/// The largest frame either side reads (a placement is a few hundred
/// bytes; a ring relay's chunk at most this).
pub const MAX_FRAME: usize = 1 << 20;
/// ChaChaPoly's tag.
const TAG: usize = 16;

/// A Mac's public key, as pinned by the other.
pub type PublicKey = [u8; 32];

/// This Mac's long-term key pair.
#[derive(Clone)]
pub struct Identity {
    secret: [u8; 32],
    public: PublicKey,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").field("public", &fingerprint(&self.public)).finish_non_exhaustive()
    }
}

impl Identity {
    /// A fresh key pair from the OS's random source.
    pub fn generate() -> Result<Self> {
        let pair = builder(NOISE)?.generate_keypair().map_err(noise_error)?;
        Self::from_secret(&pair.private)
    }

    fn from_secret(secret: &[u8]) -> Result<Self> {
        let secret: [u8; 32] = secret
            .try_into()
            .map_err(|_| EngineError::Peer { reason: "an identity key of the wrong length".into() })?;
        let public = curve25519_public(&secret)?;
        Ok(Self { secret, public })
    }

    /// The key kept in `path` (mode 0600), made there the first time.
    pub fn load_or_create(path: &Path) -> std::io::Result<Self> {
        if let Ok(hex) = std::fs::read_to_string(path) {
            if let Some(id) = from_hex(hex.trim()).and_then(|secret| Self::from_secret(&secret).ok()) {
                return Ok(id);
            }
            tracing::warn!("{} holds no identity key; a new one is made", path.display());
        }
        let id = Self::generate().map_err(std::io::Error::other)?;
        write_private(path, to_hex(&id.secret).as_bytes())?;
        Ok(id)
    }

    /// The public half, what the other Mac pins.
    pub fn public(&self) -> &PublicKey {
        &self.public
    }
}

/// The public key of an X25519 secret.
fn curve25519_public(secret: &[u8; 32]) -> Result<PublicKey> {
    Ok(curve25519_dalek::MontgomeryPoint::mul_base_clamped(*secret).to_bytes())
}

/// Whether two keys are the same, in time that does not say where they differ.
pub fn same_key(a: &PublicKey, b: &PublicKey) -> bool {
    a.ct_eq(b).into()
}

/// A key as it is written and shown: 64 hex digits.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 32 bytes from 64 hex digits.
pub fn from_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// A short form of a key for people to compare (the first 8 bytes).
pub fn fingerprint(key: &PublicKey) -> String {
    key[..8].chunks(2).map(to_hex).collect::<Vec<_>>().join(":")
}

/// `N` bytes from the OS's random source.
pub fn random<const N: usize>() -> Result<[u8; N]> {
    let mut out = [0u8; N];
    getrandom::getrandom(&mut out).map_err(|e| EngineError::Peer { reason: format!("no random source: {e}") })?;
    Ok(out)
}

/// A six-digit pairing code, uniformly drawn.
pub fn pairing_code() -> Result<String> {
    loop {
        let n = u32::from_le_bytes(random::<4>()?);
        // Rejects the top of the range so that every code is as likely.
        if n < u32::MAX - u32::MAX % 1_000_000 {
            return Ok(format!("{:06}", n % 1_000_000));
        }
    }
}

/// Writes `bytes` to `path` whole (through a temporary file), readable by
/// this user only.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let partial = path.with_extension("partial");
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(&partial)?.write_all(bytes)?;
    }
    std::fs::rename(partial, path)
}

fn builder(pattern: &'static str) -> Result<snow::Builder<'static>> {
    Ok(snow::Builder::new(pattern.parse().map_err(noise_error)?))
}

// By value: it is passed to `map_err` by name at every Noise call.
#[allow(clippy::needless_pass_by_value)]
fn noise_error(e: snow::Error) -> EngineError {
    EngineError::Peer { reason: format!("the secure link failed: {e}") }
}

fn peer_error(what: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Peer { reason: format!("{what}: {e}") }
}

fn silent() -> EngineError {
    EngineError::Peer { reason: "the peer did not answer in time".into() }
}

/// A socket read as frames through ONE buffer for its whole life: a buffer
/// made per message would swallow the bytes of a message that arrived right
/// behind the one it read.
#[derive(Debug)]
pub struct Framed {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl Framed {
    pub fn new(stream: TcpStream) -> Self {
        Self { stream, buffer: Vec::new() }
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub fn write_frame(&mut self, bytes: &[u8]) -> Result<()> {
        let len = u32::try_from(bytes.len()).map_err(|_| peer_error("sending to the peer", "a frame too long"))?;
        let mut frame = Vec::with_capacity(bytes.len() + 4);
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(bytes);
        self.stream.write_all(&frame).map_err(|e| peer_error("sending to the peer", e))
    }

    /// Reads one frame whole by `deadline` (a peer that drips a byte at a
    /// time gets no more time than one that sends nothing).
    pub fn read_frame_by(&mut self, deadline: Instant) -> Result<Vec<u8>> {
        let mut chunk = [0u8; 16 << 10];
        loop {
            if self.buffer.len() >= 4 {
                let len = u32::from_be_bytes([self.buffer[0], self.buffer[1], self.buffer[2], self.buffer[3]]) as usize;
                if len > MAX_FRAME {
                    return Err(EngineError::Peer {
                        reason: format!("the peer sent a frame of {len} bytes, over {MAX_FRAME}"),
                    });
                }
                if self.buffer.len() >= 4 + len {
                    let rest = self.buffer.split_off(4 + len);
                    let mut frame = std::mem::replace(&mut self.buffer, rest);
                    frame.drain(..4);
                    return Ok(frame);
                }
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

/// One direction's cipher: Noise's ChaChaPoly transport (a 64-bit counter
/// as the nonce, no associated data), kept here rather than in snow so that
/// a session worker can continue a channel its lender's handshake made.
#[derive(Clone, Serialize, Deserialize)]
pub struct Cipher {
    #[serde(with = "hex32")]
    key: [u8; 32],
    nonce: u64,
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cipher").field("nonce", &self.nonce).finish_non_exhaustive()
    }
}

impl Cipher {
    fn new(key: [u8; 32]) -> Self {
        Self { key, nonce: 0 }
    }

    fn nonce(&mut self) -> Result<chacha20poly1305::Nonce> {
        let n = self.nonce;
        self.nonce = n.checked_add(1).ok_or_else(|| peer_error("the secure link", "its nonces are spent"))?;
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&n.to_le_bytes());
        Ok(nonce.into())
    }

    pub fn seal(&mut self, plain: &[u8]) -> Result<Vec<u8>> {
        let nonce = self.nonce()?;
        ChaCha20Poly1305::new((&self.key).into())
            .encrypt(&nonce, Payload { msg: plain, aad: &[] })
            .map_err(|_| peer_error("the secure link", "encryption failed"))
    }

    pub fn open(&mut self, sealed: &[u8]) -> Result<Vec<u8>> {
        if sealed.len() < TAG {
            return Err(peer_error("the secure link", "a frame too short to be sealed"));
        }
        let nonce = self.nonce()?;
        ChaCha20Poly1305::new((&self.key).into())
            .decrypt(&nonce, Payload { msg: sealed, aad: &[] })
            .map_err(|_| EngineError::Peer {
                reason: "the secure link failed: a frame that was not sealed by the peer (tampered, replayed or out of order)".into(),
            })
    }
}

mod hex32 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(key: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::to_hex(key))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let hex = String::deserialize(d)?;
        super::from_hex(&hex).ok_or_else(|| serde::de::Error::custom("not 64 hex digits"))
    }
}

/// Both directions of an established link, and whom it is with.
#[derive(Clone, Serialize, Deserialize)]
pub struct Channel {
    send: Cipher,
    recv: Cipher,
    #[serde(with = "hex32")]
    remote: PublicKey,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel").field("remote", &fingerprint(&self.remote)).finish_non_exhaustive()
    }
}

impl Channel {
    fn from_handshake(mut hs: snow::HandshakeState) -> Result<Self> {
        let remote: PublicKey = hs
            .get_remote_static()
            .and_then(|k| k.try_into().ok())
            .ok_or_else(|| peer_error("the secure link", "the peer sent no key"))?;
        let initiator = hs.is_initiator();
        let (to_responder, to_initiator) = hs.dangerously_get_raw_split();
        let (send, recv) = if initiator { (to_responder, to_initiator) } else { (to_initiator, to_responder) };
        Ok(Self { send: Cipher::new(send), recv: Cipher::new(recv), remote })
    }

    /// The other Mac's key, as its handshake proved it.
    pub fn remote(&self) -> &PublicKey {
        &self.remote
    }

    /// The two directions, for a relay that runs each on its own thread.
    pub fn into_ciphers(self) -> (Cipher, Cipher) {
        (self.send, self.recv)
    }
}

/// One control connection after its handshake: JSON messages, each one
/// sealed frame.
#[derive(Debug)]
pub struct Conn {
    framed: Framed,
    channel: Channel,
}

impl Conn {
    /// A channel a session worker continues (its lender made the handshake).
    pub fn resume(stream: TcpStream, channel: Channel) -> Self {
        Self { framed: Framed::new(stream), channel }
    }

    /// The socket (its addresses, its shutdown).
    pub fn stream(&self) -> &TcpStream {
        self.framed.stream()
    }

    /// The other Mac's key.
    pub fn remote(&self) -> &PublicKey {
        self.channel.remote()
    }

    /// The socket and the channel, to hand to a session; refused while
    /// bytes the peer sent ahead are still unread here (they would be lost).
    pub fn into_parts(self) -> Result<(TcpStream, Channel)> {
        if self.framed.buffer.is_empty() {
            Ok((self.framed.stream, self.channel))
        } else {
            Err(EngineError::Peer { reason: "the peer sent more before it was answered".into() })
        }
    }

    /// A copy of the socket and the channel as they stand, for a session
    /// worker to continue while this one is dropped unused; refused while
    /// bytes the peer sent ahead are unread here.
    pub fn hand_over(&self) -> Result<(TcpStream, Channel)> {
        if !self.framed.buffer.is_empty() {
            return Err(EngineError::Peer { reason: "the peer sent more before it was answered".into() });
        }
        let stream = self.framed.stream.try_clone().map_err(|e| peer_error("handing the connection over", e))?;
        Ok((stream, self.channel.clone()))
    }

    /// The framed socket, with whatever the peer sent ahead still in its
    /// buffer, and the channel: for a relay that goes on reading it.
    pub fn into_framed(self) -> (Framed, Channel) {
        (self.framed, self.channel)
    }

    /// Sends raw bytes, sealed.
    pub fn send_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        let sealed = self.channel.send.seal(bytes)?;
        self.framed.write_frame(&sealed)
    }

    /// Receives raw bytes by `deadline`.
    pub fn receive_bytes_by(&mut self, deadline: Instant) -> Result<Vec<u8>> {
        let sealed = self.framed.read_frame_by(deadline)?;
        self.channel.recv.open(&sealed)
    }

    /// Writes `message`, sealed.
    pub fn send<T: Serialize>(&mut self, message: &T) -> Result<()> {
        let json = serde_json::to_vec(message).map_err(|e| peer_error("encoding a message", e))?;
        self.send_bytes(&json)
    }

    /// Reads one message within `timeout`.
    pub fn receive<T: for<'de> Deserialize<'de>>(&mut self, timeout: Duration) -> Result<T> {
        self.receive_by(Instant::now() + timeout)
    }

    /// Reads one message by `deadline`, the whole of it, and parses it.
    pub fn receive_by<T: for<'de> Deserialize<'de>>(&mut self, deadline: Instant) -> Result<T> {
        let bytes = self.receive_bytes_by(deadline)?;
        serde_json::from_slice(&bytes).map_err(|e| EngineError::Peer {
            reason: format!("the peer sent something this version does not read: {e}"),
        })
    }
}

/// The host's side of a later connection: the handshake, and the lender's
/// key it proved (the caller checks it against its pin).
pub fn open(stream: TcpStream, me: &Identity, deadline: Instant) -> Result<Conn> {
    let mut framed = Framed::new(stream);
    let mut hs = builder(NOISE)?.local_private_key(&me.secret).build_initiator().map_err(noise_error)?;
    let mut buf = vec![0u8; 65535];
    let n = hs.write_message(&[], &mut buf).map_err(noise_error)?;
    framed.write_frame(&[&[HELLO_SESSION], &buf[..n]].concat())?;
    initiator_rest(&mut framed, &mut hs, deadline)?;
    let channel = Channel::from_handshake(hs)?;
    Ok(Conn { framed, channel })
}

/// `<- e, ee, s, es` then `-> s, se` (and the PAKE's key, pairing).
fn initiator_rest(framed: &mut Framed, hs: &mut snow::HandshakeState, deadline: Instant) -> Result<()> {
    let mut buf = vec![0u8; 65535];
    let two = framed.read_frame_by(deadline)?;
    hs.read_message(&two, &mut buf).map_err(|_| EngineError::Peer {
        reason: "the secure link failed: the peer's handshake did not check (not a lender of this version, or someone in between)".into(),
    })?;
    let n = hs.write_message(&[], &mut buf).map_err(noise_error)?;
    framed.write_frame(&buf[..n])
}

/// The host's side of pairing with the `code` the lender shows: the
/// connection (its channel bound to the code) and the lender's key.
pub fn pair(stream: TcpStream, me: &Identity, code: &str, deadline: Instant) -> Result<Conn> {
    let mut framed = Framed::new(stream);
    let (spake, first) = Spake2::<Ed25519Group>::start_a(
        &spake2::Password::new(code.trim().as_bytes()),
        &spake2::Identity::new(b"headroom host"),
        &spake2::Identity::new(b"headroom lender"),
    );
    framed.write_frame(&[&[HELLO_PAIR], first.as_slice()].concat())?;
    let answer = framed.read_frame_by(deadline)?;
    let answer = match answer.split_first() {
        Some((&PAIR_GOES_ON, rest)) => rest,
        Some((&PAIR_REFUSED, why)) => {
            return Err(EngineError::PeerRefused {
                peer: String::new(),
                message: String::from_utf8_lossy(&why[..why.len().min(512)]).into_owned(),
            })
        }
        _ => return Err(EngineError::Peer { reason: "the peer does not speak this protocol".into() }),
    };
    let key = spake.finish(answer).map_err(|e| peer_error("pairing", e))?;
    let mut hs =
        builder(NOISE_PAIR)?.local_private_key(&me.secret).psk(3, &key).build_initiator().map_err(noise_error)?;
    let mut buf = vec![0u8; 65535];
    let n = hs.write_message(&[], &mut buf).map_err(noise_error)?;
    framed.write_frame(&buf[..n])?;
    initiator_rest(&mut framed, &mut hs, deadline)?;
    let channel = Channel::from_handshake(hs)?;
    Ok(Conn { framed, channel })
}

/// What a host's first frame asks of a lender.
#[derive(Debug)]
pub enum Hello {
    /// A later connection (its handshake's first message).
    Session(Vec<u8>),
    /// Pairing (the PAKE's first message).
    Pair(Vec<u8>),
}

/// The lender reads a connection's first frame.
pub fn hello(stream: TcpStream, deadline: Instant) -> Result<(Framed, Hello)> {
    let mut framed = Framed::new(stream);
    let first = framed.read_frame_by(deadline)?;
    let hello = match first.split_first() {
        Some((&HELLO_SESSION, rest)) => Hello::Session(rest.to_vec()),
        Some((&HELLO_PAIR, rest)) => Hello::Pair(rest.to_vec()),
        _ => return Err(EngineError::Peer { reason: "the peer does not speak this protocol".into() }),
    };
    Ok((framed, hello))
}

/// The lender's side of a later connection, from the host's first message.
pub fn accept(mut framed: Framed, first: &[u8], me: &Identity, deadline: Instant) -> Result<Conn> {
    let hs = builder(NOISE)?.local_private_key(&me.secret).build_responder().map_err(noise_error)?;
    let refused = || EngineError::Peer { reason: "the secure link failed: the host's handshake did not check".into() };
    responder(&mut framed, hs, first, deadline, refused).map(|channel| Conn { framed, channel })
}

fn responder(
    framed: &mut Framed,
    mut hs: snow::HandshakeState,
    first: &[u8],
    deadline: Instant,
    bad_last: fn() -> EngineError,
) -> Result<Channel> {
    let mut buf = vec![0u8; 65535];
    hs.read_message(first, &mut buf).map_err(noise_error)?;
    let n = hs.write_message(&[], &mut buf).map_err(noise_error)?;
    framed.write_frame(&buf[..n])?;
    let three = framed.read_frame_by(deadline)?;
    hs.read_message(&three, &mut buf).map_err(|_| bad_last())?;
    Channel::from_handshake(hs)
}

/// The lender's side of pairing with `code`, from the host's PAKE message.
/// [`EngineError::PairingCode`] when the host's code was another.
pub fn accept_pairing(mut framed: Framed, first: &[u8], me: &Identity, code: &str, deadline: Instant) -> Result<Conn> {
    let (spake, answer) = Spake2::<Ed25519Group>::start_b(
        &spake2::Password::new(code.as_bytes()),
        &spake2::Identity::new(b"headroom host"),
        &spake2::Identity::new(b"headroom lender"),
    );
    framed.write_frame(&[&[PAIR_GOES_ON], answer.as_slice()].concat())?;
    let key = spake.finish(first).map_err(|e| peer_error("pairing", e))?;
    let hs = builder(NOISE_PAIR)?.local_private_key(&me.secret).psk(3, &key).build_responder().map_err(noise_error)?;
    let one = framed.read_frame_by(deadline)?;
    responder(&mut framed, hs, &one, deadline, || EngineError::PairingCode).map(|channel| Conn { framed, channel })
}

/// The lender refuses a pairing before its PAKE (pairing is off for that
/// address): the host hears why. Nothing secret is in it.
pub fn refuse_pairing(mut framed: Framed, message: &str) {
    let _ = framed.write_frame(&[&[PAIR_REFUSED], message.as_bytes()].concat());
}

#[cfg(test)]
mod tests;
