//! Text from a model, the network or the hub on its way to a terminal: a
//! model, a Bonjour name, a lender's reply or a repo's title can carry escape
//! sequences (move the cursor, recolour, retitle the window, write the
//! clipboard with OSC 52, hide a link with OSC 8) as easily as words.
//! [`terminal_safe`] passes text, newlines and tabs and drops every other
//! control character (C0, DEL, C1); [`terminal_safe_line`] also folds line
//! breaks, for a name that must stay on its row. [`tilde`] writes a path with
//! the home folder as `~`, so a refusal shown to someone else does not carry
//! the user's name.

use std::borrow::Cow;
use std::path::Path;

/// Whether `c` may reach a terminal as it is.
fn allowed(c: char) -> bool {
    c == '\n' || c == '\t' || !c.is_control()
}

/// `text` without the control characters a terminal would act on.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if text.chars().all(allowed) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.chars().filter(|&c| allowed(c)).collect())
    }
}

/// [`terminal_safe`] on one line: newlines and tabs become spaces, so a
/// name from the network cannot print a fake row under its own.
pub fn terminal_safe_line(text: &str) -> Cow<'_, str> {
    if text.chars().all(|c| !c.is_control()) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.chars().filter(|&c| allowed(c)).map(|c| if c == '\n' || c == '\t' { ' ' } else { c }).collect())
    }
}

/// `path` as a person reads it, with `home` (the user's home folder) as `~`.
pub fn tilde(path: &Path, home: Option<&Path>) -> String {
    match home.filter(|h| h.components().count() > 1).and_then(|h| path.strip_prefix(h).ok()) {
        Some(rest) if rest.as_os_str().is_empty() => "~".to_owned(),
        Some(rest) => format!("~/{}", rest.display()),
        None => path.display().to_string(),
    }
}

/// `text` (an error message, a refusal) with every path under `home`
/// written from `~`: the one rule every front end applies where it renders
/// an error (the UI's `CommandError`, the server's error body, the CLI's
/// last line), so a message pasted into a bug report or read by a server
/// client does not carry the user's name. A longer name that merely starts
/// like the home folder (`/Users/alicexyz` for `/Users/alice`) is left alone.
pub fn tilde_text<'a>(text: &'a str, home: Option<&Path>) -> Cow<'a, str> {
    let Some(home) = home.filter(|h| h.components().count() > 1).and_then(|h| h.to_str()) else {
        return Cow::Borrowed(text);
    };
    let home = home.trim_end_matches('/');
    if home.is_empty() || !text.contains(home) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(home) {
        let after = &rest[at + home.len()..];
        // A path component goes on with a letter, digit, `.`, `-` or `_`.
        let ends_here = after.chars().next().is_none_or(|c| !(c.is_alphanumeric() || "._-".contains(c)));
        out.push_str(&rest[..at]);
        out.push_str(if ends_here { "~" } else { home });
        rest = after;
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// The user's home folder as the shell names it (`$HOME`), for
/// [`tilde_text`]; `None` where it is unset or empty. (Reading one variable
/// is the only thing here that looks outside its arguments.)
pub fn home_folder() -> Option<std::path::PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(std::path::PathBuf::from)
}

/// An error as the CLI prints it on its last line: without control
/// characters and with paths under home from `~` (the CLI's one place).
pub fn error_line(text: &str) -> String {
    terminal_safe(&without_home(text)).into_owned()
}

/// [`tilde_text`] with this user's home folder.
pub fn without_home(text: &str) -> Cow<'_, str> {
    match home_folder() {
        Some(home) => Cow::Owned(tilde_text(text, Some(&home)).into_owned()),
        None => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_other_controls_are_dropped_text_newlines_and_tabs_kept() {
        let hostile = "ok\x1b[2J\x1b]0;pwned\x07 done\r\n\tnext\u{9b}31m\u{7f}é 日本";
        assert_eq!(terminal_safe(hostile), "ok[2J]0;pwned done\n\tnext31mé 日本");
        assert!(matches!(terminal_safe("plain text\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_name_stays_on_its_line_and_loses_its_escapes() {
        // OSC 52 (write the clipboard) and a fake second row.
        let name = "Studio\x1b]52;c;cm0gLXJmIH4=\x07\nevil.local   10.0.0.9:7070";
        assert_eq!(terminal_safe_line(name), "Studio]52;c;cm0gLXJmIH4= evil.local   10.0.0.9:7070");
        assert!(matches!(terminal_safe_line("Mac mini"), Cow::Borrowed(_)));
    }

    #[test]
    fn the_home_folder_reads_as_a_tilde() {
        let home = Path::new("/Users/alice");
        assert_eq!(tilde(Path::new("/Users/alice/models/qwen"), Some(home)), "~/models/qwen");
        assert_eq!(tilde(Path::new("/Users/alice"), Some(home)), "~");
        assert_eq!(tilde(Path::new("/Users/alicexyz/m"), Some(home)), "/Users/alicexyz/m");
        assert_eq!(tilde(Path::new("/opt/m"), None), "/opt/m");
        assert_eq!(tilde(Path::new("/opt/m"), Some(Path::new("/"))), "/opt/m", "a home of / is not folded");
    }

    #[test]
    fn a_message_names_paths_under_home_from_a_tilde_and_nothing_else_changes() {
        let home = Some(Path::new("/Users/alice"));
        let refusal = "cannot read /Users/alice/Library/Application Support/Headroom/models/q/config.json: \
                       denied (also `/Users/alice`, /Users/alicexyz/m and /opt/m)";
        assert_eq!(
            tilde_text(refusal, home),
            "cannot read ~/Library/Application Support/Headroom/models/q/config.json: \
             denied (also `~`, /Users/alicexyz/m and /opt/m)"
        );
        assert_eq!(tilde_text("/Users/alice/a and /Users/alice/b", Some(Path::new("/Users/alice/"))), "~/a and ~/b");
        assert!(matches!(tilde_text("no path", home), Cow::Borrowed(_)));
        assert_eq!(tilde_text("/Users/alice/x", None), "/Users/alice/x");
        assert_eq!(tilde_text("/x/y", Some(Path::new("/"))), "/x/y", "a home of / is not folded");
    }
}
