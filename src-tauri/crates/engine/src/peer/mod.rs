//! One model across two Macs on MLX's own distributed backend (issue #28):
//! a pipeline, the host running the embedding, its first layers and the
//! output head, the peer (a Mac lent with `headroom lend`) the rest. Each
//! forward pass hands the hidden state to the peer and back over MLX's ring
//! backend (`send`/`recv`, TCP, on loopback only) through a relay on each
//! side that carries the ring's bytes over the control connection
//! ([`relay`]); the pairing and the placement go over that connection
//! first ([`protocol`]), encrypted and mutually authenticated ([`secure`]). No network engine of our
//! own: the ring is MLX's, the split is the fit's (`headroom_core::split`).
//!
//! - [`copy`]: which model a placement names, and whether a lender's own
//!   copy holds the same weights.
//! - [`ring`]: the ring group, its hand-offs, and a watchdog that cuts a
//!   stuck socket so that MLX's own error ends the pass.
//! - [`host`]: places a layer range on a peer and runs the host's side of
//!   every forward pass ([`Link`]).
//! - [`lender`]: the peer's side: loads its range, joins the ring and runs
//!   its layers for each pass until the host ends the session.
//!
//! MLX keeps one ring per process for the process's life
//! (`distributed::init` caches it), so each side of a session is one
//! process: `headroom lend` runs every session in a worker process of its
//! own, and a host process places a model on a peer once.

pub mod copy;
pub mod host;
pub mod lender;
pub mod protocol;
pub(crate) mod relay;
pub(crate) mod ring;
pub mod secure;

pub use copy::ModelCopy;
pub use host::{Link, Paired, PeerPlacement, Trust};
pub use protocol::{Placement, Reply, Request};

/// What each forward pass sends ahead of the hidden state: what to do, the
/// hidden state's batch and rows, the host's cache length before the pass
/// (the peer rolls its own back to it), and whether every row comes back.
pub(crate) const HEADER_LEN: i32 = 5;

/// What the lender sends in place of its compute time when it steps aside
/// (memory pressure on that Mac): the pass's output is not to be used, and
/// the session is over.
pub(crate) const STEPPED_ASIDE: i32 = -1;

/// The header's first field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// The session is over: the peer ends its loop and exits.
    End = 0,
    /// Run the peer's layers over the hidden state that follows.
    Forward = 1,
}
