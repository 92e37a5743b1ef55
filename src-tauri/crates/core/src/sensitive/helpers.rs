//! What the detectors share: word bytes, case-blind search, keyword
//! windows and masking.

use super::{Finding, SensitiveKind};

pub(super) fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

pub(super) fn push(found: &mut Vec<Finding>, kind: SensitiveKind, masked: String, start: usize, end: usize) {
    found.push(Finding { kind, masked, start, end });
}

/// Every index where `needle` (ASCII, not empty) occurs in `hay`, ignoring
/// ASCII case: memchr finds the first byte, then the rest is compared.
pub(super) fn find_all_ci<'a>(hay: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    let (lower, upper) = (needle[0].to_ascii_lowercase(), needle[0].to_ascii_uppercase());
    memchr::memchr2_iter(lower, upper, hay)
        .filter(move |&i| hay.get(i..i + needle.len()).is_some_and(|w| w.eq_ignore_ascii_case(needle)))
}

/// A set of lowercase keywords with, for each byte, the words that start
/// with it: [`keyword_before`] then looks at each byte of its window once.
#[derive(Debug)]
pub(super) struct Keywords {
    words: &'static [&'static str],
    /// Bit `w` of `starts[b]`: `words[w]` starts with byte `b`.
    starts: [u32; 256],
}

impl Keywords {
    pub(super) const fn new(words: &'static [&'static str]) -> Self {
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
    pub(super) fn last_in(&self, hay: &[u8]) -> Option<usize> {
        (0..hay.len()).rev().find(|&i| self.at(hay, i))
    }
}

/// The longest window [`keyword_before`] is asked about.
const MAX_KEYWORD_WINDOW: usize = 64;

/// Whether any of `words` occurs in the `window` bytes before `at`,
/// ignoring ASCII case. No allocation: it runs once per candidate.
pub(super) fn keyword_before(text: &str, at: usize, window: usize, words: &Keywords) -> bool {
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
pub(super) fn mask_tail(s: &str, keep: usize) -> String {
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
pub(super) fn mask_digits(digits: &str, head: usize, tail: usize) -> String {
    let n = digits.len();
    if n <= head + tail {
        return "*".repeat(n);
    }
    format!("{}{}{}", &digits[..head], "*".repeat(n - head - tail), &digits[n - tail..])
}
