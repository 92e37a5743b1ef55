//! The app's side of the local server: the [`ModelProvider`] that answers
//! from the same model list and fit check as the picker, and loads through
//! the app's engine handle, so the popover and the server share one model
//! and one queue.

use std::path::{Path, PathBuf};
use std::sync::PoisonError;
use std::time::UNIX_EPOCH;

use headroom_core::fit::estimate;
use headroom_core::format::CONFIG_FILE;
use headroom_core::kv::KvFormat;
use headroom_engine::source::{is_gguf, ModelFiles};
use headroom_engine::EngineError;
use headroom_server::{ModelCard, ModelProvider, ProvideError, ReadyModel};

use crate::fit;
use crate::models::{self, ModelEntry};
use crate::state::{AppState, LoadedModel};

/// A model the server can name: its id and folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offered {
    pub id: String,
    pub path: PathBuf,
}

/// The models the server offers: the picker's (the app's models folder and
/// the HF cache) plus any folders the CLI named.
#[derive(Debug, Clone)]
pub struct AppModels {
    state: AppState,
    /// Folders outside the app's own, first in the list (they win a duplicate id).
    extra: Vec<Offered>,
    /// A Mac lending itself (`serve --peer`): every model loads split with it.
    peer: Option<String>,
    /// A draft model (`serve --draft-model`) loaded beside every model.
    draft: Option<PathBuf>,
    /// The app's own server: the model the popover holds is kept (requests
    /// for another get `ModelInUse`) and is all `/v1/models` offers, unless
    /// the setting `server_allow_model_switch` is on. `headroom serve`
    /// has no popover and switches freely.
    beside_popover: bool,
}

impl AppModels {
    pub fn new(state: AppState) -> Self {
        Self { state, extra: Vec::new(), peer: None, draft: None, beside_popover: false }
    }

    /// The provider of the app's own server (see `beside_popover`).
    pub fn beside_popover(self) -> Self {
        Self { beside_popover: true, ..self }
    }

    /// The model the popover holds, when the server must keep it: the app's
    /// server, a model loaded, switching not allowed.
    fn held(&self) -> Option<LoadedModel> {
        if !self.beside_popover || self.state.settings().server_allow_model_switch {
            return None;
        }
        self.state.loaded_model()
    }

    /// Splits every model it loads with the lending Mac at `peer` (`HOST:PORT`).
    pub fn with_peer(self, peer: Option<String>) -> Self {
        Self { peer, ..self }
    }

    /// Loads the draft model in `draft` beside every model it loads.
    pub fn with_draft(self, draft: Option<PathBuf>) -> Self {
        Self { draft, ..self }
    }

    /// Offers the model at `path`, as its name: a folder with a config.json
    /// or one .gguf file, or a .gguf file (named by its stem): what the one
    /// model-files door (`ModelFiles`) reads, as `generate` and the picker do.
    /// `None` if it is none of those.
    pub fn add_model(&mut self, path: &Path) -> Option<String> {
        let id = if path.is_dir() && (path.join(CONFIG_FILE).is_file() || ModelFiles::locate(path).gguf().is_some()) {
            path.file_name()?.to_str()?.to_owned()
        } else if path.is_file() && is_gguf(path) {
            path.file_stem()?.to_str()?.to_owned()
        } else {
            return None;
        };
        self.extra.retain(|m| m.id != id);
        self.extra.push(Offered { id: id.clone(), path: path.to_owned() });
        Some(id)
    }

    /// Offers the bundled default model (the one `generate` and `chat` use
    /// when none is named) under its id, without loading it: the first
    /// request that names it loads it. `None` if this install has none.
    pub fn add_default_model(&mut self) -> Option<String> {
        let path = crate::default_model::bundled()?;
        let id = crate::default_model::DEFAULT_MODEL_ID.to_owned();
        self.extra.retain(|m| m.id != id);
        self.extra.push(Offered { id: id.clone(), path });
        Some(id)
    }

    /// Offers every model folder directly inside `dir`; returns how many.
    pub fn add_models_dir(&mut self, dir: &Path) -> std::io::Result<usize> {
        let mut subdirs: Vec<PathBuf> =
            std::fs::read_dir(dir)?.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
        subdirs.sort();
        Ok(subdirs.iter().filter(|d| self.add_model(d).is_some()).count())
    }

    /// Every model on offer, the CLI's folders first.
    pub fn entries(&self) -> Vec<Offered> {
        let mut list = self.extra.clone();
        for ModelEntry { id, path, .. } in
            models::list_models(&self.state.locations.data_dir, &self.state.locations.hub, self.state.quant_kernel())
        {
            if !list.iter().any(|e| e.id == id) {
                list.push(Offered { id, path });
            }
        }
        list
    }
}

fn card(m: &Offered) -> ModelCard {
    let created = std::fs::metadata(&m.path)
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let owned_by = m.id.split_once('/').map_or("headroom", |(org, _)| org).to_owned();
    ModelCard { id: m.id.clone(), created, owned_by }
}

impl ModelProvider for AppModels {
    /// What a request may name: while the popover's model is held, that
    /// model alone (not every folder on this Mac); otherwise every model
    /// on offer.
    fn models(&self) -> Vec<ModelCard> {
        let entries = self.entries();
        match self.held() {
            Some(held) => {
                let entry = entries.into_iter().find(|e| e.path == held.path);
                vec![card(&entry.unwrap_or(Offered { id: held.id, path: held.path }))]
            }
            None => entries.iter().map(card).collect(),
        }
    }

    fn ensure_loaded(
        &self,
        id: &str,
        context_limit: Option<usize>,
        kv: Option<KvFormat>,
    ) -> Result<ReadyModel, ProvideError> {
        let state = &self.state;
        // One switch at a time, with the popover's (models::load).
        let _switch = state.switching.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = self.entries().into_iter().find(|m| m.id == id);
        // Checked before "not found": a client learns nothing of the
        // folders on this Mac by asking for names while the popover holds one.
        if let Some(held) = self.held().filter(|h| entry.as_ref().is_none_or(|e| e.path != h.path)) {
            return Err(ProvideError::ModelInUse { requested: id.to_owned(), loaded: held.id });
        }
        let entry = entry.ok_or_else(|| ProvideError::NotFound { model: id.to_owned() })?;
        let loaded = state.loaded_model().filter(|m| m.path == entry.path);
        if let Some(m) = &loaded {
            if let Some(kv) = kv {
                kv.check_head_dim(m.footprint.head_dim)
                    .map_err(|source| ProvideError::KvFormat { model: entry.id.clone(), source })?;
            }
            // Already loaded (by the server or the popover): used as it is
            // when the request's KV format needs no more than its load was
            // approved for. Otherwise refused: reloading it would pull the
            // model from under the popover's chat and every queued request.
            if kv.is_none_or(|kv| within_approved(m, kv)) {
                let think = state.settings().thinking.get(&entry.id).copied();
                return Ok(ReadyModel { id: entry.id, load: m.info.load, think, thinks: m.info.thinks });
            }
            return Err(ProvideError::KvFormatInUse { model: entry.id, loaded: m.info.kv_label.clone() });
        }
        let failed = |reason: String| ProvideError::LoadFailed { model: id.to_owned(), reason };
        let context_limit = context_limit.unwrap_or_else(|| state.context_limit());
        let kv = kv.unwrap_or_else(|| state.kv_format());
        // The picker's guard: headers and a fresh memory reading (counting
        // what unloading the current model gives back), before anything moves.
        let source = models::budget_source(state).map_err(|e| failed(e.to_string()))?;
        let kernel = state.quant_kernel();
        let plan = fit::LoadPlan {
            dir: &entry.path,
            draft: self.draft.as_deref(),
            context: context_limit,
            dtype: headroom_engine::ComputeDtype::Native,
            kernel,
            kv,
        };
        let report = fit::check_load(&plan, source, Some(&state.store)).map_err(|e| match e {
            fit::FitError::Model(EngineError::KvFormat { source }) => {
                ProvideError::KvFormat { model: entry.id.clone(), source }
            }
            other => failed(other.to_string()),
        })?;
        // Two Macs (`serve --peer`): the model split with the peer, each
        // Mac within its own budget; refused where either would swap.
        let (report, placement) = match &self.peer {
            Some(_) if self.draft.is_some() => {
                return Err(failed("a draft model does not run with --peer yet: use one or the other".into()));
            }
            Some(peer) => {
                let split = fit::check_split(&entry.path, context_limit, plan.dtype, kernel, kv, source, peer)
                    .map_err(|e| failed(e.to_string()))?;
                let (host, lent) = (&split.report.host, &split.report.peer);
                tracing::info!(
                    model = %entry.id, peer = %split.address,
                    "split across two Macs: layers 0..{} here ({:?}), {}..{} there ({:?})",
                    host.layers, host.fit.verdict, lent.first_layer, lent.first_layer + lent.layers, lent.fit.verdict
                );
                if split.report.refuses() {
                    let over =
                        if split.report.host.fit.verdict.refuses() { &split.report.host } else { &split.report.peer };
                    return Err(ProvideError::WouldNotFit { model: entry.id, report: Box::new(over.fit.clone()) });
                }
                (split.report.host.fit.clone(), Some(split.placement().map_err(|e| failed(e.to_string()))?))
            }
            None if report.verdict.refuses() => {
                return Err(ProvideError::WouldNotFit { model: entry.id, report: Box::new(report) });
            }
            None => (report, None),
        };
        let beside = models::Beside { peer: placement, draft: self.draft.clone() };
        let info = models::switch_to(state, &entry.id, &entry.path, context_limit, kv, &report, beside)
            .map_err(|e| failed(e.to_string()))?;
        tracing::info!(model = %entry.id, context_limit, kv = %report.kv_label, "the server loaded a model");
        let think = state.settings().thinking.get(&entry.id).copied();
        Ok(ReadyModel { id: entry.id, load: info.load, think, thinks: info.thinks })
    }
}

/// Whether a turn of the loaded model `m` with its cache stored as `kv`
/// peaks no higher than its load's format was approved for, at its context limit.
fn within_approved(m: &LoadedModel, kv: KvFormat) -> bool {
    let context = u64::try_from(m.info.context_limit).unwrap_or(u64::MAX);
    let peak = |kv| estimate(&m.footprint, context, kv).predicted_peak_bytes;
    peak(kv) <= peak(m.info.kv_format)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locations;

    #[test]
    fn offers_the_app_models_and_extra_folders_and_refuses_what_would_not_fit() {
        let state = crate::test_state("serve-provider");
        let own = state.locations.data_dir.join(locations::MODELS_DIR).join("huge-demo");
        fit::write_sparse_model(&own, 200_000_000_000);
        let outside = state.locations.data_dir.join("elsewhere");
        let demo = outside.join("tiny");
        headroom_engine::demo::write_demo_model(
            &demo,
            &headroom_engine::demo::DemoSpec::new(
                headroom_engine::demo::Arch::Qwen2,
                headroom_engine::demo::Preset::Tiny,
                headroom_engine::demo::Bits::Four,
            ),
        )
        .unwrap();
        std::fs::create_dir_all(outside.join("not-a-model")).unwrap();

        let mut provider = AppModels::new(state.clone());
        assert_eq!(provider.add_models_dir(&outside).ok(), Some(1));
        let cards = provider.models();
        let ids: Vec<&str> = cards.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["tiny", "huge-demo"]);
        assert!(cards[0].created > 0 && cards[0].owned_by == "headroom", "{cards:?}");

        let err = provider.ensure_loaded("nobody/nothing", None, None).err();
        assert!(matches!(err, Some(ProvideError::NotFound { .. })), "{err:?}");
        let err = provider.ensure_loaded("huge-demo", None, None).err();
        let Some(ProvideError::WouldNotFit { model, report }) = err else { panic!("{err:?}") };
        assert_eq!((model.as_str(), report.estimate.weight_bytes), ("huge-demo", 200_000_000_000));
        assert!(state.loaded_model().is_none(), "nothing was loaded");

        let ready = provider.ensure_loaded("tiny", Some(512), None).unwrap();
        assert_eq!(ready.id, "tiny");
        assert_eq!(state.loaded_model().map(|m| m.path), Some(demo.clone()));
        // The load the request then names: the engine's current one.
        assert_eq!(state.loaded_model().map(|m| m.info.load), Some(ready.load));
        // Loaded already: nothing to do, the same answer.
        assert_eq!(provider.ensure_loaded("tiny", None, None).ok(), Some(ready));
    }

    #[test]
    fn beside_the_popover_the_server_keeps_its_model_and_offers_only_it_unless_switching_is_allowed() {
        let state = crate::test_state("serve-beside-popover");
        let models = state.locations.data_dir.join(locations::MODELS_DIR);
        let spec = headroom_engine::demo::DemoSpec::new(
            headroom_engine::demo::Arch::Qwen2,
            headroom_engine::demo::Preset::Tiny,
            headroom_engine::demo::Bits::Four,
        );
        for name in ["held", "other"] {
            headroom_engine::demo::write_demo_model(&models.join(name), &spec).unwrap();
        }
        let server = AppModels::new(state.clone()).beside_popover();
        // Nothing held yet: every model is on offer, and a request may load one.
        let ids = |p: &AppModels| p.models().into_iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(ids(&server), ["held", "other"]);
        // The popover's load (the same switch the picker makes).
        let ready = AppModels::new(state.clone()).ensure_loaded("held", Some(512), None).unwrap();

        assert_eq!(ids(&server), ["held"], "only the held model is offered, not every folder");
        let err = server.ensure_loaded("other", None, None).err();
        let Some(e @ ProvideError::ModelInUse { .. }) = err else { panic!("{err:?}") };
        assert!(e.to_string().contains("`held`") && e.to_string().contains("`other`"), "{e}");
        // A name that is no model gets the same answer: no probing of the folders.
        let err = server.ensure_loaded("no-such-model", None, None).err();
        assert!(matches!(err, Some(ProvideError::ModelInUse { ref requested, .. }) if requested == "no-such-model"));
        assert_eq!(state.loaded_model().map(|m| m.id), Some("held".to_owned()), "nothing switched");
        assert_eq!(server.ensure_loaded("held", None, None).ok(), Some(ready), "the held model serves");

        // `headroom serve` (no popover) and the user's switch both allow it.
        let allow = headroom_core::settings::Settings { server_allow_model_switch: true, ..state.settings() };
        crate::runtime::block_on(state.save_settings(&allow)).unwrap();
        assert_eq!(ids(&server), ["held", "other"]);
        assert_eq!(server.ensure_loaded("other", Some(512), None).map(|r| r.id).ok().as_deref(), Some("other"));
        assert_eq!(state.loaded_model().map(|m| m.id), Some("other".to_owned()));
    }

    #[test]
    fn a_gguf_file_or_a_folder_holding_one_is_offered_as_generate_takes_it() {
        let state = crate::test_state("serve-gguf");
        let root = headroom_test_support::scratch("serve-gguf");
        let folder = root.join("SmolLM2-folder");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("SmolLM2.Q4_1.gguf"), b"GGUF").unwrap();
        let file = root.join("Other.Q8_0.gguf");
        std::fs::write(&file, b"GGUF").unwrap();
        let not_a_model = root.join("notes.txt");
        std::fs::write(&not_a_model, b"hello").unwrap();
        let mut provider = AppModels::new(state);
        assert_eq!(provider.add_model(&folder).as_deref(), Some("SmolLM2-folder"));
        assert_eq!(provider.add_model(&file).as_deref(), Some("Other.Q8_0"));
        assert_eq!(provider.add_model(&not_a_model), None);
        // A folder with two .gguf files is no one model (the door takes exactly one).
        std::fs::write(root.join("Third.Q4_0.gguf"), b"GGUF").unwrap();
        assert_eq!(provider.add_model(&root), None);
    }

    #[test]
    fn a_request_for_a_larger_kv_format_than_the_loaded_models_is_refused_not_reloaded() {
        let state = crate::test_state("serve-kv-in-use");
        let dir = state.locations.data_dir.join(locations::MODELS_DIR).join("kv");
        let spec = headroom_engine::demo::DemoSpec::new(
            headroom_engine::demo::Arch::Qwen2,
            headroom_engine::demo::Preset::KvHeavy,
            headroom_engine::demo::Bits::Four,
        );
        headroom_engine::demo::write_demo_model(&dir, &spec).unwrap();
        let provider = AppModels::new(state.clone());
        let q8 = KvFormat::quantized(8, 64, 0).unwrap();
        let ready = provider.ensure_loaded("kv", Some(8192), Some(q8)).unwrap();
        let loaded = state.loaded_model().unwrap();
        assert_eq!(loaded.info.kv_format, q8);
        // A model whose KV cache is most of its memory: a float cache needs more.
        let peak = |kv| estimate(&loaded.footprint, 8192, kv).predicted_peak_bytes;
        assert!(peak(KvFormat::Float) > peak(q8), "{} vs {}", peak(KvFormat::Float), peak(q8));
        // Reloading would take the model from under the popover and the queue.
        let err = provider.ensure_loaded("kv", None, Some(KvFormat::Float)).err();
        assert!(matches!(err, Some(ProvideError::KvFormatInUse { ref model, .. }) if model == "kv"), "{err:?}");
        assert_eq!(state.loaded_model().map(|m| m.info.kv_format), Some(q8), "not reloaded");
        // What needs no more memory is served by the model as it is.
        assert_eq!(provider.ensure_loaded("kv", None, Some(q8)).ok(), Some(ready.clone()));
        assert_eq!(provider.ensure_loaded("kv", None, None).ok(), Some(ready));
    }
}
