//! The Macs this one paired with (`headroom pair HOST:PORT CODE`): each
//! lender's address and the token it gave, kept in the data folder
//! (`peers.json`, this user's only), so that the app and every command that
//! takes `--peer` present it. A lender allows a host by its token, or by
//! address (`lend --allow`, loopback by default).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file the tokens are kept in.
pub const PEERS_FILE: &str = "peers.json";

fn file(data_dir: &Path) -> PathBuf {
    data_dir.join(PEERS_FILE)
}

/// Every pairing: address → token. An unreadable or malformed file holds none (said in the log).
pub fn load(data_dir: &Path) -> BTreeMap<String, String> {
    match std::fs::read(file(data_dir)) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!("{} is not readable: {e}; no pairing is used", file(data_dir).display());
            BTreeMap::new()
        }),
        Err(_) => BTreeMap::new(),
    }
}

/// The token paired with `addr`, if any.
pub fn token_for(data_dir: &Path, addr: &str) -> Option<String> {
    load(data_dir).remove(addr)
}

/// Keeps `token` for `addr` (replacing an older pairing), in a file only
/// this user can read.
pub fn remember(data_dir: &Path, addr: &str, token: &str) -> std::io::Result<()> {
    let mut all = load(data_dir);
    all.insert(addr.to_owned(), token.to_owned());
    let json = serde_json::to_vec_pretty(&all).map_err(std::io::Error::other)?;
    write_private(&file(data_dir), &json)
}

/// Writes `bytes` to `path` whole (through a temporary file), readable by
/// this user only: a token is as good as the pairing it stands for.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let partial = path.with_extension("partial");
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(&partial)?.write_all(bytes)?;
    }
    std::fs::rename(partial, path)
}

/// The data folder the CLI and the app share (`$HEADROOM_DATA_DIR` first).
pub fn data_dir() -> Option<PathBuf> {
    crate::state::Locations::from_env(|| crate::state::platform_app_data_dir().ok_or(())).ok().map(|l| l.data_dir)
}

/// The token for `addr` in the shared data folder.
pub fn token(addr: &str) -> Option<String> {
    token_for(&data_dir()?, addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pairing_is_kept_for_its_address_only_and_readable_by_this_user_only() {
        let dir = headroom_test_support::scratch("peers");
        assert_eq!(token_for(&dir, "10.0.0.2:7070"), None);
        remember(&dir, "10.0.0.2:7070", "abc").unwrap();
        remember(&dir, "10.0.0.3:7070", "def").unwrap();
        remember(&dir, "10.0.0.2:7070", "ghi").unwrap();
        assert_eq!(token_for(&dir, "10.0.0.2:7070").as_deref(), Some("ghi"));
        assert_eq!(token_for(&dir, "10.0.0.3:7070").as_deref(), Some("def"));
        assert_eq!(token_for(&dir, "10.0.0.4:7070"), None);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(PEERS_FILE)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(dir.join(PEERS_FILE), "not json").unwrap();
        assert_eq!(token_for(&dir, "10.0.0.2:7070"), None);
    }
}
