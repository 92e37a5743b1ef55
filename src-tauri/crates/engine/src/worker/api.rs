//! The engine's vocabulary, as its callers see it: how a model is loaded
//! ([`LoadSettings`]) and what loading, unloading and dropping sessions
//! report; a turn's request, its statistics, and the events of its run.
//! Plain data; the handle (handle.rs) sends it and the thread (thread.rs)
//! acts on it.

use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use headroom_core::chat::{FinishReason, Message, Thinking};
use headroom_core::chat_format::ToolChoice;
use headroom_core::kv::KvFormat;
use headroom_core::speculative::{Speculation, SpeculativeMode};
use headroom_core::stats::{Rates, TurnTimings};

use crate::backend::backend_info;
use crate::error::{EngineError, Result};
use crate::mlx_memory::MlxMemory;
use crate::peer::host::HandOffs;
use crate::peer::PeerPlacement;
use crate::prompt_cache::Reuse;
use crate::quant::QuantKernel;
use crate::sampler::SamplingParams;
use crate::weights::ComputeDtype;

/// The context limit when the caller sets none: what the fit verdict assumes.
pub const DEFAULT_CONTEXT_LIMIT: usize = 8192;

/// How a model is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadSettings {
    pub dtype: ComputeDtype,
    /// How quantized matrices multiply; the default suits this process's device.
    pub kernel: QuantKernel,
    /// Most positions a session's cache may hold (prompt + generated). The
    /// fit verdict was computed at this length, so the engine enforces it.
    pub context_limit: usize,
    /// Most bytes MLX may keep in its buffer cache (freed buffers kept for
    /// reuse) while this model is loaded: the caller's budget minus the
    /// predicted peak, so a long chat cannot grow the cache into swap
    /// (`headroom_core::fit::buffer_cache_limit`). `None`: MLX's default
    /// (its memory limit).
    pub cache_limit_bytes: Option<usize>,
    /// How sessions' KV caches store keys and values unless a request asks
    /// otherwise (the fit verdict was computed for this format).
    pub kv: KvFormat,
    /// MLX's wired limit while this model is loaded (Metal only;
    /// `headroom_core::fit::wired_limit` decides it). Applied only where MLX
    /// computes on the GPU, and never above the GPU's recommended working
    /// set: MLX refuses that and the process exits. `None`: nothing wired.
    pub wired_limit_bytes: Option<usize>,
    /// Bytes the prompt cache may keep besides the latest request's state
    /// (`headroom_core::fit::prompt_cache_limit`: out of what the verdict
    /// left over). 0 keeps only the latest.
    pub prompt_cache_bytes: usize,
    /// Where the model's later layers run, when it is split across two
    /// Macs (`None`: all here).
    pub peer: Option<PeerPlacement>,
    /// A draft model loaded beside it (same vocabulary, full attention), for
    /// turns that ask for [`SpeculativeMode::Draft`]; its weights and cache
    /// are counted in the fit (`headroom_core::fit::with_draft`).
    pub draft: Option<PathBuf>,
}

impl Default for LoadSettings {
    fn default() -> Self {
        Self {
            dtype: ComputeDtype::Native,
            kernel: QuantKernel::for_device(backend_info().device),
            context_limit: DEFAULT_CONTEXT_LIMIT,
            cache_limit_bytes: None,
            kv: KvFormat::Float,
            wired_limit_bytes: None,
            prompt_cache_bytes: 0,
            peer: None,
            draft: None,
        }
    }
}

/// What unloading a model gave back, measured on the engine thread from
/// MLX's counters (active + cache) before dropping the model and after
/// clearing MLX's buffer cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UnloadReport {
    /// Whether a model was loaded.
    pub had_model: bool,
    /// Dropping the model and sessions and clearing MLX's cache.
    pub unload_time: Duration,
    /// MLX's active + cache bytes before minus after (0 if it grew:
    /// another thread of the process may allocate meanwhile).
    pub freed_bytes: u64,
    /// What the dropped arrays held: the weights plus every session's KV
    /// cache (their `nbytes`). MLX's active memory must fall by this much.
    pub expected_bytes: u64,
    /// Whether MLX's active memory fell by `expected_bytes` (within
    /// [`RETURN_TOLERANCE_BYTES`]): nothing still holds the old model, so the
    /// next one does not land on top of it.
    pub memory_returned: bool,
    pub before: MlxMemory,
    pub after: MlxMemory,
}

/// Slack for [`UnloadReport::memory_returned`]. MLX's counter is exact for
/// its own buffers and the worker holds no others, so the only error is what
/// other threads of the process allocate in the milliseconds between the two
/// readings (a test binary runs many engines at once); 16 MiB covers that
/// and is nothing next to the gigabytes the guard decides about.
pub const RETURN_TOLERANCE_BYTES: u64 = 16 << 20;

/// Whether active memory going from `before` to `after` gave back `expected` bytes.
pub fn memory_returned(before_active: u64, after_active: u64, expected: u64) -> bool {
    before_active.saturating_sub(after_active).saturating_add(RETURN_TOLERANCE_BYTES) >= expected
}

/// What dropping every session's KV cache gave back (the model stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionsDropped {
    /// How many sessions had a cache.
    pub sessions: usize,
    /// What their caches held (`nbytes`).
    pub cache_bytes: u64,
    /// MLX's active + cache bytes before minus after clearing the buffer cache.
    pub freed_bytes: u64,
    /// Chats' states written to disk first (their next turn reads them back).
    pub saved_to_disk: usize,
}

/// What writing chats' KV states to disk did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SavedSessions {
    /// States written, and their bytes.
    pub saved: usize,
    pub bytes: u64,
    /// States that could not be written (counted in the cache's stats too).
    pub failed: usize,
}

impl UnloadReport {
    /// Ok if the old model's memory is back (or there was none), else
    /// [`EngineError::MemoryNotReturned`]: loading now would stack two models.
    pub fn confirm(&self) -> Result<()> {
        if !self.had_model || self.memory_returned {
            return Ok(());
        }
        Err(EngineError::MemoryNotReturned {
            expected_bytes: self.expected_bytes,
            returned_bytes: self.before.active.saturating_sub(self.after.active),
        })
    }
}

/// What was loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// Which load of this engine it is (1, 2, …): a request names it to run
    /// on this model as loaded and no other (`GenerateRequest::load`).
    pub load: u64,
    pub dir: PathBuf,
    /// config.json's `model_type`.
    pub model_type: String,
    /// `(bits, group_size)` of the default quantization; `None` if unquantized.
    pub quantization: Option<(i32, i32)>,
    /// The stats label for it ("4-bit, group 64"); `None` if unquantized.
    pub quantization_label: Option<String>,
    /// How quantized matrices multiply; `None` if unquantized.
    pub quant_kernel: Option<QuantKernel>,
    /// The KV cache's (and activations') element type, as MLX names it ("bfloat16", "float32").
    pub kv_dtype: &'static str,
    /// How sessions' KV caches store keys and values (as asked in [`LoadSettings`]).
    pub kv_format: KvFormat,
    /// That format in words: "bf16", "8-bit (group 64) from 5000 tokens".
    pub kv_label: String,
    /// Bytes of all weights as loaded.
    pub weight_bytes: usize,
    pub context_limit: usize,
    pub eos_ids: Vec<u32>,
    /// Time to check the files and read the weights and the tokenizer,
    /// the unload excluded (separate from any turn's TTFT).
    pub load_time: Duration,
    /// Unloading the model this load replaced (`had_model` false if none).
    pub replaced: UnloadReport,
    /// The buffer-cache limit set for this model, as asked in [`LoadSettings`].
    pub cache_limit_bytes: Option<usize>,
    /// The wired limit set for this model (`None`: none, e.g. off Metal).
    pub wired_limit_bytes: Option<usize>,
    /// What a saved KV state must have been computed with to be used for
    /// this model as loaded (prompt_cache/disk.rs).
    pub fingerprint: String,
    /// The draft model loaded beside it, if any (`LoadSettings::draft`).
    pub draft: Option<PathBuf>,
    /// Its chat template has a think block (`headroom_core::thinking`):
    /// the popover offers its Think switch, a turn's thinking is read.
    pub thinks: bool,
}

/// What to do with a prompt longer than the context limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverflowPolicy {
    /// Refuse it with [`EngineError::ContextOverflow`].
    #[default]
    Error,
    /// Drop the oldest messages after the system prompt (never the last
    /// one) until it fits; still an error if the last message alone is too long.
    TruncateOldest,
}

/// One turn to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    /// Turns of one session share a KV cache, so a follow-up prefills only
    /// its new tokens. `None`: a one-off run with a cache of its own.
    pub session: Option<String>,
    /// Outside a session, whose earlier requests' states this one may reuse
    /// from the prompt cache (and whose later ones may reuse its): the same
    /// tenant's only. The local server names the API key a client sent;
    /// `None`: the one partition of requests that name no tenant.
    pub tenant: Option<String>,
    /// The whole conversation so far, ending with the user's new message.
    pub messages: Vec<Message>,
    /// The functions the model may call, rendered by the chat template as
    /// transformers' `apply_chat_template(tools=…)` renders them.
    pub tools: Vec<headroom_core::chat::Tool>,
    /// Keywords the chat template reads (`enable_thinking`, any
    /// `chat_template_kwargs`), as transformers passes `**kwargs`.
    pub template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// Which calls of `tools` the answer may (or must) make; a call, once
    /// started, is held to its tool's schema in the template's call format.
    pub tool_choice: ToolChoice,
    /// Whether a forced answer may hold several calls.
    pub parallel_tool_calls: bool,
    pub sampling: SamplingParams,
    pub max_tokens: usize,
    pub overflow: OverflowPolicy,
    /// Keep generating through EOS tokens: benchmarks and parity checks need
    /// a fixed number of tokens from models that may stop at once.
    pub ignore_eos: bool,
    /// How this turn's KV cache stores keys and values; `None`: the load's.
    /// A session whose cache has another format starts a fresh cache.
    pub kv: Option<KvFormat>,
    /// The most bytes the prompt cache may keep (besides this request's
    /// state) while this request runs: the room the caller's fit check
    /// found now; `None`: the load's allowance.
    pub prompt_cache_room: Option<usize>,
    /// Whether decoding proposes tokens and checks several per pass
    /// (`headroom_core::speculative`); greedy output is the same either way.
    pub speculative: SpeculativeMode,
    /// The load the caller admitted this request for ([`ModelInfo::load`]):
    /// if another load is current when the request's turn comes (the
    /// popover or the local server switched models while it waited), it
    /// fails with [`EngineError::ModelChanged`] instead of answering with a
    /// model the caller neither chose nor labels its figures with (the
    /// weights' fingerprint cannot tell a fine-tune of the same shape
    /// apart; the load can). `None`: whatever model is loaded then.
    pub load: Option<u64>,
    /// A grammar the answer must match (`crate::grammar`); `None`: free text.
    pub constraint: Option<crate::grammar::Constraint>,
    /// Strings that end the turn (finish reason Stop) where the text
    /// contains them, across token boundaries; never part of the output.
    pub stop: Vec<String>,
    /// The model's thinking block: which tokens are thinking, and its budget.
    pub thinking: Option<Thinking>,
}

impl GenerateRequest {
    /// A one-off greedy request for `messages`, 256 tokens at most.
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            session: None,
            tenant: None,
            messages,
            tools: Vec::new(),
            template_kwargs: serde_json::Map::new(),
            tool_choice: ToolChoice::Auto,
            parallel_tool_calls: true,
            sampling: SamplingParams::default(),
            max_tokens: 256,
            overflow: OverflowPolicy::Error,
            ignore_eos: false,
            kv: None,
            prompt_cache_room: None,
            speculative: SpeculativeMode::None,
            load: None,
            constraint: None,
            stop: Vec::new(),
            thinking: None,
        }
    }
}

/// The prompt-cache partition of the app's own runs (the summary made for
/// the cloud, one-off probes): a name no server client's tenant takes (those
/// are `None` or `api-key-…`), so no client can reuse, or learn through
/// `cached_tokens`, a state the app made from a private conversation.
pub fn internal_tenant() -> &'static str {
    "headroom-internal"
}

impl GenerateRequest {
    /// [`GenerateRequest::new`] in the app's private partition
    /// ([`internal_tenant`]): for every run the app makes outside a chat.
    pub fn internal(messages: Vec<Message>) -> Self {
        Self { tenant: Some(internal_tenant().to_owned()), ..Self::new(messages) }
    }
}

/// Identifies a run, for [`super::EngineHandle::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(pub u64);

/// The measured figures of one turn, with the labels they need.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnStats {
    /// Tokens of the whole templated conversation.
    pub prompt_tokens: usize,
    /// Of those, how many were already cached and not prefilled again.
    pub reused_tokens: usize,
    /// Where those came from (the prompt cache in memory, or on disk).
    pub reused_from: Reuse,
    /// Tokens generated (EOS excluded).
    pub generated_tokens: usize,
    /// Positions in context when generation started (= `prompt_tokens`).
    pub context_tokens: usize,
    /// Sequences decoded together; always 1 here.
    pub batch: usize,
    pub timings: TurnTimings,
    /// Computed once, by `headroom_core::stats`.
    pub rates: Rates,
    /// MLX's peak allocation during the turn (weights included), bytes.
    pub peak_memory_bytes: usize,
    /// What the KV cache was at the end of the turn: "bf16",
    /// "8-bit (group 64)", or "bf16 (8-bit from 5000 tokens)" before its conversion.
    pub kv_label: String,
    /// What speculative decoding did (mode `None`: plain decoding).
    pub speculation: Speculation,
    /// Where the later layers ran when the model is split across two Macs.
    pub peer: Option<PeerTurn>,
}

/// A turn of a model split across two Macs: where, and what handing the
/// hidden state over and back cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTurn {
    /// The peer's control address.
    pub peer: String,
    /// Layers `0..first_peer_layer` ran here, the rest there.
    pub first_peer_layer: usize,
    pub layers: usize,
    pub hand_offs: HandOffs,
}

impl PeerTurn {
    /// What `link` did since it was last asked (its hand-offs are taken).
    pub fn of(link: &crate::peer::host::Link) -> Self {
        Self {
            peer: link.peer.clone(),
            first_peer_layer: link.first_peer_layer,
            layers: link.layers,
            hand_offs: link.take_hand_offs(),
        }
    }
}

/// A [`PeerTurn`] as `--json` and the server's `usage.headroom` report it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PeerReport {
    pub peer: String,
    pub first_peer_layer: usize,
    pub layers: usize,
    /// Forward passes handed over.
    pub passes: usize,
    /// Time waited on the peer, its compute included.
    pub waited_s: f64,
    pub peer_compute_s: f64,
    /// The hand-off itself: the wait less the peer's compute, per pass.
    pub hand_off_ms_per_pass: f64,
}

impl PeerTurn {
    /// The stats line's words: "across two Macs: layers 15–29 on
    /// 10.0.0.2:7070, hand-off 1.2 ms a pass".
    pub fn summary(&self) -> String {
        format!(
            "across two Macs: layers {}–{} on {}, hand-off {:.1} ms a pass",
            self.first_peer_layer,
            self.layers.saturating_sub(1),
            self.peer,
            self.hand_offs.per_pass().as_secs_f64() * 1e3
        )
    }

    pub fn report(&self) -> PeerReport {
        let h = &self.hand_offs;
        PeerReport {
            peer: self.peer.clone(),
            first_peer_layer: self.first_peer_layer,
            layers: self.layers,
            passes: h.passes,
            waited_s: h.waited.as_secs_f64(),
            peer_compute_s: h.peer_compute.as_secs_f64(),
            hand_off_ms_per_pass: h.per_pass().as_secs_f64() * 1e3,
        }
    }
}

/// What a run reports, in this order: `Started`, `Token`s (and possibly one
/// `Text`), `Stats`, `Finished`; or `Error` at any point, which ends the run.
#[derive(Debug)]
pub enum EngineEvent {
    Started {
        prompt_tokens: usize,
        reused_tokens: usize,
        /// How to read the answer: the template's call format and thinking
        /// tags (and whether the prompt already opened a think block).
        format: headroom_core::chat_format::AnswerFormat,
    },
    /// `text` is empty while a character is split across tokens, or held
    /// back while it may be the start of a stop string.
    Token {
        id: u32,
        text: String,
        /// Inside the thinking block (its tags included).
        thinking: bool,
    },
    /// Text not tied to a new token: a character left unfinished at the end.
    Text(String),
    Stats(TurnStats),
    Finished {
        reason: FinishReason,
    },
    Error(EngineError),
}

/// A run's id and its event stream. The stream ends after `Finished` or `Error`.
#[derive(Debug)]
pub struct Run {
    pub id: RunId,
    pub events: Receiver<EngineEvent>,
}

/// Everything a run produced, gathered (for the CLI's `--json`, and tests).
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutput {
    pub text: String,
    pub token_ids: Vec<u32>,
    pub finish_reason: FinishReason,
    pub stats: TurnStats,
}

impl Run {
    /// Blocks until the run ends. `on_event` sees every event first.
    pub fn collect_with(self, mut on_event: impl FnMut(&EngineEvent)) -> Result<RunOutput> {
        let (mut text, mut token_ids, mut stats) = (String::new(), Vec::new(), None);
        for event in self.events.iter() {
            on_event(&event);
            match event {
                EngineEvent::Started { .. } => {}
                EngineEvent::Token { id, text: t, .. } => {
                    token_ids.push(id);
                    text.push_str(&t);
                }
                EngineEvent::Text(t) => text.push_str(&t),
                EngineEvent::Stats(s) => stats = Some(s),
                EngineEvent::Finished { reason } => {
                    // A run cancelled before it started has no stats.
                    let stats = stats.unwrap_or_else(|| empty_stats(token_ids.len()));
                    return Ok(RunOutput { text, token_ids, finish_reason: reason, stats });
                }
                EngineEvent::Error(e) => return Err(e),
            }
        }
        Err(EngineError::EngineStopped)
    }

    pub fn collect(self) -> Result<RunOutput> {
        self.collect_with(|_| {})
    }
}

fn empty_stats(generated: usize) -> TurnStats {
    let timings = TurnTimings {
        prompt_tokens: 0,
        prefill: Duration::ZERO,
        generated_tokens: u32::try_from(generated).unwrap_or(u32::MAX),
        first_token_at: None,
        last_token_at: None,
    };
    TurnStats {
        prompt_tokens: 0,
        reused_tokens: 0,
        reused_from: Reuse::None,
        generated_tokens: generated,
        context_tokens: 0,
        batch: 1,
        rates: timings.rates(),
        timings,
        peak_memory_bytes: 0,
        kv_label: String::new(),
        speculation: Speculation::default(),
        peer: None,
    }
}

/// Called on the engine thread right after a load unloaded the previous
/// model (the app reads the process's memory there).
pub type AfterUnload = Box<dyn FnOnce(&UnloadReport) + Send>;
