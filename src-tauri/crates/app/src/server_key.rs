//! The key of the app's own local server: made on first use from the OS's
//! random source, kept in `<data_dir>/server-key` (readable by the user
//! only), shown in Settings, replaced on request. Every request to the
//! app's server sends it (`Authorization: Bearer <key>`) unless the user
//! turned that off (`server_require_key`); `headroom serve` keeps its own
//! `--api-key-env` keys, checked by the same code in the server crate.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::codes::{Coded, ErrorCode};

/// The file, in the app's data folder.
pub const KEY_FILE: &str = "server-key";
/// What every key starts with, so one pasted somewhere is recognisable.
pub const KEY_PREFIX: &str = "hr-";
/// Random bytes in a key (written as hex): 256 bits.
const KEY_BYTES: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum ServerKeyError {
    #[error("the local server's key could not be made: the OS gave no random bytes ({0})")]
    Random(String),
    #[error("the local server's key could not be {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Coded for ServerKeyError {
    fn code(&self) -> ErrorCode {
        ErrorCode::Io
    }

    fn message(&self) -> String {
        crate::codes::upper_first(&self.to_string())
    }
}

fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(KEY_FILE)
}

/// Whether `text` is a key this module made (a file edited into something
/// else is replaced rather than trusted).
fn well_formed(text: &str) -> bool {
    text.strip_prefix(KEY_PREFIX)
        .is_some_and(|hex| hex.len() == 2 * KEY_BYTES && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The key, made and kept on first use.
pub fn key(data_dir: &Path) -> Result<String, ServerKeyError> {
    match std::fs::read_to_string(path(data_dir)) {
        Ok(text) if well_formed(text.trim()) => Ok(text.trim().to_owned()),
        Ok(_) => regenerate(data_dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => regenerate(data_dir),
        Err(source) => Err(ServerKeyError::Io { what: "read from", path: path(data_dir), source }),
    }
}

/// A new key replaces the old one (clients holding the old one are refused from now on).
pub fn regenerate(data_dir: &Path) -> Result<String, ServerKeyError> {
    let mut bytes = [0u8; KEY_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| ServerKeyError::Random(e.to_string()))?;
    let key = bytes.iter().fold(String::from(KEY_PREFIX), |mut s, b| {
        s.push_str(&format!("{b:02x}"));
        s
    });
    let file = path(data_dir);
    let io = |what, source| ServerKeyError::Io { what, path: file.clone(), source };
    std::fs::create_dir_all(data_dir).map_err(|e| io("written to", e))?;
    // Written aside with the user-only mode from its first byte, then renamed over.
    let partial = file.with_extension("partial");
    let _ = std::fs::remove_file(&partial);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options.open(&partial).map_err(|e| io("written to", e))?;
    out.write_all(key.as_bytes()).and_then(|()| out.sync_all()).map_err(|e| io("written to", e))?;
    drop(out);
    std::fs::rename(&partial, &file).map_err(|e| io("written to", e))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_made_once_kept_private_and_replaced_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let first = key(dir.path()).unwrap();
        assert!(well_formed(&first), "{first}");
        assert_eq!(key(dir.path()).unwrap(), first, "kept across calls (and restarts)");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "readable by the user only");
        }
        let second = regenerate(dir.path()).unwrap();
        assert_ne!(second, first);
        assert_eq!(key(dir.path()).unwrap(), second);
        // A file edited into something else is not trusted as a key.
        std::fs::write(dir.path().join(KEY_FILE), "password").unwrap();
        let third = key(dir.path()).unwrap();
        assert!(well_formed(&third) && third != second, "{third}");
    }
}
