//! Tauri commands, one file per feature. Each is a thin adapter: parse,
//! call a library crate, map the error once into `CommandError`.

pub mod app;
pub mod window;
