//! Email addresses.

use super::helpers::push;
use super::{Finding, SensitiveKind};

pub(super) fn emails(text: &str, found: &mut Vec<Finding>) {
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
