//! The headless subcommands. Each parses its arguments here and calls into
//! the library crates; none needs a display.

mod demo_model;
mod error;
mod fit;
mod generate;
mod hub;
mod models;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use demo_model::DemoModelArgs;
pub use error::CliError;
pub use fit::{check_model, BudgetArgs, FitArgs};
pub use generate::GenerateArgs;
pub use models::ModelsArgs;

/// Run local LLMs on a memory-tight Mac: fit checks before loading, honest
/// speed figures, and a local/cloud router. With no subcommand, opens the
/// menu-bar app.
#[derive(Debug, Parser)]
#[command(name = "headroom", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the MLX backend this build runs on (version, device).
    Backend {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write a model with random weights in the mlx-community layout (for
    /// tests and demos; the real-shape presets write several GB).
    DemoModel(DemoModelArgs),
    /// Say whether a model fits in memory before loading it: weights, KV
    /// cache, overhead, predicted peak, budget, verdict, largest context.
    Fit(FitArgs),
    /// Generate a reply with a local model, streaming it, then print the
    /// turn's stats (like `ollama run --verbose`).
    Generate(GenerateArgs),
    /// List the models in the app's models folder and the Hugging Face
    /// cache, with disk size and fit verdict at the default context.
    Models(ModelsArgs),
}

/// Runs one subcommand; the exit code says whether it succeeded.
pub fn run(command: Command) -> ExitCode {
    match command {
        Command::Backend { json } => {
            let info = crate::commands::app::AppInfo::current();
            if json {
                match serde_json::to_string(&info) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("headroom: cannot encode JSON: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                println!(
                    "Headroom {} on {}: MLX {} ({} backend)",
                    info.version, info.platform, info.mlx_version, info.device
                );
            }
            ExitCode::SUCCESS
        }
        Command::DemoModel(args) => report(demo_model::run(&args)),
        Command::Fit(args) => report(fit::run(&args)),
        Command::Generate(args) => report(generate::run(&args)),
        Command::Models(args) => report(models::run(&args)),
    }
}

/// Errors go to stderr as one clear line; the exit code is 1.
fn report(result: Result<(), CliError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("headroom: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn no_subcommand_means_the_app() {
        let cli = Cli::try_parse_from(["headroom"]).unwrap_or_else(|e| panic!("{e}"));
        assert!(cli.command.is_none());
    }

    #[test]
    fn unknown_subcommands_are_refused_with_a_message() {
        let err = Cli::try_parse_from(["headroom", "fly"]).err().map(|e| e.to_string());
        assert!(err.unwrap_or_default().contains("unrecognized subcommand 'fly'"));
    }
}
