//! `headroom`: with no subcommand it opens the menu-bar app; with one it runs
//! headless (no display needed), so the CLI works over SSH and in CI.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = headroom::cli::Cli::parse();
    match cli.command {
        None => {
            headroom::run();
            std::process::ExitCode::SUCCESS
        }
        Some(command) => headroom::cli::run(command),
    }
}
