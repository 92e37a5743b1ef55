//! The app crate's integration tests, compiled as one binary (one link of
//! the app and its whole dependency graph instead of one per file): the CLI
//! end to end, the bundle's configuration, routing, persistence, pulls, the
//! local server and the fit guard.

// clippy.toml's allow-unwrap-in-tests covers `#[test]` functions only; the
// helpers of this test binary read as plainly as the tests they serve.
#![allow(clippy::unwrap_used)]

mod common;

mod bench;
mod bundle_config;
mod cli;
mod cloud_chat;
mod desktop;
mod fit_guard;
mod openai_client;
mod persist;
mod pull;
mod route;
mod serve_limits;
mod serve_load;
mod shelf;
mod two_macs;
