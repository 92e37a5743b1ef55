//! Private IPv4 and IPv6 addresses (not networks in CIDR notation).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use super::helpers::{is_word, push};
use super::{Finding, SensitiveKind};

/// `10.0.0.0/8`, `fc00::/7`: a range in CIDR notation names a network, not
/// a machine (RFC 1918 is quoted in plenty of harmless questions).
fn is_cidr(b: &[u8], j: usize) -> bool {
    b.get(j) == Some(&b'/') && b.get(j + 1).is_some_and(u8::is_ascii_digit)
}

pub(super) fn ipv4s(text: &str, found: &mut Vec<Finding>) {
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

pub(super) fn ipv6s(text: &str, found: &mut Vec<Finding>) {
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
