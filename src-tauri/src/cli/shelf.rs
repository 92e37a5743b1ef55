//! `headroom shelf`: the starter shelf (real models people run on 16–32 GB
//! Macs) with each one's fit verdict on this Mac, what fits first, before
//! anything is downloaded; `--refresh` reads their records from the hub
//! first. `headroom pull REPO` gets one.

use std::io::Write;
use std::path::Path;

use clap::Args;
use headroom_core::fit::Verdict;
use headroom_engine::worker::DEFAULT_CONTEXT_LIMIT;
use headroom_engine::ComputeDtype;
use headroom_hub::{Endpoint, HubClient};

use super::fit::{budget_source, gb, verdict_line, BudgetArgs};
use super::kernel::KernelArgs;
use super::terminal::TerminalText;
use super::CliError;
use crate::models::{list_models, HubEnv};
use crate::shelf::{entries, refresh, Refreshed, ShelfEntry, ShelfFit, ShelfSource};
use crate::Locations;

#[derive(Debug, Clone, Args)]
pub struct ShelfArgs {
    #[command(flatten)]
    pub budget: BudgetArgs,
    #[command(flatten)]
    pub kernel: KernelArgs,
    /// Judge each model at this many tokens of context.
    #[arg(long, default_value_t = DEFAULT_CONTEXT_LIMIT)]
    pub context: usize,
    /// First read each model's config.json and weight headers from the hub
    /// ($HF_ENDPOINT; nothing else is downloaded) and keep them as its record.
    #[arg(long)]
    pub refresh: bool,
    /// Print one JSON array (each model with its whole fit report).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &ShelfArgs) -> Result<(), CliError> {
    let locations = Locations::from_env(|| crate::platform_app_data_dir().ok_or(CliError::NoDataDir))?;
    let stdout = std::io::stdout();
    if args.refresh {
        refresh_records(&locations.data_dir, &locations.hub, &mut TerminalText(std::io::stderr()))?;
    }
    // Records read from the hub reach the terminal only as text.
    shelf(args, &locations.data_dir, &locations.hub, &mut TerminalText(stdout.lock()))
}

/// Reads the records from the hub; a repo that fails keeps its older record
/// and is named on `err`.
pub(crate) fn refresh_records(data_dir: &Path, env: &HubEnv, err: &mut dyn Write) -> Result<(), CliError> {
    let cache = env.hub_dirs().into_iter().next().ok_or(CliError::NoHubCache)?;
    // Anonymous reads; the token only for a gated repo that refused one.
    let client = HubClient::new(Endpoint::from_env()?)?;
    let token = headroom_hub::HfToken::from_env()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(CliError::Runtime)?;
    for (repo, outcome) in runtime.block_on(refresh(&client, token.as_ref(), data_dir, &cache, None))? {
        match outcome {
            Refreshed::Read { commit } => {
                writeln!(err, "refreshed {repo} from the hub (commit {})", &commit[..commit.len().min(12)])?;
            }
            Refreshed::Failed(e) => writeln!(err, "kept the older record of {repo}: {e}")?,
            // Not asked for (no freshness limit here); listed for completeness.
            Refreshed::StillFresh => writeln!(err, "{repo}: its record is fresh")?,
        }
    }
    Ok(())
}

pub(crate) fn shelf(args: &ShelfArgs, data_dir: &Path, env: &HubEnv, out: &mut dyn Write) -> Result<(), CliError> {
    let mut source = budget_source(&args.budget);
    if source.available_bytes.is_none() {
        source.available_bytes = Some(headroom_memory::read()?.available);
    }
    let kernel = args.kernel.quant_kernel();
    let installed: Vec<String> = list_models(data_dir, env, kernel).into_iter().map(|m| m.id).collect();
    let fit = ShelfFit {
        shape: headroom_engine::load_shape(ComputeDtype::Native, kernel),
        kv: headroom_core::kv::KvFormat::Float,
        context: u64::try_from(args.context).unwrap_or(u64::MAX),
        inputs: Some(crate::fit::budget_inputs(source)?),
    };
    let list = entries(data_dir, &installed, fit)?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&list)?)?;
    } else {
        write!(out, "{}", table(&list, args.context))?;
    }
    Ok(())
}

fn table(list: &[ShelfEntry], context: usize) -> String {
    let budget = list.iter().find_map(|e| e.fit.as_ref()).map(|f| gb(f.budget.budget_bytes));
    let mut text = format!(
        "the starter shelf at {context} tokens of context{}; `headroom pull REPO` gets one\n",
        budget.map_or_else(String::new, |b| format!(", against this Mac's budget of {b}"))
    );
    let rows: Vec<[String; 5]> = list
        .iter()
        .map(|e| {
            let mark = if e.installed {
                " (installed)"
            } else if e.gated {
                " (gated)"
            } else {
                ""
            };
            [
                format!("{}{mark}", e.repo),
                // Unknown until refreshed: the weights are nearly all of it.
                e.download_bytes.map_or_else(|| format!("~{}", gb(e.weight_bytes)), gb),
                gb(e.weight_bytes),
                e.fit.as_ref().map_or_else(|| "?".into(), |f| gb(f.estimate.predicted_peak_bytes)),
                e.fit.as_ref().map_or_else(|| "unknown".into(), verdict_line),
            ]
        })
        .collect();
    let header = ["REPO", "DOWNLOAD", "WEIGHTS", "PEAK", "VERDICT"];
    let mut lines = super::table::lines(header, &rows, |i| i > 0).into_iter();
    text.extend(lines.next());
    for (line, e) in lines.zip(list) {
        text.push_str(&line);
        // The verdict column already says all a model that cannot fit has to say.
        let cannot_fit = e.fit.as_ref().is_some_and(|f| matches!(f.verdict, Verdict::CannotFit { .. }));
        if let (Some(why), false) = (&e.why, cannot_fit) {
            text.push_str(&format!("    {why}\n"));
        }
    }
    if let Some(ShelfSource::Recorded { on }) = list.first().map(|e| &e.source) {
        text.push_str(&format!("sizes as recorded on {on}; `headroom shelf --refresh` reads them from the hub\n"));
    }
    text
}
