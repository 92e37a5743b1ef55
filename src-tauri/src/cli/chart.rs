//! `headroom chart session ID`: a stored session's speed chart (decode tok/s
//! and TTFT per turn against context) as SVG, to stdout or a file.
//! `headroom chart live [--minutes N]`: the live graph of the last minutes
//! from the store's timeline, as the popover draws it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use headroom_charts::{ChartStyle, Theme};
use headroom_store::Store;

use super::CliError;
use crate::commands::charts::{session_chart_svg, SessionChartError};
use crate::live::{LiveChartError, ViewRequest};
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
        #[command(flatten)]
        output: ChartOutput,
    },
    /// Memory used against the budget, the pressure level, swap and the
    /// decode tok/s of answers over the last minutes, with stretches slowed
    /// by memory marked: the popover's live graph, from the stored timeline.
    Live {
        /// How many minutes back (the store keeps a week).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=10_080))]
        minutes: u32,
        #[command(flatten)]
        output: ChartOutput,
    },
}

/// Where and how a chart is written.
#[derive(Debug, Clone, Args)]
pub struct ChartOutput {
    #[arg(long, value_enum, default_value_t)]
    theme: ThemeArg,
    /// Write the SVG here instead of to stdout.
    #[arg(long, value_name = "FILE.svg")]
    out: Option<PathBuf>,
    /// Width in px (the popover's is 400).
    #[arg(long, default_value_t = ChartStyle::POPOVER_WIDTH)]
    width: u32,
    /// Height in px (the session chart's default is 300, the live graph's 200).
    #[arg(long)]
    height: Option<u32>,
}

impl ChartOutput {
    /// The style of a chart whose popover size is `popover`.
    fn style(&self, popover: ChartStyle) -> ChartStyle {
        ChartStyle { theme: self.theme.into(), ..popover }.with_size(self.width, self.height.unwrap_or(popover.height))
    }
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
    #[error(transparent)]
    Live(#[from] LiveChartError),
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
            eprintln!("headroom: {}", headroom_core::terminal::error_line(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

/// The command with its store and output injected, for tests.
pub(crate) fn chart(args: &ChartArgs, store: &Store, out: &mut dyn Write) -> Result<(), ChartCommandError> {
    chart_at(args, store, crate::live::unix_ms(), out)
}

/// [`chart`] with "now" injected, so a test draws a known window.
pub(crate) fn chart_at(
    args: &ChartArgs,
    store: &Store,
    now_ms: u64,
    out: &mut dyn Write,
) -> Result<(), ChartCommandError> {
    let (svg, output) = match &args.chart {
        ChartKind::Session { session, output } => {
            let style = output.style(ChartStyle::popover(Theme::Light));
            (block_on(session_chart_svg(store, session, &style))?, output)
        }
        ChartKind::Live { minutes, output } => {
            let settings = block_on(store.settings()).map_err(LiveChartError::from)?;
            let req = ViewRequest {
                now_ms,
                window_ms: u64::from(*minutes) * 60_000,
                // No sampler here: everything comes from the store.
                recent_memory: &[],
                os_headroom_bytes: (settings.os_headroom_gb * headroom_core::fit::GIB as f64) as u64,
                style: output.style(ChartStyle::live(Theme::Light)),
            };
            // A fresh live state: this process has measured nothing itself.
            (block_on(crate::live::view(store, &crate::live::Live::new(), &req))?.svg, output)
        }
    };
    match &output.out {
        Some(path) => {
            write_file(path, &svg)?;
            writeln!(out, "wrote {}", path.display()).map_err(ChartCommandError::Output)
        }
        None => out.write_all(svg.as_bytes()).map_err(ChartCommandError::Output),
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
    use headroom_test_support::{fresh_store, FreshStore};

    fn store(tag: &str) -> FreshStore {
        block_on(fresh_store(&format!("cli-chart-{tag}")))
    }

    fn parse(argv: &[&str]) -> ChartArgs {
        match Cli::try_parse_from(argv).unwrap().command {
            Some(Command::Chart(args)) => args,
            other => panic!("not a chart command: {other:?}"),
        }
    }

    fn answered_turn(store: &Store, context_tokens: i64) {
        let t = block_on(store.begin_turn("demo", "Go on", Some("demo"), Route::Local)).unwrap();
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
            quant_kernel: None,
            slowdown: None,
            speculation: None,
            two_macs: None,
        };
        let outcome =
            TurnOutcome { content: "…".into(), status: MessageStatus::Complete, error: None, stats: Some(stats) };
        block_on(store.finish_turn(t.assistant_message_id, &outcome)).unwrap();
    }

    #[test]
    fn session_chart_to_stdout_and_to_a_file() {
        let s = store("out");
        for ctx in [0, 40, 90] {
            answered_turn(&s, ctx);
        }
        let mut out = Vec::new();
        chart(&parse(&["headroom", "chart", "session", "demo", "--theme", "dark"]), &s, &mut out).unwrap();
        let svg = String::from_utf8_lossy(&out);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<circle").count(), 6, "three turns in two panels");
        assert!(svg.contains("fill=\"#28282A\""), "the dark background");

        let file = s.path().with_file_name("demo-chart.svg");
        let arg_file = file.display().to_string();
        let mut out = Vec::new();
        chart(&parse(&["headroom", "chart", "session", "demo", "--out", &arg_file]), &s, &mut out).unwrap();
        assert_eq!(String::from_utf8_lossy(&out), format!("wrote {}\n", file.display()));
        let written = std::fs::read_to_string(&file).unwrap();
        assert_eq!(written.matches("<circle").count(), 6);
        assert!(written.contains("fill=\"#FFFFFF\""), "light by default");
    }

    #[test]
    fn live_chart_from_the_store() {
        use headroom_core::slowdown::RatePoint;
        use headroom_core::timeline::MemoryPoint;
        let s = store("live");
        let now = 1_800_000_000_000u64;
        let gib = 1u64 << 30;
        for k in 0..20u64 {
            let p = MemoryPoint {
                at_ms: now - 200_000 + k * 10_000,
                span_ms: 10_000,
                total_bytes: 24 * gib,
                available_bytes: 16 * gib,
                used_bytes: 8 * gib,
                swap_total_bytes: 0,
                swap_used_bytes: 0,
                process_rss_bytes: gib,
                pressure: PressureLevel::Normal,
            };
            block_on(s.record_memory(&p)).unwrap();
        }
        let rates: Vec<RatePoint> = (0..5u64)
            .filter_map(|k| RatePoint::from_ms(now - 60_000 + k * 1000, now - 59_000 + k * 1000, 30))
            .collect();
        let rows: Vec<headroom_store::RateRow<'_>> =
            rates.iter().map(|&point| headroom_store::RateRow { model_id: "demo", point, slowed: false }).collect();
        block_on(s.record_rates(&rows)).unwrap();

        let mut out = Vec::new();
        chart_at(&parse(&["headroom", "chart", "live", "--theme", "dark"]), &s, now, &mut out).unwrap();
        let svg = String::from_utf8_lossy(&out);
        assert!(svg.starts_with("<svg") && svg.contains(r#"height="200""#), "{svg}");
        assert!(svg.contains(r#"data-series="memory-used" data-points="20""#), "{svg}");
        assert!(svg.contains(r#"data-series="tps" data-points="5""#));
        // Budget: 24 GB less the default OS headroom of 4 GB.
        assert!(svg.contains(&format!(r#"data-series="budget" data-bytes="{}""#, 20 * gib)));
        // Thirty seconds later, one minute back: the three rows reaching into it, no rate (55–60 s older).
        let mut out = Vec::new();
        chart_at(&parse(&["headroom", "chart", "live", "--minutes", "1"]), &s, now + 30_000, &mut out).unwrap();
        let svg = String::from_utf8_lossy(&out);
        assert!(svg.contains(r#"data-series="tps" data-points="0""#), "older than the window");
        assert!(svg.contains(r#"data-series="memory-used" data-points="3""#), "{svg}");
        assert!(Cli::try_parse_from(["headroom", "chart", "live", "--minutes", "0"]).is_err());
        assert!(Cli::try_parse_from(["headroom", "chart", "live", "--minutes", "20000"]).is_err());
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
