//! Phone numbers and PRC resident ID numbers: runs of digits, classified
//! whole or by their space-separated groups.

use super::helpers::{is_word, keyword_before, mask_digits, push, Keywords};
use super::{Finding, SensitiveKind};

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
pub(super) fn numbers(text: &str, found: &mut Vec<Finding>) {
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
