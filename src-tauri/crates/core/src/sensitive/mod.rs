//! The detectors behind "sensitive content stays local": hand-written
//! scanners over the message text that find phone numbers, PRC resident ID
//! numbers, email addresses, private IP addresses, intranet hosts and paths,
//! home-folder paths and secrets, each reported with a masked excerpt.
//!
//! The scanners work on bytes: every pattern here is ASCII, and a non-ASCII
//! byte (>= 0x80) never matches an ASCII class, so every index a scanner
//! stops at is a char boundary. A detector errs towards finding (a false
//! positive keeps a message local; a false negative sends it away), but each
//! one also rejects the look-alikes that are common in real prompts: order
//! numbers, timestamps, dates, version strings, amounts, code identifiers
//! and documentation placeholders.
//!
//! Every detector runs in time linear in the text: anchors are found with
//! memchr, each candidate is looked at a bounded number of times, and no
//! detector rescans the rest of the text per candidate (a 1 MiB paste of
//! `pwd=`, `sk-`, digits and dots is scanned in a few milliseconds; see
//! `benches/scan.rs`). [`ScanCache`] keeps the findings of texts already
//! scanned, so a long conversation is not rescanned for each new message.

mod email;
mod helpers;
mod intranet;
mod ips;
mod numbers;
mod secrets;

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

use email::emails;
use intranet::{home_paths, hosts, share_paths, urls_with_dotless_hosts};
use ips::{ipv4s, ipv6s};
use numbers::numbers;
pub use numbers::prc_id_valid;
use secrets::{assigned_secrets, bearer_tokens, entropy_near_keywords, prefixed_secrets, private_keys};

/// What kind of sensitive content a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub enum SensitiveKind {
    /// A mainland-China mobile number: 1[3-9] + 9 digits, optional +86.
    CnMobile,
    /// Any other phone number: `+` and 8–15 digits, a formatted North
    /// American number, or digits right after a word like "phone"/"电话".
    Phone,
    /// A PRC resident ID number whose ISO 7064 MOD 11-2 checksum, region and
    /// birth date are valid.
    PrcId,
    Email,
    /// 10/8, 172.16/12, 192.168/16, 127/8, 169.254/16, fc00::/7, fe80::/10, ::1.
    PrivateIp,
    /// `*.corp`, `*.internal`, `*.lan`, `*.local`, `*.intranet`,
    /// `*.localdomain`, `*.home.arpa`, or a dotless host in an http(s) URL.
    IntranetHost,
    /// `\\server\share` or `smb://server/share`.
    IntranetPath,
    /// `/Users/name`, `/home/name`, `~/…`, `C:\Users\name`.
    HomePath,
    /// API keys, tokens, passwords, private keys.
    Secret,
}

impl SensitiveKind {
    /// A stable code for the UI and the JSON output.
    pub fn code(self) -> &'static str {
        match self {
            Self::CnMobile => "SENSITIVE_CN_MOBILE",
            Self::Phone => "SENSITIVE_PHONE",
            Self::PrcId => "SENSITIVE_PRC_ID",
            Self::Email => "SENSITIVE_EMAIL",
            Self::PrivateIp => "SENSITIVE_PRIVATE_IP",
            Self::IntranetHost => "SENSITIVE_INTRANET_HOST",
            Self::IntranetPath => "SENSITIVE_INTRANET_PATH",
            Self::HomePath => "SENSITIVE_HOME_PATH",
            Self::Secret => "SENSITIVE_SECRET",
        }
    }

    /// What it is, in plain words ("a phone number").
    pub fn noun(self) -> &'static str {
        match self {
            Self::CnMobile => "a mainland-China mobile number",
            Self::Phone => "a phone number",
            Self::PrcId => "a PRC resident ID number",
            Self::Email => "an email address",
            Self::PrivateIp => "a private IP address",
            Self::IntranetHost => "an intranet host name",
            Self::IntranetPath => "an intranet share path",
            Self::HomePath => "a home-folder path",
            Self::Secret => "a secret (API key, token, password or private key)",
        }
    }
}

/// One example of each kind, as users paste them: for tests (here, the
/// app's and the command line's privacy tests) and documentation.
pub const EXAMPLES: [(SensitiveKind, &str); 9] = [
    (SensitiveKind::CnMobile, "13812345678"),
    (SensitiveKind::Phone, "+44 20 7946 0958"),
    (SensitiveKind::PrcId, "11010519491231002X"),
    (SensitiveKind::Email, "j.doe@example.com"),
    (SensitiveKind::PrivateIp, "192.168.1.20"),
    (SensitiveKind::IntranetHost, "build01.corp"),
    (SensitiveKind::IntranetPath, r"\\fileserver\finance"),
    (SensitiveKind::HomePath, "/Users/alice/Documents/salary.xlsx"),
    (SensitiveKind::Secret, "AKIAIOSFODNN7EXAMPLE"),
];

/// One piece of sensitive content: what it is, where (byte offsets into the
/// text), and a masked excerpt that is safe to show and log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub kind: SensitiveKind,
    pub masked: String,
    pub start: usize,
    pub end: usize,
}

/// Every sensitive finding in `text`, in order of position. A finding lying
/// inside another (the `build01.corp` of `ops@build01.corp`) is dropped: the
/// outer one already says it.
pub fn scan(text: &str) -> Vec<Finding> {
    let mut found = Vec::new();
    numbers(text, &mut found);
    emails(text, &mut found);
    ipv4s(text, &mut found);
    ipv6s(text, &mut found);
    hosts(text, &mut found);
    urls_with_dotless_hosts(text, &mut found);
    share_paths(text, &mut found);
    home_paths(text, &mut found);
    prefixed_secrets(text, &mut found);
    private_keys(text, &mut found);
    assigned_secrets(text, &mut found);
    bearer_tokens(text, &mut found);
    entropy_near_keywords(text, &mut found);

    // Longest first at each start, so containment is checked against the outer one.
    found.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)).then(a.kind.cmp(&b.kind)));
    // Every kept finding starts at or before `f`, so `f` lies inside one of
    // them exactly when it ends by the furthest end kept so far. In place:
    // a paste full of findings should not need a second copy of them.
    let mut reach = None;
    found.retain(|f| {
        if reach.is_some_and(|r| f.end <= r) {
            return false;
        }
        reach = Some(reach.map_or(f.end, |r: usize| r.max(f.end)));
        true
    });
    found
}

/// The most text a [`ScanCache`] keeps (the findings are small beside it):
/// past this it starts afresh, which costs one rescan of what is in use.
const CACHE_MAX_BYTES: usize = 64 << 20;

/// Findings by text, for a conversation that is checked again with every
/// new message (the route preview, the privacy gate): an unchanged message
/// is looked up (a hash and one comparison) instead of scanned. Keyed by
/// the text itself, so an edited message is simply a new entry and a hash
/// collision can never hand one text another's findings.
#[derive(Debug, Default)]
pub struct ScanCache {
    inner: Mutex<CacheInner>,
}

/// A scanned text and its findings.
type Scanned = (Arc<str>, Arc<[Finding]>);

#[derive(Debug, Default)]
struct CacheInner {
    by_hash: HashMap<u64, Vec<Scanned>>,
    bytes: usize,
    scans: u64,
}

impl ScanCache {
    /// [`scan`]'s findings for `text`, from the cache when it was scanned before.
    pub fn scan(&self, text: &str) -> Arc<[Finding]> {
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        let key = hasher.finish();
        if let Some(hit) = self.lookup(key, text) {
            return hit;
        }
        // Scanned outside the lock: a long paste must not stall other callers.
        let findings: Arc<[Finding]> = scan(text).into();
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.scans += 1;
        if inner.bytes + text.len() > CACHE_MAX_BYTES {
            inner.by_hash.clear();
            inner.bytes = 0;
        }
        if text.len() <= CACHE_MAX_BYTES {
            inner.bytes += text.len();
            inner.by_hash.entry(key).or_default().push((text.into(), Arc::clone(&findings)));
        }
        findings
    }

    fn lookup(&self, key: u64, text: &str) -> Option<Arc<[Finding]>> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let entries = inner.by_hash.get(&key)?;
        entries.iter().find(|(t, _)| &**t == text).map(|(_, f)| Arc::clone(f))
    }

    /// How many texts were actually scanned (not found in the cache) so far.
    pub fn scans(&self) -> u64 {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).scans
    }
}
