//! Secrets: prefixed API tokens, private keys, assigned passwords and keys,
//! bearer tokens, and random tokens near words like "key".

use std::collections::HashMap;

use memchr::memmem;

use super::helpers::{find_all_ci, is_word, keyword_before, push, Keywords};
use super::{Finding, SensitiveKind};

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
pub(super) fn prefixed_secrets(text: &str, found: &mut Vec<Finding>) {
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
pub(super) fn private_keys(text: &str, found: &mut Vec<Finding>) {
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
pub(super) fn assigned_secrets(text: &str, found: &mut Vec<Finding>) {
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
pub(super) fn bearer_tokens(text: &str, found: &mut Vec<Finding>) {
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
pub(super) fn entropy_near_keywords(text: &str, found: &mut Vec<Finding>) {
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
