//! `headroom pull REPO`: the fit verdict from the repo's config.json and
//! safetensors headers (nothing else downloaded), a refusal if the model
//! would swap, then a resumable, verified download into the HF cache with
//! progress lines; Ctrl-C cancels and keeps what arrived for the next pull.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use headroom_core::fit::FitReport;
use headroom_core::kv::KvFormat;
use headroom_core::settings::KernelChoice;
use headroom_engine::worker::DEFAULT_CONTEXT_LIMIT;
use headroom_engine::QuantKernel;
use headroom_hub::{CancellationToken, Endpoint, HubError, PullEvent, RemoteModel};
use serde_json::json;

use super::fit::{budget_source, describe, gb, verdict_line, BudgetArgs};
use crate::models::HubEnv;
use crate::pull::{check_pull, PullPlan};

#[derive(Debug, Clone, Args)]
pub struct PullArgs {
    /// The model's repo id on the hub, e.g. mlx-community/Qwen2.5-7B-Instruct-4bit.
    pub repo: String,
    /// Branch, tag or commit to pull.
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// Context length in tokens the fit verdict is for.
    #[arg(long, default_value_t = DEFAULT_CONTEXT_LIMIT)]
    pub context: usize,
    #[command(flatten)]
    pub budget: BudgetArgs,
    /// Download even if the verdict says the model would swap or cannot fit.
    #[arg(long)]
    pub override_fit: bool,
    /// The hub to pull from [default: $HF_ENDPOINT, else https://huggingface.co].
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Print JSON lines: the fit check, then the download's events.
    #[arg(long)]
    pub json: bool,
}

/// What `pull` can fail with: the service's pull errors, and the terminal's.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The CLI says a refusal its own way (its flags are the remedies).
    #[error("{}", refusal(repo, report))]
    WouldNotFit { repo: String, report: Box<FitReport> },
    #[error(transparent)]
    Pull(crate::pull::PullError),
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
    #[error("cannot encode JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl From<crate::pull::PullError> for PullError {
    fn from(e: crate::pull::PullError) -> Self {
        match e {
            crate::pull::PullError::WouldNotFit { repo, report } => Self::WouldNotFit { repo, report },
            other => Self::Pull(other),
        }
    }
}

impl From<HubError> for PullError {
    fn from(e: HubError) -> Self {
        Self::Pull(e.into())
    }
}

/// Exit code of a pull cancelled by Ctrl-C (128 + SIGINT, as shells report it).
const CANCELLED: u8 = 130;

pub fn run(args: &PullArgs) -> ExitCode {
    // Repo names, titles and the hub's words reach the terminal only as text.
    match pull(args, &HubEnv::from_process(), &mut super::terminal::TerminalText(std::io::stdout().lock())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("headroom: {}", headroom_core::terminal::error_line(&e.to_string()));
            match e {
                PullError::Pull(crate::pull::PullError::Hub(HubError::Cancelled { .. })) => ExitCode::from(CANCELLED),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

fn pull(args: &PullArgs, env: &HubEnv, out: &mut dyn Write) -> Result<(), PullError> {
    let endpoint = match &args.endpoint {
        Some(e) => Endpoint::parse(e)?,
        None => Endpoint::from_env()?,
    };
    let plan = PullPlan {
        repo: &args.repo,
        revision: &args.revision,
        endpoint,
        hub: env,
        context: args.context,
        // As `generate` and the app would load it by default.
        kv: KvFormat::Float,
        kernel: QuantKernel::choose(KernelChoice::Auto),
        source: budget_source(&args.budget),
    };
    crate::runtime::block_on(async {
        let checked = check_pull(plan).await?;
        let (model, report) = (&checked.check.model, &checked.check.fit);
        if args.json {
            let line = json!({ "event": "fit", "model": model, "endpoint": checked.check.endpoint, "report": report });
            writeln!(out, "{line}")?;
        } else {
            write!(out, "{}", summary(model, report, &checked.cache))?;
        }
        out.flush()?;
        let cancel = CancellationToken::new();
        let on_ctrl_c = cancel.clone();
        crate::runtime::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_ctrl_c.cancel();
            }
        });
        let mut printer = Printer { json: args.json, last_line: None, failed: None };
        let result = checked.download(args.override_fit, &cancel, |e| printer.print(out, &e)).await;
        if let Some(e) = printer.failed {
            return Err(e.into());
        }
        let outcome = result?;
        if !args.json {
            writeln!(
                out,
                "pulled {} into {} ({} downloaded in {:.1} s); `headroom models` lists it now",
                model.repo,
                outcome.snapshot.display(),
                gb(outcome.downloaded_bytes),
                outcome.elapsed_secs
            )?;
        }
        Ok(())
    })
}

/// The lines shown before downloading: what the repo holds, then the verdict in full.
fn summary(model: &RemoteModel, report: &FitReport, cache: &std::path::Path) -> String {
    let quant = model.bits.map_or_else(|| "unquantized".to_owned(), |b| format!("{b}-bit"));
    let cached = if model.cached_bytes > 0 {
        format!(", {} already in the cache", gb(model.cached_bytes))
    } else {
        String::new()
    };
    format!(
        "{repo} at {rev} (commit {commit}): {arch} {quant}, {n} files, {total} to download{cached} into {cache}\n{fit}",
        repo = model.repo,
        rev = model.revision,
        commit = &model.commit[..model.commit.len().min(12)],
        arch = model.arch,
        n = model.files.len(),
        total = gb(model.total_bytes.saturating_sub(model.cached_bytes)),
        cache = cache.display(),
        fit = describe(&format!("{} (from its safetensors headers; nothing downloaded yet)", model.repo), report),
    )
}

/// The refusal, before a single weight byte is downloaded.
fn refusal(repo: &str, r: &FitReport) -> String {
    let e = &r.estimate;
    let largest = r.largest_context_that_fits.map_or_else(|| "none".to_owned(), |n| format!("{n} tokens"));
    format!(
        "refusing to download `{repo}`: it {verdict}. Predicted peak {peak} at {ctx} tokens vs budget {budget}; \
         largest context that fits: {largest}. Nothing was downloaded. Use a smaller --context, free memory, \
         or pass --override-fit to download anyway.",
        verdict = verdict_line(r),
        peak = gb(e.predicted_peak_bytes),
        ctx = e.context_tokens,
        budget = gb(r.budget.budget_bytes),
    )
}

/// Text progress at most once a second (a line per file besides); JSON: every event.
struct Printer {
    json: bool,
    last_line: Option<Instant>,
    /// A failed write (stdout closed): reported after the pull stops.
    failed: Option<std::io::Error>,
}

impl Printer {
    fn print(&mut self, out: &mut dyn Write, event: &PullEvent) {
        if self.failed.is_some() {
            return;
        }
        let line = if self.json { serde_json::to_string(event).ok() } else { self.text(event) };
        if let Some(line) = line {
            if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
                self.failed = Some(e);
            }
        }
    }

    fn text(&mut self, event: &PullEvent) -> Option<String> {
        match event {
            PullEvent::Progress { file, file_bytes, file_size, done_bytes, total_bytes, bytes_per_sec, eta_secs } => {
                let now = Instant::now();
                if self.last_line.is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
                    && file_bytes < file_size
                {
                    return None;
                }
                self.last_line = Some(now);
                let pct = if *total_bytes > 0 { *done_bytes as f64 * 100.0 / *total_bytes as f64 } else { 100.0 };
                let eta = eta_secs.map_or_else(|| "--".to_owned(), fmt_secs);
                Some(format!(
                    "{file}: {} / {}  total {} / {} ({pct:.0} %)  {:.1} MB/s  ETA {eta}",
                    gb(*file_bytes),
                    gb(*file_size),
                    gb(*done_bytes),
                    gb(*total_bytes),
                    bytes_per_sec / 1e6
                ))
            }
            PullEvent::Retrying { file, attempt, resume_from, reason } => {
                Some(format!("{file}: transfer broke off ({reason}); attempt {attempt} resumes at byte {resume_from}"))
            }
            PullEvent::FileDone { file, reused: true, .. } => Some(format!("{file}: already in the cache")),
            PullEvent::Started { .. } | PullEvent::FileDone { .. } | PullEvent::Finished { .. } => None,
        }
    }
}

fn fmt_secs(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    #[test]
    fn pull_parses_its_flags_and_refuses_a_bad_repo_id_before_any_request() {
        let cli = Cli::try_parse_from([
            "headroom",
            "pull",
            "org/m",
            "--context",
            "4096",
            "--override-fit",
            "--json",
            "--endpoint",
            "http://127.0.0.1:1",
        ])
        .unwrap();
        let Some(Command::Pull(args)) = cli.command else { panic!("not pull") };
        assert_eq!(
            (args.repo.as_str(), args.revision.as_str(), args.context, args.override_fit, args.json),
            ("org/m", "main", 4096, true, true)
        );
        let bad = PullArgs { repo: "not-a-repo".into(), ..args };
        let err = pull(&bad, &HubEnv::default(), &mut Vec::new()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("`not-a-repo` is not a Hugging Face repo id"), "{err}");
        assert_eq!(fmt_secs(59.4), "59s");
        assert_eq!(fmt_secs(3725.0), "1h02m");
    }
}
