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
    /// A host allowed to connect without pairing (repeatable); loopback by default.
    #[arg(long = "allow", value_name = "IP")]
    pub allow: Vec<IpAddr>,
    /// A folder of models this Mac lends from (repeatable), beside its data
    /// folder's models and its Hugging Face caches; nothing outside these is read.
    #[arg(long = "models", value_name = "FOLDER")]
    pub models: Vec<std::path::PathBuf>,
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
    let config = LendConfig {
        bind: args.bind,
        port: args.port,
        allow: args.allow.clone(),
        models: args.models.clone(),
        budget: budget_source(&args.budget),
        data_dir: super::chat::locations()?.data_dir,
        allow_pulls: args.allow_pulls,
        advertise: true,
        program: std::env::current_exe()?,
    };
    let allowed: Vec<String> = if args.allow.is_empty() {
        vec!["loopback".to_owned()]
    } else {
        args.allow.iter().map(ToString::to_string).collect()
    };
    let lending = crate::lend::start(config, Box::new(say))?;
    println!(
        "lending {} on {} (budget {}); pairing code {}; hosts allowed without pairing: {}",
        lending.machine,
        lending.status.address,
        gb(lending.budget_bytes),
        lending.status.code,
        allowed.join(", ")
    );
    std::io::stdout().flush()?;
    lending.wait();
    Ok(())
}

/// What the lender did, in a line.
fn say(event: LendEvent) {
    match event {
        LendEvent::Paired { from } => println!("paired with a host at {from}"),
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
