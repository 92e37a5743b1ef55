//! What the sessions' tables hold, as Rust values: sessions, messages, turn
//! stats and their labels, and the text each enum is stored as.

use headroom_core::chat::{FinishReason, Message, Role};
use headroom_core::pressure::PressureLevel;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};

/// A conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// The stable key (the CLI's `--session`, the UI's `sessionId`).
    pub id: String,
    pub title: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A session as the list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    #[serde(flatten)]
    pub session: Session,
    pub message_count: i64,
    /// The start of the last message, for the list.
    pub preview: Option<String>,
}

/// A session whose title or one of whose messages matched a search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    #[serde(flatten)]
    pub session: Session,
    /// The first message that matched, if the match was not only in the title.
    pub message_id: Option<i64>,
    /// Text around the match.
    pub snippet: Option<String>,
}

/// Where a message is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum MessageStatus {
    /// Being generated now (or its process died; see `Store::open`).
    Streaming,
    Complete,
    /// Stopped by the user, or its process ended mid-answer; the text is what arrived.
    Interrupted,
    Error,
}

/// Who answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    #[default]
    Local,
    Cloud,
}

/// The measured figures of one assistant turn and all their labels.
/// Rates are `None` when undefined for the turn, never 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct TurnStatsRecord {
    pub model_id: String,
    /// e.g. "4-bit, group 64"; `None` for an unquantized model.
    pub quantization: Option<String>,
    pub kv_dtype: String,
    pub batch: i64,
    pub context_tokens: i64,
    pub prompt_tokens: i64,
    pub reused_tokens: i64,
    pub generated_tokens: i64,
    pub ttft_ms: Option<f64>,
    pub prefill_tps: Option<f64>,
    pub decode_tps: Option<f64>,
    pub e2e_tps: Option<f64>,
    pub prefill_ms: f64,
    pub first_token_ms: Option<f64>,
    pub last_token_ms: Option<f64>,
    pub peak_memory_bytes: i64,
    /// The worst pressure level seen around the turn.
    pub pressure: PressureLevel,
    /// Swap used after minus before, bytes; `None` if it could not be read.
    pub swap_delta_bytes: Option<i64>,
    pub finish_reason: FinishReason,
    /// How quantized matrices multiplied ("cpu f32", "fused"); `None` for an
    /// unquantized model or a cloud answer (and in exports made before it was kept).
    #[serde(default)]
    pub quant_kernel: Option<String>,
    /// Set when memory slowed the answer down ("slowed by swap: 3.1 → 0.8
    /// tok/s while swap grew 1.2 GB").
    #[serde(default)]
    pub slowdown: Option<String>,
    /// What speculative decoding did ("lookup: 62% accepted, 2.5
    /// tok/pass"); `None` for plain decoding and cloud answers.
    #[serde(default)]
    pub speculation: Option<String>,
    /// Where the later layers ran when the model was split across two Macs
    /// ("across two Macs: layers 15–29 on 10.0.0.2:7070, hand-off 1.2 ms a
    /// pass"); `None` on this Mac alone.
    #[serde(default)]
    pub two_macs: Option<String>,
}

/// One stored message, with its turn's stats if it is an answer that has them.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct StoredMessage {
    pub id: i64,
    pub session_id: String,
    pub role: Role,
    pub content: String,
    pub model: Option<String>,
    pub route: Route,
    pub status: MessageStatus,
    pub error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub stats: Option<TurnStatsRecord>,
}

/// What `begin_turn` committed.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnStart {
    pub session: Session,
    pub user_message_id: i64,
    /// The answer's row, `streaming` and empty until the first save.
    pub assistant_message_id: i64,
    /// The conversation to send the model, ending with the new user message.
    pub history: Vec<Message>,
}

/// How a turn ended, written in one transaction by `finish_turn`.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The whole answer as generated (or as far as it got).
    pub content: String,
    /// `Complete`, `Interrupted` or `Error`.
    pub status: MessageStatus,
    pub error: Option<String>,
    pub stats: Option<TurnStatsRecord>,
}

pub(crate) fn role_str(role: Role) -> &'static str {
    role.as_str()
}

pub(super) fn parse_role(s: &str) -> Result<Role> {
    match s {
        "system" => Ok(Role::System),
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        "tool" => Ok(Role::Tool),
        _ => Err(StoreError::Corrupt { column: "messages.role", value: s.to_owned() }),
    }
}

impl MessageStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Streaming => "streaming",
            Self::Complete => "complete",
            Self::Interrupted => "interrupted",
            Self::Error => "error",
        }
    }

    pub(super) fn parse(s: &str) -> Result<Self> {
        match s {
            "streaming" => Ok(Self::Streaming),
            "complete" => Ok(Self::Complete),
            "interrupted" => Ok(Self::Interrupted),
            "error" => Ok(Self::Error),
            _ => Err(StoreError::Corrupt { column: "messages.status", value: s.to_owned() }),
        }
    }
}

impl Route {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Cloud => "cloud",
        }
    }

    pub(super) fn parse(s: &str) -> Result<Self> {
        match s {
            "local" => Ok(Self::Local),
            "cloud" => Ok(Self::Cloud),
            _ => Err(StoreError::Corrupt { column: "messages.route", value: s.to_owned() }),
        }
    }
}

pub(crate) fn finish_str(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
    }
}

pub(super) fn parse_finish(s: &str) -> Result<FinishReason> {
    match s {
        "stop" => Ok(FinishReason::Stop),
        "length" => Ok(FinishReason::Length),
        "cancelled" => Ok(FinishReason::Cancelled),
        _ => Err(StoreError::Corrupt { column: "turn_stats.finish_reason", value: s.to_owned() }),
    }
}

pub(crate) fn parse_pressure(s: &str, column: &'static str) -> Result<PressureLevel> {
    match s {
        "normal" => Ok(PressureLevel::Normal),
        "warning" => Ok(PressureLevel::Warning),
        "critical" => Ok(PressureLevel::Critical),
        "unknown" => Ok(PressureLevel::Unknown),
        _ => Err(StoreError::Corrupt { column, value: s.to_owned() }),
    }
}
