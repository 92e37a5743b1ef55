//! Lending this Mac (issue #28): a service the app (Settings → Two Macs)
//! and `headroom lend` both run in process. A host that does not fit a
//! model alone runs its later layers here (the engine side is
//! `headroom_engine::peer`).
//!
//! What it accepts: requests from hosts it paired with ([`pairing`]: a code
//! it shows, exchanged once for a token) or from the addresses the lender
//! allows by address (loopback only, by default), one session at a time.
//! Nothing a host sends can stop it: each connection is served on a thread
//! of its own with a deadline for its whole request ([`REQUEST_DEADLINE`]),
//! at most [`MAX_CONNECTIONS`] at once; every field of a placement is
//! bounded before anything is read or sized from it, and a refusal names
//! the field. A budget question is answered from this Mac's memory now; a
//! placement is checked against that budget ([`share`]) and run on this
//! Mac's own copy of the model ([`copy`]), pulled from the hub only where
//! the lender allows pulls. Each session runs in a worker process
//! ([`session`]): MLX keeps one ring per process.
//!
//! - [`pairing`]: the code, the tokens, the wrong codes per source.
//! - [`share`]: the share a placement asks, against this Mac's budget.
//! - [`copy`]: this Mac's copy of the placed model, found or pulled.
//! - [`session`]: the worker process that holds a session's ring.

pub mod copy;
pub mod pairing;
pub mod session;
pub mod share;

use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use headroom_engine::peer::protocol::{self, Conn};
use headroom_engine::peer::{Placement, Reply, Request};
use headroom_engine::EngineError;
use serde::Serialize;

use crate::codes::{Coded, ErrorCode};
use crate::fit::{budget_inputs, BudgetSource};
use copy::{Found, Shelves};
use pairing::{Paired, Pairing};

/// The port the app lends on (what a host's `--peer HOST:PORT` names).
pub const LEND_PORT: u16 = 7070;
/// Where a lender keeps the tokens of the hosts it paired with (its data folder).
pub const LENT_TO_FILE: &str = "lent-to.json";
/// How long a connection has for its whole request (every byte of it), so
/// a host that drips a byte now and then holds nothing for long.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Connections served at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 32;

/// What a lender is lent with.
#[derive(Debug, Clone)]
pub struct LendConfig {
    /// The address to listen on: one interface (a Thunderbolt bridge or a
    /// LAN address, or loopback); never every interface unless asked.
    pub bind: IpAddr,
    /// The port (0: any free one).
    pub port: u16,
    /// Hosts allowed without pairing (loopback when empty).
    pub allow: Vec<IpAddr>,
    /// Folders of models lent from, beside the data folder's and the hub caches.
    pub models: Vec<PathBuf>,
    /// Where the budget's numbers come from.
    pub budget: BudgetSource,
    /// The data folder (its pairings, its models).
    pub data_dir: PathBuf,
    /// Whether a host may have this Mac pull a model it has no copy of.
    pub allow_pulls: bool,
    /// Whether to advertise with Bonjour.
    pub advertise: bool,
    /// The program whose `lend --session` runs a session (this one).
    pub program: PathBuf,
}

impl LendConfig {
    /// The app's lender: every interface at `port` (Settings do not pick an
    /// interface yet), the app's data folder, this program for sessions,
    /// advertised, no pulls.
    pub fn for_app(data_dir: &std::path::Path, port: u16) -> Result<Self, LendError> {
        Ok(Self {
            bind: IpAddr::from([0, 0, 0, 0]),
            port,
            allow: Vec::new(),
            models: Vec::new(),
            budget: BudgetSource::default(),
            data_dir: data_dir.to_owned(),
            allow_pulls: false,
            advertise: true,
            program: std::env::current_exe()?,
        })
    }
}

/// What the Settings show about this Mac being lent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct LendStatus {
    /// Where hosts reach it (`HOST:PORT`).
    pub address: String,
    /// The code a host pairs with (`headroom pair HOST:PORT CODE`).
    pub code: String,
}

/// What the lender did, for the front end to say (the CLI prints it, the app logs it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LendEvent {
    /// A host paired.
    Paired { from: IpAddr },
    /// A request was refused, and why.
    Refused { from: IpAddr, message: String },
    /// A session started.
    Lent { first_layer: usize, layers: usize, model: PathBuf, to: SocketAddr },
    /// Bonjour could not advertise it (lending works without).
    NotAdvertised { reason: String },
}

/// Why lending failed.
#[derive(Debug, thiserror::Error)]
pub enum LendError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read this Mac's memory: {0}")]
    Memory(#[from] headroom_memory::MemoryError),
    #[error("no random source for the pairing code: {0}")]
    Random(#[source] std::io::Error),
    #[error("cannot keep the pairing in {}: {source}", path.display())]
    Keep {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start a session process: {0}")]
    Session(#[source] std::io::Error),
    #[error("{0} is not set: a session process is started by a lender")]
    NotASession(&'static str),
    #[error("no Hugging Face cache folder is known here: set HF_HUB_CACHE, HF_HOME or HOME")]
    NoHubCache,
    #[error("cannot pull {repo} here: {source}")]
    Pull {
        repo: String,
        // Boxed: the hub's error is large, and every lender result carries this enum.
        #[source]
        source: Box<headroom_hub::HubError>,
    },
    /// A host's request refused, in the words the host hears.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Coded for LendError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Engine(e) => e.code(),
            _ => ErrorCode::LendFailed,
        }
    }
}

/// A lender running in this process, stopped when dropped.
pub struct Lending {
    pub status: LendStatus,
    /// This Mac's name, as hosts see it.
    pub machine: String,
    /// The budget it lent with (bytes, when it started).
    pub budget_bytes: u64,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    _advert: Option<crate::discovery::Advert>,
}

impl std::fmt::Debug for Lending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lending").field("status", &self.status).finish_non_exhaustive()
    }
}

/// What the accepting thread and each connection's share.
struct Shared {
    config: LendConfig,
    machine: String,
    addr: SocketAddr,
    pairing: Mutex<Pairing>,
    session: Mutex<Option<Child>>,
    open: AtomicUsize,
    stop: AtomicBool,
    on_event: Box<dyn Fn(LendEvent) + Send + Sync>,
}

/// Lends this Mac as `config` says; `on_event` hears what it does.
pub fn start(config: LendConfig, on_event: Box<dyn Fn(LendEvent) + Send + Sync>) -> Result<Lending, LendError> {
    let want = SocketAddr::new(config.bind, config.port);
    let listener = TcpListener::bind(want).map_err(|source| LendError::Listen { addr: want, source })?;
    let addr = listener.local_addr()?;
    let budget_bytes = headroom_core::fit::Budget::new(budget_inputs(config.budget)?).budget_bytes;
    let pairing = Pairing::new(config.data_dir.join(LENT_TO_FILE))?;
    let machine = headroom_memory::machine_name();
    let status = LendStatus { address: addr.to_string(), code: pairing.code().to_owned() };
    let advert = if config.advertise {
        crate::discovery::advertise(&machine, config.bind, addr.port(), budget_bytes)
            .map_err(|e| on_event(LendEvent::NotAdvertised { reason: e.to_string() }))
            .ok()
    } else {
        None
    };
    let shared = Arc::new(Shared {
        config,
        machine: machine.clone(),
        addr,
        pairing: Mutex::new(pairing),
        session: Mutex::new(None),
        open: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        on_event,
    });
    let accepting = Arc::clone(&shared);
    let accept =
        std::thread::Builder::new().name("headroom-lend".into()).spawn(move || accept_loop(&listener, &accepting))?;
    Ok(Lending { status, machine, budget_bytes, shared, accept: Some(accept), _advert: advert })
}

impl Lending {
    /// Blocks until the lender stops (the CLI's `headroom lend` runs until killed).
    pub fn wait(mut self) {
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

impl Drop for Lending {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread so it sees the flag.
        let _ = TcpStream::connect_timeout(&wake_address(self.shared.addr), Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        if let Some(mut child) = self.shared.session.lock().unwrap_or_else(PoisonError::into_inner).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Where to connect to reach a listener on `addr` (loopback for every interface).
fn wake_address(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::new(
            if addr.is_ipv4() { IpAddr::from([127, 0, 0, 1]) } else { IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]) },
            addr.port(),
        )
    } else {
        addr
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        if shared.open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            shared.open.fetch_sub(1, Ordering::SeqCst);
            let _ = stream.shutdown(Shutdown::Both);
            continue;
        }
        let serving = Arc::clone(shared);
        let spawned = std::thread::Builder::new().name("headroom-lend-conn".into()).spawn(move || {
            answer(&serving, stream);
            serving.open.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            shared.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Serves one connection to its end, within [`REQUEST_DEADLINE`].
fn answer(shared: &Shared, stream: TcpStream) {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let Ok(from) = stream.peer_addr() else { return };
    let _ = stream.set_write_timeout(Some(REQUEST_DEADLINE));
    let mut conn = Conn::new(stream);
    let request = match conn.receive_by::<Request>(deadline) {
        Ok(request) => request,
        Err(e) => {
            tracing::info!("lend: {from}: {e}");
            return;
        }
    };
    match reply(shared, &mut conn, from, request) {
        Ok(Some(reply)) => {
            if let Reply::Refused { message } = &reply {
                (shared.on_event)(LendEvent::Refused { from: from.ip(), message: message.clone() });
            }
            let _ = conn.send(&reply);
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!("lend: {from}: {e}");
            let _ = conn.send(&Reply::Refused { message: e.to_string() });
        }
    }
}

/// The answer to `request` from `from`; `None` when a session took the connection.
fn reply(shared: &Shared, conn: &mut Conn, from: SocketAddr, request: Request) -> Result<Option<Reply>, LendError> {
    let refused = |message: String| Ok(Some(Reply::Refused { message }));
    if let Request::Pair { code, .. } = &request {
        let paired = shared.pairing.lock().unwrap_or_else(PoisonError::into_inner).pair(from.ip(), code)?;
        return Ok(Some(match paired {
            Paired::Token(token) => {
                (shared.on_event)(LendEvent::Paired { from: from.ip() });
                Reply::Paired { token, machine: shared.machine.clone() }
            }
            Paired::Refused(message) => Reply::Refused { message },
        }));
    }
    let allowed =
        if shared.config.allow.is_empty() { from.ip().is_loopback() } else { shared.config.allow.contains(&from.ip()) };
    let known = request.token().is_some_and(|t| shared.pairing.lock().unwrap_or_else(PoisonError::into_inner).knows(t));
    if !allowed && !known {
        return refused("this host is not paired with this Mac: run `headroom pair HOST:PORT CODE` with the code `headroom lend` shows there".into());
    }
    let placement = match request {
        Request::Pair { .. } => return Ok(None),
        Request::Budget { .. } => {
            let budget = budget_inputs(shared.config.budget)?;
            return Ok(Some(Reply::Budget { version: protocol::VERSION, machine: shared.machine.clone(), budget }));
        }
        Request::Place { version, .. } if version != protocol::VERSION => {
            return refused(format!(
                "this Mac speaks version {} of the protocol, the host {version}",
                protocol::VERSION
            ));
        }
        Request::Place { placement, .. } => placement,
    };
    // Every field bounded before anything is read or sized from it.
    if let Err(e) = placement.check() {
        return refused(e.to_string());
    }
    // The ring connects back only to the host that asked, never elsewhere.
    let ring_ip = placement.host_ring.parse::<SocketAddr>().map(|a| a.ip());
    if ring_ip.ok() != Some(from.ip()) {
        return refused(format!("the host's ring address {} is not the host's own", placement.host_ring));
    }
    let mut session = shared.session.lock().unwrap_or_else(PoisonError::into_inner);
    // A finished session frees the Mac for the next.
    if session.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(Some(_)))) {
        *session = None;
    }
    if session.is_some() {
        return refused("this Mac is already lent to a host; try again when its session ends".into());
    }
    let budget = budget_inputs(shared.config.budget)?;
    let mut placement: Placement = placement;
    let shelves = Shelves::here(&shared.config.data_dir, &shared.config.models);
    let pull = match copy::find(&placement.model, &shelves) {
        Ok(Found::Here(path)) => {
            placement.model.path = path;
            if let Err(message) = share::check_share(&placement, budget) {
                return refused(message);
            }
            None
        }
        Ok(Found::Pull) if !shared.config.allow_pulls => {
            return refused("this Mac has no copy of the model and does not pull models for hosts (lend with --allow-pulls, or Settings → Two Macs → Let hosts pull)".into());
        }
        // The session checks the share from the repo's headers, then pulls.
        Ok(Found::Pull) => Some(budget),
        Err(message) => return refused(message),
    };
    let clone = conn.stream().try_clone()?;
    let stream = std::mem::replace(conn, Conn::new(clone)).into_stream()?;
    let child = session::start(&shared.config.program, &stream, &placement, pull)?;
    *session = Some(child);
    (shared.on_event)(LendEvent::Lent {
        first_layer: placement.first_layer,
        layers: placement.layers,
        model: placement.model.path.clone(),
        to: from,
    });
    Ok(None)
}

#[cfg(test)]
mod tests;
