//! The Macs this one paired with (`headroom pair HOST:PORT CODE`, or
//! Settings → Two Macs → Pair): each lender's address and the token it
//! gave, kept in the data folder (`peers.json`, this user's only), so that
//! the app and every command that takes `--peer` present it. A lender
//! allows a host by its token, or by address (`lend --allow`, loopback by
//! default). Also what the Settings list: the lenders Bonjour finds, each
//! marked if this Mac paired with it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use headroom_engine::EngineError;
use serde::Serialize;

use crate::codes::{Coded, ErrorCode};
use crate::discovery::Found;

/// The file the tokens are kept in.
pub const PEERS_FILE: &str = "peers.json";

fn file(data_dir: &Path) -> PathBuf {
    data_dir.join(PEERS_FILE)
}

/// Every pairing: address → token. An unreadable or malformed file holds none (said in the log).
pub fn load(data_dir: &Path) -> BTreeMap<String, String> {
    match std::fs::read(file(data_dir)) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!("{} is not readable: {e}; no pairing is used", file(data_dir).display());
            BTreeMap::new()
        }),
        Err(_) => BTreeMap::new(),
    }
}

/// The token paired with `addr`, if any.
pub fn token_for(data_dir: &Path, addr: &str) -> Option<String> {
    load(data_dir).remove(addr)
}

/// Keeps `token` for `addr` (replacing an older pairing), in a file only
/// this user can read.
pub fn remember(data_dir: &Path, addr: &str, token: &str) -> std::io::Result<()> {
    let mut all = load(data_dir);
    all.insert(addr.to_owned(), token.to_owned());
    let json = serde_json::to_vec_pretty(&all).map_err(std::io::Error::other)?;
    write_private(&file(data_dir), &json)
}

/// Writes `bytes` to `path` whole (through a temporary file), readable by
/// this user only: a token is as good as the pairing it stands for.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let partial = path.with_extension("partial");
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(&partial)?.write_all(bytes)?;
    }
    std::fs::rename(partial, path)
}

/// The data folder the CLI and the app share (`$HEADROOM_DATA_DIR` first).
pub fn data_dir() -> Option<PathBuf> {
    crate::locations::Locations::from_env(|| crate::locations::platform_app_data_dir().ok_or(()))
        .ok()
        .map(|l| l.data_dir)
}

/// The token for `addr` in the shared data folder.
pub fn token(addr: &str) -> Option<String> {
    token_for(&data_dir()?, addr)
}

/// A lender on this network, as Settings → Two Macs lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct Lender {
    /// Its machine's name, as it advertised it.
    pub machine: String,
    /// Where to reach it (`HOST:PORT`, what the peer setting takes).
    pub address: String,
    /// Its budget for a model when it started lending, bytes.
    pub budget_bytes: Option<u64>,
    /// This Mac holds a pairing token for that address.
    pub paired: bool,
}

/// Why the lenders could not be looked for.
#[derive(Debug, thiserror::Error)]
#[error("Cannot look for lending Macs with Bonjour: {0}. Type the peer's HOST:PORT instead.")]
pub struct FindError(#[from] mdns_sd::Error);

/// The lenders that answer Bonjour within `wait`, each marked if this Mac
/// paired with its address; `lending_on` is the port this Mac lends itself
/// on, if it does, and that lender (this Mac) is not listed: a model cannot
/// be split with the Mac it runs on. Blocks for `wait`.
pub fn find(data_dir: &Path, wait: Duration, lending_on: Option<u16>) -> Result<Vec<Lender>, FindError> {
    let machine = headroom_memory::machine_name();
    let this_mac = lending_on.map(|port| (machine.as_str(), port));
    Ok(mark(crate::discovery::browse(wait)?, &load(data_dir), this_mac))
}

/// The found lenders as listed: marked paired or not, without `this_mac`'s
/// own (its machine name and the port it lends on).
fn mark(found: Vec<Found>, pairings: &BTreeMap<String, String>, this_mac: Option<(&str, u16)>) -> Vec<Lender> {
    let is_this_mac = |f: &Found| {
        this_mac.is_some_and(|(machine, port)| {
            f.machine == machine && f.address.rsplit_once(':').is_some_and(|(_, p)| p == port.to_string())
        })
    };
    found
        .into_iter()
        .filter(|f| !is_this_mac(f))
        .map(|f| Lender {
            paired: pairings.contains_key(&f.address),
            machine: f.machine,
            address: f.address,
            budget_bytes: f.budget_bytes,
        })
        .collect()
}

/// Why pairing with a lender failed (each a sentence for the Settings).
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    /// Asking with no code would only count as a wrong one there.
    #[error("Type the pairing code the Mac at {address} shows.")]
    NoCode { address: String },
    /// The lender said no, in its words (a wrong code; pairing off after five).
    #[error("The Mac at {address} refused: {message}.")]
    Refused { address: String, message: String },
    /// Nothing answered there, not in time, or not as a lender.
    #[error("No answer from {address}: is it still lending itself? ({reason})")]
    Unreachable { address: String, reason: String },
    /// Paired, but the token could not be kept here.
    #[error("Paired with {machine}, but this Mac could not keep the pairing in {}: {source}", path.display())]
    Keep {
        machine: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Pairs with the lender at `address` using the `code` it shows and keeps
/// the token it gives (replacing an older pairing with that address): the
/// lender's machine name. Blocks for up to a few seconds (an absent lender).
pub fn pair(data_dir: &Path, address: &str, code: &str) -> Result<String, PairError> {
    let code = code.trim();
    if code.is_empty() {
        return Err(PairError::NoCode { address: address.to_owned() });
    }
    let (machine, token) = headroom_engine::peer::host::pair(address, code).map_err(|e| match e {
        EngineError::PeerRefused { message, .. } => PairError::Refused { address: address.to_owned(), message },
        EngineError::Peer { reason } => PairError::Unreachable { address: address.to_owned(), reason },
        other => PairError::Unreachable { address: address.to_owned(), reason: other.to_string() },
    })?;
    remember(data_dir, address, &token).map_err(|source| PairError::Keep {
        machine: machine.clone(),
        path: file(data_dir),
        source,
    })?;
    Ok(machine)
}

/// A stand-in lender for the app's tests.
#[cfg(any(test, feature = "testing"))]
// A test fixture (the front ends' tests use it too): a failure is the test's.
#[allow(clippy::unwrap_used)]
pub mod testing {
    use std::net::TcpListener;
    use std::thread::JoinHandle;
    use std::time::Duration;

    use headroom_engine::peer::protocol::Conn;
    use headroom_engine::peer::{Reply, Request};

    /// The machine name it pairs as, and the token it gives.
    pub const MACHINE: &str = "Studio.local";
    pub const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    /// A lender on loopback that answers one pairing: the token for `code`,
    /// "wrong pairing code" for any other. Its address, and the thread
    /// (joined: it panics if it was not asked to pair).
    pub fn lender(code: &'static str) -> (String, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let thread = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut stream = Conn::new(stream);
            let request: Request = stream.receive(Duration::from_secs(10)).unwrap();
            let Request::Pair { code: got, .. } = request else { panic!("asked {request:?}, not to pair") };
            let reply = if got == code {
                Reply::Paired { token: TOKEN.into(), machine: MACHINE.into() }
            } else {
                Reply::Refused { message: "wrong pairing code".into() }
            };
            stream.send(&reply).unwrap();
        });
        (address, thread)
    }

    /// A loopback address nothing listens on (a port just freed).
    pub fn nobody() -> String {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
    }
}

impl Coded for FindError {
    fn code(&self) -> ErrorCode {
        ErrorCode::PeerFindFailed
    }
}

impl Coded for PairError {
    fn code(&self) -> ErrorCode {
        use PairError as E;
        match self {
            E::NoCode { .. } => ErrorCode::InvalidInput,
            E::Refused { .. } => ErrorCode::PeerRefused,
            E::Unreachable { .. } => ErrorCode::PeerUnreachable,
            E::Keep { .. } => ErrorCode::PeerPairFailed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pairing_is_kept_for_its_address_only_and_readable_by_this_user_only() {
        let dir = headroom_test_support::scratch("peers");
        assert_eq!(token_for(&dir, "10.0.0.2:7070"), None);
        remember(&dir, "10.0.0.2:7070", "abc").unwrap();
        remember(&dir, "10.0.0.3:7070", "def").unwrap();
        remember(&dir, "10.0.0.2:7070", "ghi").unwrap();
        assert_eq!(token_for(&dir, "10.0.0.2:7070").as_deref(), Some("ghi"));
        assert_eq!(token_for(&dir, "10.0.0.3:7070").as_deref(), Some("def"));
        assert_eq!(token_for(&dir, "10.0.0.4:7070"), None);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(PEERS_FILE)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(dir.join(PEERS_FILE), "not json").unwrap();
        assert_eq!(token_for(&dir, "10.0.0.2:7070"), None);
    }

    #[test]
    fn pairing_keeps_the_token_for_that_address_and_says_the_machine() {
        let dir = headroom_test_support::scratch("peers-pair");
        let (address, lender) = testing::lender("482913");
        assert_eq!(pair(&dir, &address, " 482913 ").unwrap(), testing::MACHINE);
        lender.join().unwrap();
        assert_eq!(token_for(&dir, &address).as_deref(), Some(testing::TOKEN));
    }

    #[test]
    fn a_refusal_is_said_in_the_lenders_words_and_nothing_is_kept() {
        let dir = headroom_test_support::scratch("peers-refused");
        let (address, lender) = testing::lender("482913");
        let e = pair(&dir, &address, "111111").unwrap_err();
        lender.join().unwrap();
        assert!(matches!(e, PairError::Refused { .. }), "{e:?}");
        assert_eq!(e.to_string(), format!("The Mac at {address} refused: wrong pairing code."));
        assert_eq!(token_for(&dir, &address), None);
    }

    #[test]
    fn no_lender_there_is_no_answer_and_no_code_asks_nothing() {
        let dir = headroom_test_support::scratch("peers-nobody");
        let address = testing::nobody();
        let e = pair(&dir, &address, "482913").unwrap_err();
        assert!(matches!(e, PairError::Unreachable { .. }), "{e:?}");
        assert!(e.to_string().starts_with(&format!("No answer from {address}: is it still lending itself?")), "{e}");
        // Not even a connection: a lender counts an empty code as a wrong one.
        let e = pair(&dir, &address, "  ").unwrap_err();
        assert!(matches!(e, PairError::NoCode { .. }), "{e:?}");
        assert!(!dir.join(PEERS_FILE).exists());
    }

    #[test]
    fn found_lenders_are_marked_paired_by_address() {
        let found = |address: &str| Found {
            machine: "Studio.local".into(),
            address: address.into(),
            budget_bytes: Some(8 << 30),
        };
        let pairings = BTreeMap::from([("10.0.0.2:7070".to_owned(), "abc".to_owned())]);
        let listed = mark(vec![found("10.0.0.2:7070"), found("10.0.0.3:7070")], &pairings, None);
        assert_eq!(
            listed.iter().map(|l| (l.address.as_str(), l.paired)).collect::<Vec<_>>(),
            [("10.0.0.2:7070", true), ("10.0.0.3:7070", false)]
        );
        assert_eq!(listed[0].budget_bytes, Some(8 << 30));
        // The UI reads camelCase.
        let json = serde_json::to_value(&listed[0]).unwrap();
        assert_eq!(json["budgetBytes"], 8u64 << 30);

        // This Mac lending itself on 7070 is not offered as its own peer;
        // another lender of the same machine on another port (a second
        // `headroom lend`) and another Mac on 7070 still are.
        let other_port = found("10.0.0.2:7071");
        let other_mac = Found { machine: "Mini.local".into(), ..found("10.0.0.4:7070") };
        let all = vec![found("10.0.0.2:7070"), found("10.0.0.3:7070"), other_port, other_mac];
        let listed = mark(all, &pairings, Some(("Studio.local", 7070)));
        assert_eq!(
            listed.iter().map(|l| (l.machine.as_str(), l.address.as_str())).collect::<Vec<_>>(),
            [("Studio.local", "10.0.0.2:7071"), ("Mini.local", "10.0.0.4:7070")]
        );
    }
}
