//! The policy of the private cache of cloud answers, without its storage:
//! which requests may be cached, how a request becomes a key, which entries
//! to evict to stay within the byte budget, and when an entry has expired.
//!
//! The key is a SHA-256 digest, cut to its first 128 bits (32 hex digits,
//! the width the database's column checks), of, in order, a version tag, the
//! normalised prompt, the model id, the sampling parameters and the hash of
//! the history, each length-prefixed so that no two different inputs
//! serialise to the same bytes. A fixed, standard digest rather than std's
//! `DefaultHasher` (which may change between Rust releases), because keys live
//! in a database across upgrades; and a cryptographic one, because a key must
//! not be forgeable into a collision with another user's prompt.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::chat::Message;
use crate::router::Decision;

/// The cache's byte budget unless the user sets another (50 MB, 10^6 bytes).
pub const DEFAULT_BUDGET_BYTES: u64 = 50_000_000;

/// Bumped when the key's recipe changes, so old rows simply stop matching.
const KEY_VERSION: &str = "headroom-cache-key-v2";

/// The user's cache settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSettings {
    pub budget_bytes: u64,
    /// `None`: entries never expire (only LRU eviction removes them).
    pub ttl: Option<Duration>,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self { budget_bytes: DEFAULT_BUDGET_BYTES, ttl: None }
    }
}

/// The sampling parameters that change an answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingKey {
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: i32,
    pub max_tokens: u32,
    pub seed: Option<u64>,
}

/// Only answers to requests that went to the cloud with no sensitive
/// content are stored; an override of the privacy rules makes the request
/// uncacheable too (the override was for that single message, not for a
/// copy kept on disk).
pub fn cacheable(decision: &Decision) -> bool {
    decision.is_cloud() && !decision.is_sensitive() && !decision.privacy_overridden()
}

/// The prompt as the key sees it. Rules: line endings become `\n`; trailing
/// whitespace on each line goes; blank lines at the start and end go; inside
/// a line, runs of spaces and tabs after the indentation become one space.
/// Indentation and case are kept: both can change the meaning (Python, code
/// identifiers, "US" vs "us"). Unicode is not re-normalised (no NFC): that
/// would need tables this pure crate does not carry; the same keyboard
/// produces the same form anyway.
pub fn normalize_prompt(prompt: &str) -> String {
    let unified = prompt.replace("\r\n", "\n").replace('\r', "\n");
    let lines: Vec<String> = unified
        .split('\n')
        .map(|line| {
            let line = line.trim_end();
            let body = line.trim_start_matches([' ', '\t']);
            let indent = &line[..line.len() - body.len()];
            let mut out = String::with_capacity(line.len());
            out.push_str(indent);
            let mut in_gap = false;
            for c in body.chars() {
                if c == ' ' || c == '\t' {
                    in_gap = true;
                    continue;
                }
                if in_gap {
                    out.push(' ');
                    in_gap = false;
                }
                out.push(c);
            }
            out
        })
        .collect();
    let first = lines.iter().position(|l| !l.is_empty()).unwrap_or(lines.len());
    let last = lines.iter().rposition(|l| !l.is_empty()).map_or(first, |i| i + 1);
    lines[first..last].join("\n")
}

/// A SHA-256 digest fed field by field with length prefixes.
#[derive(Debug, Clone)]
struct KeyHasher(Sha256);

impl KeyHasher {
    fn new() -> Self {
        Self(Sha256::new())
    }

    fn bytes(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    fn field(&mut self, data: &[u8]) {
        self.bytes(&(data.len() as u64).to_le_bytes());
        self.bytes(data);
    }

    /// The first 128 bits in hex: an accidental collision stays negligible
    /// for a cache of any realistic size.
    fn hex(self) -> String {
        self.0.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// -0.0 and 0.0 sample alike; NaN has one spelling.
fn float_bits(x: f32) -> [u8; 4] {
    let x = if x == 0.0 {
        0.0
    } else if x.is_nan() {
        f32::NAN
    } else {
        x
    };
    x.to_bits().to_le_bytes()
}

/// The hash of the conversation before the prompt (roles and normalised
/// contents, in order); the empty history has a hash too.
pub fn history_hash(history: &[Message]) -> String {
    let mut h = KeyHasher::new();
    h.field(b"history");
    h.bytes(&(history.len() as u64).to_le_bytes());
    for m in history {
        h.field(m.role.as_str().as_bytes());
        h.field(normalize_prompt(&m.content).as_bytes());
        // Calls change the prompt the template renders, so they key the
        // cache too; a history without any hashes as it always did.
        if !m.tool_calls.is_empty() || m.tool_call_id.is_some() {
            h.field(b"tools");
            for c in &m.tool_calls {
                h.field(c.id.as_bytes());
                h.field(c.name.as_bytes());
                h.field(c.arguments.as_bytes());
            }
            h.field(m.tool_call_id.as_deref().unwrap_or_default().as_bytes());
        }
    }
    h.hex()
}

/// The cache key: 32 hex digits.
pub fn cache_key(prompt: &str, model: &str, sampling: &SamplingKey, history_hash: &str) -> String {
    let mut h = KeyHasher::new();
    h.field(KEY_VERSION.as_bytes());
    h.field(normalize_prompt(prompt).as_bytes());
    h.field(model.as_bytes());
    h.field(&float_bits(sampling.temperature));
    h.field(&float_bits(sampling.top_p));
    h.field(&sampling.top_k.to_le_bytes());
    h.field(&sampling.max_tokens.to_le_bytes());
    match sampling.seed {
        Some(seed) => h.field(&[&[1u8][..], &seed.to_le_bytes()].concat()),
        None => h.field(&[0u8]),
    }
    h.field(history_hash.as_bytes());
    h.hex()
}

/// What eviction needs to know of one stored entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryMeta {
    pub key: String,
    pub bytes: u64,
    /// Milliseconds since the Unix epoch of the last hit (or the store).
    pub last_used_ms: i64,
}

/// The keys to evict, least recently used first (ties: by key, so the
/// choice is deterministic), until the entries left plus `incoming` bytes
/// fit in `budget`. `None` if `incoming` alone exceeds the budget: such an
/// answer is not stored at all, and nothing is evicted for it.
pub fn evictions(entries: &[EntryMeta], incoming: u64, budget: u64) -> Option<Vec<String>> {
    if incoming > budget {
        return None;
    }
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum::<u64>() + incoming;
    let mut by_age: Vec<&EntryMeta> = entries.iter().collect();
    by_age.sort_by(|a, b| a.last_used_ms.cmp(&b.last_used_ms).then_with(|| a.key.cmp(&b.key)));
    let mut out = Vec::new();
    for e in by_age {
        if total <= budget {
            break;
        }
        total -= e.bytes;
        out.push(e.key.clone());
    }
    Some(out)
}

/// Whether an entry stored at `created_ms` has outlived `ttl` at `now_ms`.
/// An entry exactly `ttl` old has expired.
pub fn is_expired(created_ms: i64, now_ms: i64, ttl: Option<Duration>) -> bool {
    match ttl {
        None => false,
        Some(ttl) => {
            let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
            now_ms.saturating_sub(created_ms) >= ttl_ms
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Role;
    use crate::fit::Verdict;
    use crate::router::{route, Force, LocalModel, RouteContext, RouteRequest};

    const SAMPLING: SamplingKey = SamplingKey { temperature: 0.7, top_p: 0.9, top_k: 0, max_tokens: 512, seed: None };

    fn key(prompt: &str) -> String {
        cache_key(prompt, "gpt-4o-mini", &SAMPLING, &history_hash(&[]))
    }

    #[test]
    fn whitespace_differences_share_a_key_and_meaning_differences_do_not() {
        assert_eq!(key("What is  a\tmonad?"), key("What is a monad?"));
        assert_eq!(key("\n\nWhat is a monad?   \r\n\r\n"), key("What is a monad?"));
        assert_eq!(key("line one\r\nline two"), key("line one\nline two"));
        assert_ne!(key("What is a monad?"), key("what is a monad?"), "case is kept");
        assert_ne!(key("if x:\n    y()"), key("if x:\ny()"), "indentation is kept");
        assert_eq!(normalize_prompt("  a  b \n\tc\t\td  "), "  a b\n\tc d");
    }

    #[test]
    fn every_part_of_the_key_matters() {
        let base = key("hi");
        assert_eq!(base.len(), 32);
        assert!(base.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(cache_key("hi", "gpt-4o", &SAMPLING, &history_hash(&[])), base);
        for s in [
            SamplingKey { temperature: 0.8, ..SAMPLING },
            SamplingKey { top_p: 1.0, ..SAMPLING },
            SamplingKey { top_k: 40, ..SAMPLING },
            SamplingKey { max_tokens: 513, ..SAMPLING },
            SamplingKey { seed: Some(0), ..SAMPLING },
        ] {
            assert_ne!(cache_key("hi", "gpt-4o-mini", &s, &history_hash(&[])), base, "{s:?}");
        }
        let history = [Message::new(Role::User, "earlier"), Message::new(Role::Assistant, "reply")];
        assert_ne!(cache_key("hi", "gpt-4o-mini", &SAMPLING, &history_hash(&history)), base);
        let swapped = [Message::new(Role::Assistant, "earlier"), Message::new(Role::User, "reply")];
        assert_ne!(history_hash(&history), history_hash(&swapped));
        // Length prefixes: moving bytes between fields changes the key.
        assert_ne!(cache_key("ab", "c", &SAMPLING, ""), cache_key("a", "bc", &SAMPLING, ""));
        let zero = SamplingKey { temperature: 0.0, ..SAMPLING };
        assert_eq!(
            cache_key("hi", "m", &zero, ""),
            cache_key("hi", "m", &SamplingKey { temperature: -0.0, ..SAMPLING }, "")
        );
    }

    /// Keys are stored; they must not change between builds or releases.
    #[test]
    fn keys_are_stable() {
        // SHA-256 reference vectors (FIPS 180-2), their first 128 bits.
        let mut h = KeyHasher::new();
        h.bytes(b"");
        assert_eq!(h.hex(), "e3b0c44298fc1c149afbf4c8996fb924");
        let mut h = KeyHasher::new();
        h.bytes(b"abc");
        assert_eq!(h.hex(), "ba7816bf8f01cfea414140de5dae2223");
        assert_eq!(key("What is a monad?"), key("What is a monad?"));
        assert_eq!(history_hash(&[]), history_hash(&[]));
    }

    fn meta(key: &str, bytes: u64, last_used_ms: i64) -> EntryMeta {
        EntryMeta { key: key.into(), bytes, last_used_ms }
    }

    #[test]
    fn eviction_drops_the_least_recently_used_until_it_fits() {
        let entries = [meta("a", 40, 300), meta("b", 30, 100), meta("c", 20, 200)];
        // 90 stored + 15 incoming = 105 > 100: the oldest (b) goes.
        assert_eq!(evictions(&entries, 15, 100), Some(vec!["b".to_owned()]));
        // + 50 = 140: b (110 left), then c (90).
        assert_eq!(evictions(&entries, 50, 100), Some(vec!["b".to_owned(), "c".to_owned()]));
        assert_eq!(evictions(&entries, 10, 100), Some(vec![]));
        assert_eq!(evictions(&entries, 100, 100), Some(vec!["b".to_owned(), "c".to_owned(), "a".to_owned()]));
        assert_eq!(evictions(&entries, 101, 100), None, "too big to cache at all");
        let ties = [meta("y", 10, 5), meta("x", 10, 5)];
        assert_eq!(evictions(&ties, 5, 15), Some(vec!["x".to_owned()]));
    }

    #[test]
    fn ttl_expiry() {
        let day = Duration::from_secs(86_400);
        assert!(!is_expired(0, i64::MAX, None));
        assert!(!is_expired(1_000, 1_000 + 86_399_999, Some(day)));
        assert!(is_expired(1_000, 1_000 + 86_400_000, Some(day)));
        assert!(!is_expired(5_000, 1_000, Some(day)), "a clock that went back does not expire entries");
    }

    #[test]
    fn only_clean_cloud_answers_are_cacheable() {
        let words = |t: &str| t.split_whitespace().count();
        let fits = |_: u64| Verdict::Fits;
        let ctx = RouteContext {
            local: Some(LocalModel { id: "local".into(), fit_at: &fits }),
            cloud: Some("openai".into()),
            ..RouteContext::new(&words)
        };
        let decide = |r: RouteRequest<'_>| route(&r, &ctx).unwrap();

        assert!(cacheable(&decide(RouteRequest { needs_web: true, ..RouteRequest::new("news today") })));
        assert!(!cacheable(&decide(RouteRequest::new("short, local"))), "local answers are not cloud answers");
        let sensitive = RouteRequest { needs_web: true, ..RouteRequest::new("mail bob@corp.com") };
        assert!(!cacheable(&decide(sensitive)), "stays local");
        let overridden = RouteRequest { allow_sensitive: true, force: Some(Force::Cloud), ..sensitive };
        let d = decide(overridden);
        assert!(d.is_cloud() && !cacheable(&d), "the override was for this message only");
    }
}
