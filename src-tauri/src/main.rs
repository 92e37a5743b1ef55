//! `headroom`: with no subcommand it opens the menu-bar app; with one it runs
//! headless (no display needed), so the CLI works over SSH and in CI. Both
//! log through the one tracing setup in `headroom::logging`.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = headroom::cli::Cli::parse();
    match cli.command {
        None => {
            let env = |name| std::env::var(name).ok();
            if let Some(line) =
                headroom::missing_desktop_session(env("DISPLAY").as_deref(), env("WAYLAND_DISPLAY").as_deref())
            {
                eprintln!("{line}");
                return ExitCode::FAILURE;
            }
            let logs = headroom::logging::init(headroom::logging::app_log_dir().as_deref());
            headroom::run(logs)
        }
        Some(command) => {
            headroom::logging::init(None);
            headroom::cli::run(command)
        }
    }
}
