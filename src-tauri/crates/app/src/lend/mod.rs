//! Lending this Mac (issue #28): a service the app (Settings → Two Macs)
//! and `headroom lend` both run in process. A host that does not fit a
//! model alone runs its later layers here (the engine side is
//! `headroom_engine::peer`).
//!
//! What it accepts: every connection is a Noise handshake
//! (`headroom_engine::peer::secure`) and its requests are sealed; it serves
//! the hosts it paired with ([`pairing`]: a PAKE on the single-use code it
//! shows, after which each side pins the other's key, and this Mac's owner
//! allows the host) or, unpaired, the addresses the lender allows by
//! address (loopback only, by default), one session at a time.
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
//! - [`pairing`]: the code, the pinned hosts, the wrong codes per source.
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
use headroom_engine::peer::secure::{self, Hello, Identity};
use headroom_engine::peer::{Placement, Reply, Request};
use headroom_engine::EngineError;
use serde::Serialize;

use crate::codes::{Coded, ErrorCode};
use crate::fit::{budget_inputs, BudgetSource};
use copy::{Found, Shelves};
use pairing::{Known, PairedHost, Pairing};

/// The port the app lends on (what a host's `--peer HOST:PORT` names).
pub const LEND_PORT: u16 = 7070;
/// Where a lender keeps the keys of the hosts it paired with (its data folder).
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
    /// Whether a host that proves the code is allowed at once (`lend
    /// --allow-paired`) rather than waiting for this Mac's owner to say so.
    pub allow_paired: bool,
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
            allow_paired: false,
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
    /// The code a host pairs with (`headroom pair HOST:PORT CODE`): good
    /// once, for a few minutes.
    pub code: String,
    /// Hosts that paired and wait for this Mac's owner: "Allow <machine> to use this Mac?".
    pub waiting: Vec<PairedHost>,
}

/// What the lender did, for the front end to say (the CLI prints it, the app logs it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LendEvent {
    /// A host proved the code and its key is pinned; `allowed`: whether it
    /// may use this Mac already (else the owner is asked: [`pairing::answer`]).
    Paired { from: IpAddr, machine: String, key: String, allowed: bool },
    /// The code was spent (or expired): hosts pair with this one now.
    Code { code: String },
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
    /// Where hosts reach it.
    pub address: SocketAddr,
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
        f.debug_struct("Lending").field("address", &self.address).finish_non_exhaustive()
    }
}

/// What the accepting thread and each connection's share.
struct Shared {
    config: LendConfig,
    identity: Identity,
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
    let identity = crate::peers::identity(&config.data_dir)
        .map_err(|source| LendError::Keep { path: config.data_dir.join(crate::peers::IDENTITY_FILE), source })?;
    let machine = headroom_memory::machine_name();
    let advert = if config.advertise {
        crate::discovery::advertise(&machine, config.bind, addr.port(), budget_bytes)
            .map_err(|e| on_event(LendEvent::NotAdvertised { reason: e.to_string() }))
            .ok()
    } else {
        None
    };
    let shared = Arc::new(Shared {
        config,
        identity,
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
    Ok(Lending { address: addr, machine, budget_bytes, shared, accept: Some(accept), _advert: advert })
}

impl Lending {
    /// Where it listens, the code now (a new one once the last was spent or
    /// expired) and the hosts waiting for the owner.
    pub fn status(&self) -> Result<LendStatus, LendError> {
        let mut pairing = self.shared.pairing.lock().unwrap_or_else(PoisonError::into_inner);
        let code = pairing.code()?.to_owned();
        let waiting = pairing::hosts(pairing.file()).into_iter().filter(|h| !h.allowed).collect();
        Ok(LendStatus { address: self.address.to_string(), code, waiting })
    }

    /// Where its pinned hosts are kept (for [`pairing::answer`], [`pairing::revoke`]).
    pub fn hosts_file(&self) -> PathBuf {
        self.shared.config.data_dir.join(LENT_TO_FILE)
    }

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
    let mut conn = match secure::hello(stream, deadline) {
        Ok((framed, Hello::Pair(first))) => return pair(shared, framed, &first, from, deadline),
        Ok((framed, Hello::Session(first))) => match secure::accept(framed, &first, &shared.identity, deadline) {
            Ok(conn) => conn,
            Err(e) => {
                tracing::info!("lend: {from}: {e}");
                return;
            }
        },
        Err(e) => {
            tracing::info!("lend: {from}: {e}");
            return;
        }
    };
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

/// A pairing connection: the PAKE on the code shown now, then the host's
/// name; its key is pinned and the code spent.
fn pair(shared: &Shared, framed: secure::Framed, first: &[u8], from: SocketAddr, deadline: Instant) {
    let refused = |message: String| (shared.on_event)(LendEvent::Refused { from: from.ip(), message });
    let code = {
        let mut pairing = shared.pairing.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(message) = pairing.refusal(from.ip()) {
            secure::refuse_pairing(framed, &message);
            return refused(message);
        }
        match pairing.code() {
            Ok(code) => code.to_owned(),
            Err(e) => return refused(e.to_string()),
        }
    };
    let mut conn = match secure::accept_pairing(framed, first, &shared.identity, &code, deadline) {
        Ok(conn) => conn,
        Err(EngineError::PairingCode) => {
            if let Err(e) = shared.pairing.lock().unwrap_or_else(PoisonError::into_inner).wrong(from.ip()) {
                tracing::warn!("lend: {e}");
            }
            return refused("wrong pairing code".into());
        }
        Err(e) => return tracing::info!("lend: pairing with {from}: {e}"),
    };
    let machine = match conn.receive_by::<Request>(deadline) {
        Ok(Request::Pair { machine, .. }) if !machine.is_empty() && machine.len() <= protocol::MAX_MACHINE => machine,
        Ok(_) => {
            let message = "a pairing names the host's machine (at most 256 bytes), and nothing else".to_owned();
            let _ = conn.send(&Reply::Refused { message: message.clone() });
            return refused(message);
        }
        Err(e) => return tracing::info!("lend: pairing with {from}: {e}"),
    };
    // A name is anyone's to choose: one line of text where it is shown.
    let machine: String = machine.chars().filter(|c| !c.is_control()).collect();
    let key = *conn.remote();
    let (paired, new_code) = {
        let mut pairing = shared.pairing.lock().unwrap_or_else(PoisonError::into_inner);
        let paired = pairing.paired(&code, &key, &machine, shared.config.allow_paired);
        (paired, pairing.code().map(str::to_owned))
    };
    match paired {
        Ok(allowed) => {
            let _ = conn.send(&Reply::Paired { machine: shared.machine.clone(), approved: allowed });
            (shared.on_event)(LendEvent::Paired { from: from.ip(), machine, key: secure::to_hex(&key), allowed });
            if let Ok(code) = new_code {
                (shared.on_event)(LendEvent::Code { code });
            }
        }
        Err(e) => {
            let _ = conn.send(&Reply::Refused { message: e.to_string() });
            refused(e.to_string());
        }
    }
}

/// The answer to `request` from `from`; `None` when a session took the connection.
fn reply(shared: &Shared, conn: &mut Conn, from: SocketAddr, request: Request) -> Result<Option<Reply>, LendError> {
    let refused = |message: String| Ok(Some(Reply::Refused { message }));
    let by_address =
        if shared.config.allow.is_empty() { from.ip().is_loopback() } else { shared.config.allow.contains(&from.ip()) };
    match pairing::known(&shared.config.data_dir.join(LENT_TO_FILE), conn.remote()) {
        Known::Allowed(_) => {}
        Known::Waiting(machine) if !by_address => {
            return refused(format!(
                "this Mac's owner has not allowed {machine} to use it yet: they are asked there (Settings → Two Macs, or the terminal running `headroom lend`)"
            ));
        }
        Known::Unknown if !by_address => {
            return refused("this host is not paired with this Mac: run `headroom pair HOST:PORT CODE` with the code `headroom lend` shows there".into());
        }
        Known::Waiting(_) | Known::Unknown => {}
    }
    let placement = match request {
        Request::Pair { .. } => return refused("pairing runs on a connection of its own".into()),
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
    let child = session::start(&shared.config.program, conn, &placement, pull)?;
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
