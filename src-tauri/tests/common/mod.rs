//! What the binary-level test files share.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::process::{Command, Output};

/// Runs the `headroom` binary with a Hugging Face cache that holds nothing,
/// so repo ids resolve the same on every machine, and a data folder of the
/// call's own (`generate` and `bench` record what their turns took there),
/// never the user's nor another call's.
pub fn headroom(args: &[&str]) -> Output {
    headroom_with(args, &[])
}

/// [`headroom`] with extra environment variables.
pub fn headroom_with(args: &[&str], env: &[(&str, &OsStr)]) -> Output {
    // Removed once the command is done.
    let data = headroom_test_support::scratch("cli-test-data");
    Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .env("HF_HUB_CACHE", data.join("empty-hub"))
        .env("HEADROOM_DATA_DIR", data.join("data"))
        .envs(env.iter().copied())
        .output()
        .expect("cannot run headroom")
}
