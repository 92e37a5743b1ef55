//! `headroom lend`: makes this Mac available to one host, which runs a
//! model's later layers here when the model does not fit on the host alone
//! (issue #28; the engine side is `headroom_engine::peer`). The host's
//! `--peer HOST:PORT` (generate, chat, bench, serve) and `fit --peer` talk
//! to it.
//!
//! What it accepts: connections from the addresses `--allow` names (by
//! default this machine's loopback only), one session at a time. A budget
//! question is answered from this Mac's memory now, as its own fit would;
//! a placement is checked against the same budget (the share's weights, its
//! KV cache and the overhead) before a byte is read, and refused with its
//! numbers where it would swap. Each session runs in a process of its own
//! (`lend --session`), which holds the host's connection and MLX's ring, so
//! a dead or stuck ring ends only that process.

use std::io::Write;
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clap::Args;
use headroom_core::fit::Verdict;
use headroom_engine::peer::{protocol, Placement, Reply, Request};
use headroom_engine::ComputeDtype;

use super::fit::{budget_source, gb, verdict_line, BudgetArgs};
use super::CliError;
use crate::fit::{budget_inputs, PeerSplit};

/// The environment variable that hands a session process its placement.
const PLACEMENT_ENV: &str = "HEADROOM_PLACEMENT";
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
    println!(
        "lending {} on {addr} (budget {}); hosts allowed: {}",
        headroom_memory::machine_name(),
        gb(headroom_core::fit::Budget::new(budget).budget_bytes),
        names.join(", ")
    );
    std::io::stdout().flush()?;
    let mut running: Option<Child> = None;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let from = stream.peer_addr().map(|a| a.ip());
        if !from.as_ref().is_ok_and(|ip| allowed.contains(ip)) {
            eprintln!("headroom lend: refused a connection from {from:?} (not --allow'ed)");
            continue;
        }
        // A finished session frees the Mac for the next.
        if running.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(Some(_)))) {
            running = None;
        }
        if let Err(e) = answer(stream, args, running.is_some()).map(|child| {
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
fn answer(mut stream: TcpStream, args: &LendArgs, busy: bool) -> Result<Option<Child>, CliError> {
    let request: Request = protocol::receive(&stream, FIRST_QUESTION)?;
    let budget = budget_inputs(budget_source(&args.budget))?;
    let placement = match request {
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
    if let Err(message) = check_share(&placement, budget) {
        eprintln!("headroom lend: refused a placement: {message}");
        protocol::send(&mut stream, &Reply::Refused { message })?;
        return Ok(None);
    }
    let child = match start_session(&stream, &placement) {
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
        placement.model.display(),
        stream.peer_addr().map_or_else(|_| "a host".to_owned(), |a| a.to_string())
    );
    std::io::stdout().flush()?;
    Ok(Some(child))
}

/// A session process for `placement`, holding the host's connection as its stdin.
fn start_session(stream: &TcpStream, placement: &Placement) -> Result<Child, CliError> {
    let json = serde_json::to_string(placement)?;
    let exe = std::env::current_exe().map_err(|e| CliError::Lend(format!("cannot find this program: {e}")))?;
    let fd = stream.as_fd().try_clone_to_owned().map_err(|e| CliError::Lend(e.to_string()))?;
    Command::new(exe)
        .args(["lend", "--session"])
        .env(PLACEMENT_ENV, json)
        .stdin(Stdio::from(fd))
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| CliError::Lend(format!("cannot start a session process: {e}")))
}

/// The share the host asks of this Mac, against this Mac's budget: its
/// verdict in words with the numbers where it would swap.
fn check_share(p: &Placement, budget: headroom_core::fit::BudgetInputs) -> Result<(), String> {
    let dtype = if p.f32 { ComputeDtype::F32 } else { ComputeDtype::Native };
    let kernel =
        headroom_engine::QuantKernel::from_name(&p.kernel).ok_or_else(|| format!("unknown kernel {:?}", p.kernel))?;
    let inspection = headroom_engine::inspect(&p.model, dtype, kernel)
        .map_err(|e| format!("this Mac cannot read its copy of {}: {e}", p.model.display()))?;
    let fp = &inspection.footprint;
    headroom_core::split::check_splittable(fp).map_err(|e| e.to_string())?;
    if usize::try_from(fp.layers).ok() != Some(p.layers) || p.first_layer == 0 || p.first_layer >= p.layers {
        return Err(format!(
            "layers {}..{} of {} do not match this copy's {} layers",
            p.first_layer,
            p.layers,
            p.model.display(),
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
    let placement: Placement = serde_json::from_str(&json)?;
    let fd = std::io::stdin().as_fd().try_clone_to_owned().map_err(|e| CliError::Lend(e.to_string()))?;
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
    let served = headroom_engine::peer::lender::serve(TcpStream::from(fd), &placement, &mut tight)?;
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
