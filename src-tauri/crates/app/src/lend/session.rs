//! One lent session, in a process of its own: MLX keeps one ring per
//! process for the process's life, so each session's ring lives (and dies,
//! when a host vanishes) in a worker the lender starts with the host's
//! connection as its stdin, and the checked placement and the connection's
//! channel (its keys, so the worker continues the sealed conversation) in
//! its environment, which only this user (and root) can read. The lender
//! reads nothing the worker prints.

use std::net::TcpStream;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use headroom_core::fit::BudgetInputs;
use headroom_engine::peer::lender::Served;
use headroom_engine::peer::protocol::Conn;
use headroom_engine::peer::secure::Channel;
use headroom_engine::peer::{Placement, Reply};

use super::LendError;

/// The environment variable that hands a session process its placement.
const PLACEMENT_ENV: &str = "HEADROOM_PLACEMENT";
/// The control connection's channel.
const CHANNEL_ENV: &str = "HEADROOM_CHANNEL";
/// Set for a session that pulls the model first: the budget its share is checked against.
const PULL_ENV: &str = "HEADROOM_PULL_WITHIN";

/// Starts `program lend --session` for `placement` (checked), holding the
/// host's connection as its stdin; with `pull`, it first pulls the model
/// within that budget.
pub(super) fn start(
    program: &Path,
    conn: &Conn,
    placement: &Placement,
    pull: Option<BudgetInputs>,
) -> Result<Child, LendError> {
    let json = serde_json::to_string(placement).map_err(|e| LendError::Io(std::io::Error::other(e)))?;
    let (stream, channel) = conn.hand_over()?;
    let channel = serde_json::to_string(&channel).map_err(|e| LendError::Io(std::io::Error::other(e)))?;
    let fd = stream.as_fd().try_clone_to_owned().map_err(LendError::Io)?;
    let mut command = Command::new(program);
    if let Some(budget) = pull {
        command.env(PULL_ENV, serde_json::to_string(&budget).map_err(|e| LendError::Io(std::io::Error::other(e)))?);
    }
    command
        .args(["lend", "--session"])
        .env(PLACEMENT_ENV, json)
        .env(CHANNEL_ENV, channel)
        .stdin(Stdio::from(fd))
        .stdout(Stdio::null())
        .spawn()
        .map_err(LendError::Session)
}

/// `lend --session`: serves the session whose connection is stdin and whose
/// placement is in the environment; what it did.
pub fn run() -> Result<Served, LendError> {
    let json = std::env::var(PLACEMENT_ENV).map_err(|_| LendError::NotASession(PLACEMENT_ENV))?;
    let mut placement: Placement = serde_json::from_str(&json).map_err(|e| LendError::Io(std::io::Error::other(e)))?;
    let channel = std::env::var(CHANNEL_ENV).map_err(|_| LendError::NotASession(CHANNEL_ENV))?;
    let channel: Channel = serde_json::from_str(&channel).map_err(|e| LendError::Io(std::io::Error::other(e)))?;
    let fd = std::io::stdin().as_fd().try_clone_to_owned().map_err(LendError::Io)?;
    let mut control = Conn::resume(TcpStream::from(fd), channel);
    if let Ok(budget) = std::env::var(PULL_ENV) {
        let budget: BudgetInputs =
            serde_json::from_str(&budget).map_err(|e| LendError::Io(std::io::Error::other(e)))?;
        match super::copy::pull(&placement, budget, &mut control) {
            Ok(path) => placement.model.path = path,
            Err(e) => {
                // The host hears why; the session is over.
                let _ = control.send(&Reply::Refused { message: e.to_string() });
                return Err(e);
            }
        }
    }
    // Steps aside at the pressure a local model gives its memory back at
    // (crate::away's policy), read at most twice a second.
    let policy = crate::away::policy_from_env(headroom_core::away::AwayPolicy::default());
    let mut reader = headroom_memory::Reader::new()?;
    let mut last: Option<(Instant, bool)> = None;
    let mut tight = || match last {
        Some((at, was)) if at.elapsed() < Duration::from_millis(500) => was,
        _ => {
            let now = policy.is_tight(reader.read().pressure);
            last = Some((Instant::now(), now));
            now
        }
    };
    Ok(headroom_engine::peer::lender::serve(control, &placement, &mut tight)?)
}
