//! `headroom lend`: makes this Mac available to one host, which runs a
//! model's later layers here when the model does not fit on the host alone
//! (issue #28; the engine side is `headroom_engine::peer`). The host's
//! `--peer HOST:PORT` (generate, chat, bench, serve) and `fit --peer` talk
//! to it.
//!
//! What it accepts: requests from hosts it paired with (a pairing code it
//! prints, exchanged once with `headroom pair HOST:PORT CODE` for a token
//! the host presents from then on; five wrong codes end pairing until it
//! restarts) or from the addresses `--allow` names (by default this
//! machine's loopback only), one session at a time. A budget
//! question is answered from this Mac's memory now, as its own fit would;
//! a placement is checked against the same budget (the share's weights, its
//! KV cache and the overhead) before a byte is read, and refused with its
//! numbers where it would swap. The model is this Mac's own copy with the
//! host's identity, found on its shelves or pulled from the hub
//! ([`super::lend_copy`]). Each session runs in a process of its own
//! (`lend --session`), which holds the host's connection and MLX's ring, so
//! a dead or stuck ring ends only that process.

use std::io::Write;
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clap::Args;
use headroom_core::fit::{BudgetInputs, Verdict};
use headroom_engine::peer::{protocol, Placement, Reply, Request};
use headroom_engine::ComputeDtype;

use super::fit::{budget_source, gb, verdict_line, BudgetArgs};
use super::lend_copy::{Found, Shelves};
use super::terminal::terminal_safe_line;
use super::CliError;
use crate::fit::{budget_inputs, PeerSplit};

/// Where a lender keeps the tokens of the hosts it paired with (its data folder).
const LENT_TO_FILE: &str = "lent-to.json";
/// Wrong pairing codes a lender takes before it stops pairing until restarted.
const PAIRING_ATTEMPTS: u32 = 5;

/// The environment variable that hands a session process its placement.
const PLACEMENT_ENV: &str = "HEADROOM_PLACEMENT";
/// Set for a session that pulls the model first: the budget its share is checked against.
const PULL_ENV: &str = "HEADROOM_PULL_WITHIN";
/// How long a connecting host has to ask its first question.
const FIRST_QUESTION: Duration = Duration::from_secs(10);

/// `--peer`: run the model's later layers on a Mac that `headroom lend`s.
#[derive(Debug, Clone, Default, Args)]
pub struct PeerArgs {
    /// A Mac lending itself (`headroom lend` prints its HOST:PORT): the
    /// model is split between this Mac and that one, each within its own
    /// budget, and the later layers run there.
    #[arg(long, value_name = "HOST:PORT")]
    pub peer: Option<String>,
}

/// `headroom peers`.
#[derive(Debug, Clone, Args)]
pub struct PeersArgs {
    /// How long to listen for answers, in seconds.
    #[arg(long, default_value_t = 3)]
    pub seconds: u64,
    /// Print one JSON array instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// Lists the Macs lending themselves on this network (Bonjour).
pub fn peers(args: &PeersArgs) -> Result<(), CliError> {
    let found = crate::discovery::browse(Duration::from_secs(args.seconds))
        .map_err(|e| CliError::Lend(format!("cannot browse with Bonjour: {e}")))?;
    if args.json {
        println!("{}", serde_json::to_string(&found)?);
        return Ok(());
    }
    if found.is_empty() {
        println!("no Mac lends itself on this network (looked for {} s)", args.seconds);
    }
    for f in &found {
        let budget = f.budget_bytes.map_or_else(|| "budget unknown".to_owned(), |b| format!("budget {}", gb(b)));
        // Bonjour names are anyone's on the network: text only, one row each.
        println!("{:<24} {:<22} {budget}", terminal_safe_line(&f.machine), terminal_safe_line(&f.address));
    }
    Ok(())
}

/// `headroom pair HOST:PORT CODE`.
#[derive(Debug, Clone, Args)]
pub struct PairArgs {
    /// The lending Mac's address, as `headroom lend` prints it.
    #[arg(value_name = "HOST:PORT")]
    pub peer: String,
    /// The pairing code `headroom lend` prints there.
    pub code: String,
}

/// Pairs this Mac with a lending one: the token it gives is kept in the
/// data folder, and `--peer` (and the app) present it from then on.
pub fn pair(args: &PairArgs) -> Result<(), CliError> {
    // The app's Pair button and this command: one pairing, one place the token is kept.
    let dir = super::chat::locations()?.data_dir;
    let machine = crate::peers::pair(&dir, &args.peer, &args.code).map_err(|e| CliError::Lend(e.to_string()))?;
    println!("paired with {} at {}", terminal_safe_line(&machine), args.peer);
    Ok(())
}

#[derive(Debug, Clone, Args)]
pub struct LendArgs {
    /// The address to listen on: this machine's loopback by default; a
    /// Thunderbolt-bridge or LAN address to lend to another Mac.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// The port to listen on (0: any free one, printed).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// A host allowed to connect (repeatable); loopback by default.
    #[arg(long = "allow", value_name = "IP")]
    pub allow: Vec<IpAddr>,
    /// A folder of models this Mac lends from (repeatable), beside its data
    /// folder's models and its Hugging Face caches; nothing outside these is read.
    #[arg(long = "models", value_name = "FOLDER")]
    pub models: Vec<std::path::PathBuf>,
    #[command(flatten)]
    pub budget: BudgetArgs,
    /// Internal: serve one session on stdin (started by `lend` itself).
    #[arg(long, hide = true)]
    pub session: bool,
}

pub fn run(args: &LendArgs) -> Result<(), CliError> {
    if args.session {
        return session();
    }
    let listener = TcpListener::bind((args.bind, args.port))
        .map_err(|e| CliError::Lend(format!("cannot listen on {}:{}: {e}", args.bind, args.port)))?;
    let addr = listener.local_addr().map_err(|e| CliError::Lend(e.to_string()))?;
    let allowed: Vec<IpAddr> =
        if args.allow.is_empty() { vec![IpAddr::from([127, 0, 0, 1])] } else { args.allow.clone() };
    let budget = budget_inputs(budget_source(&args.budget))?;
    let names: Vec<String> = allowed.iter().map(ToString::to_string).collect();
    let mut pairing = Pairing::new(super::chat::locations()?.data_dir.join(LENT_TO_FILE))?;
    println!(
        "lending {} on {addr} (budget {}); pairing code {}; hosts allowed without pairing: {}",
        headroom_memory::machine_name(),
        gb(headroom_core::fit::Budget::new(budget).budget_bytes),
        pairing.code,
        names.join(", ")
    );
    std::io::stdout().flush()?;
    // Bonjour, so hosts can find it (`headroom peers`); lending works without.
    let budget_bytes = headroom_core::fit::Budget::new(budget).budget_bytes;
    let _advert = crate::discovery::advertise(&headroom_memory::machine_name(), args.bind, addr.port(), budget_bytes)
        .map_err(|e| eprintln!("headroom lend: not advertised with Bonjour: {e}"))
        .ok();
    let mut running: Option<Child> = None;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let by_address = stream.peer_addr().is_ok_and(|a| allowed.contains(&a.ip()));
        // A finished session frees the Mac for the next.
        if running.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(Some(_)))) {
            running = None;
        }
        if let Err(e) = answer(stream, args, &mut pairing, by_address, running.is_some()).map(|child| {
            if child.is_some() {
                running = child;
            }
        }) {
            eprintln!("headroom lend: {e}");
        }
    }
    Ok(())
}

/// Answers one connection: a budget question, or a placement (checked,
/// then handed to a session process). Returns the session's process.
fn answer(
    mut stream: TcpStream,
    args: &LendArgs,
    pairing: &mut Pairing,
    by_address: bool,
    busy: bool,
) -> Result<Option<Child>, CliError> {
    let request: Request = protocol::receive(&stream, FIRST_QUESTION)?;
    if let Request::Pair { code, .. } = &request {
        let reply = match pairing.pair(code)? {
            Ok(token) => Reply::Paired { token, machine: headroom_memory::machine_name() },
            Err(message) => Reply::Refused { message },
        };
        protocol::send(&mut stream, &reply)?;
        return Ok(None);
    }
    if !by_address && !request.token().is_some_and(|t| pairing.knows(t)) {
        let from = stream.peer_addr().map_or_else(|_| "a host".to_owned(), |a| a.ip().to_string());
        eprintln!("headroom lend: refused {from}: not paired, not --allow'ed");
        let message = "this host is not paired with this Mac: run `headroom pair HOST:PORT CODE` with the code `headroom lend` shows there".to_owned();
        protocol::send(&mut stream, &Reply::Refused { message })?;
        return Ok(None);
    }
    let budget = budget_inputs(budget_source(&args.budget))?;
    let placement = match request {
        Request::Pair { .. } => return Ok(None),
        Request::Budget { .. } => {
            let reply = Reply::Budget { version: protocol::VERSION, machine: headroom_memory::machine_name(), budget };
            protocol::send(&mut stream, &reply)?;
            return Ok(None);
        }
        Request::Place { version, .. } if version != protocol::VERSION => {
            let message = format!("this Mac speaks version {} of the protocol, the host {version}", protocol::VERSION);
            protocol::send(&mut stream, &Reply::Refused { message })?;
            return Ok(None);
        }
        Request::Place { placement, .. } => placement,
    };
    if busy {
        let message = "this Mac is already lent to a host; try again when its session ends".to_owned();
        protocol::send(&mut stream, &Reply::Refused { message })?;
        return Ok(None);
    }
    // The ring connects back only to the host that asked, never elsewhere.
    let ring_ip = placement.host_ring.parse::<std::net::SocketAddr>().map(|a| a.ip());
    if ring_ip.ok() != stream.peer_addr().ok().map(|a| a.ip()) {
        let message = format!("the host's ring address {} is not the host's own", placement.host_ring);
        protocol::send(&mut stream, &Reply::Refused { message })?;
        return Ok(None);
    }
    // This Mac's own copy of the model, by its identity (or one to pull).
    let mut placement = placement;
    let shelves = Shelves::here(&super::chat::locations()?.data_dir, &args.models);
    let checked = match super::lend_copy::find(&placement.model, &shelves) {
        Ok(Found::Here(path)) => {
            placement.model.path = path;
            check_share(&placement, budget).map(|()| None)
        }
        // The session checks the share from the repo's headers, then pulls.
        Ok(Found::Pull) => Ok(Some(budget)),
        Err(message) => Err(message),
    };
    let pull = match checked {
        Ok(pull) => pull,
        Err(message) => {
            eprintln!("headroom lend: refused a placement: {message}");
            protocol::send(&mut stream, &Reply::Refused { message })?;
            return Ok(None);
        }
    };
    let child = match start_session(&stream, &placement, pull) {
        Ok(child) => child,
        Err(e) => {
            // The host hears why, not a closed connection.
            protocol::send(&mut stream, &Reply::Refused { message: e.to_string() })?;
            return Err(e);
        }
    };
    println!(
        "lent layers {}..{} of {} to {}",
        placement.first_layer,
        placement.layers,
        placement.model.path.display(),
        stream.peer_addr().map_or_else(|_| "a host".to_owned(), |a| a.to_string())
    );
    std::io::stdout().flush()?;
    Ok(Some(child))
}

/// A session process for `placement`, holding the host's connection as its
/// stdin; with `pull`, it first pulls the model within that budget.
fn start_session(stream: &TcpStream, placement: &Placement, pull: Option<BudgetInputs>) -> Result<Child, CliError> {
    let json = serde_json::to_string(placement)?;
    let exe = std::env::current_exe().map_err(|e| CliError::Lend(format!("cannot find this program: {e}")))?;
    let fd = stream.as_fd().try_clone_to_owned().map_err(|e| CliError::Lend(e.to_string()))?;
    let mut command = Command::new(exe);
    if let Some(budget) = pull {
        command.env(PULL_ENV, serde_json::to_string(&budget)?);
    }
    command
        .args(["lend", "--session"])
        .env(PLACEMENT_ENV, json)
        .stdin(Stdio::from(fd))
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| CliError::Lend(format!("cannot start a session process: {e}")))
}

/// The share the host asks of this Mac, against this Mac's budget: its
/// verdict in words with the numbers where it would swap.
fn check_share(p: &Placement, budget: BudgetInputs) -> Result<(), String> {
    let dtype = if p.f32 { ComputeDtype::F32 } else { ComputeDtype::Native };
    let kernel =
        headroom_engine::QuantKernel::from_name(&p.kernel).ok_or_else(|| format!("unknown kernel {:?}", p.kernel))?;
    let inspection = headroom_engine::inspect(&p.model.path, dtype, kernel)
        .map_err(|e| format!("this Mac cannot read its copy of {}: {e}", p.model.path.display()))?;
    check_share_of(&inspection.footprint, p, budget)
}

/// The share `p` asks of a model with footprint `fp` (read from this Mac's
/// copy, or from the hub's headers before a pull), against this Mac's budget.
pub(super) fn check_share_of(
    fp: &headroom_core::fit::ModelFootprint,
    p: &Placement,
    budget: BudgetInputs,
) -> Result<(), String> {
    headroom_core::split::check_splittable(fp).map_err(|e| e.to_string())?;
    if usize::try_from(fp.layers).ok() != Some(p.layers) || p.first_layer == 0 || p.first_layer >= p.layers {
        return Err(format!(
            "layers {}..{} of {} do not match this copy's {} layers",
            p.first_layer,
            p.layers,
            p.model.path.display(),
            fp.layers
        ));
    }
    let first = u64::try_from(p.first_layer).unwrap_or(u64::MAX);
    let context = u64::try_from(p.context).unwrap_or(u64::MAX);
    let share = headroom_core::split::share(fp, first..fp.layers, context, p.kv, budget);
    if share.fit.verdict.refuses() {
        return Err(format!(
            "layers {first}..{} would not fit on {}: it {} (peak {} = weights {} + KV cache {} + overhead {} vs budget {})",
            fp.layers,
            headroom_memory::machine_name(),
            verdict_line(&share.fit),
            gb(share.fit.estimate.predicted_peak_bytes),
            gb(share.fit.estimate.weight_bytes),
            gb(share.fit.estimate.kv_peak_bytes()),
            gb(share.fit.estimate.overhead.total_bytes),
            gb(share.fit.budget.budget_bytes),
        ));
    }
    Ok(())
}

/// `lend --session`: the host's connection is stdin; the placement is in
/// the environment.
fn session() -> Result<(), CliError> {
    let json = std::env::var(PLACEMENT_ENV).map_err(|_| CliError::Lend(format!("{PLACEMENT_ENV} is not set")))?;
    let mut placement: Placement = serde_json::from_str(&json)?;
    let fd = std::io::stdin().as_fd().try_clone_to_owned().map_err(|e| CliError::Lend(e.to_string()))?;
    let mut control = TcpStream::from(fd);
    if let Ok(budget) = std::env::var(PULL_ENV) {
        let budget: BudgetInputs = serde_json::from_str(&budget)?;
        match super::lend_copy::pull(&placement, budget, &mut control) {
            Ok(path) => placement.model.path = path,
            Err(e) => {
                // The host hears why; the session is over.
                let _ = protocol::send(&mut control, &Reply::Refused { message: e.to_string() });
                return Err(e);
            }
        }
    }
    // Steps aside at the pressure a local model gives its memory back at
    // (crate::away's policy), read at most twice a second.
    let policy = crate::away::policy_from_env(headroom_core::away::AwayPolicy::default());
    let mut reader = headroom_memory::Reader::new()?;
    let mut last: Option<(std::time::Instant, bool)> = None;
    let mut tight = || match last {
        Some((at, was)) if at.elapsed() < Duration::from_millis(500) => was,
        _ => {
            let now = policy.is_tight(reader.read().pressure);
            last = Some((std::time::Instant::now(), now));
            now
        }
    };
    let served = headroom_engine::peer::lender::serve(control, &placement, &mut tight)?;
    eprintln!(
        "headroom lend: session over{}: {} passes, {} rows, {:.1} s computing",
        if served.stepped_aside { " (stepped aside: memory pressure here)" } else { "" },
        served.passes,
        served.rows,
        served.compute.as_secs_f64()
    );
    Ok(())
}

/// The split in lines: each Mac's layers, weights, KV share, peak, budget, verdict.
pub(crate) fn split_lines(split: &PeerSplit) -> String {
    let r = &split.report;
    let mut s = format!("across two Macs at {} tokens: {}\n", r.context_tokens, verdict_word(r.verdict()));
    for (name, share) in [("this Mac", &r.host), (split.machine.as_str(), &r.peer)] {
        let e = &share.fit.estimate;
        s.push_str(&format!(
            "  {name:<14} layers {:>3}..{:<3} weights {}  KV {}  overhead {}  peak {}  budget {}  {}\n",
            share.first_layer,
            share.first_layer + share.layers,
            gb(e.weight_bytes),
            gb(e.kv_peak_bytes()),
            gb(e.overhead.total_bytes),
            gb(e.predicted_peak_bytes),
            gb(share.fit.budget.budget_bytes),
            verdict_line(&share.fit),
        ));
    }
    s
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Fits => "fits",
        Verdict::Tight => "tight",
        Verdict::WouldSwap { .. } => "would swap",
        Verdict::CannotFit { .. } => "cannot fit",
    }
}

/// The refusal `--peer` fails with when either Mac would swap.
pub(crate) fn split_refusal(model: &str, split: &PeerSplit) -> String {
    format!(
        "refusing to load `{model}` across this Mac and {} ({}): one of them would swap. Nothing was loaded. Use a smaller --context, free memory, or pass --override-fit.\n{}",
        split.machine,
        split.address,
        split_lines(split).trim_end()
    )
}

/// The lender's pairings: the code it shows, the tokens it gave (kept in
/// its data folder, this user's only), and how many wrong codes it took.
struct Pairing {
    code: String,
    tokens: Vec<String>,
    wrong: u32,
    file: std::path::PathBuf,
}

impl Pairing {
    fn new(file: std::path::PathBuf) -> Result<Self, CliError> {
        let tokens = std::fs::read(&file).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        let digits = random_bytes::<4>()?;
        let code = format!("{:06}", u32::from_le_bytes(digits) % 1_000_000);
        Ok(Self { code, tokens, wrong: 0, file })
    }

    fn knows(&self, token: &str) -> bool {
        self.tokens.iter().any(|t| t == token)
    }

    /// A new token for the right code; the refusal in words for a wrong one.
    fn pair(&mut self, code: &str) -> Result<Result<String, String>, CliError> {
        if self.wrong >= PAIRING_ATTEMPTS {
            return Ok(Err(format!(
                "{PAIRING_ATTEMPTS} wrong pairing codes: pairing is off until `headroom lend` is started again"
            )));
        }
        if code.trim() != self.code {
            self.wrong += 1;
            return Ok(Err("wrong pairing code".to_owned()));
        }
        let token: String = random_bytes::<16>()?.iter().map(|b| format!("{b:02x}")).collect();
        self.tokens.push(token.clone());
        crate::peers::write_private(&self.file, &serde_json::to_vec(&self.tokens)?)
            .map_err(|e| CliError::Lend(format!("cannot keep the pairing in {}: {e}", self.file.display())))?;
        println!("paired with a host");
        Ok(Ok(token))
    }
}

/// `N` bytes from the OS's random source.
fn random_bytes<const N: usize>() -> Result<[u8; N], CliError> {
    use std::io::Read;
    let mut out = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut out))
        .map_err(|e| CliError::Lend(format!("no random source: {e}")))?;
    Ok(out)
}
