//! Which port the app's own local server (Settings → Local server) listens
//! on, written into the data folder while it runs, so that `headroom serve`
//! on the same port can say politely that the app already serves there,
//! instead of failing on a taken port.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The marker file, in the app's data folder.
pub const MARKER_FILE: &str = "app-server.json";

#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    port: u16,
    pid: u32,
}

fn marker_path(data_dir: &Path) -> PathBuf {
    data_dir.join(MARKER_FILE)
}

/// Notes that the app's server listens on 127.0.0.1:`port`.
pub fn record(data_dir: &Path, port: u16) -> std::io::Result<()> {
    let text = serde_json::to_string(&Marker { port, pid: std::process::id() }).map_err(std::io::Error::other)?;
    std::fs::write(marker_path(data_dir), text)
}

/// The app's server stopped (or the app is starting: nothing serves yet).
pub fn clear(data_dir: &Path) {
    match std::fs::remove_file(marker_path(data_dir)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("could not remove {}: {e}", marker_path(data_dir).display()),
    }
}

/// Whether the app serves on 127.0.0.1:`port` right now: its marker names
/// that port and something answers there (a marker left by a crash, with
/// nothing listening, is not a server).
pub fn app_serves_on(data_dir: &Path, port: u16) -> bool {
    let marker: Option<Marker> =
        std::fs::read_to_string(marker_path(data_dir)).ok().and_then(|t| serde_json::from_str(&t).ok());
    marker.is_some_and(|m| m.port == port && port != 0) && {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_app_serves_where_its_marker_says_and_something_listens() {
        let dir = tempfile::tempdir().unwrap();
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(!app_serves_on(dir.path(), port), "no marker");
        record(dir.path(), port).unwrap();
        assert!(app_serves_on(dir.path(), port));
        assert!(!app_serves_on(dir.path(), port.wrapping_add(1)), "another port");
        drop(listener);
        assert!(!app_serves_on(dir.path(), port), "a marker with nothing listening is stale");
        clear(dir.path());
        clear(dir.path());
        assert!(!dir.path().join(MARKER_FILE).exists());
        std::fs::write(dir.path().join(MARKER_FILE), "{not json").unwrap();
        assert!(!app_serves_on(dir.path(), port), "a corrupt marker is no server");
    }
}
