//! The lender's pairings: the code it shows (single-use, drawn from the
//! OS's random source, good for [`CODE_LIFETIME`]), the hosts whose keys it
//! pinned (kept in its data folder, this user's only, each allowed by this
//! Mac's owner or waiting to be), and the wrong codes it took, counted per
//! source address, so that one host guessing cannot turn pairing off for
//! another. The code itself is checked by a PAKE
//! (`headroom_engine::peer::secure`): it never crosses the wire, and each
//! wrong one costs a guesser a connection.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use headroom_engine::peer::secure::{self, PublicKey};
use serde::{Deserialize, Serialize};

use super::LendError;

/// Wrong pairing codes a lender takes from one address before it stops
/// pairing with that address until it is started again.
pub const PAIRING_ATTEMPTS: u32 = 5;
/// Wrong codes, from anyone, after which the code is replaced by a new one:
/// many sources guessing together get this many tries at one code.
pub const WRONG_PER_CODE: u32 = 10;
/// How long a code is good for.
pub const CODE_LIFETIME: Duration = Duration::from_secs(5 * 60);
/// The addresses whose wrong codes are remembered at once: a flood of
/// sources beyond it is refused pairing rather than grown without bound.
const SOURCES: usize = 4096;
/// The most hosts a lender pins (each a line in Settings).
const MAX_HOSTS: usize = 256;

/// A host this Mac paired with, as Settings and `headroom lend --list` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct PairedHost {
    /// The host's name, as it said it when pairing.
    pub machine: String,
    /// Its public key (64 hex digits): what it proves on every connection.
    pub key: String,
    /// Whether this Mac's owner allowed it ("Allow <machine> to use this Mac?").
    pub allowed: bool,
    /// When it paired (seconds since 1970).
    #[ts(type = "number")]
    pub paired_at: u64,
}

impl PairedHost {
    /// A short form of its key, for people to compare.
    pub fn fingerprint(&self) -> String {
        secure::from_hex(&self.key).map_or_else(|| self.key.clone(), |k| secure::fingerprint(&k))
    }
}

/// Whom a connection's key belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// A paired host this Mac's owner allowed.
    Allowed(String),
    /// Paired, waiting for the owner's answer.
    Waiting(String),
    /// Never paired (or revoked).
    Unknown,
}

/// The code, the wrong codes per source.
#[derive(Debug)]
pub struct Pairing {
    code: String,
    issued: Instant,
    wrong: HashMap<IpAddr, u32>,
    wrong_this_code: u32,
    file: PathBuf,
}

impl Pairing {
    /// Pairing with the hosts kept in `file`, with a fresh code.
    pub fn new(file: PathBuf) -> Result<Self, LendError> {
        Ok(Self { code: fresh_code()?, issued: Instant::now(), wrong: HashMap::new(), wrong_this_code: 0, file })
    }

    /// The code this lender shows now (a new one once the last expired).
    pub fn code(&mut self) -> Result<&str, LendError> {
        if self.issued.elapsed() >= CODE_LIFETIME {
            self.renew()?;
        }
        Ok(&self.code)
    }

    fn renew(&mut self) -> Result<(), LendError> {
        self.code = fresh_code()?;
        self.issued = Instant::now();
        self.wrong_this_code = 0;
        Ok(())
    }

    /// Why `from` may not pair now, if it may not: it gave
    /// [`PAIRING_ATTEMPTS`] wrong codes (or too many sources are guessing).
    pub fn refusal(&self, from: IpAddr) -> Option<String> {
        let wrong = self.wrong.get(&from).copied().unwrap_or(0);
        (wrong >= PAIRING_ATTEMPTS || (wrong == 0 && self.wrong.len() >= SOURCES)).then(|| {
            format!("{PAIRING_ATTEMPTS} wrong pairing codes from {from}: pairing is off for that address until this Mac lends itself again")
        })
    }

    /// A wrong code from `from`: counted there, and the code replaced after
    /// [`WRONG_PER_CODE`] from anyone.
    pub fn wrong(&mut self, from: IpAddr) -> Result<(), LendError> {
        *self.wrong.entry(from).or_insert(0) += 1;
        self.wrong_this_code += 1;
        if self.wrong_this_code >= WRONG_PER_CODE {
            self.renew()?;
        }
        Ok(())
    }

    /// A host proved `code`: its key is pinned (allowed if it was before or
    /// `allow` says so, else waiting for the owner) and the code is spent (a
    /// new one is shown). Whether it is allowed; refused if another host
    /// spent that code first.
    pub fn paired(&mut self, code: &str, key: &PublicKey, machine: &str, allow: bool) -> Result<bool, LendError> {
        if !bool::from(subtle::ConstantTimeEq::ct_eq(code.as_bytes(), self.code.as_bytes())) {
            return Err(LendError::Refused("that pairing code was used already: ask for the new one".into()));
        }
        self.renew()?;
        let mut hosts = hosts(&self.file);
        let hex = secure::to_hex(key);
        let allowed = allow || hosts.iter().any(|h| h.allowed && same(&h.key, key));
        hosts.retain(|h| !same(&h.key, key));
        if hosts.len() >= MAX_HOSTS {
            return Err(LendError::Refused(format!("this Mac has paired with {MAX_HOSTS} hosts: revoke one first")));
        }
        let paired_at = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        hosts.push(PairedHost { machine: machine.to_owned(), key: hex, allowed, paired_at });
        keep(&self.file, &hosts)?;
        Ok(allowed)
    }

    /// Where the pinned hosts are kept.
    pub fn file(&self) -> &Path {
        &self.file
    }
}

fn fresh_code() -> Result<String, LendError> {
    secure::pairing_code().map_err(|e| LendError::Random(std::io::Error::other(e)))
}

fn same(hex: &str, key: &PublicKey) -> bool {
    secure::from_hex(hex).is_some_and(|k| secure::same_key(&k, key))
}

/// The hosts pinned in `file` (none when it is missing or unreadable: said in the log).
pub fn hosts(file: &Path) -> Vec<PairedHost> {
    match std::fs::read(file) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!("{} is not readable: {e}; no host is paired", file.display());
            Vec::new()
        }),
        Err(_) => Vec::new(),
    }
}

/// Whom `key` belongs to, read from `file` now (so a revoke takes effect at
/// the next connection).
pub fn known(file: &Path, key: &PublicKey) -> Known {
    match hosts(file).into_iter().find(|h| same(&h.key, key)) {
        Some(h) if h.allowed => Known::Allowed(h.machine),
        Some(h) => Known::Waiting(h.machine),
        None => Known::Unknown,
    }
}

/// The owner's answer to "Allow <machine> to use this Mac?": allowed, or
/// forgotten. False if no such host is paired.
pub fn answer(file: &Path, key: &str, allow: bool) -> Result<bool, LendError> {
    let mut hosts = hosts(file);
    let Some(i) = hosts.iter().position(|h| h.key.eq_ignore_ascii_case(key)) else { return Ok(false) };
    if allow {
        hosts[i].allowed = true;
    } else {
        hosts.remove(i);
    }
    keep(file, &hosts)?;
    Ok(true)
}

/// Revokes a paired host: its key opens nothing here from the next connection.
pub fn revoke(file: &Path, key: &str) -> Result<bool, LendError> {
    answer(file, key, false)
}

fn keep(file: &Path, hosts: &[PairedHost]) -> Result<(), LendError> {
    let json = serde_json::to_vec_pretty(hosts)
        .map_err(|e| LendError::Keep { path: file.to_owned(), source: std::io::Error::other(e) })?;
    secure::write_private(file, &json).map_err(|source| LendError::Keep { path: file.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_codes_are_counted_per_source_and_another_source_still_pairs() {
        let dir = headroom_test_support::scratch("lend-pairing");
        let mut pairing = Pairing::new(dir.join("lent-to.json")).unwrap();
        let (guesser, host) = (IpAddr::from([10, 0, 0, 9]), IpAddr::from([10, 0, 0, 2]));
        for _ in 0..PAIRING_ATTEMPTS {
            assert_eq!(pairing.refusal(guesser), None);
            pairing.wrong(guesser).unwrap();
        }
        let off = pairing.refusal(guesser).unwrap();
        assert!(off.contains("pairing is off for that address"), "{off}");
        assert_eq!(pairing.refusal(host), None);
    }

    #[test]
    fn a_code_is_spent_by_a_pairing_and_replaced_after_many_wrong_ones() {
        let dir = headroom_test_support::scratch("lend-pairing-code");
        let mut pairing = Pairing::new(dir.join("lent-to.json")).unwrap();
        let first = pairing.code().unwrap().to_owned();
        let key = secure::Identity::generate().unwrap();
        assert!(!pairing.paired(&first, key.public(), "Studio", false).unwrap(), "allowed before the owner said so");
        let again = pairing.paired(&first, key.public(), "Studio", false).unwrap_err();
        assert!(again.to_string().contains("used already"), "{again}");
        assert_ne!(pairing.code().unwrap(), first, "the code was used and is still shown");
        let second = pairing.code().unwrap().to_owned();
        for i in 0..WRONG_PER_CODE {
            pairing.wrong(IpAddr::from([10, 0, 1, u8::try_from(i).unwrap()])).unwrap();
        }
        // Almost surely another draw; a repeat would be one chance in a million.
        assert_ne!(pairing.code().unwrap(), second);
    }

    #[test]
    fn a_host_waits_for_the_owner_then_is_allowed_and_revoked() {
        let dir = headroom_test_support::scratch("lend-pairing-hosts");
        let file = dir.join("lent-to.json");
        let mut pairing = Pairing::new(file.clone()).unwrap();
        let host = secure::Identity::generate().unwrap();
        let hex = secure::to_hex(host.public());
        assert_eq!(known(&file, host.public()), Known::Unknown);
        let code = pairing.code().unwrap().to_owned();
        pairing.paired(&code, host.public(), "Air", false).unwrap();
        assert_eq!(known(&file, host.public()), Known::Waiting("Air".into()));
        assert!(answer(&file, &hex, true).unwrap());
        assert_eq!(known(&file, host.public()), Known::Allowed("Air".into()));
        // Pairing again keeps the owner's answer.
        let code = pairing.code().unwrap().to_owned();
        assert!(pairing.paired(&code, host.public(), "Air", false).unwrap());
        assert_eq!(hosts(&file).len(), 1);
        assert!(revoke(&file, &hex).unwrap());
        assert_eq!(known(&file, host.public()), Known::Unknown);
        assert!(!revoke(&file, &hex).unwrap());
    }
}
