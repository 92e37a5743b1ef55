//! Lending this Mac from the app: `headroom lend` run as a child process of
//! the app (the same binary), so that a session's ring lives in processes
//! of its own and the app only starts and stops it. It listens on every
//! interface at [`LEND_PORT`] and answers only hosts that pair with the
//! code it prints (or loopback).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::Serialize;

/// The port the app lends on (what a host's `--peer HOST:PORT` names).
pub const LEND_PORT: u16 = 7070;

/// How long `headroom lend` may take to say where it listens.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// What the Settings show about this Mac being lent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct LendStatus {
    /// Where hosts reach it (`0.0.0.0:7070`: every address of this Mac).
    pub address: String,
    /// The code a host pairs with (`headroom pair HOST:PORT CODE`).
    pub code: String,
}

/// A running `headroom lend`, stopped when dropped.
#[derive(Debug)]
pub struct Lending {
    child: Child,
    pub status: LendStatus,
}

impl Drop for Lending {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why lending could not start.
#[derive(Debug, thiserror::Error)]
pub enum LendError {
    #[error("cannot start `headroom lend`: {0}")]
    Start(std::io::Error),
    #[error("`headroom lend` did not start: {0}")]
    Failed(String),
}

/// Starts `headroom lend` on every interface at `port`, with the app's data
/// folder (its pairings), and reads where it listens and its code.
pub fn start(data_dir: &std::path::Path, port: u16) -> Result<Lending, LendError> {
    let exe = std::env::current_exe().map_err(LendError::Start)?;
    let mut child = Command::new(exe)
        .args(["lend", "--bind", "0.0.0.0", "--port", &port.to_string()])
        .env(crate::DATA_DIR_ENV, data_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(LendError::Start)?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    // The first line says where it listens; read off this thread, bounded.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        if let Some(out) = stdout {
            let mut out = BufReader::new(out);
            let _ = out.read_line(&mut line);
            let _ = tx.send(line);
            // Later lines (a session lent, a pairing) go to the log.
            for l in out.lines().map_while(Result::ok) {
                tracing::info!("lend: {l}");
            }
        }
    });
    if let Some(err) = stderr {
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                tracing::info!("lend: {l}");
            }
        });
    }
    let line = rx.recv_timeout(START_TIMEOUT).unwrap_or_default();
    match parse_first_line(&line) {
        Some(status) => Ok(Lending { child, status }),
        None => {
            let _ = child.kill();
            let code = child.wait().ok().and_then(|s| s.code());
            Err(LendError::Failed(format!(
                "it exited ({code:?}) without saying where it listens; the port {port} may be taken"
            )))
        }
    }
}

/// `lending NAME on ADDR (budget …); pairing code NNNNNN; …` → its address and code.
fn parse_first_line(line: &str) -> Option<LendStatus> {
    let address = line.split(" on ").nth(1)?.split_whitespace().next()?.to_owned();
    let code: String = line.split("pairing code ").nth(1)?.chars().take_while(char::is_ascii_digit).collect();
    (code.len() == 6).then_some(LendStatus { address, code })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_address_and_the_code_from_lends_first_line() {
        let line = "lending Studio.local on 0.0.0.0:7070 (budget 26.10 GB); pairing code 048291; hosts allowed without pairing: 127.0.0.1\n";
        assert_eq!(parse_first_line(line), Some(LendStatus { address: "0.0.0.0:7070".into(), code: "048291".into() }));
        assert_eq!(parse_first_line("headroom: cannot lend this Mac: cannot listen on 0.0.0.0:7070"), None);
        assert_eq!(parse_first_line(""), None);
    }
}
