//! Intranet hosts, URLs with dotless hosts, share paths and home-folder paths.

use memchr::memmem;

use super::helpers::{find_all_ci, is_word, mask_tail, push};
use super::{Finding, SensitiveKind};

/// Suffixes that only resolve inside a private network.
const INTRANET_SUFFIXES: &[&str] = &[".corp", ".internal", ".lan", ".local", ".intranet", ".localdomain", ".home.arpa"];

pub(super) fn hosts(text: &str, found: &mut Vec<Finding>) {
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
pub(super) fn urls_with_dotless_hosts(text: &str, found: &mut Vec<Finding>) {
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
pub(super) fn share_paths(text: &str, found: &mut Vec<Finding>) {
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
pub(super) fn home_paths(text: &str, found: &mut Vec<Finding>) {
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
