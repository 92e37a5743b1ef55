//! What the binary-level test files share.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs the `headroom` binary with a Hugging Face cache that holds nothing,
/// so repo ids resolve the same on every machine, and a data folder of the
/// call's own (`generate` and `bench` record what their turns took there),
/// never the user's nor another call's.
pub fn headroom(args: &[&str]) -> Output {
    headroom_with(args, &[])
}

/// A data folder no other call of this process uses.
fn fresh_data_dir() -> std::path::PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("headroom-cli-test-data-{}-{n}", std::process::id()))
}

/// [`headroom`] with extra environment variables.
pub fn headroom_with(args: &[&str], env: &[(&str, &OsStr)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .env("HF_HUB_CACHE", std::env::temp_dir().join("headroom-cli-test-empty-hub"))
        .env("HEADROOM_DATA_DIR", fresh_data_dir())
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run headroom: {e}"))
}
