//! The Macs this one paired with (`headroom pair HOST:PORT CODE`, or
//! Settings → Two Macs → Pair): each lender's address, its machine name
//! and the key it proved when pairing, kept in the data folder
//! (`peers.json`, this user's only), so that the app and every command
//! that takes `--peer` check the lender is that Mac (the Noise handshake in
//! `headroom_engine::peer::secure`). This Mac's own key is `identity.key`
//! there, the same whether it hosts or lends. Also what the Settings list:
//! the lenders Bonjour finds, each marked if this Mac paired with it, and
//! the pairings with "Forget".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use headroom_engine::peer::secure::{self, Identity};
use headroom_engine::peer::Trust;
use headroom_engine::EngineError;
use serde::{Deserialize, Serialize};

use crate::codes::{Coded, ErrorCode};
use crate::discovery::Found;

/// The file the pairings are kept in.
pub const PEERS_FILE: &str = "peers.json";
/// Where this Mac keeps its own key, as host and as lender.
pub const IDENTITY_FILE: &str = "identity.key";

fn file(data_dir: &Path) -> PathBuf {
    data_dir.join(PEERS_FILE)
}

/// A lender this Mac paired with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct PairedLender {
    /// Where it lends (`HOST:PORT`).
    #[serde(default)]
    pub address: String,
    /// Its machine's name, as it said it when pairing.
    pub machine: String,
    /// Its public key (64 hex digits), pinned: a Mac at that address with
    /// another key is refused.
    pub key: String,
    /// Whether its owner had allowed this Mac when they paired (else they are asked there).
    pub allowed: bool,
}

/// Every pairing: address → the lender. An unreadable or malformed file
/// (an older version's tokens) holds none (said in the log).
pub fn load(data_dir: &Path) -> BTreeMap<String, PairedLender> {
    match std::fs::read(file(data_dir)) {
        Ok(bytes) => serde_json::from_slice::<BTreeMap<String, PairedLender>>(&bytes)
            .map(|all| all.into_iter().map(|(a, l)| (a.clone(), PairedLender { address: a, ..l })).collect())
            .unwrap_or_else(|e| {
                tracing::warn!("{} is not readable: {e}; no pairing is used (pair again)", file(data_dir).display());
                BTreeMap::new()
            }),
        Err(_) => BTreeMap::new(),
    }
}

/// The pairings, for Settings and `headroom pair --list`.
pub fn list(data_dir: &Path) -> Vec<PairedLender> {
    load(data_dir).into_values().collect()
}

/// Keeps `lender` (replacing an older pairing with its address), in a file
/// only this user can read.
pub fn remember(data_dir: &Path, lender: &PairedLender) -> std::io::Result<()> {
    let mut all = load(data_dir);
    all.insert(lender.address.clone(), lender.clone());
    keep(data_dir, &all)
}

/// Forgets the pairing with `address` (its key opens nothing from here
/// on); false if there was none.
pub fn forget(data_dir: &Path, address: &str) -> std::io::Result<bool> {
    let mut all = load(data_dir);
    if all.remove(address).is_none() {
        return Ok(false);
    }
    keep(data_dir, &all).map(|()| true)
}

fn keep(data_dir: &Path, all: &BTreeMap<String, PairedLender>) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(all).map_err(std::io::Error::other)?;
    write_private(&file(data_dir), &json)
}

/// Writes `bytes` to `path` whole (through a temporary file), readable by
/// this user only.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    secure::write_private(path, bytes)
}

/// This Mac's own key, made in `data_dir` the first time.
pub fn identity(data_dir: &Path) -> std::io::Result<Identity> {
    Identity::load_or_create(&data_dir.join(IDENTITY_FILE))
}

/// Whom this Mac trusts the lender at `addr` to be: its own key and the
/// pinned one (none if it never paired with that address).
pub fn trust_in(data_dir: &Path, addr: &str) -> Result<Trust, EngineError> {
    let identity = identity(data_dir).map_err(|e| EngineError::Peer {
        reason: format!("this Mac's key in {} cannot be kept: {e}", data_dir.join(IDENTITY_FILE).display()),
    })?;
    let pinned = load(data_dir).remove(addr).and_then(|l| secure::from_hex(&l.key));
    Ok(Trust { identity, pinned })
}

/// The data folder the CLI and the app share (`$HEADROOM_DATA_DIR` first).
pub fn data_dir() -> Option<PathBuf> {
    crate::locations::Locations::from_env(|| crate::locations::platform_app_data_dir().ok_or(()))
        .ok()
        .map(|l| l.data_dir)
}

/// Whom this Mac trusts the lender at `addr` to be, from the shared data folder.
pub fn trust(addr: &str) -> Result<Trust, EngineError> {
    let dir = data_dir().ok_or_else(|| EngineError::Peer { reason: "no data folder is known here".into() })?;
    trust_in(&dir, addr)
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
    /// This Mac paired with that address.
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
fn mark(found: Vec<Found>, pairings: &BTreeMap<String, PairedLender>, this_mac: Option<(&str, u16)>) -> Vec<Lender> {
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
    /// Paired, but the lender's key could not be kept here.
    #[error("Paired with {machine}, but this Mac could not keep the pairing in {}: {source}", path.display())]
    Keep {
        machine: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Pairs with the lender at `address` using the `code` it shows (a PAKE:
/// the code never crosses the wire) and pins its key (replacing an older
/// pairing with that address): the lender as kept. Blocks for up to a few
/// seconds (an absent lender).
pub fn pair(data_dir: &Path, address: &str, code: &str) -> Result<PairedLender, PairError> {
    let code = code.trim();
    if code.is_empty() {
        return Err(PairError::NoCode { address: address.to_owned() });
    }
    let unreachable = |reason: String| PairError::Unreachable { address: address.to_owned(), reason };
    let identity = identity(data_dir).map_err(|e| unreachable(format!("this Mac's key cannot be kept: {e}")))?;
    let machine = headroom_memory::machine_name();
    let paired = headroom_engine::peer::host::pair(address, code, &identity, &machine).map_err(|e| match e {
        EngineError::PeerRefused { message, .. } => PairError::Refused { address: address.to_owned(), message },
        EngineError::Peer { reason } => unreachable(reason),
        other => unreachable(other.to_string()),
    })?;
    let lender = PairedLender {
        address: address.to_owned(),
        machine: paired.machine,
        key: secure::to_hex(&paired.key),
        allowed: paired.approved,
    };
    remember(data_dir, &lender).map_err(|source| PairError::Keep {
        machine: lender.machine.clone(),
        path: file(data_dir),
        source,
    })?;
    Ok(lender)
}

/// A stand-in lender for the app's tests.
#[cfg(any(test, feature = "testing"))]
// A test fixture (the front ends' tests use it too): a failure is the test's.
#[allow(clippy::unwrap_used)]
pub mod testing {
    use std::net::TcpListener;
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    use headroom_engine::peer::secure::{self, Hello, Identity};
    use headroom_engine::peer::{Reply, Request};

    /// The machine name it pairs as.
    pub const MACHINE: &str = "Studio.local";

    /// A lender on loopback that answers one pairing with `code` (the PAKE,
    /// then its name; a wrong code closes the connection, as a lender
    /// does). Its address, its key, and the thread (joined: it panics if it
    /// was not asked to pair).
    pub fn lender(code: &'static str) -> (String, String, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let identity = Identity::generate().unwrap();
        let key = secure::to_hex(identity.public());
        let thread = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            let (framed, hello) = secure::hello(stream, deadline).unwrap();
            let Hello::Pair(first) = hello else { panic!("asked {hello:?}, not to pair") };
            let Ok(mut conn) = secure::accept_pairing(framed, &first, &identity, code, deadline) else { return };
            let request: Request = conn.receive_by(deadline).unwrap();
            assert!(matches!(request, Request::Pair { .. }), "asked {request:?}, not to pair");
            conn.send(&Reply::Paired { machine: MACHINE.into(), approved: false }).unwrap();
        });
        (address, key, thread)
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

    fn lender(address: &str, key: &str) -> PairedLender {
        PairedLender { address: address.into(), machine: "Studio".into(), key: key.into(), allowed: true }
    }

    #[test]
    fn a_pairing_is_kept_for_its_address_only_and_readable_by_this_user_only() {
        let dir = headroom_test_support::scratch("peers");
        let (a, b, c) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
        assert!(trust_in(&dir, "10.0.0.2:7070").unwrap().pinned.is_none());
        remember(&dir, &lender("10.0.0.2:7070", &a)).unwrap();
        remember(&dir, &lender("10.0.0.3:7070", &b)).unwrap();
        remember(&dir, &lender("10.0.0.2:7070", &c)).unwrap();
        assert_eq!(trust_in(&dir, "10.0.0.2:7070").unwrap().pinned, secure::from_hex(&c));
        assert_eq!(trust_in(&dir, "10.0.0.3:7070").unwrap().pinned, secure::from_hex(&b));
        assert!(trust_in(&dir, "10.0.0.4:7070").unwrap().pinned.is_none());
        assert_eq!(list(&dir).len(), 2);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for f in [PEERS_FILE, IDENTITY_FILE] {
                let mode = std::fs::metadata(dir.join(f)).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600, "{f}");
            }
        }
        assert!(forget(&dir, "10.0.0.3:7070").unwrap());
        assert!(!forget(&dir, "10.0.0.3:7070").unwrap());
        assert_eq!(list(&dir).len(), 1);
        // An older version's tokens: no pairing, pair again.
        std::fs::write(dir.join(PEERS_FILE), r#"{"10.0.0.2:7070":"0123"}"#).unwrap();
        assert!(trust_in(&dir, "10.0.0.2:7070").unwrap().pinned.is_none());
    }

    #[test]
    fn pairing_pins_the_lenders_key_for_that_address_and_says_the_machine() {
        let dir = headroom_test_support::scratch("peers-pair");
        let (address, key, lender) = testing::lender("482913");
        let paired = pair(&dir, &address, " 482913 ").unwrap();
        lender.join().unwrap();
        assert_eq!(
            (paired.machine.as_str(), paired.key.as_str(), paired.allowed),
            (testing::MACHINE, key.as_str(), false)
        );
        assert_eq!(trust_in(&dir, &address).unwrap().pinned, secure::from_hex(&key));
    }

    #[test]
    fn a_refusal_is_said_in_the_lenders_words_and_nothing_is_kept() {
        let dir = headroom_test_support::scratch("peers-refused");
        let (address, _, lender) = testing::lender("482913");
        let e = pair(&dir, &address, "111111").unwrap_err();
        lender.join().unwrap();
        assert!(matches!(e, PairError::Refused { .. }), "{e:?}");
        assert_eq!(e.to_string(), format!("The Mac at {address} refused: wrong pairing code."));
        assert!(list(&dir).is_empty());
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
        let pairings = BTreeMap::from([("10.0.0.2:7070".to_owned(), lender("10.0.0.2:7070", &"a".repeat(64)))]);
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
