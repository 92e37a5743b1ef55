//! The lender's copy of a placed model: found among this Mac's own models
//! by its identity (`headroom_engine::peer::copy`), or pulled from the hub
//! when the host's copy is a hub snapshot and this Mac has none, through
//! the same fit-checked pull as `headroom pull`, the check being this
//! Mac's share of the model rather than all of it. A lender pulls only
//! when it was lent with pulls allowed (`lend --allow-pulls`), and only the
//! files its share needs (the hub's own list for the model at that commit).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use headroom_core::fit::BudgetInputs;
use headroom_engine::peer::copy::identity;
use headroom_engine::peer::protocol::Conn;
use headroom_engine::peer::{ModelCopy, Placement, Reply};
use headroom_engine::{ComputeDtype, QuantKernel};
use headroom_hub::{download, inspect, CancellationToken, Endpoint, HubClient, PullEvent, RepoId};

use super::LendError;
use headroom_core::format::hf_cache::HubEnv;

/// How often a pulling lender tells the host how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// Where a lender keeps the models it lends: folders of models (its data
/// folder's `models/`, the bundled default model's, and any `lend --models`
/// names) and its hub caches. A lender reads nothing outside them, whatever
/// path a host names.
#[derive(Debug, Clone, Default)]
pub struct Shelves {
    pub folders: Vec<PathBuf>,
    pub hubs: Vec<PathBuf>,
}

impl Shelves {
    /// This Mac's: `data_dir`'s models, the bundled model's folder, `extra`, the hub caches.
    pub fn here(data_dir: &Path, extra: &[PathBuf]) -> Self {
        let mut folders = vec![data_dir.join(crate::locations::MODELS_DIR)];
        folders.extend(crate::default_model::bundled().and_then(|f| f.parent().map(Path::to_owned)));
        folders.extend(extra.iter().cloned());
        Self { folders, hubs: HubEnv::from_process().hub_dirs() }
    }

    /// Whether `path` lies on one of the shelves (links resolved).
    fn holds(&self, path: &Path) -> bool {
        let Ok(path) = path.canonicalize() else { return false };
        self.folders.iter().chain(&self.hubs).filter_map(|f| f.canonicalize().ok()).any(|f| path.starts_with(f))
    }

    /// The places a copy of `model` may be, likeliest first: the host's own
    /// path where it is on a shelf here (the same user and layout on both
    /// Macs), the same repo and commit in a hub cache, the same name on a
    /// folder shelf; then every other model on the shelves (a copy under
    /// another name, or the folder around a GGUF file).
    fn places(&self, model: &ModelCopy) -> Vec<PathBuf> {
        let mut places = Vec::new();
        if self.holds(&model.path) {
            places.push(model.path.clone());
        }
        places.extend(self.hubs.iter().filter_map(|hub| model.in_hub_cache(hub)));
        if let Some(name) = model.path.file_name() {
            places.extend(self.folders.iter().map(|f| f.join(name)));
        }
        for folder in &self.folders {
            for entry in entries(folder) {
                places.extend(entries(&entry).into_iter().filter(|p| is_gguf(p)));
                places.push(entry);
            }
        }
        for hub in &self.hubs {
            for repo in entries(hub) {
                for snapshot in entries(&repo.join("snapshots")) {
                    places.extend(entries(&snapshot).into_iter().filter(|p| is_gguf(p)));
                    places.push(snapshot);
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        places.retain(|p| p.exists() && seen.insert(p.clone()));
        places
    }
}

/// A folder's entries (none for one that cannot be read), sorted.
fn entries(folder: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(folder).into_iter().flatten().flatten().map(|e| e.path()).collect();
    found.sort();
    found
}

fn is_gguf(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case(headroom_engine::source::GGUF_EXTENSION))
}

/// Where this Mac's copy of a placed model is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Here, with the host's identity.
    Here(PathBuf),
    /// Not here; the host's is a hub snapshot, so it can be pulled.
    Pull,
}

/// This Mac's copy of `model` (one with its identity) on `shelves`, or the
/// pull that brings one. Refused, saying where it looked, when there is
/// none and nothing to pull it from.
pub fn find(model: &ModelCopy, shelves: &Shelves) -> Result<Found, String> {
    let mut other = None;
    for place in shelves.places(model) {
        match identity(&place) {
            Ok(id) if id == model.identity => return Ok(Found::Here(place)),
            // Another model of the same name: said in the refusal, if nothing matches.
            Ok(_) if place.file_name() == model.path.file_name() => other = other.or(Some(place)),
            Ok(_) => {}
            Err(e) => tracing::info!("not the placed model: {}: {e}", place.display()),
        }
    }
    if model.repo.is_some() && model.commit.is_some() {
        return Ok(Found::Pull);
    }
    let name =
        model.path.file_name().map_or_else(|| model.path.display().to_string(), |n| n.to_string_lossy().into_owned());
    Err(match other {
        Some(place) => format!(
            "this Mac's copy of {name} at {} holds other weights than the host's (another revision, quantization or fine-tune), and the host's is not from the hub, so it cannot be pulled here",
            place.display()
        ),
        None => {
            let looked: Vec<String> = shelves.folders.iter().chain(&shelves.hubs).map(|p| p.display().to_string()).collect();
            format!(
                "this Mac has no copy of {name} (looked in {}), and the host's is not from the hub, so it cannot be pulled here: copy the model into one of those folders, or lend with --models FOLDER",
                looked.join(", ")
            )
        }
    })
}

/// Pulls the placed model into this Mac's first hub cache, after checking
/// from the repo's headers alone that this Mac's share fits `budget`;
/// tells the host how far it got every [`PROGRESS_EVERY`]. Returns the
/// copy's path. A host that hangs up ends the pull (what arrived is kept
/// for the next one, as `headroom pull` keeps it).
pub(super) fn pull(p: &Placement, budget: BudgetInputs, control: &mut Conn) -> Result<PathBuf, LendError> {
    let (Some(repo), Some(commit)) = (&p.model.repo, &p.model.commit) else {
        return Err(LendError::Refused("the host's copy is not from the hub".into()));
    };
    let hub = |source: headroom_hub::HubError| LendError::Pull { repo: repo.clone(), source: Box::new(source) };
    let repo_id = RepoId::parse(repo).map_err(hub)?;
    let cache = HubEnv::from_process().hub_dirs().into_iter().next().ok_or(LendError::NoHubCache)?;
    let client = HubClient::from_env(Endpoint::from_env().map_err(hub)?).map_err(hub)?;
    let dtype = if p.f32 { ComputeDtype::F32 } else { ComputeDtype::Native };
    let kernel = QuantKernel::from_name(&p.kernel)
        .ok_or_else(|| LendError::Refused(format!("unknown kernel {:?}", p.kernel)))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let outcome = runtime.block_on(async {
        let model = inspect(&client, &repo_id, commit, &cache, headroom_engine::load_shape(dtype, kernel))
            .await
            .map_err(hub)?;
        super::share::check_share_of(&model.footprint, p, budget).map_err(LendError::Refused)?;
        tracing::info!(
            "pulling {repo} at {} for the host ({} to download)",
            &commit[..commit.len().min(12)],
            crate::fit::gb(model.total_bytes.saturating_sub(model.cached_bytes))
        );
        let cancel = CancellationToken::new();
        let mut last = Instant::now();
        let mut hung_up = false;
        let result = download(&client, &cache, &model, &cancel, |event| {
            if let PullEvent::Progress { done_bytes, total_bytes, .. } = event {
                if last.elapsed() >= PROGRESS_EVERY && !hung_up {
                    last = Instant::now();
                    if control.send(&Reply::Pulling { done_bytes, total_bytes }).is_err() {
                        hung_up = true;
                        cancel.cancel();
                    }
                }
            }
        })
        .await;
        if hung_up {
            return Err(LendError::Refused(format!(
                "the host hung up while {repo} was being pulled; what arrived is kept"
            )));
        }
        result.map_err(hub)
    })?;
    Ok(match p.model.file_in_snapshot() {
        Some(file) => outcome.snapshot.join(file),
        None => outcome.snapshot,
    })
}
