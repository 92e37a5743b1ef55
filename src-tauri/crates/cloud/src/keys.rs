//! API keys per base URL: in the OS keychain, or, only where no keychain
//! service exists (a headless Linux box without a Secret Service), in a file
//! only the user can read — and the caller is told which, so the UI can say
//! so. A keychain that exists and fails (macOS's Keychain always exists; a
//! locked Secret Service refusing) is an error to report, never a reason
//! to write the key into a file.
//!
//! The calls block (the keychain is a D-Bus / Security-framework round trip):
//! from async code, call them through `spawn_blocking`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::{normalize_base_url, ApiKey};
use crate::error::KeyError;

/// The keychain "service" every Headroom key is filed under.
pub const KEYCHAIN_SERVICE: &str = "headroom-cloud";
/// The fallback file, in the app's data folder.
pub const KEY_FILE_NAME: &str = "cloud-keys.json";

/// Where a key lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub enum KeyStorage {
    /// The OS keychain (Keychain, Credential Manager, Secret Service).
    Keychain,
    /// A JSON file readable only by the user (mode 0600): no keychain
    /// service was reachable.
    File,
}

/// Keys for cloud endpoints.
#[derive(Debug, Clone)]
pub struct KeyStore {
    file: PathBuf,
    use_keychain: bool,
}

impl KeyStore {
    /// Keychain first, `<data_dir>/cloud-keys.json` when it is unreachable.
    pub fn new(data_dir: &Path) -> Self {
        Self { file: data_dir.join(KEY_FILE_NAME), use_keychain: true }
    }

    /// Only the file (for a user who opted out of the keychain).
    pub fn file_only(data_dir: &Path) -> Self {
        Self { file: data_dir.join(KEY_FILE_NAME), use_keychain: false }
    }

    pub fn file_path(&self) -> &Path {
        &self.file
    }

    /// Stores `key` for `base_url`, replacing any earlier one; says where.
    pub fn set(&self, base_url: &str, key: &ApiKey) -> Result<KeyStorage, KeyError> {
        let key_text = key.expose().trim();
        if key_text.is_empty() {
            return Err(KeyError::EmptyKey);
        }
        let account = account(base_url)?;
        if self.use_keychain {
            match keychain_entry(&account).and_then(|e| e.set_password(key_text)) {
                Ok(()) => {
                    // A key stored in the file earlier would shadow nothing but
                    // would linger in plain text: drop it.
                    self.file_remove(&account)?;
                    return Ok(KeyStorage::Keychain);
                }
                Err(e) if unreachable_keychain(&e) => {
                    tracing::info!("no OS keychain reachable ({e}); the API key goes to {}", self.file.display());
                }
                Err(e) => return Err(KeyError::Keychain(e)),
            }
        }
        let mut keys = self.read_file()?;
        keys.insert(account, key_text.to_owned());
        self.write_file(&keys)?;
        Ok(KeyStorage::File)
    }

    /// The key stored for `base_url`, and where it was found.
    pub fn get(&self, base_url: &str) -> Result<Option<(ApiKey, KeyStorage)>, KeyError> {
        let account = account(base_url)?;
        if self.use_keychain {
            match keychain_entry(&account).and_then(|e| e.get_password()) {
                Ok(key) => return Ok(Some((ApiKey::new(key), KeyStorage::Keychain))),
                Err(keyring::Error::NoEntry) => {}
                Err(e) if unreachable_keychain(&e) => {}
                Err(e) => return Err(KeyError::Keychain(e)),
            }
        }
        Ok(self.read_file()?.remove(&account).map(|k| (ApiKey::new(k), KeyStorage::File)))
    }

    /// Removes the key for `base_url` from both places; whether one existed.
    pub fn delete(&self, base_url: &str) -> Result<bool, KeyError> {
        let account = account(base_url)?;
        let mut found = false;
        if self.use_keychain {
            match keychain_entry(&account).and_then(|e| e.delete_credential()) {
                Ok(()) => found = true,
                Err(keyring::Error::NoEntry) => {}
                Err(e) if unreachable_keychain(&e) => {}
                Err(e) => return Err(KeyError::Keychain(e)),
            }
        }
        Ok(self.file_remove(&account)? || found)
    }

    fn file_remove(&self, account: &str) -> Result<bool, KeyError> {
        if !self.file.exists() {
            return Ok(false);
        }
        let mut keys = self.read_file()?;
        let found = keys.remove(account).is_some();
        if found {
            self.write_file(&keys)?;
        }
        Ok(found)
    }

    fn read_file(&self) -> Result<BTreeMap<String, String>, KeyError> {
        let text = match std::fs::read_to_string(&self.file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(source) => return Err(KeyError::File { path: self.file.clone(), source }),
        };
        serde_json::from_str(&text)
            .map_err(|e| KeyError::CorruptFile { path: self.file.clone(), detail: e.to_string() })
    }

    /// Writes a temporary file created 0600 and renames it over the old one,
    /// so the key is never readable by others, not even for a moment, and a
    /// crash mid-write leaves the old file whole.
    fn write_file(&self, keys: &BTreeMap<String, String>) -> Result<(), KeyError> {
        let io = |source| KeyError::File { path: self.file.clone(), source };
        if let Some(dir) = self.file.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let tmp = self.file.with_extension("json.tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp).map_err(io)?;
        let text = serde_json::to_string_pretty(keys).unwrap_or_default();
        file.write_all(text.as_bytes()).and_then(|()| file.sync_all()).map_err(io)?;
        drop(file);
        std::fs::rename(&tmp, &self.file).map_err(io)
    }
}

/// Keys are filed per normalised base URL, so "http://h/v1/" and
/// "http://h/v1" share one.
fn account(base_url: &str) -> Result<String, KeyError> {
    normalize_base_url(base_url).map_err(|e| KeyError::InvalidUrl(e.to_string()))
}

fn keychain_entry(account: &str) -> keyring::Result<keyring::Entry> {
    keyring::Entry::new(KEYCHAIN_SERVICE, account)
}

/// Only the Secret Service (Linux and the other Unix desktops) is an
/// optional service that may simply not be running; macOS's Keychain and
/// Windows' Credential Manager are always there, so their errors are real.
const KEYCHAIN_MAY_BE_ABSENT: bool = cfg!(all(unix, not(any(target_os = "macos", target_os = "ios"))));

/// Whether `e` means "there is no keychain service here" on this platform.
fn unreachable_keychain(e: &keyring::Error) -> bool {
    no_keychain_service(KEYCHAIN_MAY_BE_ABSENT, e)
}

/// `e` says no keychain service exists, where one may be absent at all: no
/// store could be set up (no D-Bus session), or the Secret Service could not
/// be reached (`PlatformFailure`: no provider, no bus). A service that
/// answered "locked" or "prompt dismissed" (`NoStorageAccess`) exists, and
/// the user refused it: that is reported, not worked around.
fn no_keychain_service(may_be_absent: bool, e: &keyring::Error) -> bool {
    may_be_absent
        && matches!(
            e,
            keyring::Error::PlatformFailure(_)
                | keyring::Error::NoDefaultStore
                | keyring::Error::NotSupportedByStore(_)
        )
}

#[cfg(test)]
mod tests {
    use headroom_test_support::scratch;

    use super::*;

    #[test]
    fn file_store_sets_gets_replaces_and_deletes_per_url() {
        let dir = scratch("cloud-keys-roundtrip");
        let store = KeyStore::file_only(&dir);
        assert_eq!(store.get("http://a/v1").ok().flatten(), None);
        assert_eq!(store.set("http://a/v1/", &ApiKey::new(" k1 ")).ok(), Some(KeyStorage::File));
        store.set("http://b/v1", &ApiKey::new("k2")).unwrap();
        store.set("http://a/v1", &ApiKey::new("k3")).unwrap();
        let got = store.get("http://a/v1").unwrap();
        assert_eq!(got, Some((ApiKey::new("k3"), KeyStorage::File)));
        assert_eq!(store.delete("http://a/v1").ok(), Some(true));
        assert_eq!(store.delete("http://a/v1").ok(), Some(false));
        assert_eq!(store.get("http://a/v1").ok().flatten(), None);
        assert_eq!(store.get("http://b/v1").ok().flatten().map(|(k, _)| k), Some(ApiKey::new("k2")));
    }

    #[cfg(unix)]
    #[test]
    fn key_file_is_readable_by_the_user_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("cloud-keys-mode");
        let store = KeyStore::file_only(&dir);
        store.set("http://a/v1", &ApiKey::new("k")).unwrap();
        let mode = std::fs::metadata(store.file_path()).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn only_a_missing_secret_service_falls_back_to_the_file_never_a_keychain_error() {
        let failure = || keyring::Error::PlatformFailure("no secret service provider or dbus session found".into());
        let refused = || keyring::Error::NoStorageAccess("SS Error: object locked".into());
        // Linux without a Secret Service: the file.
        assert!(no_keychain_service(true, &failure()));
        assert!(no_keychain_service(true, &keyring::Error::NoDefaultStore));
        // A Secret Service that is there but locked, or whose prompt was dismissed: reported.
        assert!(!no_keychain_service(true, &refused()));
        // macOS: the Keychain always exists; every error of it is reported.
        for e in [failure(), refused(), keyring::Error::NoDefaultStore] {
            assert!(!no_keychain_service(false, &e), "{e}");
        }
        assert_eq!(KEYCHAIN_MAY_BE_ABSENT, cfg!(target_os = "linux"));
    }

    #[test]
    fn bad_input_is_refused_with_the_reason() {
        let dir = scratch("cloud-keys-bad");
        let store = KeyStore::file_only(&dir);
        assert!(matches!(store.set("http://a/v1", &ApiKey::new("  ")), Err(KeyError::EmptyKey)));
        assert!(matches!(store.set("a/v1", &ApiKey::new("k")), Err(KeyError::InvalidUrl(_))));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(store.file_path(), "{not json").unwrap();
        match store.get("http://a/v1") {
            Err(e @ KeyError::CorruptFile { .. }) => {
                assert!(e.to_string().contains(KEY_FILE_NAME), "{e}")
            }
            other => panic!("expected CorruptFile, got {other:?}"),
        }
    }
}
