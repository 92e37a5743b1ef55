//! The binary's behaviour around the desktop: the app refuses to start
//! without a display in one line, and `headroom serve` refuses politely to
//! start a second server on the port the app already serves.

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn without_a_display_the_app_says_so_in_one_line_and_exits_1() {
    if !cfg!(target_os = "linux") {
        return; // macOS and Windows always have a window server
    }
    let data = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env("HEADROOM_DATA_DIR", data.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line, no GTK backtrace: {stderr}");
    assert!(stderr.starts_with("headroom: the menu-bar app needs a desktop session"), "{stderr}");
    assert!(stderr.contains("`xvfb-run make run`") && stderr.contains("`headroom --help`"), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(started.elapsed() < Duration::from_secs(10), "it refused at once");
    // Nothing was started: no database, no demo model, no log file.
    assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 0);
}

#[test]
fn serve_refuses_politely_where_the_app_already_serves() {
    let data = tempfile::tempdir().unwrap();
    // The app's server: a listener, and the marker the app writes beside it.
    let app_server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = app_server.local_addr().unwrap().port();
    headroom::serve_marker::record(data.path(), port).unwrap();

    let out = crate::common::headroom_with(
        &["serve", "--port", &port.to_string()],
        &[("HEADROOM_DATA_DIR", data.path().as_os_str())],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the Headroom app already serves the OpenAI-compatible API on http://127.0.0.1:{port}/v1"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("stop it there first, or pick another --port"), "{stderr}");
    assert!(out.stdout.is_empty(), "no URL was printed: {}", String::from_utf8_lossy(&out.stdout));
}
