//! The headless subcommands. Each parses its arguments here and calls into
//! the library crates; none needs a display.

mod bandwidth;
pub(crate) mod bench;
mod chart;
pub(crate) mod chat;
mod cloud_key;
mod demo_model;
mod error;
mod export;
pub(crate) mod fit;
mod generate;
#[cfg(test)]
mod hostile_tests;
mod hub;
pub(crate) mod kernel;
pub(crate) mod kv;
pub(crate) mod lend;
mod live_probe;
mod models;
mod pull;
mod route;
mod serve;
mod sessions;
mod shelf;
pub(crate) mod speculative;
mod table;
mod terminal;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use bandwidth::BandwidthArgs;
pub use bench::BenchArgs;
pub use chart::ChartArgs;
pub use chat::ChatArgs;
pub use cloud_key::CloudKeyArgs;
pub use demo_model::DemoModelArgs;
pub use error::CliError;
pub use export::{ExportArgs, ExportFormat, ImportArgs};
pub use fit::{check_model, BudgetArgs, FitArgs};
pub use generate::GenerateArgs;
pub use kernel::KernelArgs;
pub use lend::{LendArgs, PairArgs, PeerArgs, PeersArgs};
pub use live_probe::LiveProbeArgs;
pub use models::ModelsArgs;
pub use pull::PullArgs;
pub use route::RouteArgs;
pub use serve::ServeArgs;
pub use sessions::SessionsArgs;
pub use shelf::ShelfArgs;

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
    /// Measure this machine's memory bandwidth (STREAM copy and triad), the
    /// roofline's denominator; on Apple silicon also the chip's rated figure.
    Bandwidth(BandwidthArgs),
    /// Benchmark a model like llama-bench: per context depth, prefill p and
    /// decode n tokens, r runs after a warm-up; mean ± sd, labels, roofline.
    Bench(BenchArgs),
    /// Store, delete or check the API key of a cloud endpoint (OpenAI-
    /// compatible): the OS keychain, or a user-only file where there is none.
    CloudKey(CloudKeyArgs),
    /// Draw a chart as SVG: `chart session ID` is a stored session's decode
    /// tok/s and TTFT per turn against context; `chart live` the live graph
    /// (memory, pressure, swap and tok/s of the last minutes) from the store.
    Chart(ChartArgs),
    /// One chat turn in a stored session (created if new, continued
    /// otherwise): the history is the context; the answer is saved as it streams.
    Chat(ChatArgs),
    /// Write a model with random weights in the mlx-community layout (for
    /// tests and demos; the real-shape presets write several GB).
    DemoModel(DemoModelArgs),
    /// Say whether a model fits in memory before loading it: weights, KV
    /// cache, overhead, predicted peak, budget, verdict, largest context.
    Fit(FitArgs),
    /// Print a stored session as Markdown or JSON (with its stats).
    Export(ExportArgs),
    /// Generate a reply with a local model, streaming it, then print the
    /// turn's stats (like `ollama run --verbose`).
    Generate(GenerateArgs),
    /// Add a session from a JSON export (`headroom export --format json`).
    Import(ImportArgs),
    /// Lend this Mac to another: a host whose model does not fit alone
    /// runs its later layers here (`--peer HOST:PORT` there), each Mac
    /// within its own budget, over MLX's ring backend.
    Lend(LendArgs),
    /// List the Macs lending themselves on this network (Bonjour): name,
    /// HOST:PORT for `--peer` and `pair`, budget.
    Peers(PeersArgs),
    /// Pair with a Mac that lends itself (`headroom lend` shows the code):
    /// `--peer HOST:PORT` and the app then present the token it gives.
    Pair(PairArgs),
    /// Answer with a local model a few times and print each answer's
    /// per-second decode rate beside swap and pressure, and whether a
    /// slowdown is blamed on memory (the live graph's attribution).
    LiveProbe(LiveProbeArgs),
    /// List the models in the app's models folder and the Hugging Face
    /// cache, with disk size and fit verdict at the default context.
    Models(ModelsArgs),
    /// Download a model from the Hugging Face hub into the HF cache: the fit
    /// verdict from its safetensors headers first (a model that would swap
    /// is refused unless --override-fit), then a resumable, verified download.
    Pull(PullArgs),
    /// Say where one message would run (the local model or the cloud) and
    /// why: sensitive content, input length, tools, web, fit. Sends nothing.
    Route(RouteArgs),
    /// The starter shelf: real models people run on 16–32 GB Macs, each with
    /// its fit verdict on this Mac (what fits first) before any download;
    /// `headroom pull REPO` gets one.
    Shelf(ShelfArgs),
    /// Serve the OpenAI-compatible API (/v1/models, /v1/chat/completions)
    /// on 127.0.0.1 until Ctrl-C, on the models the app knows.
    Serve(ServeArgs),
    /// List the stored chat sessions, most recent first.
    Sessions(SessionsArgs),
}

/// Runs one subcommand; the exit code says whether it succeeded.
pub fn run(command: Command) -> ExitCode {
    match command {
        Command::Backend { json } => {
            let info = crate::about::AppInfo::current();
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
        Command::Bandwidth(args) => report(bandwidth::run(&args)),
        Command::Bench(args) => report(bench::run(&args)),
        Command::Chart(args) => chart::run(&args),
        Command::Chat(args) => report(chat::run(&args)),
        Command::CloudKey(args) => report(cloud_key::run(&args)),
        Command::DemoModel(args) => report(demo_model::run(&args)),
        Command::Export(args) => report(export::run_export(&args)),
        Command::Import(args) => report(export::run_import(&args)),
        Command::Sessions(args) => report(sessions::run(&args)),
        Command::Fit(args) => report(fit::run(&args)),
        Command::Generate(args) => report(generate::run(&args)),
        Command::Lend(args) => report(lend::run(&args)),
        Command::Pair(args) => report(lend::pair(&args)),
        Command::Peers(args) => report(lend::peers(&args)),
        Command::LiveProbe(args) => report(live_probe::run(&args)),
        Command::Models(args) => report(models::run(&args)),
        Command::Pull(args) => pull::run(&args),
        Command::Route(args) => route::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Shelf(args) => report(shelf::run(&args)),
    }
}

/// Errors go to stderr as one clear line; the exit code is 1.
fn report(result: Result<(), CliError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("headroom: {}", headroom_core::terminal::error_line(&e.to_string()));
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
        let cli = Cli::try_parse_from(["headroom"]).unwrap();
        assert!(cli.command.is_none());
    }

    #[test]
    fn unknown_subcommands_are_refused_with_a_message() {
        let err = Cli::try_parse_from(["headroom", "fly"]).err().map(|e| e.to_string());
        assert!(err.unwrap_or_default().contains("unrecognized subcommand 'fly'"));
    }
}
