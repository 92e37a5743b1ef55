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

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use memchr::memmem;
use serde::Serialize;

/// What kind of sensitive content a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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

// ---------------------------------------------------------------- helpers

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn push(found: &mut Vec<Finding>, kind: SensitiveKind, masked: String, start: usize, end: usize) {
    found.push(Finding { kind, masked, start, end });
}

/// Every index where `needle` (ASCII, not empty) occurs in `hay`, ignoring
/// ASCII case: memchr finds the first byte, then the rest is compared.
fn find_all_ci<'a>(hay: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    let (lower, upper) = (needle[0].to_ascii_lowercase(), needle[0].to_ascii_uppercase());
    memchr::memchr2_iter(lower, upper, hay)
        .filter(move |&i| hay.get(i..i + needle.len()).is_some_and(|w| w.eq_ignore_ascii_case(needle)))
}

/// A set of lowercase keywords with, for each byte, the words that start
/// with it: [`keyword_before`] then looks at each byte of its window once.
#[derive(Debug)]
struct Keywords {
    words: &'static [&'static str],
    /// Bit `w` of `starts[b]`: `words[w]` starts with byte `b`.
    starts: [u32; 256],
}

impl Keywords {
    const fn new(words: &'static [&'static str]) -> Self {
        assert!(words.len() <= 32, "one bit per word");
        let mut starts = [0u32; 256];
        let mut w = 0;
        while w < words.len() {
            let first = words[w].as_bytes()[0];
            starts[first as usize] |= 1 << w;
            w += 1;
        }
        Self { words, starts }
    }
}

impl Keywords {
    /// Whether one of the words starts at `hay[i]` (`hay` already lowercase).
    fn at(&self, hay: &[u8], i: usize) -> bool {
        let mut candidates = self.starts[usize::from(hay[i])];
        while candidates != 0 {
            let w = candidates.trailing_zeros() as usize;
            if hay[i..].starts_with(self.words[w].as_bytes()) {
                return true;
            }
            candidates &= candidates - 1;
        }
        false
    }

    /// Where the last of the words in `hay` (lowercase) starts.
    fn last_in(&self, hay: &[u8]) -> Option<usize> {
        (0..hay.len()).rev().find(|&i| self.at(hay, i))
    }
}

/// The longest window [`keyword_before`] is asked about.
const MAX_KEYWORD_WINDOW: usize = 64;

/// Whether any of `words` occurs in the `window` bytes before `at`,
/// ignoring ASCII case. No allocation: it runs once per candidate.
fn keyword_before(text: &str, at: usize, window: usize, words: &Keywords) -> bool {
    let from = at.saturating_sub(window.min(MAX_KEYWORD_WINDOW));
    let mut buf = [0u8; MAX_KEYWORD_WINDOW];
    let before = &mut buf[..at - from];
    before.copy_from_slice(&text.as_bytes()[from..at]);
    before.make_ascii_lowercase();
    // A window that starts inside a character cannot match a whole word
    // there: UTF-8 never has one character's bytes inside another's.
    (0..before.len()).any(|i| words.at(before, i))
}

/// The first `keep` chars, then `*` for the rest of a short value, or an
/// ellipsis and the length for a long one.
fn mask_tail(s: &str, keep: usize) -> String {
    let n = s.chars().count();
    let head: String = s.chars().take(keep).collect();
    if n <= keep {
        return "*".repeat(n);
    }
    if n - keep <= 12 {
        format!("{head}{}", "*".repeat(n - keep))
    } else {
        format!("{head}…({n} chars)")
    }
}

/// Digits shown at both ends, the middle starred: `138****5678`.
fn mask_digits(digits: &str, head: usize, tail: usize) -> String {
    let n = digits.len();
    if n <= head + tail {
        return "*".repeat(n);
    }
    format!("{}{}{}", &digits[..head], "*".repeat(n - head - tail), &digits[n - tail..])
}

// ------------------------------------------------- phone numbers, PRC IDs

/// Words that make a bare run of digits a phone number.
const PHONE_WORDS: Keywords = Keywords::new(&[
    "phone", "tel:", "tel.", "tel ", "call", "mobile", "cell", "whatsapp", "fax", "sms", "电话", "手机", "联系", "号码",
]);

/// A currency sign right before a number makes it an amount.
fn is_currency(c: char) -> bool {
    matches!(c, '$' | '€' | '£' | '¥' | '￥' | '₹' | '₩')
}

/// Runs of digits joined by single separators (space, `-`, `.`, parentheses),
/// optionally led by `+` or `(`; each run is classified whole, then, if that
/// fails, by its space-separated windows (so "in 2024 13812345678" still
/// finds the mobile number).
fn numbers(text: &str, found: &mut Vec<Finding>) {
    let b = text.as_bytes();
    let n = b.len();
    let mut i = 0;
    while i < n {
        let c = b[i];
        let starts = c.is_ascii_digit() || ((c == b'+' || c == b'(') && i + 1 < n && b[i + 1].is_ascii_digit());
        if !starts || !number_may_start(text, i) {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        loop {
            if j < n && b[j].is_ascii_digit() {
                j += 1;
                continue;
            }
            // Up to two separators (") ", " (") between digit groups.
            let mut k = j;
            while k < n && k - j < 2 && matches!(b[k], b' ' | b'-' | b'.' | b'(' | b')') {
                k += 1;
            }
            if k > j
                && k < n
                && b[k].is_ascii_digit()
                && (k - j == 1 || b[j..k].iter().any(|&s| s == b'(' || s == b')'))
            {
                j = k;
                continue;
            }
            // A closing parenthesis right after digits belongs to "(415)".
            if j < n && b[j] == b')' && b[i] == b'(' {
                j += 1;
            }
            break;
        }
        // The PRC ID's check character.
        if j < n && (b[j] == b'X' || b[j] == b'x') && j - i == 17 && b[i..j].iter().all(u8::is_ascii_digit) {
            j += 1;
        }
        let end_ok = j >= n || !(is_word(b[j]) || b[j] == b'%' || b[j] == b'@');
        if end_ok {
            classify_run(text, i, j, found);
        }
        i = j.max(i + 1);
    }
}

/// A number may not start inside a word, a version or path, after `#`
/// (order and issue numbers) or after a currency sign.
fn number_may_start(text: &str, i: usize) -> bool {
    let Some(prev) = text[..i].chars().next_back() else { return true };
    if prev.is_ascii() {
        let p = prev as u8;
        if is_word(p) || matches!(p, b'.' | b'#' | b'/' | b'\\' | b'@' | b'+' | b'-' | b'(' | b')') {
            // "-" and "(" only block when they hang off a word ("ORD-1…", "f(1…").
            if matches!(p, b'-' | b'(') {
                let before = text[..i - 1].bytes().next_back();
                return !before.is_some_and(is_word);
            }
            return false;
        }
        return true;
    }
    !is_currency(prev)
}

/// The most space-separated groups a phone number is written in.
const MAX_GROUPS: usize = 6;

fn classify_run(text: &str, start: usize, end: usize, found: &mut Vec<Finding>) {
    if let Some((kind, masked)) = classify(text, start, end, &mut None) {
        push(found, kind, masked, start, end);
        return;
    }
    // Space-separated windows, longest first from each group.
    let run = &text[start..end];
    let mut groups = Vec::new();
    let mut g = 0;
    for (idx, ch) in run.char_indices() {
        if ch == ' ' {
            groups.push((start + g, start + idx));
            g = idx + 1;
        }
    }
    groups.push((start + g, end));
    if groups.len() < 2 {
        return;
    }
    let bytes = text.as_bytes();
    let digits: Vec<usize> =
        groups.iter().map(|&(a, z)| bytes[a..z].iter().filter(|c| c.is_ascii_digit()).count()).collect();
    let mut s = 0;
    while s < groups.len() {
        let mut matched = None;
        // No phone number has more than six groups; the cap keeps a long
        // list of numbers ("1 2 3 …") linear. Windows with too many or too
        // few digits for anything [`classify`] knows are not asked about.
        let last = groups.len().min(s + MAX_GROUPS);
        let mut phone_word = None;
        let mut in_window: usize = digits[s..last].iter().sum();
        for e in (s..last).rev() {
            let n = in_window;
            in_window -= digits[e];
            if n > MAX_DIGITS {
                continue;
            }
            if n < MIN_DIGITS {
                break;
            }
            let (a, z) = (groups[s].0, groups[e].1);
            if (a, z) == (start, end) {
                continue;
            }
            if let Some(hit) = classify(text, a, z, &mut phone_word) {
                matched = Some((e, a, z, hit));
                break;
            }
        }
        match matched {
            Some((e, a, z, (kind, masked))) => {
                push(found, kind, masked, a, z);
                s = e + 1;
            }
            None => s += 1,
        }
    }
}

/// The most digits anything [`classify`] recognises has: a PRC ID's 18
/// (a phone number has at most 15, after its country code).
const MAX_DIGITS: usize = 18;

/// The fewest: a local phone number's 7.
const MIN_DIGITS: usize = 7;

/// What the run `text[start..end]` is, if sensitive. Allocation-free until
/// it finds something, and it stops at the 19th digit, so every call costs
/// a few dozen bytes however long the run.
fn classify(text: &str, start: usize, end: usize, phone_word: &mut Option<bool>) -> Option<(SensitiveKind, String)> {
    let run = &text.as_bytes()[start..end];
    // The digits, and the lengths of the digit groups, in one bounded pass.
    let mut digits = [0u8; MAX_DIGITS];
    let mut n = 0;
    let mut groups = [0usize; MAX_DIGITS];
    let mut ngroups = 0;
    let mut in_group = false;
    for &c in run {
        if c.is_ascii_digit() {
            if n == MAX_DIGITS {
                return None;
            }
            digits[n] = c;
            n += 1;
            if !in_group {
                ngroups += 1;
            }
            groups[ngroups - 1] += 1;
            in_group = true;
        } else {
            in_group = false;
        }
    }
    if n < MIN_DIGITS {
        return None;
    }
    let digits = &digits[..n];
    let groups = &groups[..ngroups];
    let as_str = |d: &[u8]| String::from_utf8_lossy(d).into_owned();

    let plus = run.first() == Some(&b'+');
    let body = &run[usize::from(plus)..];
    let unchecked = body.strip_suffix(b"X").or_else(|| body.strip_suffix(b"x")).unwrap_or(body);
    let separated = unchecked.iter().any(|c| !c.is_ascii_digit());

    if !plus && !separated && run.len() == 18 {
        let id = text[start..end].to_uppercase();
        return prc_id_valid(run).then(|| (SensitiveKind::PrcId, mask_digits(&id, 4, 2)));
    }
    if matches!(run.last(), Some(b'X' | b'x')) {
        return None;
    }

    let date_like = matches!(groups, [4, 2, 2] | [2, 2, 4] | [4, 2, 2, 2] | [4, 2, 2, 2, 2]);
    if date_like {
        return None;
    }

    // North American numbers, formatted: [1-]NXX-NXX-XXXX. Checked before
    // the mainland mobile rule, which "1.415.555.2671"'s 11 digits also match.
    let nanp = match groups {
        [3, 3, 4] => Some(0),
        [1, 3, 3, 4] if digits[0] == b'1' => Some(1),
        _ => None,
    };
    let nanp_formatted = !plus && separated && nanp.is_some_and(|a| digits[a] >= b'2' && digits[a + 3] >= b'2');
    if nanp_formatted {
        return Some((SensitiveKind::Phone, mask_digits(&as_str(digits), 3, 2)));
    }

    let national = if plus && digits.starts_with(b"86") {
        Some(&digits[2..])
    } else if !plus && digits.starts_with(b"0086") {
        Some(&digits[4..])
    } else if !plus {
        Some(digits)
    } else {
        None
    };
    if let Some(d) = national {
        if d.len() == 11 && d[0] == b'1' && (b'3'..=b'9').contains(&d[1]) {
            return Some((SensitiveKind::CnMobile, mask_digits(&as_str(d), 3, 4)));
        }
    }

    let phone = if plus {
        (8..=15).contains(&n) && digits[0] != b'0'
    } else {
        // The same for every window that starts here: asked once.
        n <= 15 && *phone_word.get_or_insert_with(|| keyword_before(text, start, 32, &PHONE_WORDS))
    };
    phone.then(|| (SensitiveKind::Phone, mask_digits(&as_str(digits), 3, 2)))
}

/// Province-level region codes (the ID's first two digits).
const PRC_REGIONS: &[u8] = &[
    11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 46, 50, 51, 52, 53, 54, 61, 62, 63,
    64, 65, 71, 81, 82, 83, 91,
];

/// ISO 7064 MOD 11-2 weights: 2^(17-i) mod 11.
const PRC_WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];

/// 17 digits and a check character, with a known region, a real birth date
/// (1900–2099) and the right MOD 11-2 check character.
pub fn prc_id_valid(id: &[u8]) -> bool {
    if id.len() != 18 || !id[..17].iter().all(u8::is_ascii_digit) {
        return false;
    }
    let num = |r: std::ops::Range<usize>| id[r].iter().fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'));
    let region = num(0..2);
    if !PRC_REGIONS.iter().any(|&r| u32::from(r) == region) {
        return false;
    }
    let (year, month, day) = (num(6..10), num(10..12), num(12..14));
    if !(1900..=2099).contains(&year) || !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return false;
    }
    let sum: u32 = id[..17].iter().zip(PRC_WEIGHTS).map(|(d, w)| u32::from(d - b'0') * w).sum();
    let expected = b"10X98765432"[(sum % 11) as usize];
    id[17].to_ascii_uppercase() == expected
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => 29,
        2 => 28,
        _ => 31,
    }
}

// ------------------------------------------------------------------ email

fn emails(text: &str, found: &mut Vec<Finding>) {
    let b = text.as_bytes();
    let local_char = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'%' | b'+' | b'-');
    let domain_char = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-');
    for at in memchr::memchr_iter(b'@', b) {
        let mut s = at;
        while s > 0 && local_char(b[s - 1]) {
            s -= 1;
        }
        while s < at && b[s] == b'.' {
            s += 1;
        }
        let mut e = at + 1;
        while e < b.len() && domain_char(b[e]) {
            e += 1;
        }
        while e > at + 1 && matches!(b[e - 1], b'.' | b'-') {
            e -= 1;
        }
        let local = &text[s..at];
        let domain = &text[at + 1..e];
        // `git@github.com:org/repo.git` is an SSH remote, not a mailbox.
        let ssh_remote = local == "git" && b.get(e) == Some(&b':');
        if local.is_empty() || local.len() > 64 || ssh_remote || !domain_ok(domain) {
            continue;
        }
        let first = local.chars().next().unwrap_or('*');
        push(found, SensitiveKind::Email, format!("{first}***@{domain}"), s, e);
    }
}

/// A dotted domain with a letters-only TLD; not `2x.png` (retina image names).
fn domain_ok(domain: &str) -> bool {
    // The TLD first: it rejects most candidates without splitting the rest.
    let Some((_, tld)) = domain.rsplit_once('.') else { return false };
    if tld.len() < 2 || !tld.bytes().all(|c| c.is_ascii_alphabetic()) {
        return false;
    }
    if domain.split('.').any(|l| l.is_empty() || l.starts_with('-') || l.ends_with('-')) {
        return false;
    }
    let first = domain.split('.').next().unwrap_or_default().as_bytes();
    let scale =
        first.len() >= 2 && first[..first.len() - 1].iter().all(u8::is_ascii_digit) && first[first.len() - 1] == b'x';
    !scale
}

// -------------------------------------------------------------------- IPs

/// `10.0.0.0/8`, `fc00::/7`: a range in CIDR notation names a network, not
/// a machine (RFC 1918 is quoted in plenty of harmless questions).
fn is_cidr(b: &[u8], j: usize) -> bool {
    b.get(j) == Some(&b'/') && b.get(j + 1).is_some_and(u8::is_ascii_digit)
}

fn ipv4s(text: &str, found: &mut Vec<Finding>) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let starts = b[i].is_ascii_digit() && (i == 0 || !(is_word(b[i - 1]) || b[i - 1] == b'.'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
            j += 1;
        }
        let mut e = j;
        while e > i && b[e - 1] == b'.' {
            e -= 1;
        }
        let after_ok = j >= b.len() || !is_word(b[j]);
        if after_ok && !is_cidr(b, j) {
            if let Ok(ip) = Ipv4Addr::from_str(&text[i..e]) {
                let [a, bb, ..] = ip.octets();
                let private = a == 10
                    || a == 127
                    || (a == 172 && (16..=31).contains(&bb))
                    || (a == 192 && bb == 168)
                    || (a == 169 && bb == 254);
                if private {
                    push(found, SensitiveKind::PrivateIp, format!("{a}.{bb}.*.*"), i, e);
                }
            }
        }
        i = j;
    }
}

fn ipv6s(text: &str, found: &mut Vec<Finding>) {
    let b = text.as_bytes();
    let v6_char = |c: u8| c.is_ascii_hexdigit() || c == b':' || c == b'.';
    let mut i = 0;
    while i < b.len() {
        let starts =
            v6_char(b[i]) && b[i] != b'.' && (i == 0 || !(is_word(b[i - 1]) || b[i - 1] == b':' || b[i - 1] == b'.'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && v6_char(b[j]) {
            j += 1;
        }
        let cand = text[i..j].trim_end_matches('.');
        let after_ok = j >= b.len() || !is_word(b[j]);
        if after_ok && !is_cidr(b, j) && cand.bytes().filter(|&c| c == b':').count() >= 2 {
            if let Ok(ip) = Ipv6Addr::from_str(cand) {
                let first = ip.segments()[0];
                let private = ip.is_loopback() || (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80;
                if private {
                    push(found, SensitiveKind::PrivateIp, format!("{:x}::…", first), i, i + cand.len());
                }
            }
        }
        i = j.max(i + 1);
    }
}

// ----------------------------------------------------- intranet hosts, paths

/// Suffixes that only resolve inside a private network.
const INTRANET_SUFFIXES: &[&str] = &[".corp", ".internal", ".lan", ".local", ".intranet", ".localdomain", ".home.arpa"];

fn hosts(text: &str, found: &mut Vec<Finding>) {
    let b = text.as_bytes();
    let host_char = |c: u8| c.is_ascii_alphanumeric() || c == b'-' || c == b'.';
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_alphanumeric() || (i > 0 && (host_char(b[i - 1]) || b[i - 1] == b'_')) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && host_char(b[j]) {
            j += 1;
        }
        let mut e = j;
        while e > i && matches!(b[e - 1], b'.' | b'-') {
            e -= 1;
        }
        let host = &b[i..e];
        let called = b.get(j) == Some(&b'(') || b.get(j) == Some(&b'_');
        // Every suffix is a dot and at most 11 more bytes: most words have no dot there.
        let dotted = host[host.len().saturating_sub(12)..].contains(&b'.');
        let suffix = INTRANET_SUFFIXES
            .iter()
            .filter(|_| dotted)
            .find(|s| host.len() >= s.len() && host[host.len() - s.len()..].eq_ignore_ascii_case(s.as_bytes()));
        if let (false, Some(suffix)) = (called, suffix) {
            let name = &text[i..e - suffix.len()];
            let labels_ok =
                !name.is_empty() && name.split('.').all(|l| !l.is_empty() && !l.starts_with('-') && !l.ends_with('-'));
            if labels_ok {
                let name = name.to_ascii_lowercase();
                push(found, SensitiveKind::IntranetHost, format!("{}{suffix}", mask_tail(&name, 2)), i, e);
            }
        }
        i = j.max(i + 1);
    }
}

/// `http://wiki/…`: a host without a dot resolves only on the local network.
fn urls_with_dotless_hosts(text: &str, found: &mut Vec<Finding>) {
    let b = text.as_bytes();
    for scheme in ["http://", "https://"] {
        for s in find_all_ci(b, scheme.as_bytes()) {
            let h = s + scheme.len();
            let mut e = h;
            while e < b.len() && (b[e].is_ascii_alphanumeric() || b[e] == b'-' || b[e] == b'.' || b[e] == b'_') {
                e += 1;
            }
            let host = &text[h..e];
            if !host.is_empty() && !host.contains('.') && !host.eq_ignore_ascii_case("localhost") {
                push(found, SensitiveKind::IntranetHost, format!("{}{}", &scheme, mask_tail(host, 2)), s, e);
            }
        }
    }
}

/// `\\server\share` and `smb://server/share`.
fn share_paths(text: &str, found: &mut Vec<Finding>) {
    let b = text.as_bytes();
    let name_char = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_' | b'$');
    let mut i = 0;
    while i + 2 < b.len() {
        if b[i] == b'\\' && b[i + 1] == b'\\' && (i == 0 || b[i - 1] != b'\\') {
            let mut e = i + 2;
            while e < b.len() && name_char(b[e]) {
                e += 1;
            }
            let server_end = e;
            if e > i + 2 && e + 1 < b.len() && b[e] == b'\\' && name_char(b[e + 1]) {
                e += 1;
                while e < b.len() && !b[e].is_ascii_whitespace() && !matches!(b[e], b'"' | b'\'' | b'`') {
                    e += 1;
                }
                let server = &text[i + 2..server_end];
                push(found, SensitiveKind::IntranetPath, format!("\\\\{}\\…", mask_tail(server, 2)), i, e);
                i = e;
                continue;
            }
        }
        i += 1;
    }
    // The path runs to the next space or quote; one found inside another's
    // path is part of it (skipping it keeps "smb://smb://…" linear).
    let stop = |c: u8| c.is_ascii_whitespace() || matches!(c, b'"' | b'\'' | b'`');
    let mut covered = 0;
    for s in find_all_ci(b, b"smb://") {
        if s < covered {
            continue;
        }
        let mut server_end = s + 6;
        while server_end < b.len() && !stop(b[server_end]) && b[server_end] != b'/' {
            server_end += 1;
        }
        let server = &text[s + 6..server_end];
        if !server.is_empty() {
            let mut e = server_end;
            while e < b.len() && !stop(b[e]) {
                e += 1;
            }
            push(found, SensitiveKind::IntranetPath, format!("smb://{}/…", mask_tail(server, 2)), s, e);
            covered = e;
        }
    }
}

/// `/Users/name`, `/home/name`, `~/…`, `C:\Users\name` (either slash, any
/// drive). Placeholders (`/home/<you>`, `/Users/$USER`) and macOS's
/// `/Users/Shared` name nobody.
fn home_paths(text: &str, found: &mut Vec<Finding>) {
    let b = text.as_bytes();
    let path_end = |from: usize| {
        let mut e = from;
        while e < b.len()
            && !b[e].is_ascii_whitespace()
            && !matches!(b[e], b'"' | b'\'' | b'`' | b')' | b',' | b';' | b'>')
        {
            e += 1;
        }
        while e > from && matches!(b[e - 1], b'.' | b':') {
            e -= 1;
        }
        e
    };
    let boundary = |s: usize| s == 0 || !(is_word(b[s - 1]) || matches!(b[s - 1], b'.' | b'-' | b'~'));
    let name_at = |from: usize, sep: u8| {
        let mut e = from;
        while e < b.len() && b[e] != sep && !b[e].is_ascii_whitespace() && !matches!(b[e], b'"' | b'\'' | b'`') {
            e += 1;
        }
        &text[from..e]
    };
    let is_placeholder =
        |name: &str| name.is_empty() || name.starts_with(['<', '$', '{', '%', '[']) || name == "Shared";

    // Each loop skips what lies inside a path it already reported (it would
    // be part of that one), so a path of nothing but "/home/a/home/a…" is
    // walked once, not once per repetition.
    for prefix in ["/Users/", "/home/"] {
        let mut covered = 0;
        for s in memmem::find_iter(b, prefix.as_bytes()) {
            if s < covered || !boundary(s) {
                continue;
            }
            let name = name_at(s + prefix.len(), b'/');
            if is_placeholder(name) {
                continue;
            }
            covered = path_end(s);
            push(found, SensitiveKind::HomePath, format!("{prefix}{}/…", mask_tail(name, 1)), s, covered);
        }
    }
    let mut covered = 0;
    for s in memmem::find_iter(b, b"~/") {
        if s >= covered && boundary(s) && b.get(s + 2).is_some_and(|c| !c.is_ascii_whitespace()) {
            covered = path_end(s);
            push(found, SensitiveKind::HomePath, "~/…".to_owned(), s, covered);
        }
    }
    for sep in [b'\\', b'/'] {
        let needle = [b':', sep, b'u', b's', b'e', b'r', b's', sep];
        let mut covered = 0;
        for c in find_all_ci(b, &needle) {
            if c == 0 || c - 1 < covered || !b[c - 1].is_ascii_alphabetic() || !boundary(c - 1) {
                continue;
            }
            let s = c - 1;
            let name = name_at(c + needle.len(), sep);
            if is_placeholder(name) || name.eq_ignore_ascii_case("public") || name.eq_ignore_ascii_case("default") {
                continue;
            }
            let drive = char::from(b[s]);
            let sep = char::from(sep);
            covered = path_end(s);
            push(
                found,
                SensitiveKind::HomePath,
                format!("{drive}:{sep}Users{sep}{}{sep}…", mask_tail(name, 1)),
                s,
                covered,
            );
        }
    }
}

// ---------------------------------------------------------------- secrets

/// Token prefixes of well-known services: (prefix, minimum body length,
/// exact body length where the format fixes one, uppercase and digits only).
const PREFIXES: &[(&str, usize, Option<usize>)] = &[
    ("sk-", 20, None),         // OpenAI, Anthropic (sk-proj-…, sk-ant-…), DeepSeek
    ("ghp_", 30, None),        // GitHub personal access token
    ("gho_", 30, None),        // GitHub OAuth
    ("ghu_", 30, None),        // GitHub user-to-server
    ("ghs_", 30, None),        // GitHub server-to-server
    ("ghr_", 30, None),        // GitHub refresh
    ("github_pat_", 22, None), // GitHub fine-grained PAT
    ("xoxb-", 10, None),       // Slack bot
    ("xoxp-", 10, None),       // Slack user
    ("xoxa-", 10, None),       // Slack app
    ("xoxr-", 10, None),       // Slack refresh
    ("xoxs-", 10, None),       // Slack session
    ("AKIA", 16, Some(16)),    // AWS access key id
    ("ASIA", 16, Some(16)),    // AWS temporary access key id
    ("AIza", 35, None),        // Google API key
    ("glpat-", 20, None),      // GitLab
    ("hf_", 30, None),         // Hugging Face
];

/// The first bytes of [`PREFIXES`]: most tokens start with none of them.
const PREFIX_STARTS: &[u8] = b"sgxAh";

fn token_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

/// Real keys are random: a digit and several distinct characters. This
/// rejects `sk-xxxxxxxxxxxxxxxxxxxxxxxx` and `sk-your-api-key-goes-here`.
fn looks_random(body: &str) -> bool {
    let mut seen = [false; 128];
    for c in body.bytes().filter(u8::is_ascii) {
        seen[usize::from(c)] = true;
    }
    body.bytes().any(|c| c.is_ascii_digit()) && seen.iter().filter(|&&s| s).count() >= 6
}

/// A prefix is made of token characters and must start a token, so each
/// token (a maximal run of them) is looked at once, against the prefixes
/// that begin with its first byte.
fn prefixed_secrets(text: &str, found: &mut Vec<Finding>) {
    let b = text.as_bytes();
    let mut s = 0;
    while s < b.len() {
        if !token_char(b[s]) {
            s += 1;
            continue;
        }
        let mut e = s + 1;
        while e < b.len() && token_char(b[e]) {
            e += 1;
        }
        if !PREFIX_STARTS.contains(&b[s]) {
            s = e;
            continue;
        }
        let token = &b[s..e];
        let candidates = PREFIXES.iter().filter(|(p, ..)| token.starts_with(p.as_bytes()));
        for &(prefix, min, exact) in candidates {
            let body = &text[s + prefix.len()..e];
            let ok = match exact {
                Some(len) => body.len() == len && body.bytes().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()),
                None => body.len() >= min && looks_random(body),
            };
            if ok {
                push(found, SensitiveKind::Secret, format!("{prefix}…({} chars)", e - s), s, e);
            }
        }
        s = e;
    }
}

/// `-----BEGIN … PRIVATE KEY-----` (RSA, EC, OpenSSH, PKCS#8, encrypted, PGP).
fn private_keys(text: &str, found: &mut Vec<Finding>) {
    const BEGIN: &str = "-----BEGIN ";
    const END: &str = "-----END ";
    // Labels are short; looking no further keeps this linear.
    let label_at = |from: usize| -> Option<usize> {
        let mut window_end = (from + 48).min(text.len());
        while !text.is_char_boundary(window_end) {
            window_end -= 1;
        }
        text.get(from..window_end)?.find("-----").map(|r| from + r)
    };
    // Every END marker once, by label: a BEGIN without its END must not
    // send a search through the rest of the text for each BEGIN.
    let mut ends: HashMap<&str, Vec<usize>> = HashMap::new();
    for q in memmem::find_iter(text.as_bytes(), END) {
        let label_start = q + END.len();
        if let Some(le) = label_at(label_start) {
            ends.entry(&text[label_start..le]).or_default().push(le + 5);
        }
    }
    let mut from = 0;
    while let Some(rel) = memmem::find(&text.as_bytes()[from..], BEGIN.as_bytes()) {
        let s = from + rel;
        let label_start = s + BEGIN.len();
        from = label_start;
        let Some(le) = label_at(label_start) else { continue };
        let label = &text[label_start..le];
        if label.ends_with("PRIVATE KEY") || label.ends_with("PRIVATE KEY BLOCK") {
            // The first END with this label after the BEGIN's own marker.
            let after = ends.get(label).and_then(|v| v.get(v.partition_point(|&e| e <= le + 5)).copied());
            let e = after.unwrap_or(le + 5);
            push(found, SensitiveKind::Secret, format!("-----BEGIN {label}----- …"), s, e);
            from = e;
        }
    }
}

/// Names that make the value after `=` or `:` a secret (matched at the end
/// of an identifier: `OPENAI_API_KEY`, `db_password`, `GITHUB_TOKEN`).
const SECRET_NAMES: &[&str] = &[
    "apikey",
    "api_key",
    "api-key",
    "access_key",
    "secret_key",
    "private_key",
    "secret",
    "token",
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "credential",
    "credentials",
];

/// Names whose values are passwords: shorter values still count.
const PASSWORD_NAMES: &[&str] = &["password", "passwd", "pwd", "passphrase"];

/// Values that are obviously not the secret itself, and a call (`(`).
const PLACEHOLDERS: Keywords = Keywords::new(&[
    "your",
    "xxx",
    "***",
    "...",
    "…",
    "<",
    ">",
    "${",
    "{{",
    "example",
    "placeholder",
    "redacted",
    "os.environ",
    "process.env",
    "getenv",
    "env[",
    "env.",
    "(",
]);

const NOT_VALUES: &[&str] =
    &["none", "null", "nil", "true", "false", "str", "string", "bytes", "optional", "undefined"];

/// `NAME = value` and `NAME: value` where NAME ends in a secret's name.
///
/// A value runs to the next space or delimiter, so every `=` inside one
/// value has (part of) the same value: `resume` skips them once the first
/// verdict says they would add nothing (a finding that covers them, or a
/// rejection a part of the value cannot escape). That keeps a long paste of
/// `pwd=pwd=pwd=…` linear instead of one scan of the rest per `=`.
fn assigned_secrets(text: &str, found: &mut Vec<Finding>) {
    let b = text.as_bytes();
    let mut resume = 0;
    for i in memchr::memchr2_iter(b'=', b':', b) {
        if i < resume {
            continue;
        }
        // Not `==`, `!=`, `<=`, `::`, `://`.
        let next = b.get(i + 1).copied();
        let prev = if i > 0 { b[i - 1] } else { b' ' };
        if matches!(next, Some(b'=') | Some(b':') | Some(b'/')) || matches!(prev, b'=' | b'!' | b'<' | b'>' | b':') {
            continue;
        }
        // The name: skip spaces and a closing quote, then an identifier.
        let mut k = i;
        while k > 0 && b[k - 1] == b' ' {
            k -= 1;
        }
        if k > 0 && matches!(b[k - 1], b'"' | b'\'') {
            k -= 1;
        }
        let name_end = k;
        while k > 0 && token_char(b[k - 1]) {
            k -= 1;
        }
        let name = &b[k..name_end];
        let named = SECRET_NAMES.iter().find(|w| {
            let w = w.as_bytes();
            name.len() >= w.len() && name[name.len() - w.len()..].eq_ignore_ascii_case(w) && {
                let before = name.len() - w.len();
                before == 0 || matches!(name[before - 1], b'_' | b'-' | b'.')
            }
        });
        let Some(word) = named else { continue };

        // The value: skip spaces, an opening quote, then up to a delimiter.
        let mut v = i + 1;
        while v < b.len() && b[v] == b' ' {
            v += 1;
        }
        let quote = b.get(v).copied().filter(|&q| matches!(q, b'"' | b'\'' | b'`'));
        if quote.is_some() {
            v += 1;
        }
        let mut e = v;
        while e < b.len()
            && Some(b[e]) != quote
            && !b[e].is_ascii_whitespace()
            && !matches!(b[e], b',' | b';' | b'}' | b']')
        {
            e += 1;
        }
        if quote.is_none() {
            while e > v && matches!(b[e - 1], b'.' | b')') {
                e -= 1;
            }
        }
        let value = &text[v..e];
        let chars = value.chars().count();
        let min = if PASSWORD_NAMES.contains(word) { 6 } else { 8 };
        let literal = quote.is_some()
            || value.bytes().any(|c| c.is_ascii_digit() || !(c.is_ascii_alphabetic() || c == b'_' || c == b'.'));
        let few_kinds = at_most_two_kinds(value);
        let not_value = NOT_VALUES.iter().any(|n| value.eq_ignore_ascii_case(n));
        if chars < min || !literal || few_kinds || not_value {
            // An unquoted value has no quotes in it, so a later `=` inside it
            // has a part of it as its value: as short, as plain, as uniform
            // (and no part of a NOT_VALUES word names a secret).
            resume = if quote.is_none() { e } else { i + 1 };
            continue;
        }
        // A placeholder or a call can be escaped by a later part of the
        // value: skip to just past the last one.
        let lower = value.to_ascii_lowercase();
        let offender = PLACEHOLDERS.last_in(lower.as_bytes());
        if let Some(at) = offender {
            resume = v + at + 1;
            continue;
        }
        push(found, SensitiveKind::Secret, format!("{}=…({chars} chars)", &text[k..name_end]), k, e);
        resume = e;
    }
}

/// Whether `s` is made of at most two distinct characters ("aaaa", "x-x-").
fn at_most_two_kinds(s: &str) -> bool {
    let mut chars = s.chars();
    let Some(a) = chars.next() else { return true };
    let Some(b) = chars.find(|&c| c != a) else { return true };
    chars.all(|c| c == a || c == b)
}

/// `Authorization: Bearer <token>`.
fn bearer_tokens(text: &str, found: &mut Vec<Finding>) {
    let b = text.as_bytes();
    for s in find_all_ci(b, b"bearer ") {
        if s > 0 && is_word(b[s - 1]) {
            continue;
        }
        let v = s + 7;
        let mut e = v;
        while e < b.len() && (token_char(b[e]) || matches!(b[e], b'.' | b'~' | b'+' | b'/' | b'=')) {
            e += 1;
        }
        if e - v >= 20 && looks_random(&text[v..e]) {
            push(found, SensitiveKind::Secret, format!("Bearer …({} chars)", e - v), s, e);
        }
    }
}

/// Words after which a long random token is a credential.
const KEY_WORDS: Keywords = Keywords::new(&[
    "key",
    "secret",
    "token",
    "password",
    "passwd",
    "credential",
    "bearer",
    "密钥",
    "密码",
    "令牌",
    "口令",
]);

/// Shannon entropy in bits per character.
fn entropy(s: &str) -> f64 {
    let mut counts = [0u32; 256];
    for c in s.bytes() {
        counts[usize::from(c)] += 1;
    }
    let n = s.len() as f64;
    counts.iter().filter(|&&c| c > 0).map(|&c| f64::from(c) / n).map(|p| -p * p.log2()).sum()
}

/// A token of 20+ characters from a base64/hex alphabet, mixed-case with
/// digits (or 32+ hex digits), with at least 3.5 bits of entropy per character, within 48 bytes
/// after a word like "key", "token" or "密钥".
fn entropy_near_keywords(text: &str, found: &mut Vec<Finding>) {
    let b = text.as_bytes();
    let tok = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=' | b'_' | b'-');
    let mut i = 0;
    while i < b.len() {
        if !tok(b[i]) || (i > 0 && tok(b[i - 1])) {
            i += 1;
            continue;
        }
        let mut e = i;
        while e < b.len() && tok(b[e]) {
            e += 1;
        }
        let t = &text[i..e];
        if t.len() < 20 {
            i = e;
            continue;
        }
        // Random keys mix cases and digits, or are long hex; snake_case
        // identifiers and words are neither.
        let digit = t.bytes().any(|c| c.is_ascii_digit());
        let cased = t.bytes().any(|c| c.is_ascii_uppercase()) && t.bytes().any(|c| c.is_ascii_lowercase());
        let hex = t.len() >= 32 && t.bytes().all(|c| c.is_ascii_hexdigit());
        if ((digit && cased) || hex)
            && !t.contains("//")
            && entropy(t) >= 3.5
            && keyword_before(text, i, 48, &KEY_WORDS)
        {
            push(found, SensitiveKind::Secret, format!("{}…({} chars)", &t[..4], t.len()), i, e);
        }
        i = e;
    }
}
