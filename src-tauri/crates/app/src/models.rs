//! Where models are on disk: the app's own models folder and the local
//! Hugging Face cache (offline; its layout is `headroom_core::format::hf_cache`,
//! the module the hub crate writes it with), and the facts the model picker
//! shows about each one, read by the one model-format reader.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use headroom_core::fit::{check_with, FitReport, ModelFootprint, GIB};
use headroom_core::format::hf_cache::{RepoFolder, MAIN};
use headroom_core::format::CONFIG_FILE;
use headroom_core::kv::KvFormat;
use headroom_core::remedies::{Candidate, Remedy};
use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
use headroom_engine::source::{ModelFiles, GGUF_EXTENSION};
use headroom_engine::{mlx_memory, ComputeDtype, EngineError, QuantKernel};
use headroom_store::Store;
use serde::Serialize;

pub use headroom_core::format::hf_cache::HubEnv;

use crate::codes::{Coded, ErrorCode};
use crate::default_model::DEFAULT_MODEL_ID;
use crate::fit::{self, BudgetSource};
use crate::locations::MODELS_DIR;
use crate::state::{AppState, LoadedModel};

/// The bundled demo model's folder name (and id) inside [`MODELS_DIR`].
pub const DEMO_MODEL_ID: &str = "headroom-demo-tiny";

#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
    #[error("model {model} not found (searched {})", searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NotFound { model: String, searched: Vec<PathBuf> },
    #[error("the Hugging Face cache entry for {model} at {} is broken: {reason}", repo_dir.display())]
    BrokenCacheEntry { model: String, repo_dir: PathBuf, reason: String },
}

/// Why a model was not loaded (the picker's load, a reload after an
/// unload, the default model at start). Each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("The model {id} is no longer on this Mac.")]
    NotFound { id: String },
    /// The listing could not read the folder: its reason, as the picker shows it.
    #[error("{}", .0.message)]
    Unusable(ModelProblem),
    #[error("The context limit must be at least one token.")]
    NoContext,
    #[error("The draft model {draft} in Settings is no longer on this Mac, or cannot be read. Choose another draft, or none.")]
    DraftGone { draft: String },
    #[error("No peer Mac is set: name one in Settings → Two Macs.")]
    NoPeer,
    /// The fit verdict refuses it; `details` are the numbers and remedies
    /// the warning sheet shows (none for a refused split).
    #[error("{message}")]
    TooLarge { message: String, details: Option<serde_json::Value> },
    #[error("This Mac's memory could not be read: {0}")]
    Memory(#[from] headroom_memory::MemoryError),
    #[error("{0}")]
    Split(headroom_core::split::SplitError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Demo(#[from] headroom_engine::demo::DemoError),
    #[error("The bundled model {} could not be set up in {}: {source}", file.display(), dir.display())]
    Bundled { file: PathBuf, dir: PathBuf, source: std::io::Error },
}

impl From<fit::FitError> for LoadError {
    fn from(e: fit::FitError) -> Self {
        match e {
            fit::FitError::Model(e) => Self::Engine(e),
            fit::FitError::Memory(e) => Self::Memory(e),
            fit::FitError::Split(e) => Self::Split(e),
        }
    }
}

impl Coded for LoadError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::NotFound { .. } => ErrorCode::ModelNotFound,
            Self::Unusable(p) => p.code,
            Self::NoContext | Self::NoPeer => ErrorCode::InvalidSetting,
            Self::DraftGone { .. } => ErrorCode::DraftModel,
            Self::TooLarge { .. } => ErrorCode::ModelTooLarge,
            Self::Memory(_) => ErrorCode::Memory,
            Self::Split(_) => ErrorCode::PeerUnsupported,
            Self::Engine(e) => e.code(),
            Self::Demo(e) => e.code(),
            Self::Bundled { .. } => ErrorCode::Io,
        }
    }

    fn message(&self) -> String {
        match self {
            Self::Engine(e) => e.message(),
            Self::Demo(e) => e.message(),
            _ => self.to_string(),
        }
    }

    fn details(&self) -> Option<serde_json::Value> {
        match self {
            Self::TooLarge { details, .. } => details.clone(),
            _ => None,
        }
    }
}

/// One model the picker can offer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct ModelEntry {
    /// Folder name for the app's models, `org/name` for the HF cache.
    pub id: String,
    pub name: String,
    pub path: PathBuf,
    /// HF `model_type` (qwen2, llama, …), if config.json says.
    pub arch: Option<String>,
    /// Quantization bits, if quantized.
    pub bits: Option<u32>,
    /// e.g. "4-bit, group 64"; `None` if unquantized (or unreadable).
    pub quantization: Option<String>,
    /// Sum of the safetensors files.
    pub size_bytes: u64,
    pub loaded: bool,
    /// The loaded model's chat template has a think block (the chat offers
    /// its Think switch); read at the load, so false for every other entry.
    pub thinks: bool,
    /// The fit verdict at the app's context limit, with every part; `None`
    /// when there is no budget or the model cannot be read (see `problem`).
    pub fit: Option<FitReport>,
    /// What would make it fit when `fit` refuses (`headroom_core::remedies`):
    /// the warning sheet offers these, each with one click.
    pub remedies: Vec<Remedy>,
    /// Why this folder cannot be loaded, when its files say so (a broken
    /// config, a lying header, an unsupported architecture): the listing
    /// shows it rather than failing, so one bad folder hides no other model.
    pub problem: Option<ModelProblem>,
    /// What the fit check consumes, read with the listing (not sent to the UI).
    #[serde(skip)]
    pub footprint: Option<ModelFootprint>,
    /// With a peer Mac set and a model that does not fit here alone: the
    /// split across both, each Mac's share and verdict (the picker's
    /// "across two Macs" row).
    pub two_macs: Option<fit::PeerSplit>,
}

/// A model folder that cannot be used, as the UI shows it: the error code
/// and sentence loading it would fail with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct ModelProblem {
    pub code: ErrorCode,
    #[serde(with = "crate::codes::ui_text")]
    #[ts(type = "string")]
    pub message: String,
}

impl From<EngineError> for ModelProblem {
    fn from(e: EngineError) -> Self {
        Self { code: e.code(), message: e.message() }
    }
}

/// What `model_load` reports: the entry, now loaded, and how long the switch took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct LoadResult {
    #[serde(flatten)]
    pub entry: ModelEntry,
    /// The context limit the engine was loaded with.
    pub context_limit: usize,
    /// Unloading the previous model (and clearing MLX's cache); 0 if none was loaded.
    pub unload_ms: u64,
    /// MLX memory (active + cache) that unloading the previous model gave back.
    pub freed_bytes: u64,
    /// What the previous model's weights and KV caches held: the memory
    /// that had to come back (checked before loading; 0 if none was loaded).
    pub expected_freed_bytes: u64,
    /// This process's resident set before and after that unload (the OS's
    /// view; on Linux the allocator may keep some freed pages for reuse).
    pub rss_before_unload_bytes: u64,
    pub rss_after_unload_bytes: u64,
    pub load_ms: u64,
    /// The cap on MLX's buffer cache while this model is loaded
    /// (`headroom_core::fit::buffer_cache_limit`).
    pub cache_limit_bytes: usize,
    /// MLX's wired limit while this model is loaded; `None`: nothing wired
    /// (off Metal, or the verdict leaves no safe reserve: `fit::wired_limit`).
    pub wired_limit_bytes: Option<usize>,
    /// How its KV caches store keys and values ("8-bit (group 64) from 5000 tokens").
    pub kv_cache: String,
}

/// The HF cache snapshot of `org/name`, offline.
pub fn resolve_repo(repo_id: &str, env: &HubEnv) -> Result<PathBuf, ModelsError> {
    let searched = env.hub_dirs();
    if RepoFolder::for_id(Path::new(""), repo_id).is_none() {
        return Err(ModelsError::NotFound { model: repo_id.into(), searched: Vec::new() });
    }
    for hub in &searched {
        let Some(repo) = RepoFolder::for_id(hub, repo_id) else { continue };
        if repo.dir().is_dir() {
            return snapshot_of(repo_id, &repo);
        }
    }
    Err(ModelsError::NotFound { model: repo_id.into(), searched })
}

/// The snapshot `refs/main` names; a ref that is missing, unreadable or
/// not a commit name (a hostile `../..`) is a broken entry.
fn snapshot_of(repo_id: &str, repo: &RepoFolder) -> Result<PathBuf, ModelsError> {
    let broken = |reason: String| ModelsError::BrokenCacheEntry {
        model: repo_id.into(),
        repo_dir: repo.dir().to_owned(),
        reason,
    };
    let refs = repo.ref_file(MAIN).map_err(|e| broken(e.to_string()))?;
    let sha = std::fs::read_to_string(&refs).map_err(|e| broken(format!("{}: {e}", refs.display())))?;
    let snapshot = repo.snapshot_for_ref(&sha).map_err(|e| broken(format!("refs/main: {e}")))?;
    if !snapshot.is_dir() {
        return Err(broken(format!("refs/main names {}, which is missing", snapshot.display())));
    }
    Ok(snapshot)
}

/// Every model folder (one with a config.json, or one GGUF file) in `<data>/models` and the HF
/// caches, smallest first, each read with `kernel` (which the footprint
/// depends on); the first cache in precedence order wins a duplicate id. A
/// folder whose files cannot be used is listed with its `problem`; a cache
/// entry without a usable snapshot is skipped: a listing never fails, and no
/// bad folder hides another.
pub fn list_models(data_dir: &Path, env: &HubEnv, kernel: QuantKernel) -> Vec<ModelEntry> {
    let mut found = Vec::new();
    for dir in subdirs(&data_dir.join(MODELS_DIR)) {
        if let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_owned) {
            push_model(&mut found, name.clone(), name, dir, kernel);
        }
    }
    for hub in env.hub_dirs() {
        for repo_dir in subdirs(&hub) {
            let Some(id) = repo_dir.file_name().and_then(|n| n.to_str()).and_then(RepoFolder::repo_id) else {
                continue;
            };
            if found.iter().any(|m: &ModelEntry| m.id == id) {
                continue;
            }
            let Some(repo) = RepoFolder::for_id(&hub, &id) else { continue };
            if let Ok(snapshot) = snapshot_of(&id, &repo) {
                let name = id.split_once('/').map_or(id.as_str(), |(_, n)| n).to_owned();
                push_model(&mut found, id, name, snapshot, kernel);
            }
        }
    }
    found.sort_by(|a, b| a.size_bytes.cmp(&b.size_bytes).then_with(|| a.name.cmp(&b.name)));
    found
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    dirs
}

fn push_model(found: &mut Vec<ModelEntry>, id: String, name: String, path: PathBuf, kernel: QuantKernel) {
    if !path.join(CONFIG_FILE).is_file() && ModelFiles::locate(&path).gguf().is_none() {
        return;
    }
    // Headers only: safe on a folder of any size or any content.
    let (arch, quantization, footprint, problem) = match headroom_engine::inspect(&path, ComputeDtype::Native, kernel) {
        Ok(i) => {
            let quant = i.config.quantization.as_ref().map(|q| q.default);
            (Some(i.config.model_type_name().to_owned()), quant, Some(i.footprint), None)
        }
        Err(e) => (None, None, None, Some(ModelProblem::from(e))),
    };
    let bits = quantization.and_then(|q| u32::try_from(q.bits).ok());
    let size_bytes = std::fs::read_dir(&path)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors" || x == GGUF_EXTENSION))
        // metadata() follows the HF cache's symlinks into blobs/.
        .filter_map(|e| std::fs::metadata(e.path()).ok())
        .map(|m| m.len())
        .sum();
    found.push(ModelEntry {
        id,
        name,
        path,
        arch,
        bits,
        quantization: quantization.map(|q| q.label()),
        size_bytes,
        loaded: false,
        thinks: false,
        fit: None,
        remedies: Vec::new(),
        problem,
        footprint,
        two_macs: None,
    });
}

/// The budget the picker and the guard use now: a fresh reading, plus what
/// unloading the loaded model (its MLX arrays and MLX's buffer cache) would free.
pub fn budget_source(state: &AppState) -> Result<BudgetSource, headroom_memory::MemoryError> {
    let reading = headroom_memory::read()?;
    let freed_by_unload_bytes = match state.loaded_model() {
        Some(_) => mlx_memory().map(|m| m.active.saturating_add(m.cache)).unwrap_or(0),
        None => 0,
    };
    Ok(BudgetSource {
        available_bytes: Some(reading.available),
        freed_by_unload_bytes,
        os_headroom_bytes: state.os_headroom_bytes(),
        ..BudgetSource::default()
    })
}

/// [`list_models`], each with its fit verdict at `context` tokens against
/// `source` (none when there is no budget or the model cannot be read),
/// all against one reading of the memory, calibrated by what `learned` (the
/// store) measured for each model on this machine, if given.
pub fn list_models_with_fit(
    data_dir: &Path,
    env: &HubEnv,
    kernel: QuantKernel,
    kv: KvFormat,
    context: usize,
    source: Option<BudgetSource>,
    learned: Option<&Store>,
) -> Vec<ModelEntry> {
    let mut list = list_models(data_dir, env, kernel);
    let inputs = source.and_then(|s| fit::budget_inputs(s).ok());
    let context = u64::try_from(context).unwrap_or(u64::MAX);
    for m in &mut list {
        let Some((inputs, fp)) = inputs.zip(m.footprint.as_ref()) else { continue };
        let measured =
            learned.map(|store| fit::learned(store, &m.path, ComputeDtype::Native, kernel)).unwrap_or_default();
        m.fit = Some(check_with(fp, context, kv, inputs, &measured));
    }
    let remedies: Vec<Vec<Remedy>> =
        list.iter().map(|m| m.fit.as_ref().map(|r| remedies_for(r, kv, &m.id, &list)).unwrap_or_default()).collect();
    for (m, r) in list.iter_mut().zip(remedies) {
        m.remedies = r;
    }
    list
}

/// The models the picker offers, the loaded one marked, each with its fit
/// verdict at the app's context limit.
pub fn entries(state: &AppState) -> Vec<ModelEntry> {
    let loaded = state.loaded_model();
    let source = budget_source(state).ok();
    let mut list = list_models_with_fit(
        &state.locations.data_dir,
        &state.locations.hub,
        state.quant_kernel(),
        state.kv_format(),
        state.context_limit(),
        source,
        Some(&state.store),
    );
    for m in &mut list {
        m.loaded = loaded.as_ref().is_some_and(|l| l.id == m.id);
        m.thinks = m.loaded && loaded.as_ref().is_some_and(|l| l.info.thinks);
    }
    if let Some(draft) = state.draft_model() {
        add_draft(&mut list, &draft, state.context_limit(), state.kv_format());
    }
    if let Some(peer) = state.peer() {
        add_two_macs(&mut list, &peer, state.context_limit(), state.kv_format());
    }
    list
}

/// The draft model the settings name (`draft`, an id of `list`): every
/// other model's verdict counts it too (its weights and KV cache, by the
/// formula: `ModelFootprint::with_draft`), and says so. A draft no longer
/// listed, or unreadable, leaves the list as it is.
fn add_draft(list: &mut [ModelEntry], draft: &str, context: usize, kv: KvFormat) {
    let Some(draft_fp) = list.iter().find(|m| m.id == draft && m.problem.is_none()).and_then(|m| m.footprint.clone())
    else {
        tracing::warn!("the draft model {draft} is not in the list; verdicts count none");
        return;
    };
    let context = u64::try_from(context).unwrap_or(u64::MAX);
    for m in list.iter_mut().filter(|m| m.id != draft) {
        let (Some(fp), Some(alone)) = (&m.footprint, &m.fit) else { continue };
        let mut report = check_with(&fp.with_draft(&draft_fp), context, kv, alone.budget.inputs, &[]);
        report.basis = format!("{}, with the draft model {draft}", report.basis);
        m.fit = Some(report);
    }
}

/// The draft model's folder for loading `id` (the settings' draft, unless it is `id` itself).
fn draft_path(state: &AppState, id: &str, all: &[ModelEntry]) -> Result<Option<PathBuf>, LoadError> {
    let Some(draft) = state.draft_model().filter(|d| d != id) else { return Ok(None) };
    match all.iter().find(|m| m.id == draft) {
        Some(m) if m.problem.is_none() => Ok(Some(m.path.clone())),
        _ => Err(LoadError::DraftGone { draft }),
    }
}

/// Each model of `list` that does not fit here alone gets its split across
/// this Mac and `peer` (whose budget is asked once). A peer that does not
/// answer leaves the list as it is, said in the log.
fn add_two_macs(list: &mut [ModelEntry], peer: &str, context: usize, kv: KvFormat) {
    let refused = |m: &ModelEntry| m.fit.as_ref().is_some_and(|f| f.verdict.refuses());
    if !list.iter().any(refused) {
        return;
    }
    let lender = crate::peers::trust(peer).and_then(|trust| headroom_engine::peer::host::peer_budget(peer, &trust));
    let (machine, lender) = match lender {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!("no two-Mac verdicts: {e}");
            return;
        }
    };
    let context = u64::try_from(context).unwrap_or(u64::MAX);
    for m in list.iter_mut().filter(|m| refused(m)) {
        let (Some(fp), Some(here)) = (&m.footprint, &m.fit) else { continue };
        if let Ok(report) = headroom_core::split::split(fp, context, kv, here.budget.inputs, lender) {
            m.two_macs = Some(fit::PeerSplit { address: peer.to_owned(), machine: machine.clone(), report });
        }
    }
}

/// Loads the model the picker calls `id` (blocking: call it off the UI
/// thread) with `context_limit` and its KV caches stored as `kv` (defaults:
/// the app's settings). Unless `override_fit`, a model that would swap or
/// cannot fit is refused before anything is unloaded or allocated, with
/// `MODEL_TOO_LARGE` and the numbers.
pub fn load(
    state: &AppState,
    id: &str,
    context_limit: Option<usize>,
    kv: Option<KvFormat>,
    override_fit: bool,
    across_peer: bool,
) -> Result<LoadResult, LoadError> {
    let _switch = state.switching.lock().unwrap_or_else(PoisonError::into_inner);
    let kernel = state.quant_kernel();
    let all = list_models(&state.locations.data_dir, &state.locations.hub, kernel);
    let mut entry =
        all.iter().find(|m| m.id == id).cloned().ok_or_else(|| LoadError::NotFound { id: id.to_owned() })?;
    // A folder the listing could not read is refused with its reason before anything moves.
    if let Some(p) = &entry.problem {
        return Err(LoadError::Unusable(p.clone()));
    }
    let context_limit = context_limit.unwrap_or_else(|| state.context_limit());
    if context_limit == 0 {
        return Err(LoadError::NoContext);
    }
    let kv = kv.unwrap_or_else(|| state.kv_format());
    if across_peer {
        // Checked for each Mac there; this Mac's verdict alone does not apply.
        return load_across(state, entry, context_limit, kv, override_fit);
    }
    let source = budget_source(state)?;
    let draft = draft_path(state, id, &all)?;
    let plan = fit::LoadPlan {
        dir: &entry.path,
        draft: draft.as_deref(),
        context: context_limit,
        dtype: ComputeDtype::Native,
        kernel,
        kv,
    };
    let report = fit::check_load(&plan, source, Some(&state.store))?;
    if report.verdict.refuses() && !override_fit {
        let over = fit::over_by(&report) as f64 / GIB as f64;
        let message = match report.largest_context_that_fits {
            Some(n) => format!(
                "{} would push this Mac into swap by {over:.1} GB at {context_limit} tokens of context. It fits with up to {n} tokens, or load it anyway.",
                entry.name
            ),
            None => format!(
                "{} cannot fit in this Mac's memory at any context: it is {over:.1} GB over even at the smallest. Free memory or choose a smaller model.",
                entry.name
            ),
        };
        let remedies = remedies_for(&report, kv, &entry.id, &all);
        let details = fit::refusal_details(&report, &remedies).into_details();
        return Err(LoadError::TooLarge { message, details });
    }
    let s = switch_to(state, &entry.id, &entry.path, context_limit, kv, &report, Beside { peer: None, draft })?;
    entry.loaded = true;
    entry.fit = Some(report);
    Ok(LoadResult::of(entry, context_limit, s))
}

/// [`load`] across this Mac and the peer the settings name: the split
/// checked for each Mac (refused with both Macs' numbers where either
/// would swap, unless `override_fit`), then the one switch with the
/// placement.
fn load_across(
    state: &AppState,
    mut entry: ModelEntry,
    context_limit: usize,
    kv: KvFormat,
    override_fit: bool,
) -> Result<LoadResult, LoadError> {
    let peer = state.peer().ok_or(LoadError::NoPeer)?;
    let source = budget_source(state)?;
    let split =
        fit::check_split(&entry.path, context_limit, ComputeDtype::Native, state.quant_kernel(), kv, source, &peer)?;
    if split.report.refuses() && !override_fit {
        let side = |s: &headroom_core::split::Share, name: &str| {
            format!(
                "{name} {:.1} GB of {:.1} GB",
                s.fit.estimate.predicted_peak_bytes as f64 / GIB as f64,
                s.fit.budget.budget_bytes as f64 / GIB as f64
            )
        };
        let message = format!(
            "{} would push one of the two Macs into swap at {context_limit} tokens: {}, {}.",
            entry.name,
            side(&split.report.host, "this Mac"),
            side(&split.report.peer, &split.machine),
        );
        return Err(LoadError::TooLarge { message, details: None });
    }
    let report = split.report.host.fit.clone();
    let beside = Beside { peer: Some(split.placement()?), draft: None };
    let s = switch_to(state, &entry.id, &entry.path, context_limit, kv, &report, beside)?;
    entry.loaded = true;
    entry.fit = Some(report);
    entry.two_macs = Some(split);
    Ok(LoadResult::of(entry, context_limit, s))
}

/// What would make the refused `report` fit: a smaller KV cache (from the
/// first token: the most it saves), another quantization of the same model
/// among `all` (the models on this Mac but `id`), a shorter context. Each is the
/// same fit check with one thing changed (`headroom_core::remedies`).
fn remedies_for(report: &FitReport, kv: KvFormat, id: &str, all: &[ModelEntry]) -> Vec<Remedy> {
    let candidates: Vec<Candidate> = all
        .iter()
        .filter(|m| m.problem.is_none() && m.id != id)
        .filter_map(|m| {
            Some(Candidate { id: m.id.clone(), name: m.name.clone(), footprint: m.footprint.clone()?, bits: m.bits })
        })
        .collect();
    headroom_core::remedies::remedies(report, kv, kv.quant().map_or(0, |q| q.start), &candidates)
}

/// What a switch measured.
impl LoadResult {
    /// `entry`, now loaded at `context_limit` by the switch `s`.
    fn of(entry: ModelEntry, context_limit: usize, s: Switched) -> Self {
        Self {
            entry: ModelEntry { thinks: s.thinks, ..entry },
            context_limit,
            unload_ms: s.unload_ms,
            freed_bytes: s.freed_bytes,
            expected_freed_bytes: s.expected_freed_bytes,
            rss_before_unload_bytes: s.rss_before_unload_bytes,
            rss_after_unload_bytes: s.rss_after_unload_bytes,
            load_ms: s.load_ms,
            cache_limit_bytes: s.cache_limit_bytes,
            wired_limit_bytes: s.wired_limit_bytes,
            kv_cache: s.kv_cache,
        }
    }
}

#[derive(Debug)]
pub struct Switched {
    /// The engine's load of the new model (`ModelInfo::load`).
    pub load: u64,
    unload_ms: u64,
    freed_bytes: u64,
    expected_freed_bytes: u64,
    rss_before_unload_bytes: u64,
    rss_after_unload_bytes: u64,
    load_ms: u64,
    cache_limit_bytes: usize,
    wired_limit_bytes: Option<usize>,
    kv_cache: String,
    /// Its template has a think block (`ModelInfo::thinks`).
    pub thinks: bool,
}

/// Puts the model at `path` in the engine in place of the current one, the
/// one way the popover and the local server switch, with the app's kernel
/// and the KV format `kv` the `report` was computed for; MLX's buffer-cache
/// and wired limits come from the report (`headroom_core::fit`'s rules).
/// The engine checks the new folder first (config, headers, every tensor,
/// the tokenizer against the embedding) while the old model still answers:
/// a broken folder fails here and the old model stays loaded. Then it
/// unloads the old model (clearing MLX's cache) and waits until MLX's
/// readings show its memory back (the fit `report` counted it as free, so
/// loading earlier would let two models share one budget), and reads the
/// new weights under the report's cache limit. A failure after the unload
/// leaves no model loaded, and says so. The caller holds `state.switching`
/// from its fit check on.
pub fn switch_to(
    state: &AppState,
    id: &str,
    path: &Path,
    context_limit: usize,
    kv: KvFormat,
    report: &FitReport,
    beside: Beside,
) -> Result<Switched, EngineError> {
    let rss = || headroom_memory::process_rss().unwrap_or(0);
    let rss_before_unload_bytes = rss();
    // Read on the engine thread between the unload and the new weights.
    let after_unload = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&after_unload);
    let observe: headroom_engine::worker::AfterUnload = Box::new(move |_| {
        *seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(rss());
    });
    let settings = fit::load_settings(
        report,
        context_limit,
        ComputeDtype::Native,
        state.quant_kernel(),
        kv,
        state.prompt_cache_max_bytes(),
    );
    let settings = headroom_engine::worker::LoadSettings { peer: beside.peer, draft: beside.draft, ..settings };
    let cache_limit = settings.cache_limit_bytes.unwrap_or(usize::MAX);
    let kernel = settings.kernel;
    let info = match state.engine.load_observed(path, settings, Some(observe)) {
        Ok(info) => info,
        Err(e) => {
            if matches!(e, EngineError::NothingLoaded { .. }) {
                state.set_loaded(None);
            }
            return Err(e);
        }
    };
    let replaced = info.replaced;
    let (load, load_time, thinks) = (info.load, info.load_time, info.thinks);
    let (wired_limit_bytes, kv_cache) = (info.wired_limit_bytes, info.kv_label.clone());
    state.set_loaded(Some(LoadedModel::new(id, path.to_owned(), info, report.footprint.clone(), kernel)));
    let rss_after_unload_bytes = after_unload.lock().unwrap_or_else(PoisonError::into_inner).unwrap_or_else(rss);
    Ok(Switched {
        load,
        unload_ms: if replaced.had_model { millis(replaced.unload_time) } else { 0 },
        freed_bytes: replaced.freed_bytes,
        expected_freed_bytes: replaced.expected_bytes,
        rss_before_unload_bytes,
        rss_after_unload_bytes,
        load_ms: millis(load_time),
        cache_limit_bytes: cache_limit,
        wired_limit_bytes,
        kv_cache,
        thinks,
    })
}

/// What a load places beside the model: a peer Mac for its later layers,
/// a draft model for speculative decoding (the `report` counted either).
#[derive(Debug, Clone, Default)]
pub struct Beside {
    pub peer: Option<headroom_engine::peer::PeerPlacement>,
    pub draft: Option<PathBuf>,
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The model a fresh install talks with: when nothing is loaded and no model
/// in the app's models folder fits this Mac (a fresh install, or only models
/// too big to load), the bundled real model (`crate::default_model`, when
/// `state.locations` names one) is linked into the models folder, or else
/// the tiny random-weight qwen2 4-bit demo model is written there (tests,
/// and a checkout without `make setup`); it is loaded if it is the only
/// own model that fits, so the app chats at once. Returns whether it loaded it.
pub fn ensure_default_model(state: &AppState) -> Result<bool, LoadError> {
    if state.loaded_model().is_some() {
        return Ok(false);
    }
    let data_dir = &state.locations.data_dir;
    let source = budget_source(state).ok();
    let context = state.context_limit();
    // A model whose fit cannot be told counts as fitting: it is the user's.
    // A folder that cannot be loaded at all does not.
    let fitting = || -> Vec<ModelEntry> {
        let learned = Some(&state.store);
        list_models_with_fit(
            data_dir,
            &HubEnv::default(),
            state.quant_kernel(),
            state.kv_format(),
            context,
            source,
            learned,
        )
        .into_iter()
        .filter(|m| m.problem.is_none() && m.fit.as_ref().is_none_or(|r| !r.verdict.refuses()))
        .collect()
    };
    let models_dir = data_dir.join(MODELS_DIR);
    let starter = match &state.locations.default_model {
        Some(_) => DEFAULT_MODEL_ID,
        None => DEMO_MODEL_ID,
    };
    if fitting().is_empty() {
        match &state.locations.default_model {
            Some(file) => {
                crate::default_model::install(file, &models_dir).map_err(|source| LoadError::Bundled {
                    file: file.clone(),
                    dir: models_dir.clone(),
                    source,
                })?;
            }
            None if !models_dir.join(DEMO_MODEL_ID).join(CONFIG_FILE).is_file() => {
                write_demo_model(
                    &models_dir.join(DEMO_MODEL_ID),
                    &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four),
                )?;
            }
            None => {}
        }
    }
    match fitting().as_slice() {
        [only] if only.id == starter => {
            // The demo's heads are 16 wide, too narrow for MLX to quantize
            // with group 64: with a quantized KV setting it keeps a float cache.
            let kv = state.kv_format();
            let head_dim = only.footprint.as_ref().map_or(0, |f| f.head_dim);
            let kv = if kv.check_head_dim(head_dim).is_ok() { kv } else { KvFormat::Float };
            load(state, &only.id, None, Some(kv), false, false)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

impl Coded for ModelsError {
    fn code(&self) -> ErrorCode {
        use ModelsError as E;
        match self {
            E::NotFound { .. } => ErrorCode::ModelNotFound,
            E::BrokenCacheEntry { .. } => ErrorCode::ModelIncomplete,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::attention::Backend;
    use headroom_core::fit::{CPU_BUFFER_CACHE_BYTES, MIN_BUFFER_CACHE_BYTES};
    use headroom_test_support::scratch;

    #[test]
    fn the_settings_context_and_os_headroom_shape_the_budget() {
        let state = crate::test_state("settings-budget");
        let before = budget_source(&state).unwrap();
        assert_eq!(before.os_headroom_bytes, headroom_core::fit::DEFAULT_OS_HEADROOM);
        let settings =
            headroom_core::settings::Settings { os_headroom_gb: 6.5, context_limit: 4096, ..Default::default() };
        state.apply_settings(&settings);
        let after = budget_source(&state).unwrap();
        assert_eq!(after.os_headroom_bytes, 6 * headroom_core::fit::GIB + headroom_core::fit::GIB / 2);
        assert_eq!(state.context_limit(), 4096);
    }

    fn fake_model(dir: &Path, config: &str, weights: usize) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("config.json"), config).unwrap();
        std::fs::write(dir.join("model.safetensors"), vec![0u8; weights]).unwrap();
    }

    fn cached_repo(hub: &Path, id: &str, sha: &str) -> PathBuf {
        let repo = hub.join(format!("models--{}", id.replace('/', "--")));
        let snap = repo.join("snapshots").join(sha);
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), format!("{sha}\n")).unwrap();
        snap
    }

    #[test]
    fn lists_own_models_and_the_hf_cache_smallest_first_and_bad_folders_with_their_problem() {
        let root = scratch("models-list");
        let data = root.join("data");
        let demo = |dir: &Path, arch, bits| {
            write_demo_model(dir, &DemoSpec::new(arch, Preset::Tiny, bits)).unwrap();
        };
        demo(&data.join("models/tiny"), Arch::Qwen2, Bits::Four);
        std::fs::create_dir_all(data.join("models/not-a-model")).unwrap();
        // A hostile config: listed with its problem, hiding nothing.
        fake_model(&data.join("models/hostile"), r#"{"model_type":"llama","head_dim":-2147483648}"#, 10);
        let hub = root.join("hub");
        let snap = cached_repo(&hub, "mlx-community/Big-8bit", "abc");
        demo(&snap, Arch::Llama, Bits::Eight);
        let broken = cached_repo(&hub, "org/broken", "def");
        std::fs::remove_dir_all(broken).unwrap();
        // A ref that tries to leave the repo folder is no snapshot.
        let escaping = cached_repo(&hub, "org/escape", "x");
        std::fs::write(escaping.join("../../refs/main"), "../../models--mlx-community--Big-8bit/snapshots/abc")
            .unwrap();
        let env = HubEnv { hf_hub_cache: Some(hub.clone().into()), ..HubEnv::default() };

        let list = list_models(&data, &env, QuantKernel::CPU);
        let ids: Vec<&str> = list.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["hostile", "tiny", "mlx-community/Big-8bit"]);
        let p = list[0].problem.as_ref().unwrap_or_else(|| panic!("{:?}", list[0]));
        assert_eq!(p.code, ErrorCode::ModelConfig);
        assert!(p.message.contains("hidden_size"), "the first field missing or bad is named: {}", p.message);
        assert!(list[0].arch.is_none() && list[0].footprint.is_none());
        assert_eq!(
            (list[1].arch.as_deref(), list[1].bits, list[1].quantization.as_deref()),
            (Some("qwen2"), Some(4), Some("4-bit, group 64"))
        );
        assert!(list[1].problem.is_none() && list[1].footprint.is_some());
        assert_eq!((list[2].name.as_str(), list[2].bits, list[2].path.clone()), ("Big-8bit", Some(8), snap));
        assert!(matches!(resolve_repo("org/escape", &env), Err(ModelsError::BrokenCacheEntry { .. })));
    }

    /// What a fresh install does: the real model `make setup` unpacked is
    /// linked into the data folder, listed as a GGUF llama at 4 bits, and loaded.
    #[test]
    fn the_real_default_model_is_linked_and_loaded_into_an_empty_data_folder() {
        let file = crate::default_model::checkout_copy();
        assert!(file.is_file(), "{} is missing: run `make setup`", file.display());
        let mut state = crate::test_state("default-model");
        state.locations.default_model = Some(file);
        assert_eq!(ensure_default_model(&state).ok(), Some(true));
        let list = entries(&state);
        assert_eq!(list.len(), 1, "{list:?}");
        let m = &list[0];
        assert_eq!(
            (m.id.as_str(), m.arch.as_deref(), m.bits, m.quantization.as_deref(), m.loaded),
            (DEFAULT_MODEL_ID, Some("llama"), Some(4), Some("4-bit, group 32"), true)
        );
        assert_eq!(m.size_bytes, 98_362_432, "the GGUF file's size");
        let linked = state
            .locations
            .data_dir
            .join(MODELS_DIR)
            .join(DEFAULT_MODEL_ID)
            .join(crate::default_model::DEFAULT_MODEL_FILE);
        assert!(linked.is_file(), "{} links the bundled file", linked.display());
        assert_eq!(ensure_default_model(&state).ok(), Some(false), "already loaded");
        let _ = std::fs::remove_dir_all(&state.locations.data_dir);
    }

    #[test]
    fn the_demo_model_is_written_and_loaded_once_into_an_empty_data_folder() {
        let state = crate::test_state("demo");
        assert_eq!(ensure_default_model(&state).ok(), Some(true));
        let list = entries(&state);
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(
            (list[0].id.as_str(), list[0].arch.as_deref(), list[0].bits, list[0].loaded),
            (DEMO_MODEL_ID, Some("qwen2"), Some(4), true)
        );
        assert!(list[0].size_bytes > 0);
        assert_eq!(ensure_default_model(&state).ok(), Some(false), "already loaded");
        let err = load(&state, "nobody/nothing", None, None, false, false).err();
        assert_eq!(err.map(|e| e.code()), Some(ErrorCode::ModelNotFound));
    }

    #[test]
    fn repo_ids_resolve_through_refs_main_in_precedence_order() {
        let root = scratch("models-order");
        let home = root.join("home");
        let in_home = cached_repo(&home.join(".cache/huggingface/hub"), "org/m", "abc123");
        let env = HubEnv { home: Some(home.into()), ..HubEnv::default() };
        assert_eq!(resolve_repo("org/m", &env).ok(), Some(in_home));
        let in_hub_cache = cached_repo(&root.join("hubcache"), "org/m", "0f0f");
        let env = HubEnv { hf_hub_cache: Some(root.join("hubcache").into()), ..env };
        assert_eq!(resolve_repo("org/m", &env).ok(), Some(in_hub_cache));
        let err = resolve_repo("org/absent", &env).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("org/absent") && err.contains("hubcache"), "{err}");
        let snap = cached_repo(&root.join("hubcache"), "org/broken", "aaa");
        std::fs::remove_dir_all(snap).unwrap();
        assert!(matches!(resolve_repo("org/broken", &env), Err(ModelsError::BrokenCacheEntry { .. })));
    }

    #[test]
    fn the_buffer_and_prompt_caches_share_what_the_budget_leaves_after_the_peak_but_never_below_the_floor() {
        let tmp = scratch("models-cachelimit");
        let dir = tmp.join("demo");
        write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).unwrap();
        let at = |available: u64| {
            let source = BudgetSource { available_bytes: Some(available), ..BudgetSource::default() };
            fit::check_model(&dir, 1024, source).unwrap()
        };
        let settings = |report: &FitReport, prompt_cache_max: u64| {
            let s = fit::load_settings(
                report,
                1024,
                ComputeDtype::Native,
                QuantKernel::choose(Default::default()),
                KvFormat::Float,
                prompt_cache_max,
            );
            (s.cache_limit_bytes.unwrap_or(usize::MAX) as u64, s.prompt_cache_bytes as u64)
        };
        let roomy = at(16 * GIB);
        let spare = roomy.budget.budget_bytes - roomy.estimate.predicted_peak_bytes;
        assert!(spare > MIN_BUFFER_CACHE_BYTES);
        if roomy.footprint.backend == Backend::Cpu {
            // MLX's CPU cache stays at MLX's own default, whatever the spare.
            let cpu = CPU_BUFFER_CACHE_BYTES;
            assert_eq!(settings(&roomy, 0), (cpu, 0));
            assert_eq!(settings(&roomy, u64::MAX), (cpu, spare / 2));
            assert_eq!(settings(&roomy, GIB), (cpu, GIB));
            assert_eq!(settings(&at(GIB), u64::MAX), (cpu, 0));
        } else {
            assert_eq!(settings(&roomy, 0), (spare, 0));
            assert_eq!(settings(&roomy, u64::MAX), (spare - spare / 2, spare / 2));
            assert_eq!(settings(&roomy, GIB), (spare - GIB, GIB));
            // Nothing to spare (even a budget of 0): the floor, and no prompt cache.
            assert_eq!(settings(&at(GIB), u64::MAX), (MIN_BUFFER_CACHE_BYTES, 0));
        }
        let _ = std::fs::remove_dir_all(dir.parent().unwrap_or(&dir));
    }

    #[test]
    fn a_switch_waits_for_one_already_under_way() {
        let state = crate::test_state("switch-lock");
        assert_eq!(ensure_default_model(&state).ok(), Some(true));
        state.set_loaded(None);
        state.engine.unload().unwrap();
        // Another switch (the server's, say) holds the lock…
        let held = state.switching.lock().unwrap_or_else(PoisonError::into_inner);
        let (tx, rx) = std::sync::mpsc::channel();
        let other = AppState::clone(&state);
        let popover = std::thread::spawn(move || {
            let _ = tx.send(load(&other, DEMO_MODEL_ID, Some(512), None, false, false).map(|r| r.entry.id));
        });
        // …so the popover's load neither finishes nor touches the engine
        // (unlocked, the tiny demo model loads in tens of milliseconds).
        assert!(rx.recv_timeout(std::time::Duration::from_millis(500)).is_err(), "the load ran during another switch");
        assert!(state.loaded_model().is_none());
        drop(held);
        let loaded = rx.recv().unwrap();
        assert_eq!(loaded.ok().as_deref(), Some(DEMO_MODEL_ID));
        popover.join().expect("the loading thread panicked");
    }

    #[test]
    fn switching_confirms_the_old_model_memory_came_back_and_reports_both_times() {
        let state = crate::test_state("switch");
        assert_eq!(ensure_default_model(&state).ok(), Some(true));
        // bf16 `small`: about 20 MB of weights, well above the tolerance.
        let small = state.locations.data_dir.join(MODELS_DIR).join("small-bf16");
        write_demo_model(&small, &DemoSpec::new(Arch::Qwen2, Preset::Small, Bits::Sixteen)).unwrap();

        let to_small = load(&state, "small-bf16", Some(1024), None, false, false).unwrap();
        // The demo model it replaced: its weights had to come back.
        assert!(to_small.expected_freed_bytes > 0, "{to_small:?}");
        assert!(to_small.rss_before_unload_bytes > 0 && to_small.rss_after_unload_bytes > 0, "{to_small:?}");
        let small_weights = headroom_engine::inspect_model(&small).unwrap().weight_bytes;
        assert!(small_weights > 16 << 20, "{small_weights}");

        let back = load(&state, DEMO_MODEL_ID, Some(1024), None, false, false).unwrap();
        // Expected = what the engine held: exactly the small model's weights
        // (no session was opened), and MLX gave (at least about) that back.
        assert_eq!(back.expected_freed_bytes, small_weights, "{back:?}");
        assert!(back.freed_bytes + headroom_engine::worker::RETURN_TOLERANCE_BYTES >= small_weights, "{back:?}");
        assert_eq!(state.loaded_model().map(|m| m.id), Some(DEMO_MODEL_ID.to_owned()));

        // A refused switch touches nothing: the loaded model stays, and MLX
        // allocates nothing for the 200 GB model (headers only were read).
        crate::fit::write_sparse_model(&state.locations.data_dir.join(MODELS_DIR).join("huge"), 200_000_000_000);
        let active = || mlx_memory().map(|m| m.active).unwrap_or(0);
        let before = active();
        let err = load(&state, "huge", Some(1024), None, false, false).err();
        assert_eq!(err.map(|e| e.code()), Some(ErrorCode::ModelTooLarge));
        assert!(active() <= before + headroom_engine::worker::RETURN_TOLERANCE_BYTES, "{before} -> {}", active());
        assert_eq!(state.loaded_model().map(|m| m.id), Some(DEMO_MODEL_ID.to_owned()));
        let _ = std::fs::remove_dir_all(&state.locations.data_dir);
    }

    /// The warning's one-click KV remedy through the app's own load: a model
    /// that would swap with a float KV cache at 128K tokens is refused with
    /// "the KV cache at 8 bits" among its remedies (the same list the model
    /// picker shows), and the load that remedy stands for goes through.
    #[test]
    fn the_kv_cache_remedy_turns_a_refusal_into_a_load() {
        let state = crate::test_state("kv-remedy");
        let dir = state.locations.data_dir.join(MODELS_DIR).join("tiny-kv");
        write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::TinyKv, Bits::Four)).unwrap();
        // A long-context model: the config's ceiling is what the fit caps at.
        let config = std::fs::read_to_string(dir.join(CONFIG_FILE)).unwrap();
        let config = config.replace("\"max_position_embeddings\": 4096", "\"max_position_embeddings\": 131072");
        assert!(config.contains("131072"), "{config}");
        std::fs::write(dir.join(CONFIG_FILE), config).unwrap();
        let context = 131_072;
        let q8 = KvFormat::quantized(8, 64, 0).unwrap_or_default();
        // The budget halfway between the two peaks: the float cache swaps, 8 bits fit.
        let peak = |kv| {
            let source = budget_source(&state).unwrap();
            let r = fit::check_model_with(&dir, context, ComputeDtype::Native, state.quant_kernel(), kv, source, None);
            r.unwrap().estimate.predicted_peak_bytes
        };
        let (float_peak, q8_peak) = (peak(KvFormat::Float), peak(q8));
        // The float cache's extra bytes over the 8-bit one's: 2 layers × 2 KV
        // heads × 64 × 128K positions × (2 − 17/16) bytes, about 63 MB.
        assert!(float_peak > q8_peak + (48 << 20), "{float_peak} vs {q8_peak}");
        // This Mac's available memory moves while other tests run: the budget
        // is set from a fresh reading for each try, and one try of a few
        // must land between the two peaks.
        let kind = |r: &Remedy| std::mem::discriminant(r);
        let mut refused_with = None;
        for _ in 0..5 {
            let available = headroom_memory::read().unwrap().available;
            let headroom = available.saturating_sub(float_peak / 2 + q8_peak / 2);
            assert!(headroom > GIB, "not enough memory free here for this test: {available}");
            let settings = headroom_core::settings::Settings {
                os_headroom_gb: headroom as f64 / GIB as f64,
                context_limit: context,
                ..Default::default()
            };
            state.apply_settings(&settings);
            let Err(refused) = load(&state, "tiny-kv", None, None, false, false) else {
                let _ = state.engine.unload();
                state.set_loaded(None);
                continue;
            };
            assert_eq!(refused.code(), ErrorCode::ModelTooLarge);
            let details = refused.details().unwrap_or_default();
            let remedies: Vec<Remedy> =
                serde_json::from_value(details["remedies"].clone()).expect("a list of remedies");
            if remedies.first().is_some_and(|r| matches!(r, Remedy::KvCache { bits: 8, .. })) {
                // The picker offers the same kinds (its own reading may move the context's figure).
                let listed = entries(&state).into_iter().find(|m| m.id == "tiny-kv").map(|m| m.remedies);
                let listed: Vec<_> = listed.unwrap_or_default().iter().map(kind).collect();
                assert_eq!(listed, remedies.iter().map(kind).collect::<Vec<_>>());
                refused_with = Some(remedies);
                break;
            }
        }
        let remedies = refused_with.expect("never refused with an 8-bit KV remedy");
        let Some(Remedy::KvCache { bits: 8, group_size, start, .. }) = remedies.first() else { panic!("{remedies:?}") };
        let kv = KvFormat::quantized(8, u64::from(*group_size), *start).unwrap_or_default();
        let loaded = load(&state, "tiny-kv", None, Some(kv), false, false).unwrap();
        assert_eq!(loaded.kv_cache, "8-bit (group 64)");
        assert_eq!(state.loaded_model().map(|m| m.id), Some("tiny-kv".to_owned()));
        let _ = std::fs::remove_dir_all(&state.locations.data_dir);
    }
}
