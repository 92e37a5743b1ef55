//! Stop strings over streamed text: a stop is found even when it spans
//! tokens, and is never handed out; text that could still become a stop
//! is held back until it cannot.

/// One turn's scan for its stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopScan {
    stops: Vec<String>,
    /// Text received and not yet handed out: it ends with a prefix of a stop.
    held: String,
    hit: bool,
}

impl StopScan {
    /// Empty strings are ignored (they would stop before the first token).
    pub fn new(stops: &[String]) -> Self {
        Self { stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(), ..Self::default() }
    }

    /// Whether a stop string was found: nothing more is handed out.
    pub fn hit(&self) -> bool {
        self.hit
    }

    /// Reads `text`, returns what may be handed out now: everything before
    /// the first stop (the stop and what follows are dropped), or everything
    /// but the longest tail that is the start of some stop.
    pub fn push(&mut self, text: &str) -> String {
        if self.hit {
            return String::new();
        }
        if self.stops.is_empty() {
            return text.to_owned();
        }
        self.held.push_str(text);
        let first = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min();
        if let Some(at) = first {
            self.hit = true;
            let out = self.held[..at].to_owned();
            self.held.clear();
            return out;
        }
        let keep = self.held.len() - self.longest_stop_prefix_tail();
        let out = self.held[..keep].to_owned();
        self.held.drain(..keep);
        out
    }

    /// What is still held at the end of the turn (no stop came).
    pub fn finish(&mut self) -> String {
        if self.hit {
            return String::new();
        }
        std::mem::take(&mut self.held)
    }

    /// Bytes at the end of `held` that begin some stop string (at a char boundary).
    fn longest_stop_prefix_tail(&self) -> usize {
        let held = &self.held;
        let mut best = 0;
        for stop in &self.stops {
            // The longest proper prefix of `stop` that `held` ends with.
            let max = stop.len().saturating_sub(1).min(held.len());
            for n in (best + 1..=max).rev() {
                if held.is_char_boundary(held.len() - n) && stop.is_char_boundary(n) && held.ends_with(&stop[..n]) {
                    best = n;
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| (*s).to_owned()).collect();
        let mut scan = StopScan::new(&stops);
        let mut out = String::new();
        for p in pieces {
            out.push_str(&scan.push(p));
        }
        out.push_str(&scan.finish());
        (out, scan.hit())
    }

    #[test]
    fn a_stop_across_tokens_is_found_and_never_handed_out() {
        assert_eq!(run(&["END"], &["one two E", "N", "D three"]), ("one two ".into(), true));
        // The earliest of several stops wins.
        assert_eq!(run(&["b", "xa"], &["zx", "ab"]), ("z".into(), true));
        // A held prefix that does not complete is handed out later.
        assert_eq!(run(&["END"], &["EN", "d"]), ("ENd".into(), false));
        assert_eq!(run(&["END"], &["a", "EN"]), ("aEN".into(), false));
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
        // Multi-byte text is cut at character boundaries.
        assert_eq!(run(&["é!"], &["caf", "é", "!x"]), ("caf".into(), true));
    }

    #[test]
    fn held_text_is_only_a_possible_stop_prefix() {
        let mut scan = StopScan::new(&["\n\nUser:".to_owned()]);
        assert_eq!(scan.push("Hi.\n"), "Hi.");
        assert_eq!(scan.push("\nUs"), "");
        assert_eq!(scan.push("ed"), "\n\nUsed");
        assert!(!scan.hit());
    }
}
