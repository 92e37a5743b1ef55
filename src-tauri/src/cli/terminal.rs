//! Model output on a terminal, streamed: [`TerminalText`] passes what
//! [`headroom_core::terminal::terminal_safe`] keeps (text, newlines, tabs)
//! and drops every other control character before it reaches a terminal. A
//! pipe or a file gets the bytes unchanged.

use std::io::{self, Write};

pub use headroom_core::terminal::{terminal_safe, terminal_safe_line};

/// A writer that passes [`terminal_safe`] text on to `inner`.
#[derive(Debug)]
pub struct TerminalText<W: Write>(pub W);

impl<W: Write> Write for TerminalText<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => self.0.write_all(terminal_safe(text).as_bytes())?,
            // Not UTF-8 as a whole (the callers write whole strings, so this is
            // rare): C0 controls and DEL are single bytes in UTF-8, never part
            // of a longer sequence, so dropping them byte by byte is safe.
            Err(_) => {
                let kept: Vec<u8> =
                    buf.iter().copied().filter(|&b| b == b'\n' || b == b'\t' || (b >= 0x20 && b != 0x7f)).collect();
                self.0.write_all(&kept)?;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_other_controls_are_dropped_text_newlines_and_tabs_kept() {
        let hostile = "ok\x1b[2J\x1b]0;pwned\x07 done\r\n\tnext\u{9b}31m\u{7f}é 日本";
        let safe = "ok[2J]0;pwned done\n\tnext31mé 日本";

        let mut out = TerminalText(Vec::new());
        out.write_all(hostile.as_bytes()).unwrap();
        assert_eq!(out.0, safe.as_bytes());
        // Bytes that are not UTF-8: the single-byte controls still go.
        let mut out = TerminalText(Vec::new());
        out.write_all(b"\xff\x1bx\x07y\n").unwrap();
        assert_eq!(out.0, b"\xffxy\n");
    }
}
