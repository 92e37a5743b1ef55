//! `headroom lend`: makes this Mac available to one host, which runs a
//! model's later layers here when the model does not fit on the host alone
//! (issue #28; the lender is the service `headroom_app::lend`, run here in
//! process, the engine side `headroom_engine::peer`). The host's
//! `--peer HOST:PORT` (generate, chat, bench, serve) and `fit --peer` talk
//! to it. This command parses its flags and prints what the lender does.

use std::io::Write;
use std::net::IpAddr;
use std::time::Duration;

use clap::Args;
use headroom_core::fit::Verdict;

use super::fit::{budget_source, gb, verdict_line, BudgetArgs};
use super::terminal::terminal_safe_line;
use super::CliError;
use crate::fit::PeerSplit;
use crate::lend::{LendConfig, LendEvent};

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

/// `headroom pair HOST:PORT CODE`, `headroom pair --list`, `headroom pair --forget HOST:PORT`.
#[derive(Debug, Clone, Args)]
pub struct PairArgs {
    /// The lending Mac's address, as `headroom lend` prints it.
    #[arg(value_name = "HOST:PORT", required_unless_present_any = ["list", "forget"])]
    pub peer: Option<String>,
    /// The pairing code `headroom lend` prints there (good once, for a few minutes).
    #[arg(required_unless_present_any = ["list", "forget"])]
    pub code: Option<String>,
    /// List the lending Macs this one paired with (address, name, key).
    #[arg(long, conflicts_with_all = ["peer", "code", "forget"])]
    pub list: bool,
    /// Forget the pairing with this lender: its key is no longer trusted here.
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["peer", "code"])]
    pub forget: Option<String>,
}

/// Pairs this Mac with a lending one by the code it shows (a PAKE: the code
/// never crosses the network): each Mac pins the other's key, kept in the
/// data folder, and `--peer` (and the app) check it from then on. Or lists
/// or forgets the pairings.
pub fn pair(args: &PairArgs) -> Result<(), CliError> {
    // The app's Pair button and this command: one pairing, one place the key is kept.
    let dir = super::chat::locations()?.data_dir;
    if args.list {
        for l in crate::peers::list(&dir) {
            let key = headroom_engine::peer::secure::from_hex(&l.key)
                .map_or_else(|| "?".to_owned(), |k| headroom_engine::peer::secure::fingerprint(&k));
            println!("{:<22} {:<24} key {key}", terminal_safe_line(&l.address), terminal_safe_line(&l.machine));
        }
        return Ok(());
    }
    if let Some(address) = &args.forget {
        let forgotten = crate::peers::forget(&dir, address)?;
        println!("{}", if forgotten { format!("forgot {address}") } else { format!("not paired with {address}") });
        return Ok(());
    }
    let (Some(peer), Some(code)) = (&args.peer, &args.code) else {
        return Err(CliError::Lend("name the lending Mac's HOST:PORT and the code it shows".into()));
    };
    let paired = crate::peers::pair(&dir, peer, code).map_err(|e| CliError::Lend(e.to_string()))?;
    println!("paired with {} at {peer}", terminal_safe_line(&paired.machine));
    if !paired.allowed {
        println!("its owner is asked there to allow this Mac; until they do, it refuses this Mac's requests");
    }
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
    /// A host allowed to connect without pairing (repeatable); loopback by default.
    #[arg(long = "allow", value_name = "IP")]
    pub allow: Vec<IpAddr>,
    /// A folder of models this Mac lends from (repeatable), beside its data
    /// folder's models and its Hugging Face caches; nothing outside these is read.
    #[arg(long = "models", value_name = "FOLDER")]
    pub models: Vec<std::path::PathBuf>,
    /// Allow every host that proves the pairing code at once, without asking
    /// on this terminal ("Allow <host> to use this Mac? [y/N]").
    #[arg(long)]
    pub allow_paired: bool,
    /// List the hosts this Mac paired with (name, key, allowed) and exit.
    #[arg(long, conflicts_with_all = ["revoke", "session"])]
    pub hosts: bool,
    /// Revoke the paired host whose key starts with this (as `--hosts` shows it) and exit.
    #[arg(long, value_name = "KEY", conflicts_with = "allow_host")]
    pub revoke: Option<String>,
    /// Allow the paired host whose key starts with this (as `--hosts` shows it) and exit.
    #[arg(long, value_name = "KEY")]
    pub allow_host: Option<String>,
    /// Let a host have this Mac pull a model it has no copy of from the
    /// hub (its share checked against this Mac's budget first). Off by default.
    #[arg(long)]
    pub allow_pulls: bool,
    #[command(flatten)]
    pub budget: BudgetArgs,
    /// Internal: serve one session on stdin (started by the lender itself).
    #[arg(long, hide = true)]
    pub session: bool,
}

pub fn run(args: &LendArgs) -> Result<(), CliError> {
    if args.session {
        let served = crate::lend::session::run()?;
        eprintln!(
            "headroom lend: session over{}: {} passes, {} rows, {:.1} s computing",
            if served.stepped_aside { " (stepped aside: memory pressure here)" } else { "" },
            served.passes,
            served.rows,
            served.compute.as_secs_f64()
        );
        return Ok(());
    }
    let data_dir = super::chat::locations()?.data_dir;
    let hosts_file = data_dir.join(crate::lend::LENT_TO_FILE);
    if args.hosts || args.revoke.is_some() || args.allow_host.is_some() {
        let answer = match (&args.revoke, &args.allow_host) {
            (Some(key), _) => Some((key.as_str(), false)),
            (None, Some(key)) => Some((key.as_str(), true)),
            (None, None) => None,
        };
        return hosts(&hosts_file, answer);
    }
    let config = LendConfig {
        bind: args.bind,
        port: args.port,
        allow: args.allow.clone(),
        models: args.models.clone(),
        budget: budget_source(&args.budget),
        data_dir,
        allow_pulls: args.allow_pulls,
        advertise: true,
        allow_paired: args.allow_paired,
        program: std::env::current_exe()?,
    };
    let allowed: Vec<String> = if args.allow.is_empty() {
        vec!["loopback".to_owned()]
    } else {
        args.allow.iter().map(ToString::to_string).collect()
    };
    let ask = !args.allow_paired && std::io::IsTerminal::is_terminal(&std::io::stdin());
    let lending = crate::lend::start(config, Box::new(move |event| say(event, &hosts_file, ask)))?;
    let status = lending.status()?;
    println!(
        "lending {} on {} (budget {}); pairing code {} (good once, for 5 minutes); hosts allowed without pairing: {}",
        lending.machine,
        status.address,
        gb(lending.budget_bytes),
        status.code,
        allowed.join(", ")
    );
    std::io::stdout().flush()?;
    lending.wait();
    Ok(())
}

/// `lend --hosts`, and `lend --revoke KEY` / `--allow-host KEY` (`answer`: the key and whether to allow).
fn hosts(file: &std::path::Path, answer: Option<(&str, bool)>) -> Result<(), CliError> {
    let all = crate::lend::pairing::hosts(file);
    let Some((prefix, allow)) = answer else {
        for h in &all {
            let state = if h.allowed { "allowed" } else { "waiting" };
            println!("{:<24} key {}  {state}", terminal_safe_line(&h.machine), h.fingerprint());
        }
        return Ok(());
    };
    let plain: String = prefix.chars().filter(char::is_ascii_hexdigit).collect::<String>().to_ascii_lowercase();
    let matching: Vec<_> = all.iter().filter(|h| !plain.is_empty() && h.key.starts_with(&plain)).collect();
    let [host] = matching.as_slice() else {
        return Err(CliError::Lend(format!(
            "{} paired hosts have a key starting with {prefix}: give more of it",
            matching.len()
        )));
    };
    crate::lend::pairing::answer(file, &host.key, allow)?;
    let done = if allow { "allowed" } else { "revoked" };
    println!("{done} {} (key {})", terminal_safe_line(&host.machine), host.fingerprint());
    Ok(())
}

/// What the lender did, in a line; a host that paired is allowed or not on
/// this terminal (`ask`), else it waits for `lend --hosts` / the app.
fn say(event: LendEvent, hosts_file: &std::path::Path, ask: bool) {
    match event {
        LendEvent::Paired { from, machine, key, allowed } => {
            let short = headroom_engine::peer::secure::from_hex(&key)
                .map_or_else(String::new, |k| headroom_engine::peer::secure::fingerprint(&k));
            let machine = terminal_safe_line(&machine);
            println!("paired with {machine} at {from} (key {short})");
            if !allowed && ask {
                print!("Allow {machine} to use this Mac? [y/N] ");
                let _ = std::io::stdout().flush();
                let mut line = String::new();
                let yes = std::io::stdin().read_line(&mut line).is_ok() && line.trim().eq_ignore_ascii_case("y");
                match crate::lend::pairing::answer(hosts_file, &key, yes) {
                    Ok(_) if yes => println!("allowed {machine}"),
                    Ok(_) => println!("not allowed; {machine} is forgotten"),
                    Err(e) => eprintln!("headroom lend: {e}"),
                }
            } else if !allowed {
                println!("{machine} waits to be allowed (`headroom lend --allow-paired`, or the app's Settings)");
            }
        }
        LendEvent::Code { code } => println!("pairing code now {code} (good once, for 5 minutes)"),
        LendEvent::Lent { first_layer, layers, model, to } => {
            println!(
                "lent layers {first_layer}..{layers} of {} to {to}",
                terminal_safe_line(&model.display().to_string())
            );
        }
        // A refusal can quote what a host sent: no control character reaches the terminal.
        LendEvent::Refused { from, message } => {
            eprintln!("headroom lend: refused {from}: {}", terminal_safe_line(&message));
        }
        LendEvent::NotAdvertised { reason } => eprintln!("headroom lend: not advertised with Bonjour: {reason}"),
    }
    let _ = std::io::stdout().flush();
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
