//! The host's side: places the later layers of a model on a peer, and runs
//! the hand-off of every forward pass ([`Link`]).

use std::cell::Cell;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use headroom_core::fit::BudgetInputs;
use mlx_rs::{Array, Dtype};

use super::protocol::{Conn, Placement, Reply, Request, VERSION};
use super::relay::Relay;
use super::ring::{join_deadline, stall_deadline, Ring};
use super::secure::{self, Identity, PublicKey};
use super::{Op, HEADER_LEN, STEPPED_ASIDE};
use crate::cache::KvCache;
use crate::error::{EngineError, MlxContext, Result};
use crate::models::{LaterLayers, Logits, Stages};

/// How long connecting to a peer may take when placing a model.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a budget question may take, connecting and answering: the
/// model list asks it, and an absent peer must not hold the list up.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the peer may take to load its share (it reads its layers from
/// disk first): a 32B model's half from a slow disk.
const PLACE_TIMEOUT: Duration = Duration::from_secs(600);

/// Where a model's later layers go: the peer's control address (`host:port`,
/// as `headroom lend` prints it) and the first layer it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerPlacement {
    pub addr: String,
    /// This Mac's key and the lender's, as pinned when they paired.
    pub trust: Trust,
    pub first_peer_layer: usize,
    /// The context the split was fitted for.
    pub context: usize,
}

/// Whom a host trusts a lender to be: this Mac's own key, and the key it
/// pinned for the lender when they paired (none: only a lender on loopback,
/// this Mac itself, is used unpaired).
#[derive(Clone)]
pub struct Trust {
    pub identity: Identity,
    pub pinned: Option<PublicKey>,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trust").field("pinned", &self.pinned.as_ref().map(secure::fingerprint)).finish()
    }
}

impl PartialEq for Trust {
    fn eq(&self, other: &Self) -> bool {
        secure::same_key(self.identity.public(), other.identity.public())
            && match (&self.pinned, &other.pinned) {
                (Some(a), Some(b)) => secure::same_key(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

impl Eq for Trust {}

/// What pairing gave the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paired {
    /// The lender's machine name.
    pub machine: String,
    /// The lender's key, to pin.
    pub key: PublicKey,
    /// Whether the lender's owner allowed this host already (else they are asked there).
    pub approved: bool,
}

/// What the hand-offs of one turn cost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandOffs {
    /// Forward passes handed over (one per decoded token, one per prompt chunk).
    pub passes: usize,
    /// Time the host waited on the peer, its layers included.
    pub waited: Duration,
    /// Of that, the peer's own compute (what it reported for each pass).
    pub peer_compute: Duration,
}

impl HandOffs {
    /// The hand-off itself per pass: the wait less the peer's compute.
    pub fn per_pass(&self) -> Duration {
        let passes = u32::try_from(self.passes.max(1)).unwrap_or(u32::MAX);
        self.waited.saturating_sub(self.peer_compute) / passes
    }
}

/// A model's later layers, placed on a peer for the life of this process's ring.
pub struct Link {
    ring: Ring,
    /// The ring's relay over the control connection (the lender ends the
    /// session when it closes).
    _relay: Relay,
    /// Where the peer's control connection is (for messages).
    pub peer: String,
    /// The first layer the peer runs, and the model's layers in all.
    pub first_peer_layer: usize,
    pub layers: usize,
    /// The activations' dtype and width: what crosses the ring.
    dtype: Dtype,
    hidden: i32,
    /// Set once a hand-off failed: the ring is gone for this process.
    lost: Cell<bool>,
    /// Since the last [`Link::take_hand_offs`].
    hand_offs: Mutex<HandOffs>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("peer", &self.peer).field("first_peer_layer", &self.first_peer_layer).finish()
    }
}

/// The peer's budget now (for the split and `headroom fit --peer`), and its machine's name.
pub fn peer_budget(addr: &str, trust: &Trust) -> Result<(String, BudgetInputs)> {
    let mut control = open_control(addr, trust, ANSWER_TIMEOUT)?;
    control.send(&Request::Budget { version: VERSION })?;
    match control.receive(ANSWER_TIMEOUT)? {
        Reply::Budget { version, machine, budget } if version == VERSION => Ok((machine, budget)),
        Reply::Budget { version, .. } => Err(EngineError::PeerRefused {
            peer: addr.to_owned(),
            message: format!("it speaks version {version} of the protocol, this Mac {VERSION}"),
        }),
        Reply::Refused { message } => Err(EngineError::PeerRefused { peer: addr.to_owned(), message }),
        Reply::Placed | Reply::Paired { .. } | Reply::Pulling { .. } => {
            Err(EngineError::Peer { reason: "the peer answered something else to a budget question".into() })
        }
    }
}

/// Pairs with the lender at `addr` using the `code` it shows (a PAKE: the
/// code never crosses the wire): its machine's name and its key to pin.
/// `machine` is this Mac's name, for the lender's owner to allow.
pub fn pair(addr: &str, code: &str, identity: &Identity, machine: &str) -> Result<Paired> {
    let stream = connect(addr, ANSWER_TIMEOUT)?;
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    let answer = (|| {
        let mut control = secure::pair(stream, identity, code, deadline)?;
        control.send(&Request::Pair { version: VERSION, machine: machine.to_owned() })?;
        let key = *control.remote();
        Ok((control.receive_by::<Reply>(deadline)?, key))
    })();
    let (reply, key) = answer.map_err(|e| match e {
        // A lender closes a pairing whose code did not check; from here that
        // is a handshake that failed or a connection closed before an answer.
        EngineError::Peer { reason } if reason.contains("closed") || reason.contains("did not check") => {
            EngineError::PeerRefused { peer: addr.to_owned(), message: "wrong pairing code".into() }
        }
        EngineError::PeerRefused { message, .. } => EngineError::PeerRefused { peer: addr.to_owned(), message },
        other => other,
    })?;
    match reply {
        Reply::Paired { machine, approved } => Ok(Paired { machine, key, approved }),
        Reply::Refused { message } => Err(EngineError::PeerRefused { peer: addr.to_owned(), message }),
        Reply::Placed | Reply::Budget { .. } | Reply::Pulling { .. } => {
            Err(EngineError::Peer { reason: "the peer answered something else to a pairing".into() })
        }
    }
}

/// Places layers `first_peer_layer..` of the model on the peer (which loads
/// them from its own copy of `placement.model`, pulling a missing one from
/// the hub first) and joins the ring. Each of the lender's answers, a pull's
/// progress included, must come within [`PLACE_TIMEOUT`].
pub(crate) fn place(at: &PeerPlacement, placement: Placement, dtype: Dtype, hidden: i32) -> Result<Link> {
    let mut control = open_control(&at.addr, &at.trust, CONNECT_TIMEOUT)?;
    // This side's ring listens on loopback only; the relay carries it.
    let host_ring = free_address(IpAddr::from([127, 0, 0, 1]))?;
    let (first_peer_layer, layers) = (placement.first_layer, placement.layers);
    control.send(&Request::Place { version: VERSION, placement })?;
    loop {
        match control.receive(PLACE_TIMEOUT)? {
            Reply::Placed => break,
            Reply::Pulling { done_bytes, total_bytes } => {
                tracing::info!("{} is pulling its copy of the model: {done_bytes} of {total_bytes} bytes", at.addr);
            }
            Reply::Refused { message } => return Err(EngineError::PeerRefused { peer: at.addr.clone(), message }),
            Reply::Budget { .. } | Reply::Paired { .. } => {
                return Err(EngineError::Peer { reason: "the peer answered something else to a placement".into() })
            }
        }
    }
    let ring_addr = host_ring.parse().map_err(|e| EngineError::Peer { reason: format!("{host_ring}: {e}") })?;
    let relay = Relay::start(control, ring_addr, 0)?;
    let lender_ring = relay.port.to_string();
    // A lender that answers but never joins would hold this thread in
    // MLX's accept for good: the join has a deadline of its own.
    let ring =
        Ring::join_within(&host_ring, &lender_ring, 0, stall_deadline(), join_deadline()).map_err(|e| match e {
            EngineError::PeerRingTimeout { secs, .. } => EngineError::PeerRingTimeout { peer: at.addr.clone(), secs },
            other => other,
        })?;
    Ok(Link {
        ring,
        _relay: relay,
        peer: at.addr.clone(),
        first_peer_layer,
        layers,
        dtype,
        hidden,
        lost: Cell::new(false),
        hand_offs: Mutex::default(),
    })
}

impl Link {
    /// One forward pass across both Macs: the host's layers here, the
    /// peer's there, the head here. The peer rolls its cache back to the
    /// host's length first, so a rejected proposal or a new turn (a cache
    /// trimmed or started afresh here) is one there too.
    fn forward_across(
        &self,
        stages: &dyn Stages,
        tokens: &Array,
        cache: &mut KvCache,
        logits: Logits,
    ) -> Result<Array> {
        if self.lost.get() {
            return Err(EngineError::PeerLost { reason: format!("the peer at {} is gone", self.peer) });
        }
        let offset = i32::try_from(cache.offset()).unwrap_or(i32::MAX);
        let h = stages.blocks(stages.embed(tokens)?, cache)?.as_dtype(self.dtype).op("cast the hidden state")?;
        h.eval().op("the host's layers")?;
        let (b, l) = (h.dim(0), h.dim(1));
        let all = logits == Logits::All;
        let header = Array::from_slice(&[Op::Forward as i32, b, l, offset, i32::from(all)], &[HEADER_LEN]);
        let started = Instant::now();
        let back = (|| {
            self.ring.send(&header)?;
            self.ring.send(&h)?;
            let back = self.ring.recv(&[b, if all { l } else { 1 }, self.hidden], self.dtype)?;
            let micros = self.ring.recv(&[1], Dtype::Int32)?;
            Ok((back, micros.as_slice::<i32>().first().copied().unwrap_or(0)))
        })();
        let (back, micros) = back.inspect_err(|_: &EngineError| self.lost.set(true))?;
        if micros == STEPPED_ASIDE {
            self.lost.set(true);
            return Err(EngineError::PeerLost {
                reason: format!("the Mac at {} gave its memory back (memory pressure there)", self.peer),
            });
        }
        {
            let mut h = self.hand_offs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            h.passes += 1;
            h.waited += started.elapsed();
            h.peer_compute += Duration::from_micros(u64::try_from(micros).unwrap_or(0));
        }
        stages.head(back, logits)
    }

    /// What the hand-offs cost since the last call.
    pub fn take_hand_offs(&self) -> HandOffs {
        std::mem::take(&mut *self.hand_offs.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Whether a hand-off failed (the ring is gone for this process).
    pub fn is_lost(&self) -> bool {
        self.lost.get()
    }
}

impl Link {
    /// The link running `model`'s later layers, if they run on a peer.
    pub fn of(model: &crate::models::Model) -> Option<&Link> {
        model.later_layers().and_then(|l| l.as_any().downcast_ref())
    }
}

impl LaterLayers for Link {
    fn forward(&self, stages: &dyn Stages, tokens: &Array, cache: &mut KvCache, logits: Logits) -> Result<Array> {
        self.forward_across(stages, tokens, cache, logits)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // Tells the peer to end its session; it also ends when the ring or
        // the control connection goes, so a failure here changes nothing.
        if !self.lost.get() {
            let _ = self.ring.send(&Array::from_slice(&[Op::End as i32, 0, 0, 0, 0], &[HEADER_LEN]));
        }
    }
}

/// A control connection to the lender at `addr`: the Noise handshake, and
/// the lender's key checked against the pin (a lender on loopback, this
/// Mac, may be unpinned).
fn open_control(addr: &str, trust: &Trust, timeout: Duration) -> Result<Conn> {
    let stream = connect(addr, timeout)?;
    let loopback = stream.peer_addr().is_ok_and(|a| a.ip().is_loopback());
    let conn = secure::open(stream, &trust.identity, Instant::now() + timeout)?;
    let refused = |reason: &str| Err(EngineError::PeerNotTrusted { peer: addr.to_owned(), reason: reason.to_owned() });
    match &trust.pinned {
        Some(pin) if secure::same_key(pin, conn.remote()) => Ok(conn),
        Some(_) => refused("is not the Mac this one paired with (its key is another): pair with it again"),
        None if loopback => Ok(conn),
        None => refused("is not paired with this Mac: pair with it first (`headroom pair HOST:PORT CODE`, or Settings → Two Macs → Pair)"),
    }
}

fn connect(addr: &str, timeout: Duration) -> Result<TcpStream> {
    let target = addr
        .to_socket_addrs()
        .map_err(|e| EngineError::Peer { reason: format!("{addr} is not a host:port address: {e}") })?
        .next()
        .ok_or_else(|| EngineError::Peer { reason: format!("{addr} resolves to no address") })?;
    TcpStream::connect_timeout(&target, timeout)
        .map_err(|e| EngineError::Peer { reason: format!("cannot reach a lending Mac at {addr}: {e}") })
}

/// An `ip:port` on this interface with a port free now (MLX's ring binds it
/// a moment later).
pub(crate) fn free_address(ip: IpAddr) -> Result<String> {
    let listener = TcpListener::bind(SocketAddr::new(ip, 0))
        .map_err(|e| EngineError::Peer { reason: format!("no free port on {ip}: {e}") })?;
    let addr = listener.local_addr().map_err(|e| EngineError::Peer { reason: format!("no free port on {ip}: {e}") })?;
    Ok(addr.to_string())
}
