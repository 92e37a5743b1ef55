//! The one chat-turn service, for the app and `headroom chat` alike: a turn
//! goes route → cache lookup → (for the cloud) an optional summary of older
//! turns → the privacy gate → the run (local model, cloud, or the cached
//! answer) → record (store, stats) → events. The Tauri commands and the CLI
//! are thin front ends over [`start`]: they hand it a [`TurnRequest`] and a
//! [`Sink`] for the [`ChatEvent`]s (a Channel, stdout), and the run's id comes
//! back at once.
//!
//! Nothing here imports `crate::commands` or `crate::cli` (a test checks).
//!
//! A cached answer is stored like a cloud one (`route = cloud`); what marks
//! it is its stats' model id, `cache:<model>` (no schema change needed, and
//! the charts keep it apart from real cloud calls, whose rates it would
//! distort).

pub mod cache;
pub(crate) mod calls;
pub mod cloud;
pub mod events;
pub mod gate;
pub mod local;
pub mod record;
pub mod route;
pub mod summary;

#[cfg(test)]
mod tests;

use std::sync::mpsc::{self, Receiver};

use headroom_core::chat::Message;
use headroom_core::router::{Force, RouteError};
use headroom_store::{in_context, LastTurn, StoreError};

pub use events::{ChatEvent, RouteInfo, RouteReason, RouteTarget, Sink, ToolOutcome, TurnEnd};
pub use record::StoredIds;
pub use route::Choice;

use crate::codes::{capitalized, Coded, ErrorCode};
use crate::runs::Registered;
use crate::runtime::block_on;
use crate::state::AppState;

/// The most new tokens one turn may ask for.
pub const MAX_TOKENS_LIMIT: usize = 32_768;

/// What to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// A new message.
    New(String),
    /// The session's last question again: its answer is replaced once the
    /// new one has started (and stays as it was if the new one is refused).
    Again,
}

/// What the user chose for one turn, beyond its text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnOptions {
    /// Max new tokens; the settings' value when `None`.
    pub max_tokens: Option<usize>,
    /// Run here or in the cloud instead of where the router would send it.
    /// Forcing the cloud does not let sensitive content out.
    pub force: Option<Force>,
    /// The user lets this one message's sensitive content go to the cloud
    /// (after seeing the findings: the route preview lists them).
    pub allow_sensitive: bool,
    /// Sampling, where the caller overrides the settings (`headroom chat --temp`).
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    /// Generate through end-of-sequence tokens (benchmarks, tests; local only).
    pub ignore_eos: bool,
    /// Run locally even where the model would swap at the context the turn
    /// needs (forcing local means the same).
    pub override_fit: bool,
    /// The chat's Think switch (a thinking model only): `None` leaves the
    /// model's setting (`Settings::thinking`), else its template's default.
    pub think: Option<bool>,
    /// The model must call this tool first (an enabled tool of a running MCP server).
    pub tool: Option<String>,
}

/// One turn to run.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRequest {
    pub session: String,
    pub ask: Ask,
    pub options: TurnOptions,
}

/// A turn handed to its run: its id now (for cancelling), its end later.
#[derive(Debug)]
pub struct Running {
    pub run_id: u64,
    /// Sent once, after the end is recorded.
    pub done: Receiver<Done>,
}

/// How a turn ended, once recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    pub end: TurnEnd,
    pub route: RouteInfo,
    /// Where it was stored; `None` for a regenerate that never started
    /// (then nothing changed).
    pub ids: Option<StoredIds>,
}

/// Why a turn did not start. Each is refused before anything is stored (a
/// regenerate's old answer stays as it was).
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error("the message is empty")]
    EmptyMessage,
    #[error("max new tokens must be between 1 and {MAX_TOKENS_LIMIT}, not {0}")]
    MaxTokens(usize),
    #[error("this chat has no answer to regenerate yet")]
    NothingToRegenerate,
    #[error("no model is loaded yet")]
    NoModelLoaded,
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error("no cloud provider is set up")]
    NoCloudProvider,
    #[error("no cloud model is set")]
    NoCloudModel,
    /// The privacy gate refused the request (see `headroom_core::gate`).
    #[error(transparent)]
    Blocked(#[from] headroom_core::gate::Blocked),
    /// The loaded model would swap at the context this turn needs.
    #[error("{model} would push this Mac into swap at the {context} tokens this chat needs now; nothing was run. Force the local model for this message to run it anyway, or free memory.")]
    WouldSwap { model: String, context: u64 },
    #[error(transparent)]
    Key(#[from] headroom_cloud::KeyError),
    #[error(transparent)]
    Cloud(#[from] headroom_cloud::CloudError),
    #[error(transparent)]
    Engine(#[from] headroom_engine::EngineError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("this Mac's memory could not be read: {0}")]
    Memory(headroom_memory::MemoryError),
    /// A model Headroom had unloaded could not be loaded again for this message.
    // Boxed: a refusal carries its numbers, and every turn result would be that large.
    #[error(transparent)]
    Load(Box<crate::models::LoadError>),
    #[error("could not start the turn's thread: {0}")]
    Thread(std::io::Error),
    // Boxed: as `Load`.
    #[error(transparent)]
    Tools(Box<crate::tools::ToolsError>),
}

impl From<crate::tools::ToolsError> for TurnError {
    fn from(e: crate::tools::ToolsError) -> Self {
        Self::Tools(Box::new(e))
    }
}

impl From<crate::models::LoadError> for TurnError {
    fn from(e: crate::models::LoadError) -> Self {
        Self::Load(Box::new(e))
    }
}

/// The conversation before the question, and what a regenerate replaces.
struct Asked {
    text: String,
    history: Vec<Message>,
    replaces: Option<LastTurn>,
}

/// Starts a turn in `request.session` with the settings `state` goes by;
/// see the module docs. Returns once the run is under way (its events
/// follow on `sink`) or with why it was refused, in which case nothing was
/// stored.
pub fn start(
    state: &AppState,
    request: TurnRequest,
    sink: impl FnMut(ChatEvent) -> bool + Send + 'static,
) -> Result<Running, TurnError> {
    let settings = &state.settings();
    let options = &request.options;
    let max_tokens = options.max_tokens.unwrap_or(settings.max_tokens);
    if max_tokens == 0 || max_tokens > MAX_TOKENS_LIMIT {
        return Err(TurnError::MaxTokens(max_tokens));
    }
    if let Ask::New(text) = &request.ask {
        if text.trim().is_empty() {
            return Err(TurnError::EmptyMessage);
        }
    }
    let asked = asked(state, &request)?;
    state.away.note_use();
    // A model Headroom unloaded on its own (idle, memory pressure) comes
    // back for the next message, fit-checked, unless it is for the cloud.
    let mut notes = Vec::new();
    if options.force != Some(Force::Cloud) {
        notes.extend(
            crate::give_back::reload(state)?.map(|message| RouteReason { code: crate::away::RELOADED_CODE, message }),
        );
    }
    if state.loaded_model().is_none() && settings.cloud_base_url.is_none() && options.force != Some(Force::Cloud) {
        // Nothing to route to: the plainest words for the first run.
        return Err(TurnError::NoModelLoaded);
    }
    let choice = Choice { force: options.force, allow_sensitive: options.allow_sensitive, ..Choice::default() };
    let route::Routed { decision, basis } =
        route::for_state(state, Some(&request.session), &asked.text, &asked.history, choice)?;
    let plan = Plan {
        session: request.session.clone(),
        text: asked.text,
        history: asked.history,
        replaces: asked.replaces,
        options: request.options,
        max_tokens,
        decision,
        basis,
        notes,
    };
    let sink: Sink = Box::new(sink);
    if plan.decision.is_cloud() {
        cloud::start(state, settings, plan, sink)
    } else {
        local::start(state, settings, plan, sink)
    }
}

/// Everything [`start`] decided, for the local or the cloud side.
#[derive(Debug)]
pub(crate) struct Plan {
    pub session: String,
    pub text: String,
    /// The conversation before `text`, as the model sees it.
    pub history: Vec<Message>,
    pub replaces: Option<LastTurn>,
    pub options: TurnOptions,
    pub max_tokens: usize,
    pub decision: headroom_core::router::Decision,
    /// The figures the decision's fit was taken on (a model was loaded).
    pub basis: Option<route::FitBasis>,
    /// Said in the route note besides the router's reasons (the model was loaded again first).
    pub notes: Vec<RouteReason>,
}

fn asked(state: &AppState, request: &TurnRequest) -> Result<Asked, TurnError> {
    let stored = block_on(state.store.messages(&request.session))?;
    Ok(match &request.ask {
        Ask::New(text) => Asked {
            text: text.clone(),
            history: stored.iter().filter(|m| in_context(m)).map(|m| Message::new(m.role, m.content.clone())).collect(),
            replaces: None,
        },
        Ask::Again => {
            let last = LastTurn::of(&stored).ok_or(TurnError::NothingToRegenerate)?;
            let before = &stored[..stored.len() - 2];
            Asked {
                text: last.question.clone(),
                history: before
                    .iter()
                    .filter(|m| in_context(m))
                    .map(|m| Message::new(m.role, m.content.clone()))
                    .collect(),
                replaces: Some(last),
            }
        }
    })
}

/// Runs `events` to the end on a thread of its own: drive (sink, recorder),
/// then `after` (the cloud keeps its answer in the cache), then the end is
/// recorded and sent on `done`. `registered` is the run's entry in the
/// registry, dropped when the run is over.
pub(crate) fn spawn(
    registered: Registered,
    route: RouteInfo,
    events: impl IntoIterator<Item = events::RunEvent> + Send + 'static,
    mut sink: Sink,
    mut recorder: record::TurnRecorder,
    stop: impl Fn() + Send + 'static,
    after: impl FnOnce(&TurnEnd) + Send + 'static,
) -> Result<Running, TurnError> {
    let run_id = registered.id();
    let (done_tx, done) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("headroom-turn-{run_id}"))
        .spawn(move || {
            let end = events::drive(run_id, &route, events, &mut sink, &mut recorder, stop);
            drop(registered);
            after(&end);
            let ids = match recorder.finish(&end) {
                Ok(ids) => ids,
                Err(e) => {
                    tracing::error!("could not store the finished turn: {e}");
                    None
                }
            };
            let _ = done_tx.send(Done { end, route, ids });
        })
        .map_err(TurnError::Thread)?;
    Ok(Running { run_id, done })
}

impl Coded for TurnError {
    fn code(&self) -> ErrorCode {
        use TurnError as E;
        match self {
            E::Route(e) => e.code(),
            E::Key(e) => e.code(),
            E::Cloud(e) => Coded::code(e),
            E::Engine(e) => e.code(),
            E::Store(e) => e.code(),
            E::Load(e) => e.code(),
            E::Tools(e) => e.code(),
            E::EmptyMessage => ErrorCode::EmptyMessage,
            E::NoModelLoaded => ErrorCode::NoModelLoaded,
            E::NothingToRegenerate => ErrorCode::NothingToRegenerate,
            E::MaxTokens(_) => ErrorCode::InvalidSetting,
            E::NoCloudProvider => ErrorCode::RouteNoCloud,
            E::NoCloudModel => ErrorCode::CloudNoModel,
            E::Blocked(_) => ErrorCode::PrivacyBlocked,
            E::WouldSwap { .. } => ErrorCode::TurnWouldSwap,
            E::Memory(_) => ErrorCode::Memory,
            E::Thread(_) => ErrorCode::EngineInternal,
        }
    }

    fn message(&self) -> String {
        use TurnError as E;
        match self {
            E::Route(e) => e.message(),
            E::Key(e) => e.message(),
            E::Cloud(e) => e.message(),
            E::Engine(e) => e.message(),
            E::Store(e) => e.message(),
            E::Load(e) => e.message(),
            E::Tools(e) => e.message(),
            E::EmptyMessage => "Type a message first.".to_owned(),
            E::NoModelLoaded => "No model is loaded yet. Pick one from the list at the top.".to_owned(),
            E::NoCloudProvider => "No cloud provider is set up: add one in Settings.".to_owned(),
            E::NoCloudModel => "No cloud model is set: choose one in Settings, next to the cloud URL.".to_owned(),
            _ => capitalized(&self.to_string()),
        }
    }

    fn details(&self) -> Option<serde_json::Value> {
        match self {
            TurnError::Load(e) => e.details(),
            _ => None,
        }
    }
}
