//! AppState: the cheap handles every command (and `headroom chat`, which
//! builds one too) can reach.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use headroom_core::fit::ModelFootprint;
use headroom_core::kv::KvFormat;
use headroom_core::sensitive::ScanCache;
use headroom_core::settings::{KernelChoice, Settings};
use headroom_engine::prompt_cache::disk::DiskTier;
use headroom_engine::tokenizer::Tokenizer;
use headroom_engine::worker::{EngineHandle, ModelInfo};
use headroom_engine::{BackendInfo, EngineError, QuantKernel};
use headroom_memory::Sampler;

pub use crate::locations::{app_identifier, platform_app_data_dir, Locations};
use crate::runs::Runs;

/// The data folder's subfolder of chats' saved KV states.
pub const KV_STATES_DIR: &str = "kv-states";

/// What a turn's stats are labelled with beyond the engine's own figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLabels {
    pub model_id: String,
    /// e.g. "4-bit, group 64"; `None` for an unquantized model.
    pub quantization: Option<String>,
    pub kv_dtype: String,
    /// How its quantized matrices multiply ("cpu-f32", "fused"); `None` when unquantized.
    pub quant_kernel: Option<String>,
}

impl ModelLabels {
    /// A local model's, from what its load reported: the engine's
    /// quantization, and its KV cache ("bf16", or "8-bit (group 64) from
    /// 5000 tokens"; each turn's stats then say what the cache really was).
    pub fn of_load(model_id: &str, info: &ModelInfo) -> Self {
        let quantization = info.quantization_label.clone();
        let quant_kernel = info.quant_kernel.map(|k| k.as_str().to_owned());
        Self { model_id: model_id.to_owned(), quantization, kv_dtype: info.kv_label.clone(), quant_kernel }
    }

    /// A cloud answer's: no local quantization or KV cache is involved.
    pub fn cloud(model: &str) -> Self {
        Self { model_id: model.to_owned(), quantization: None, kv_dtype: "n/a (cloud)".to_owned(), quant_kernel: None }
    }
}

/// The model the engine holds now, as the picker names it, with what its
/// load reported: turns read their labels, token counts and fit from here
/// instead of from the model's files.
#[derive(Debug, Clone)]
pub struct LoadedModel {
    pub id: String,
    pub path: PathBuf,
    /// What the engine reported at load.
    pub info: ModelInfo,
    /// Its sizes as the fit check read them before loading.
    pub footprint: ModelFootprint,
    /// How its quantized matrices multiply.
    pub kernel: QuantKernel,
    pub labels: ModelLabels,
    /// Its tokenizer for counting tokens, read on first use (once per load).
    tokenizer: Arc<OnceLock<Arc<Tokenizer>>>,
}

impl LoadedModel {
    pub fn new(id: &str, path: PathBuf, info: ModelInfo, footprint: ModelFootprint, kernel: QuantKernel) -> Self {
        let labels = ModelLabels::of_load(id, &info);
        Self { id: id.to_owned(), path, info, footprint, kernel, labels, tokenizer: Arc::default() }
    }

    /// The model's tokenizer (the one the engine encodes with), read from
    /// its folder the first time a turn or a preview counts tokens.
    pub fn tokenizer(&self) -> Result<Arc<Tokenizer>, EngineError> {
        if let Some(t) = self.tokenizer.get() {
            return Ok(Arc::clone(t));
        }
        let read = Arc::new(Tokenizer::for_model(&self.path)?);
        Ok(Arc::clone(self.tokenizer.get_or_init(|| read)))
    }
}

/// The settings a process goes by, and the KV format its loads use.
#[derive(Debug, Clone, Default)]
struct Applied {
    settings: Settings,
    /// The settings' format, or `headroom serve`'s flags'.
    kv: KvFormat,
}

/// Shared by all commands through `tauri::State`. Holds handles; the two
/// small maps behind std mutexes are only touched briefly, never across an
/// `.await`.
#[derive(Debug, Clone)]
pub struct AppState {
    pub backend: BackendInfo,
    pub engine: EngineHandle,
    pub locations: Locations,
    pub loaded: Arc<Mutex<Option<LoadedModel>>>,
    /// The database: sessions, messages, stats, settings.
    pub store: headroom_store::Store,
    /// The settings this process goes by: the one copy every turn, fit
    /// check and load reads ([`Self::settings`] and the accessors below).
    applied: Arc<RwLock<Applied>>,
    /// The memory sampler, once `run()` has started it (tests run without one).
    pub memory: Arc<OnceLock<Sampler>>,
    /// The local OpenAI-compatible server, while the toggle has it on.
    pub server: Arc<Mutex<Option<headroom_server::Server>>>,
    /// This Mac lent to another (`headroom lend` as a child process), while the toggle has it on.
    pub lending: Arc<Mutex<Option<crate::lend::Lending>>>,
    /// Held through a model switch, from its fit check to the end of its
    /// load: the popover and the local server switch one at a time, so
    /// neither checks a budget the other is about to spend.
    pub switching: Arc<Mutex<()>>,
    /// Every run that can be stopped: chat turns, benchmarks, downloads.
    pub runs: Runs,
    /// Privacy findings of texts already scanned: a conversation is scanned
    /// once, not again for every message (the route preview asks often).
    pub scans: Arc<ScanCache>,
    /// The live view: who is looking (sets the sampler's pace) and the
    /// per-second rates of streaming answers, written to the store.
    pub live: crate::live::Live,
    /// When to give memory back (idle unload, memory pressure) and what was given.
    pub away: crate::away::AwayHandle,
    /// The MCP servers of `mcp.json` and the tools the popover's turns may call.
    pub tools: crate::tools::Tools,
}

impl AppState {
    pub fn new(engine: EngineHandle, locations: Locations, store: headroom_store::Store) -> Self {
        // Every load and turn of the app, `headroom chat` and `headroom
        // serve` is measured and kept, for the fit to learn from.
        if let Err(e) = engine.set_meter(Some(crate::fit::store_meter(store.clone()))) {
            tracing::warn!("loads and turns will not be measured: {e}");
        }
        let live = crate::live::Live::new();
        live.attach_store(store.clone());
        let tools = crate::tools::Tools::new(locations.data_dir.clone());
        Self {
            backend: headroom_engine::backend_info(),
            engine,
            locations,
            loaded: Arc::default(),
            store,
            applied: Arc::default(),
            memory: Arc::default(),
            server: Arc::default(),
            lending: Arc::default(),
            switching: Arc::default(),
            runs: Runs::default(),
            scans: Arc::default(),
            live,
            away: crate::away::AwayHandle::default(),
            tools,
        }
    }

    /// Writes chats' KV states unused for `idle` to disk and logs what was
    /// written; `why` says when ("idle", "at quit", "at the end of `headroom
    /// chat`"). Blocking: the engine answers between runs. The app at quit,
    /// `headroom chat` at its end (idle zero) and the idle check all come here.
    pub fn save_chat_states(&self, idle: std::time::Duration, why: &str) {
        match self.engine.save_sessions(idle) {
            Ok(s) if s.saved + s.failed > 0 => {
                tracing::info!(saved = s.saved, bytes = s.bytes, failed = s.failed, "chats' KV states saved {why}")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("chats' KV states were not saved {why}: {e}"),
        }
    }

    /// Where chats' KV states are saved across restarts.
    pub fn kv_states_dir(&self) -> PathBuf {
        self.locations.data_dir.join(KV_STATES_DIR)
    }

    fn applied(&self) -> std::sync::RwLockReadGuard<'_, Applied> {
        self.applied.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The settings as this process applies them (the store's, with a
    /// front end's overrides for this run).
    pub fn settings(&self) -> Settings {
        self.applied().settings.clone()
    }

    /// Stores `settings` and applies them: what the Settings view saves
    /// (validated by the store first; nothing changes if it refuses them).
    pub async fn save_settings(&self, settings: &Settings) -> Result<(), headroom_store::StoreError> {
        self.store.set_settings(settings).await?;
        self.apply_settings(settings);
        Ok(())
    }

    /// Makes `settings` the ones this process goes by (at start and after
    /// each save; `headroom chat` with its flags): turns read them from
    /// here, fit checks and loads from the next one on; chats' saved states
    /// and the away policy follow at once.
    pub fn apply_settings(&self, settings: &Settings) {
        // Validated with the settings; an unreadable one keeps the float cache.
        let kv = settings.kv_format().unwrap_or_default();
        *self.applied.write().unwrap_or_else(PoisonError::into_inner) = Applied { settings: settings.clone(), kv };
        // Off (0 MB) keeps chats' states in memory only; the folder stays
        // known, so deleting a chat still deletes what it saved when it was on.
        let tier =
            Some(DiskTier { dir: self.kv_states_dir(), limit_bytes: settings.kv_disk_mb.saturating_mul(1 << 20) });
        if let Err(e) = self.engine.set_disk_tier(tier) {
            tracing::warn!("could not set where chats' KV states are saved: {e}");
        }
        self.away.apply_settings(settings);
    }

    /// `headroom serve`'s flags over the settings for its loads: the
    /// context limit, the kernel and the KV format (which may name a group
    /// size the settings cannot).
    pub fn override_loads(&self, context_limit: usize, kernel: KernelChoice, kv: KvFormat) {
        let mut applied = self.applied.write().unwrap_or_else(PoisonError::into_inner);
        applied.settings.context_limit = context_limit;
        applied.settings.kernel = kernel;
        applied.kv = kv;
    }

    /// Context length (tokens) models are checked and loaded at unless a load names another.
    pub fn context_limit(&self) -> usize {
        self.applied().settings.context_limit
    }

    /// Memory never given to a model (the settings' OS headroom), in bytes.
    pub fn os_headroom_bytes(&self) -> u64 {
        // Validated to 0..=1024 GB, so the product fits a u64.
        (self.applied().settings.os_headroom_gb * headroom_core::fit::GIB as f64).round() as u64
    }

    /// The most the prompt cache may be given at the next load (bytes).
    pub fn prompt_cache_max_bytes(&self) -> u64 {
        self.applied().settings.prompt_cache_mb.saturating_mul(1 << 20)
    }

    /// The kernel the settings ask for.
    pub fn kernel_choice(&self) -> KernelChoice {
        self.applied().settings.kernel
    }

    /// The kernel models are loaded (and fit-checked) with.
    pub fn quant_kernel(&self) -> QuantKernel {
        QuantKernel::choose(self.kernel_choice())
    }

    /// The KV format models are loaded (and fit-checked) with, and the
    /// server's requests that name none get.
    pub fn kv_format(&self) -> KvFormat {
        self.applied().kv
    }

    /// The port this Mac lends itself on (Settings → Two Macs → Lend), if it does.
    pub fn lending_port(&self) -> Option<u16> {
        let lending = self.lending.lock().unwrap_or_else(PoisonError::into_inner);
        lending.as_ref().map(|l| l.address.port())
    }

    /// The model the settings load beside others as their draft (its id), if any.
    pub fn draft_model(&self) -> Option<String> {
        self.applied().settings.draft_model.clone()
    }

    /// The Mac lending itself to this one (`HOST:PORT`), if the settings name one.
    pub fn peer(&self) -> Option<String> {
        self.applied().settings.peer.clone()
    }

    pub fn loaded_model(&self) -> Option<LoadedModel> {
        self.loaded.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn set_loaded(&self, model: Option<LoadedModel>) {
        if model.is_some() {
            // A load is use, and whatever Headroom unloaded is not to be reloaded over it.
            self.away.note_loaded();
        }
        *self.loaded.lock().unwrap_or_else(PoisonError::into_inner) = model;
    }
}
