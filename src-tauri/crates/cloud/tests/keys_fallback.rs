//! With no Secret Service reachable (a headless Linux box), keys go to the
//! user-only file and the store says so. Its own test binary: it points the
//! D-Bus session address at nothing for the whole process.

#![cfg(target_os = "linux")]

use std::os::unix::fs::PermissionsExt;

use headroom_cloud::{ApiKey, KeyStorage, KeyStore};

#[test]
fn without_a_keychain_service_keys_live_in_a_user_only_file() {
    // Set before any keychain call, in a binary with this single test, so no
    // other thread reads the environment meanwhile.
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/headroom-test-bus");
    let dir = headroom_test_support::scratch("cloud-keys-fallback");
    let store = KeyStore::new(&dir);

    let url = "http://127.0.0.1:9/v1";
    let storage = store.set(url, &ApiKey::new("sk-fallback")).expect("set");
    assert_eq!(storage, KeyStorage::File);
    let mode = std::fs::metadata(store.file_path()).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
    assert_eq!(mode, 0o600, "the key file must be readable by the user only");

    let got = store.get(&format!("{url}/")).expect("get");
    assert_eq!(got, Some((ApiKey::new("sk-fallback"), KeyStorage::File)));
    assert!(store.delete(url).expect("delete"));
    assert_eq!(store.get(url).expect("get"), None);
}
