//! The one thing the server asks of its embedder: which models exist, and
//! "make this one the loaded model if it fits". The app implements it over
//! its model list and fit check, so the server, the CLI and the popover
//! agree on what exists and on what would swap.

use headroom_core::kv::KvFormat;

use crate::error::ProvideError;

/// A model as `GET /v1/models` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCard {
    /// What clients put in `model`.
    pub id: String,
    /// Unix seconds (the folder's modification time; 0 if unknown).
    pub created: u64,
    /// The organisation for `org/name` ids, else "headroom".
    pub owned_by: String,
}

/// The model a request will run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyModel {
    /// The id responses name (`model`).
    pub id: String,
    /// The engine's load of it (`ModelInfo::load`): the request runs on
    /// that load or fails, never on a model the app switched to meanwhile.
    pub load: u64,
    /// The model's thinking setting (`None`: its template's default) and
    /// whether its template has a think block (`headroom_core::thinking`).
    pub think: Option<headroom_core::thinking::Think>,
    pub thinks: bool,
}

/// Answers the server's questions about models. Calls may block (reading
/// headers, loading weights): the server makes them off its async threads,
/// one at a time, so a load and the run that needed it are never split by
/// another request's load.
pub trait ModelProvider: Send + Sync + 'static {
    /// Every model a client may name.
    fn models(&self) -> Vec<ModelCard>;

    /// Makes `id` the engine's loaded model: nothing to do when it is loaded
    /// already; otherwise a fit check at `context_limit` (`None`: the
    /// provider's default) and, only if it fits, a load that replaces the
    /// current model (the engine drops the old one first, so two models
    /// never share memory).
    ///
    /// `kv` is the KV format the request asks for (`None`: the provider's).
    /// A loaded model serves it as it is when that format needs no more
    /// memory than the one its load was approved for; otherwise the model is
    /// fit-checked and loaded again with it, so a request can never take
    /// memory the verdict did not approve.
    fn ensure_loaded(
        &self,
        id: &str,
        context_limit: Option<usize>,
        kv: Option<KvFormat>,
    ) -> Result<ReadyModel, ProvideError>;
}
