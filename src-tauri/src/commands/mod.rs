//! Tauri commands, one file per feature. Each is a thin adapter: parse,
//! call a library crate, map the error once into `CommandError`.

// Tauri hands commands their arguments (State, Channel, String) by value.
#![allow(clippy::needless_pass_by_value)]

pub mod app;
pub mod bench;
pub mod charts;
pub mod chat;
pub mod cloud;
pub mod desktop;
pub mod export;
pub mod lend;
pub mod live;
pub mod memory;
pub mod models;
pub mod peers;
pub mod prompt_cache;
pub mod pull;
pub mod route;
pub mod server;
pub mod sessions;
pub mod shelf;
pub mod tools;
pub mod window;
