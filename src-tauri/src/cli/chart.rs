//! `headroom chart session ID`: a stored session's speed chart (decode tok/s
//! and TTFT per turn against context) as SVG, to stdout or a file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use headroom_charts::{ChartStyle, Theme};
use headroom_store::Store;

use super::CliError;
use crate::commands::charts::{session_chart_svg, SessionChartError};
use crate::runtime::block_on;

#[derive(Debug, Clone, Args)]
pub struct ChartArgs {
    #[command(subcommand)]
    pub chart: ChartKind,
}

#[derive(Debug, Clone, Subcommand)]
pub enum ChartKind {
    /// Decode tok/s and TTFT of every turn of a stored session, against the
    /// context each turn started with.
    Session {
        /// The session's id (see `headroom sessions`).
        session: String,
        #[arg(long, value_enum, default_value_t)]
        theme: ThemeArg,
        /// Write the SVG here instead of to stdout.
        #[arg(long, value_name = "FILE.svg")]
        out: Option<PathBuf>,
        /// Width in px (the popover's is 400).
        #[arg(long, default_value_t = ChartStyle::POPOVER_WIDTH)]
        width: u32,
        /// Height in px.
        #[arg(long, default_value_t = ChartStyle::POPOVER_HEIGHT)]
        height: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ThemeArg {
    #[default]
    Light,
    Dark,
}

impl From<ThemeArg> for Theme {
    fn from(t: ThemeArg) -> Self {
        match t {
            ThemeArg::Light => Theme::Light,
            ThemeArg::Dark => Theme::Dark,
        }
    }
}

/// What `headroom chart` can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ChartCommandError {
    #[error(transparent)]
    Cli(#[from] CliError),
    #[error(transparent)]
    Chart(#[from] SessionChartError),
    #[error("cannot write the chart to {}: {source}", path.display())]
    WriteFile { path: PathBuf, source: std::io::Error },
    #[error("cannot write the chart: {0}")]
    Output(#[source] std::io::Error),
}

pub fn run(args: &ChartArgs) -> ExitCode {
    let result = super::chat::open_store().map_err(ChartCommandError::from).and_then(|store| {
        let stdout = std::io::stdout();
        chart(args, &store, &mut stdout.lock())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("headroom: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The command with its store and output injected, for tests.
pub(crate) fn chart(args: &ChartArgs, store: &Store, out: &mut dyn Write) -> Result<(), ChartCommandError> {
    match &args.chart {
        ChartKind::Session { session, theme, out: file, width, height } => {
            let style = ChartStyle::popover((*theme).into()).with_size(*width, *height);
            let svg = block_on(session_chart_svg(store, session, &style))?;
            match file {
                Some(path) => {
                    write_file(path, &svg)?;
                    writeln!(out, "wrote {}", path.display()).map_err(ChartCommandError::Output)
                }
                None => out.write_all(svg.as_bytes()).map_err(ChartCommandError::Output),
            }
        }
    }
}

fn write_file(path: &Path, svg: &str) -> Result<(), ChartCommandError> {
    std::fs::write(path, svg).map_err(|source| ChartCommandError::WriteFile { path: path.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use headroom_core::chat::FinishReason;
    use headroom_core::pressure::PressureLevel;
    use headroom_store::{MessageStatus, Route, TurnOutcome, TurnStatsRecord};

    use super::*;
    use crate::cli::{Cli, Command};

    fn store(tag: &str) -> Store {
        let dir = std::env::temp_dir().join(format!("headroom-cli-chart-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        block_on(Store::open(&dir)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn parse(argv: &[&str]) -> ChartArgs {
        match Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).command {
            Some(Command::Chart(args)) => args,
            other => panic!("not a chart command: {other:?}"),
        }
    }

    fn answered_turn(store: &Store, context_tokens: i64) {
        let t =
            block_on(store.begin_turn("demo", "Go on", Some("demo"), Route::Local)).unwrap_or_else(|e| panic!("{e}"));
        let stats = TurnStatsRecord {
            model_id: "demo".into(),
            quantization: None,
            kv_dtype: "float16".into(),
            batch: 1,
            context_tokens,
            prompt_tokens: 12,
            reused_tokens: 0,
            generated_tokens: 16,
            ttft_ms: Some(30.0),
            prefill_tps: Some(400.0),
            decode_tps: Some(50.0 - context_tokens as f64 / 100.0),
            e2e_tps: Some(40.0),
            prefill_ms: 30.0,
            first_token_ms: Some(30.0),
            last_token_ms: Some(330.0),
            peak_memory_bytes: 1 << 28,
            pressure: PressureLevel::Normal,
            swap_delta_bytes: None,
            finish_reason: FinishReason::Length,
        };
        let outcome =
            TurnOutcome { content: "…".into(), status: MessageStatus::Complete, error: None, stats: Some(stats) };
        block_on(store.finish_turn(t.assistant_message_id, &outcome)).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn session_chart_to_stdout_and_to_a_file() {
        let s = store("out");
        for ctx in [0, 40, 90] {
            answered_turn(&s, ctx);
        }
        let mut out = Vec::new();
        chart(&parse(&["headroom", "chart", "session", "demo", "--theme", "dark"]), &s, &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        let svg = String::from_utf8_lossy(&out);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<circle").count(), 6, "three turns in two panels");
        assert!(svg.contains("fill=\"#28282A\""), "the dark background");

        let file = s.path().with_file_name("demo-chart.svg");
        let arg_file = file.display().to_string();
        let mut out = Vec::new();
        chart(&parse(&["headroom", "chart", "session", "demo", "--out", &arg_file]), &s, &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(String::from_utf8_lossy(&out), format!("wrote {}\n", file.display()));
        let written = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(written.matches("<circle").count(), 6);
        assert!(written.contains("fill=\"#FFFFFF\""), "light by default");
    }

    #[test]
    fn bad_sessions_themes_and_paths_are_clear_errors() {
        let s = store("errors");
        let err = chart(&parse(&["headroom", "chart", "session", "nope"]), &s, &mut Vec::new()).err();
        assert_eq!(err.map(|e| e.to_string()), Some("no session `nope`".into()));
        let err = Cli::try_parse_from(["headroom", "chart", "session", "x", "--theme", "sepia"]).err();
        assert!(err.map(|e| e.to_string()).unwrap_or_default().contains("invalid value 'sepia'"));
        answered_turn(&s, 0);
        let bad = s.path().with_file_name("no-such-dir").join("c.svg");
        let arg = bad.display().to_string();
        let err = chart(&parse(&["headroom", "chart", "session", "demo", "--out", &arg]), &s, &mut Vec::new()).err();
        assert!(err
            .map(|e| e.to_string())
            .unwrap_or_default()
            .starts_with(&format!("cannot write the chart to {arg}")));
        let err = chart(&parse(&["headroom", "chart", "session", "demo", "--width", "100"]), &s, &mut Vec::new()).err();
        assert!(err.map(|e| e.to_string()).unwrap_or_default().contains("too small"));
    }
}
