//! What the user set per tool (on/off, always allow, results are private),
//! kept in `tools.json` in the app's data folder beside `mcp.json` (which
//! stays the user's own file, in the notation other apps read: Headroom
//! never writes it). A tool the file does not name gets the defaults: on,
//! asks before each call, private where its server is private by default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file's name in the app's data folder.
pub const FILE: &str = "tools.json";

/// One tool's switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct ToolFlags {
    /// Offered to the model.
    pub enabled: bool,
    /// Runs without asking first.
    pub always_allow: bool,
    /// Its results are sensitive whatever the scanner finds: a turn whose
    /// context holds one never goes to the cloud.
    pub private: bool,
}

impl ToolFlags {
    pub fn defaults(private_server: bool) -> Self {
        Self { enabled: true, always_allow: false, private: private_server }
    }
}

/// Why the flags could not be written.
#[derive(Debug, thiserror::Error)]
pub enum FlagsError {
    #[error("could not save the tools' settings to {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// Every tool's flags the user has set, by `server/tool`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlagStore {
    #[serde(flatten)]
    tools: BTreeMap<String, ToolFlags>,
}

fn key(server: &str, tool: &str) -> String {
    format!("{server}/{tool}")
}

impl FlagStore {
    /// The file in `dir`; an unreadable or garbled one is logged and
    /// read as empty (the defaults are the careful choice: ask, and keep a
    /// filesystem server's results private).
    pub fn read(dir: &Path) -> Self {
        let path = dir.join(FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| {
                tracing::warn!("{} is not readable, the tools' defaults apply: {e}", path.display());
                Self::default()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::default(),
            Err(e) => {
                tracing::warn!("could not read {}, the tools' defaults apply: {e}", path.display());
                Self::default()
            }
        }
    }

    /// Writes the file in `dir` whole (a temporary file renamed over it).
    pub fn write(&self, dir: &Path) -> Result<(), FlagsError> {
        let path = dir.join(FILE);
        let write = |source| FlagsError::Write { path: path.clone(), source };
        std::fs::create_dir_all(dir).map_err(write)?;
        let tmp = dir.join(format!(".{FILE}.tmp"));
        let text = serde_json::to_string_pretty(self).map_err(|e| write(std::io::Error::other(e)))?;
        std::fs::write(&tmp, text).map_err(write)?;
        std::fs::rename(&tmp, &path).map_err(write)
    }

    pub fn get(&self, server: &str, tool: &str, private_server: bool) -> ToolFlags {
        self.tools.get(&key(server, tool)).copied().unwrap_or_else(|| ToolFlags::defaults(private_server))
    }

    pub fn set(&mut self, server: &str, tool: &str, flags: ToolFlags) {
        self.tools.insert(key(server, tool), flags);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_then_what_was_saved_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut flags = FlagStore::read(dir.path());
        assert_eq!(flags.get("fs", "read_file", true), ToolFlags { enabled: true, always_allow: false, private: true });
        assert!(!flags.get("time", "now", false).private);
        flags.set("time", "now", ToolFlags { enabled: false, always_allow: true, private: false });
        flags.write(dir.path()).unwrap();
        let again = FlagStore::read(dir.path());
        assert_eq!(again.get("time", "now", false), ToolFlags { enabled: false, always_allow: true, private: false });
        // A private server's tool the user made public stays public.
        let mut flags = again;
        flags.set("fs", "read_file", ToolFlags { enabled: true, always_allow: false, private: false });
        assert!(!flags.get("fs", "read_file", true).private);
    }

    #[test]
    fn a_garbled_file_reads_as_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), "{not json").unwrap();
        assert_eq!(FlagStore::read(dir.path()), FlagStore::default());
    }
}
