//! What the binary-level test files share.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::process::{Command, Output};

/// Runs the `headroom` binary with a Hugging Face cache that holds nothing,
/// so repo ids resolve the same on every machine.
pub fn headroom(args: &[&str]) -> Output {
    headroom_with(args, &[])
}

/// [`headroom`] with extra environment variables.
pub fn headroom_with(args: &[&str], env: &[(&str, &OsStr)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .env("HF_HUB_CACHE", std::env::temp_dir().join("headroom-cli-test-empty-hub"))
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run headroom: {e}"))
}
