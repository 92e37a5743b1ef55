//! The starter shelf as the app and the CLI both show it: real models people
//! run on 16–32 GB Macs (`headroom_core::shelf`), each with its fit verdict
//! on this Mac from the same fit code the picker uses, what fits first.
//! Pulling one is the ordinary pull (`commands::pull`, `cli::pull`), which
//! checks the fit again from the repo's real headers before downloading.
//!
//! The records are the repo's (`assets/shelf.json`) until [`refresh`] has
//! read a repo from the hub; its record is then kept in the data folder
//! (`shelf/<org>__<name>.json`) and wins over the recorded one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use headroom_core::fit::{check_with, BudgetInputs, FitReport, Verdict, GIB, MIN_CONTEXT};
use headroom_core::format::LoadShape;
use headroom_core::kv::KvFormat;
use headroom_core::remedies::{remedies, Remedy};
use headroom_core::shelf::{self, ShelfError, ShelfModel, ShelfRecord};
use headroom_engine::ComputeDtype;
use headroom_hub::{inspect, HfToken, HubClient, HubError, RepoId};
use serde::Serialize;

use crate::codes::{Coded, ErrorCode};
use crate::state::AppState;

/// The folder under the app's data folder that holds refreshed records.
pub const SHELF_DIR: &str = "shelf";

/// Where a shelf entry's facts come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ShelfSource {
    /// Recorded in the app (`assets/shelf.json`) on this day.
    Recorded { on: String },
    /// Read from the hub by [`refresh`].
    Hub { commit: String },
}

/// One row of the shelf.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct ShelfEntry {
    pub repo: String,
    pub name: String,
    pub about: String,
    pub license: String,
    /// The repo asks for its terms to be accepted: a Hugging Face token is needed.
    pub gated: bool,
    /// HF `model_type`.
    pub arch: String,
    pub bits: Option<u32>,
    /// "4-bit, group 64".
    pub quantization: Option<String>,
    /// Bytes a pull downloads, when known.
    pub download_bytes: Option<u64>,
    /// Weight bytes as the engine would hold them.
    pub weight_bytes: u64,
    /// Already in the model list (the HF cache or the app's models folder).
    pub installed: bool,
    /// The verdict at the app's context limit; `None` when this Mac's memory could not be read.
    pub fit: Option<FitReport>,
    /// What would make it fit (a shorter context, a quantized KV cache) when `fit` refuses.
    pub remedies: Vec<Remedy>,
    /// Why it does not fit, in one sentence; `None` when it fits.
    pub why: Option<String>,
    pub source: ShelfSource,
}

#[derive(Debug, thiserror::Error)]
pub enum ShelfServiceError {
    #[error("a starter shelf record cannot be read: {0}")]
    Record(#[from] ShelfError),
    #[error("{repo} could not be read from the hub: {source}")]
    Hub {
        repo: String,
        // Boxed: a hub error is large, and every shelf result carries this enum.
        #[source]
        source: Box<HubError>,
    },
    #[error("the shelf record for {repo} could not be written to {}: {source}", path.display())]
    Write {
        repo: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What the shelf's verdicts are computed against.
#[derive(Debug, Clone, Copy)]
pub struct ShelfFit {
    pub shape: LoadShape,
    pub kv: KvFormat,
    pub context: u64,
    /// `None`: no budget (memory unreadable); the entries carry no verdict.
    pub inputs: Option<BudgetInputs>,
}

/// The shelf's models: each recorded one, or its refreshed record from
/// `data_dir` where one was written and still reads.
pub fn models(data_dir: &Path) -> Result<Vec<(ShelfModel, ShelfSource)>, ShelfServiceError> {
    let recorded = shelf::parse_shelf(shelf::RECORDED)?;
    let mut out = Vec::with_capacity(recorded.models.len());
    for record in recorded.models {
        let refreshed = std::fs::read_to_string(record_path(data_dir, &record.repo))
            .ok()
            .and_then(|text| shelf::parse_record(&text).ok())
            .filter(|r| r.repo == record.repo)
            .and_then(|r| {
                let commit = r.source.strip_prefix("hub ").unwrap_or(&r.source).to_owned();
                r.check().ok().map(|m| (m, ShelfSource::Hub { commit }))
            });
        match refreshed {
            Some(found) => out.push(found),
            None => out.push((record.check()?, ShelfSource::Recorded { on: recorded.recorded_on.clone() })),
        }
    }
    Ok(out)
}

/// The shelf with a verdict for each model, what fits first (then tight,
/// then what would swap, then what cannot fit), smaller before larger
/// within each; `installed` lists the ids already in the model list.
pub fn entries(data_dir: &Path, installed: &[String], fit: ShelfFit) -> Result<Vec<ShelfEntry>, ShelfServiceError> {
    let mut list: Vec<ShelfEntry> = models(data_dir)?
        .into_iter()
        .map(|(model, source)| {
            let footprint = model.footprint(fit.shape);
            let report = fit.inputs.map(|inputs| check_with(&footprint, fit.context, fit.kv, inputs, &[]));
            let quant = model.config.quantization.as_ref().map(|q| q.default);
            ShelfEntry {
                installed: installed.iter().any(|id| id == &model.record.repo),
                arch: model.config.model_type_name().to_owned(),
                bits: quant.and_then(|q| u32::try_from(q.bits).ok()),
                quantization: quant.map(|q| q.label()),
                weight_bytes: footprint.weight_bytes,
                remedies: report.as_ref().map(|r| remedies(r, fit.kv, 0, &[])).unwrap_or_default(),
                why: report.as_ref().and_then(why),
                fit: report,
                source,
                repo: model.record.repo,
                name: model.record.name,
                about: model.record.about,
                license: model.record.license,
                gated: model.record.gated,
                download_bytes: model.record.download_bytes,
            }
        })
        .collect();
    list.sort_by_key(|e| (e.fit.as_ref().map_or(4, |r| rank(r.verdict)), e.weight_bytes));
    Ok(list)
}

fn rank(v: Verdict) -> u8 {
    match v {
        Verdict::Fits => 0,
        Verdict::Tight => 1,
        Verdict::WouldSwap { .. } => 2,
        Verdict::CannotFit { .. } => 3,
    }
}

fn gb(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / GIB as f64)
}

/// Why a model does not fit, with its numbers; `None` when it fits. (The
/// row already says what it needs; this says by how much that is too much,
/// and what would fit.)
pub fn why(r: &FitReport) -> Option<String> {
    let (budget, context) = (gb(r.budget.budget_bytes), r.estimate.context_tokens);
    match r.verdict {
        Verdict::Fits | Verdict::Tight => None,
        Verdict::WouldSwap { by_bytes } => Some(match r.largest_context_that_fits {
            Some(n) => format!(
                "{} over this Mac's {budget} budget at {context} tokens; fits with up to {n} tokens",
                gb(by_bytes)
            ),
            None => format!("{} over this Mac's {budget} budget at {context} tokens", gb(by_bytes)),
        }),
        Verdict::CannotFit { by_bytes } => Some(format!(
            "{} over this Mac's {budget} budget even at the shortest context ({MIN_CONTEXT} tokens)",
            gb(by_bytes)
        )),
    }
}

fn record_path(data_dir: &Path, repo: &str) -> PathBuf {
    data_dir.join(SHELF_DIR).join(format!("{}.json", repo.replace('/', "__")))
}

/// How long a record read from the hub stands before the app's own refresh
/// reads it again (`headroom shelf --refresh` always does).
pub const FRESH_FOR: Duration = Duration::from_secs(7 * 24 * 3600);

/// What [`refresh`] did with one repo.
#[derive(Debug)]
pub enum Refreshed {
    /// Read from the hub at this commit, and kept.
    Read { commit: String },
    /// Its kept record is younger than `fresh_for`: not asked.
    StillFresh,
    /// The hub could not give it (offline, gated without a token): its older record stays.
    Failed(ShelfServiceError),
}

/// Reads every shelf repo's config.json and weight headers from the hub
/// (nothing else is downloaded) and keeps each as the repo's record in
/// `data_dir`, so the verdicts follow the repos as they change; a repo
/// whose kept record is younger than `fresh_for` is skipped. One repo
/// failing keeps its older record; the others still refresh.
pub async fn refresh(
    client: &HubClient,
    token: Option<&HfToken>,
    data_dir: &Path,
    cache_root: &Path,
    fresh_for: Option<Duration>,
) -> Result<Vec<(String, Refreshed)>, ShelfServiceError> {
    let recorded = shelf::parse_shelf(shelf::RECORDED)?;
    let mut outcomes = Vec::with_capacity(recorded.models.len());
    for record in recorded.models {
        let repo = record.repo.clone();
        let age = std::fs::metadata(record_path(data_dir, &repo))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        let outcome = if fresh_for.zip(age).is_some_and(|(fresh, age)| age < fresh) {
            Refreshed::StillFresh
        } else {
            match refresh_one(client, token, data_dir, cache_root, record).await {
                Ok(commit) => Refreshed::Read { commit },
                Err(e) => Refreshed::Failed(e),
            }
        };
        outcomes.push((repo, outcome));
    }
    Ok(outcomes)
}

/// Reads one repo anonymously: the user's token goes to the hub only for a
/// repo the record calls gated, and only after the hub refused the
/// anonymous read (401/403), so a refresh of public repos says nothing of
/// who is asking.
async fn refresh_one(
    client: &HubClient,
    token: Option<&HfToken>,
    data_dir: &Path,
    cache_root: &Path,
    record: ShelfRecord,
) -> Result<String, ShelfServiceError> {
    let hub = |source| ShelfServiceError::Hub { repo: record.repo.clone(), source: Box::new(source) };
    let id = RepoId::parse(&record.repo).map_err(hub)?;
    let anonymous = client.clone().with_token(None);
    // The shape does not matter here: the record keeps dtypes and shapes, not the footprint.
    let remote = match inspect(&anonymous, &id, "main", cache_root, LoadShape::default()).await {
        Err(HubError::Gated { .. }) if record.gated && token.is_some() => {
            let signed = client.clone().with_token(token.cloned());
            inspect(&signed, &id, "main", cache_root, LoadShape::default()).await
        }
        other => other,
    }
    .map_err(hub)?;
    let tensors = remote
        .headers
        .iter()
        .flat_map(|h| h.tensors.iter())
        .map(|(name, t)| (name.clone(), t.dtype.as_str().to_owned(), t.shape.clone()))
        .collect();
    let config = serde_json::from_slice(&remote.config_bytes)
        .map_err(|e| ShelfError::Json { reason: format!("{}: config.json: {e}", record.repo) })?;
    let fresh = ShelfRecord {
        download_bytes: Some(remote.total_bytes),
        hub_files_gb: None,
        source: format!("hub {}", remote.commit),
        config,
        layers: 0,
        tensors,
        ..record
    };
    // A record that would not read back is not kept (the recorded one stays).
    fresh.clone().check()?;
    let path = record_path(data_dir, &fresh.repo);
    let write = |source| ShelfServiceError::Write { repo: fresh.repo.clone(), path: path.clone(), source };
    let text = serde_json::to_string(&fresh).map_err(|e| write(std::io::Error::other(e)))?;
    std::fs::create_dir_all(data_dir.join(SHELF_DIR)).map_err(write)?;
    // Written aside and renamed: a reader never sees half a record.
    let partial = path.with_extension("json.partial");
    std::fs::write(&partial, text).map_err(write)?;
    std::fs::rename(&partial, &path).map_err(write)?;
    Ok(remote.commit)
}

/// The shelf against the app's settings (kernel, KV format, context limit)
/// and the budget the picker uses now (what unloading the loaded model frees included).
pub fn for_app(state: &AppState) -> Result<Vec<ShelfEntry>, ShelfServiceError> {
    let kernel = state.quant_kernel();
    let installed: Vec<String> = crate::models::list_models(&state.locations.data_dir, &state.locations.hub, kernel)
        .into_iter()
        .map(|m| m.id)
        .collect();
    let inputs = crate::models::budget_source(state).ok().and_then(|s| crate::fit::budget_inputs(s).ok());
    let fit = ShelfFit {
        shape: headroom_engine::load_shape(ComputeDtype::Native, kernel),
        kv: state.kv_format(),
        context: u64::try_from(state.context_limit()).unwrap_or(u64::MAX),
        inputs,
    };
    entries(&state.locations.data_dir, &installed, fit)
}
impl Coded for ShelfServiceError {
    fn code(&self) -> ErrorCode {
        use ShelfServiceError as E;
        match self {
            // The hub's own errors keep their codes (offline, gated, not found).
            E::Hub { source, .. } => source.code(),
            E::Record(_) => ErrorCode::ShelfRecord,
            E::Write { .. } => ErrorCode::Io,
        }
    }

    fn message(&self) -> String {
        match self {
            ShelfServiceError::Hub { source, repo } => format!("{repo}: {}", source.message()),
            _ => self.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use headroom_hub::testserver::TestHub;
    use headroom_hub::{Endpoint, HfToken, HubClient};

    use super::*;

    /// A shelf record whose repo is gated: the refresh asks anonymously
    /// first, sends the token only after the hub's 401, and reads config,
    /// index and safetensors headers by range, not the weights.
    #[test]
    fn a_gated_repo_gets_the_token_only_after_a_401_and_only_the_header_bytes_are_read() {
        let root = headroom_test_support::scratch("shelf-gated");
        let source = root.join("source");
        headroom_engine::demo::write_demo_model(
            &source,
            &headroom_engine::demo::DemoSpec::new(
                headroom_engine::demo::Arch::Qwen2,
                headroom_engine::demo::Preset::Tiny,
                headroom_engine::demo::Bits::Four,
            ),
        )
        .unwrap();
        let repo = "mlx-community/Gated-Tiny-4bit";
        let token = "hf_gated_shelf_token";
        let hub = TestHub::start().unwrap();
        hub.add_gated_repo(repo, &source, token).unwrap();
        let record = ShelfRecord {
            repo: repo.into(),
            gated: true,
            ..shelf::parse_shelf(shelf::RECORDED).unwrap().models.remove(0)
        };
        let client = HubClient::new(Endpoint::parse(&hub.endpoint()).unwrap()).unwrap();
        let token = HfToken::new(token).unwrap();
        let data_dir = root.join("data");
        let commit =
            crate::runtime::block_on(refresh_one(&client, Some(&token), &data_dir, &root.join("hf"), record)).unwrap();
        assert!(!commit.is_empty());

        let log = hub.log();
        let first_signed = log.iter().position(|r| r.authorization.is_some()).expect("the token was needed");
        // Everything before the first signed request went anonymously, and
        // the hub refused a file to it (the 401 that asks for the token).
        assert!(log[..first_signed].iter().any(|r| r.path.contains("/resolve/")), "{log:?}");
        assert!(log.iter().all(|r| r.authorization.as_deref().is_none_or(|a| a == "Bearer hf_gated_shelf_token")));
        // Weight files are read by range only (the 8-byte length, then the header).
        let weights: Vec<_> = log.iter().filter(|r| r.path.ends_with(".safetensors") && r.method == "GET").collect();
        assert!(!weights.is_empty() && weights.iter().all(|r| r.range.is_some()), "{weights:?}");
        // What the verdict needs of each weight file: its 8-byte length and
        // the header that length names; the ranges asked for are exactly that.
        let (mut on_disk, mut needed) = (0u64, 0u64);
        for entry in std::fs::read_dir(&source).unwrap().flatten() {
            if entry.path().extension().is_some_and(|x| x == "safetensors") {
                let bytes = std::fs::read(entry.path()).unwrap();
                on_disk += bytes.len() as u64;
                needed += 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap());
            }
        }
        let span = |r: &str| {
            let (a, b) = r.strip_prefix("bytes=").and_then(|r| r.split_once('-')).unwrap();
            b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() + 1
        };
        let asked: u64 =
            weights.iter().filter(|r| r.authorization.is_some()).map(|r| span(r.range.as_deref().unwrap())).sum();
        assert_eq!(asked, needed, "{weights:?}");
        // Everything the stub sent (listing, config, headers, the 401s): a
        // fraction of the weights even for this tiny model.
        let sent = hub.bytes_sent();
        assert!(sent * 5 < on_disk, "the refresh read {sent} bytes of a repo whose weights are {on_disk}");
        eprintln!("gated shelf refresh: {} requests, {sent} bytes sent, weights {on_disk} bytes", log.len());
        assert!(models(&data_dir).is_ok());
    }
}
