//! Sessions, their messages and per-turn stats: the turn protocol that loses
//! nothing (user message committed first, answer saved while it streams,
//! the end and its stats in one transaction), listing, search, rename, delete.

use headroom_core::chat::{FinishReason, Message, Role};
use headroom_core::pressure::PressureLevel;
use serde::{Deserialize, Serialize};
use sqlx::sqlite::SqliteRow;
// AssertSqlSafe: the dynamic statements here are built from constants only, never from input.
use sqlx::{AssertSqlSafe, Row, Sqlite, Transaction};

use crate::error::{Context, Result, StoreError};
use crate::{now_ms, Store};

/// A conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// The stable key (the CLI's `--session`, the UI's `sessionId`).
    pub id: String,
    pub title: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A session as the list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    #[serde(flatten)]
    pub session: Session,
    pub message_count: i64,
    /// The start of the last message, for the list.
    pub preview: Option<String>,
}

/// A session whose title or one of whose messages matched a search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    #[default]
    Local,
    Cloud,
}

/// The measured figures of one assistant turn and all their labels.
/// Rates are `None` when undefined for the turn, never 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

/// One stored message, with its turn's stats if it is an answer that has them.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn parse_role(s: &str) -> Result<Role> {
    match s {
        "system" => Ok(Role::System),
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
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

    fn parse(s: &str) -> Result<Self> {
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

    fn parse(s: &str) -> Result<Self> {
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

fn parse_finish(s: &str) -> Result<FinishReason> {
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

fn check_id(id: &str) -> Result<()> {
    if id.is_empty() || id.chars().count() > 200 {
        return Err(StoreError::InvalidSessionId(id.to_owned()));
    }
    Ok(())
}

fn clean_title(title: &str) -> Result<String> {
    let title = title.trim();
    if title.is_empty() {
        return Err(StoreError::EmptyTitle);
    }
    Ok(title.to_owned())
}

/// A title from a first message: its first line, at most 60 characters.
pub fn title_from(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("New chat");
    let mut title: String = line.chars().take(60).collect();
    if line.chars().count() > 60 {
        title.push('…');
    }
    title
}

fn session_from(row: &SqliteRow) -> Result<Session> {
    Ok(Session {
        id: row.try_get("id").ctx("read session")?,
        title: row.try_get("title").ctx("read session")?,
        created_at: row.try_get("created_at").ctx("read session")?,
        updated_at: row.try_get("updated_at").ctx("read session")?,
    })
}

const MESSAGE_COLUMNS: &str =
    "m.id, m.session_id, m.role, m.content, m.model, m.route, m.status, m.error, m.created_at, m.updated_at,
    t.message_id AS t_message_id, t.model_id, t.quantization, t.kv_dtype, t.batch, t.context_tokens, t.prompt_tokens,
    t.reused_tokens, t.generated_tokens, t.ttft_ms, t.prefill_tps, t.decode_tps, t.e2e_tps, t.prefill_ms,
    t.first_token_ms, t.last_token_ms, t.peak_memory_bytes, t.pressure, t.swap_delta_bytes, t.finish_reason, t.quant_kernel, t.slowdown";

fn message_from(row: &SqliteRow) -> Result<StoredMessage> {
    let what = "read message";
    let stats = match row.try_get::<Option<i64>, _>("t_message_id").ctx(what)? {
        None => None,
        Some(_) => Some(TurnStatsRecord {
            model_id: row.try_get("model_id").ctx(what)?,
            quantization: row.try_get("quantization").ctx(what)?,
            kv_dtype: row.try_get("kv_dtype").ctx(what)?,
            batch: row.try_get("batch").ctx(what)?,
            context_tokens: row.try_get("context_tokens").ctx(what)?,
            prompt_tokens: row.try_get("prompt_tokens").ctx(what)?,
            reused_tokens: row.try_get("reused_tokens").ctx(what)?,
            generated_tokens: row.try_get("generated_tokens").ctx(what)?,
            ttft_ms: row.try_get("ttft_ms").ctx(what)?,
            prefill_tps: row.try_get("prefill_tps").ctx(what)?,
            decode_tps: row.try_get("decode_tps").ctx(what)?,
            e2e_tps: row.try_get("e2e_tps").ctx(what)?,
            prefill_ms: row.try_get("prefill_ms").ctx(what)?,
            first_token_ms: row.try_get("first_token_ms").ctx(what)?,
            last_token_ms: row.try_get("last_token_ms").ctx(what)?,
            peak_memory_bytes: row.try_get("peak_memory_bytes").ctx(what)?,
            pressure: parse_pressure(row.try_get("pressure").ctx(what)?, "turn_stats.pressure")?,
            swap_delta_bytes: row.try_get("swap_delta_bytes").ctx(what)?,
            finish_reason: parse_finish(row.try_get("finish_reason").ctx(what)?)?,
            quant_kernel: row.try_get("quant_kernel").ctx(what)?,
            slowdown: row.try_get("slowdown").ctx(what)?,
        }),
    };
    Ok(StoredMessage {
        id: row.try_get("id").ctx(what)?,
        session_id: row.try_get("session_id").ctx(what)?,
        role: parse_role(row.try_get("role").ctx(what)?)?,
        content: row.try_get("content").ctx(what)?,
        model: row.try_get("model").ctx(what)?,
        route: Route::parse(row.try_get("route").ctx(what)?)?,
        status: MessageStatus::parse(row.try_get("status").ctx(what)?)?,
        error: row.try_get("error").ctx(what)?,
        created_at: row.try_get("created_at").ctx(what)?,
        updated_at: row.try_get("updated_at").ctx(what)?,
        stats,
    })
}

/// Whether a model sees this message: everything said is, in order. Failed
/// answers and answers still streaming are left out; an interrupted answer
/// stays (the user saw it).
pub fn in_context(m: &StoredMessage) -> bool {
    matches!(m.status, MessageStatus::Complete | MessageStatus::Interrupted)
        && !(m.role == Role::Assistant && m.content.is_empty())
}

/// The messages a model sees (see [`in_context`]).
fn context_of(messages: &[StoredMessage]) -> Vec<Message> {
    messages.iter().filter(|m| in_context(m)).map(|m| Message::new(m.role, m.content.clone())).collect()
}

/// A session's last exchange: a question and the answer to it, the last two
/// rows. What regenerate replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastTurn {
    pub question_id: i64,
    pub answer_id: i64,
    pub question: String,
}

impl LastTurn {
    /// The last exchange of `messages` (a session's, in order); `None` if
    /// the session does not end in an answer to a question.
    pub fn of(messages: &[StoredMessage]) -> Option<Self> {
        match messages {
            [.., q, a] if q.role == Role::User && a.role == Role::Assistant => {
                Some(Self { question_id: q.id, answer_id: a.id, question: q.content.clone() })
            }
            _ => None,
        }
    }
}

/// A unique-enough id for a new session: time and a per-process counter.
fn new_session_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("s{:x}-{:x}-{n:x}", now_ms(), std::process::id())
}

pub(crate) async fn insert_stats(tx: &mut Transaction<'_, Sqlite>, message_id: i64, s: &TurnStatsRecord) -> Result<()> {
    sqlx::query(
        "INSERT INTO turn_stats (message_id, model_id, quantization, kv_dtype, batch, context_tokens, prompt_tokens,
            reused_tokens, generated_tokens, ttft_ms, prefill_tps, decode_tps, e2e_tps, prefill_ms, first_token_ms,
            last_token_ms, peak_memory_bytes, pressure, swap_delta_bytes, finish_reason, quant_kernel, slowdown)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)",
    )
    .bind(message_id)
    .bind(&s.model_id)
    .bind(&s.quantization)
    .bind(&s.kv_dtype)
    .bind(s.batch)
    .bind(s.context_tokens)
    .bind(s.prompt_tokens)
    .bind(s.reused_tokens)
    .bind(s.generated_tokens)
    .bind(s.ttft_ms)
    .bind(s.prefill_tps)
    .bind(s.decode_tps)
    .bind(s.e2e_tps)
    .bind(s.prefill_ms)
    .bind(s.first_token_ms)
    .bind(s.last_token_ms)
    .bind(s.peak_memory_bytes)
    .bind(s.pressure.as_str())
    .bind(s.swap_delta_bytes)
    .bind(finish_str(s.finish_reason))
    .bind(&s.quant_kernel)
    .bind(&s.slowdown)
    .execute(&mut **tx)
    .await
    .ctx("insert turn stats")?;
    Ok(())
}

/// Escapes LIKE's wildcards so a search for `50%` finds "50%".
fn like_pattern(text: &str) -> String {
    let mut p = String::with_capacity(text.len() + 2);
    p.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// About 40 characters either side of the first case-insensitive match.
fn snippet(content: &str, needle: &str) -> String {
    let lower = content.to_lowercase();
    let chars: Vec<char> = content.chars().collect();
    // Char index of the match; lowercasing may change byte lengths, so count chars.
    let at = lower.find(&needle.to_lowercase()).map_or(0, |b| lower[..b].chars().count());
    let start = at.saturating_sub(40);
    let end = (at + needle.chars().count() + 40).min(chars.len());
    let mut s: String = chars[start.min(chars.len())..end].iter().collect();
    if start > 0 {
        s.insert(0, '…');
    }
    if end < chars.len() {
        s.push('…');
    }
    s
}

impl Store {
    /// A new, empty session.
    pub async fn create_session(&self, title: &str) -> Result<Session> {
        let title = clean_title(title)?;
        let now = now_ms();
        let session = Session { id: new_session_id(), title, created_at: now, updated_at: now };
        sqlx::query("INSERT INTO sessions (id, title, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)")
            .bind(&session.id)
            .bind(&session.title)
            .bind(now)
            .execute(&self.pool)
            .await
            .ctx("create session")?;
        Ok(session)
    }

    /// The session `id`, created with `title` if there is none.
    pub async fn ensure_session(&self, id: &str, title: &str) -> Result<Session> {
        let mut tx = self.pool.begin().await.ctx("begin transaction")?;
        let session = ensure_session_in(&mut tx, id, title).await?;
        tx.commit().await.ctx("commit session")?;
        Ok(session)
    }

    pub async fn session(&self, id: &str) -> Result<Option<Session>> {
        let row = sqlx::query("SELECT id, title, created_at, updated_at FROM sessions WHERE id = ?1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .ctx("read session")?;
        row.as_ref().map(session_from).transpose()
    }

    /// Every session, the most recently active first.
    pub async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        let rows = sqlx::query(
            "SELECT s.id, s.title, s.created_at, s.updated_at,
                (SELECT count(*) FROM messages m WHERE m.session_id = s.id) AS message_count,
                (SELECT substr(m.content, 1, 120) FROM messages m WHERE m.session_id = s.id ORDER BY m.id DESC LIMIT 1) AS preview
             FROM sessions s ORDER BY s.updated_at DESC, s.id",
        )
        .fetch_all(&self.pool)
        .await
        .ctx("list sessions")?;
        rows.iter()
            .map(|row| {
                Ok(SessionSummary {
                    session: session_from(row)?,
                    message_count: row.try_get("message_count").ctx("list sessions")?,
                    preview: row.try_get("preview").ctx("list sessions")?,
                })
            })
            .collect()
    }

    pub async fn rename_session(&self, id: &str, title: &str) -> Result<Session> {
        let title = clean_title(title)?;
        let done = sqlx::query("UPDATE sessions SET title = ?2, updated_at = ?3 WHERE id = ?1")
            .bind(id)
            .bind(&title)
            .bind(now_ms())
            .execute(&self.pool)
            .await
            .ctx("rename session")?;
        if done.rows_affected() == 0 {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        self.session(id).await?.ok_or_else(|| StoreError::SessionNotFound(id.to_owned()))
    }

    /// Deletes a session with its messages and their stats (foreign-key
    /// cascades); false if there was none.
    pub async fn delete_session(&self, id: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM sessions WHERE id = ?1")
            .bind(id)
            .execute(&self.pool)
            .await
            .ctx("delete session")?;
        Ok(done.rows_affected() > 0)
    }

    /// Sessions whose title or messages contain `text` (case-insensitive for
    /// ASCII), the most recent first; at most 100.
    pub async fn search_sessions(&self, text: &str) -> Result<Vec<SearchHit>> {
        let needle = text.trim();
        if needle.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT s.id, s.title, s.created_at, s.updated_at, hit.id AS message_id, hit.content
             FROM sessions s
             LEFT JOIN messages hit ON hit.id = (
                 SELECT m.id FROM messages m WHERE m.session_id = s.id AND m.content LIKE ?1 ESCAPE '\\'
                 ORDER BY m.id LIMIT 1)
             WHERE s.title LIKE ?1 ESCAPE '\\' OR hit.id IS NOT NULL
             ORDER BY s.updated_at DESC, s.id LIMIT 100",
        )
        .bind(like_pattern(needle))
        .fetch_all(&self.pool)
        .await
        .ctx("search sessions")?;
        rows.iter()
            .map(|row| {
                let content: Option<String> = row.try_get("content").ctx("search sessions")?;
                Ok(SearchHit {
                    session: session_from(row)?,
                    message_id: row.try_get("message_id").ctx("search sessions")?,
                    snippet: content.map(|c| snippet(&c, needle)),
                })
            })
            .collect()
    }

    /// A session's messages in order, each answer with its stats.
    pub async fn messages(&self, session_id: &str) -> Result<Vec<StoredMessage>> {
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m LEFT JOIN turn_stats t ON t.message_id = m.id
             WHERE m.session_id = ?1 ORDER BY m.id"
        );
        let rows = sqlx::query(AssertSqlSafe(sql)).bind(session_id).fetch_all(&self.pool).await.ctx("read messages")?;
        rows.iter().map(message_from).collect()
    }

    pub async fn message(&self, id: i64) -> Result<StoredMessage> {
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m LEFT JOIN turn_stats t ON t.message_id = m.id WHERE m.id = ?1"
        );
        let row = sqlx::query(AssertSqlSafe(sql)).bind(id).fetch_optional(&self.pool).await.ctx("read message")?;
        row.as_ref().map(message_from).transpose()?.ok_or(StoreError::MessageNotFound(id))
    }

    /// What the model should see for a session now (see `context_of`).
    pub async fn history(&self, session_id: &str) -> Result<Vec<Message>> {
        Ok(context_of(&self.messages(session_id).await?))
    }

    /// Step 1 of a turn, before generation starts: in one transaction, the
    /// session (created with a title from the message if new), the user's
    /// message (`complete`) and an empty `streaming` answer.
    pub async fn begin_turn(
        &self,
        session_id: &str,
        user_text: &str,
        model: Option<&str>,
        route: Route,
    ) -> Result<TurnStart> {
        self.begin_turn_in(session_id, user_text, model, route, None).await
    }

    /// [`Self::begin_turn`] for a regenerated answer: in the same
    /// transaction, `replaces` (the session's last exchange, the question
    /// being asked again) is taken out first, with its answer's stats. Called
    /// only once the new turn has started, so a refused regenerate leaves the
    /// old exchange exactly as it was; if the session no longer ends in
    /// `replaces`, nothing changes and [`StoreError::TurnChanged`] says so.
    pub async fn begin_turn_replacing(
        &self,
        session_id: &str,
        user_text: &str,
        model: Option<&str>,
        route: Route,
        replaces: &LastTurn,
    ) -> Result<TurnStart> {
        self.begin_turn_in(session_id, user_text, model, route, Some(replaces)).await
    }

    async fn begin_turn_in(
        &self,
        session_id: &str,
        user_text: &str,
        model: Option<&str>,
        route: Route,
        replaces: Option<&LastTurn>,
    ) -> Result<TurnStart> {
        let mut tx = self.pool.begin().await.ctx("begin transaction")?;
        if let Some(old) = replaces {
            let last: Vec<i64> =
                sqlx::query_scalar("SELECT id FROM messages WHERE session_id = ?1 ORDER BY id DESC LIMIT 2")
                    .bind(session_id)
                    .fetch_all(&mut *tx)
                    .await
                    .ctx("read the last turn")?;
            if last != [old.answer_id, old.question_id] {
                return Err(StoreError::TurnChanged { session: session_id.to_owned() });
            }
            // turn_stats goes with its message (ON DELETE CASCADE).
            sqlx::query("DELETE FROM messages WHERE id IN (?1, ?2)")
                .bind(old.answer_id)
                .bind(old.question_id)
                .execute(&mut *tx)
                .await
                .ctx("take back the last turn")?;
        }
        let session = ensure_session_in(&mut tx, session_id, &title_from(user_text)).await?;
        let now = now_ms();
        let insert = "INSERT INTO messages (session_id, role, content, model, route, status, created_at, updated_at)
                      VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)";
        let user_message_id = sqlx::query(insert)
            .bind(session_id)
            .bind("user")
            .bind(user_text)
            .bind(model)
            .bind(route.as_str())
            .bind("complete")
            .bind(now)
            .execute(&mut *tx)
            .await
            .ctx("insert user message")?
            .last_insert_rowid();
        let assistant_message_id = sqlx::query(insert)
            .bind(session_id)
            .bind("assistant")
            .bind("")
            .bind(model)
            .bind(route.as_str())
            .bind("streaming")
            .bind(now)
            .execute(&mut *tx)
            .await
            .ctx("insert answer")?
            .last_insert_rowid();
        sqlx::query("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")
            .bind(session_id)
            .bind(now)
            .execute(&mut *tx)
            .await
            .ctx("touch session")?;
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m LEFT JOIN turn_stats t ON t.message_id = m.id
             WHERE m.session_id = ?1 ORDER BY m.id"
        );
        let rows = sqlx::query(AssertSqlSafe(sql)).bind(session_id).fetch_all(&mut *tx).await.ctx("read messages")?;
        let messages = rows.iter().map(message_from).collect::<Result<Vec<_>>>()?;
        tx.commit().await.ctx("commit user message")?;
        Ok(TurnStart { session, user_message_id, assistant_message_id, history: context_of(&messages) })
    }

    /// Step 2, while the answer streams: its text so far. It also re-asserts
    /// `streaming`, in case another process's `open` marked it interrupted.
    pub async fn save_partial(&self, assistant_message_id: i64, content: &str) -> Result<()> {
        let done = sqlx::query(
            "UPDATE messages SET content = ?2, status = 'streaming', updated_at = ?3
             WHERE id = ?1 AND status IN ('streaming', 'interrupted')",
        )
        .bind(assistant_message_id)
        .bind(content)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .ctx("save partial answer")?;
        if done.rows_affected() == 0 {
            return Err(StoreError::MessageNotFound(assistant_message_id));
        }
        Ok(())
    }

    /// Step 3: the final text, status and stats, in one transaction.
    pub async fn finish_turn(&self, assistant_message_id: i64, outcome: &TurnOutcome) -> Result<()> {
        let mut tx = self.pool.begin().await.ctx("begin transaction")?;
        let now = now_ms();
        let session: Option<String> = sqlx::query_scalar(
            "UPDATE messages SET content = ?2, status = ?3, error = ?4, updated_at = ?5 WHERE id = ?1 RETURNING session_id",
        )
        .bind(assistant_message_id)
        .bind(&outcome.content)
        .bind(outcome.status.as_str())
        .bind(&outcome.error)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await
        .ctx("finish answer")?;
        let session = session.ok_or(StoreError::MessageNotFound(assistant_message_id))?;
        if let Some(stats) = &outcome.stats {
            insert_stats(&mut tx, assistant_message_id, stats).await?;
        }
        sqlx::query("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")
            .bind(&session)
            .bind(now)
            .execute(&mut *tx)
            .await
            .ctx("touch session")?;
        tx.commit().await.ctx("commit finished turn")?;
        Ok(())
    }
}

async fn ensure_session_in(tx: &mut Transaction<'_, Sqlite>, id: &str, title: &str) -> Result<Session> {
    check_id(id)?;
    let title = clean_title(title)?;
    let now = now_ms();
    sqlx::query(
        "INSERT INTO sessions (id, title, created_at, updated_at) VALUES (?1, ?2, ?3, ?3) ON CONFLICT (id) DO NOTHING",
    )
    .bind(id)
    .bind(&title)
    .bind(now)
    .execute(&mut **tx)
    .await
    .ctx("create session")?;
    let row = sqlx::query("SELECT id, title, created_at, updated_at FROM sessions WHERE id = ?1")
        .bind(id)
        .fetch_one(&mut **tx)
        .await
        .ctx("read session")?;
    session_from(&row)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testutil::store;

    pub(crate) fn stats(model: &str, generated: i64) -> TurnStatsRecord {
        TurnStatsRecord {
            model_id: model.into(),
            quantization: Some("4-bit, group 64".into()),
            kv_dtype: "16-bit float".into(),
            batch: 1,
            context_tokens: 31,
            prompt_tokens: 31,
            reused_tokens: 3,
            generated_tokens: generated,
            ttft_ms: Some(12.345_678_9),
            prefill_tps: Some(2511.1),
            decode_tps: None,
            e2e_tps: Some(0.1 + 0.2),
            prefill_ms: 12.0,
            first_token_ms: Some(12.3),
            last_token_ms: None,
            peak_memory_bytes: 123_456_789,
            pressure: PressureLevel::Warning,
            swap_delta_bytes: Some(-4096),
            finish_reason: FinishReason::Length,
            quant_kernel: None,
            slowdown: None,
        }
    }

    #[tokio::test]
    async fn a_turn_commits_the_user_message_first_then_streams_then_finishes_with_stats() {
        let store = store("turn").await;
        let t = store
            .begin_turn("cli-1", "What is MLX?\nsecond line", Some("demo"), Route::Local)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.session.title, "What is MLX?");
        assert_eq!(t.history, vec![Message::new(Role::User, "What is MLX?\nsecond line")]);
        let msgs = store.messages("cli-1").await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(msgs.len(), 2);
        assert_eq!((msgs[0].role, msgs[0].status), (Role::User, MessageStatus::Complete));
        assert_eq!(
            (msgs[1].role, msgs[1].status, msgs[1].content.as_str()),
            (Role::Assistant, MessageStatus::Streaming, "")
        );
        // An empty streaming answer is not context.
        assert_eq!(store.history("cli-1").await.unwrap_or_default().len(), 1);

        store.save_partial(t.assistant_message_id, "An array").await.unwrap_or_else(|e| panic!("{e}"));
        let m = store.message(t.assistant_message_id).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((m.content.as_str(), m.status), ("An array", MessageStatus::Streaming));

        let outcome = TurnOutcome {
            content: "An array framework.".into(),
            status: MessageStatus::Complete,
            error: None,
            stats: Some(stats("demo", 4)),
        };
        store.finish_turn(t.assistant_message_id, &outcome).await.unwrap_or_else(|e| panic!("{e}"));
        let m = store.message(t.assistant_message_id).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((m.content.as_str(), m.status), ("An array framework.", MessageStatus::Complete));
        assert_eq!(m.stats, Some(stats("demo", 4)), "every stat and label comes back as written");

        // The next turn's context is the stored conversation.
        let t2 = store
            .begin_turn("cli-1", "And tokens?", Some("demo"), Route::Local)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t2.session.title, "What is MLX?", "an existing session keeps its title");
        let roles: Vec<Role> = t2.history.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
        assert_eq!(t2.history[1].content, "An array framework.");

        // A failed answer is kept (with why) but is not context; a finished row cannot be re-streamed.
        let failed = TurnOutcome {
            content: String::new(),
            status: MessageStatus::Error,
            error: Some("engine stopped".into()),
            stats: None,
        };
        store.finish_turn(t2.assistant_message_id, &failed).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(store.save_partial(t2.assistant_message_id, "x").await, Err(StoreError::MessageNotFound(_))));
        let m = store.message(t2.assistant_message_id).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((m.status, m.error.as_deref(), m.stats), (MessageStatus::Error, Some("engine stopped"), None));
        assert_eq!(store.history("cli-1").await.unwrap_or_default().len(), 3);
        assert!(matches!(store.finish_turn(999, &failed).await, Err(StoreError::MessageNotFound(999))));
        assert!(matches!(store.begin_turn("", "x", None, Route::Local).await, Err(StoreError::InvalidSessionId(_))));
    }

    #[tokio::test]
    async fn a_regenerated_turn_replaces_the_last_one_in_one_transaction() {
        let store = store("take-back").await;
        assert_eq!(LastTurn::of(&store.messages("none").await.unwrap_or_default()), None);
        for (q, a) in [("first?", "one"), ("second?", "two")] {
            let t = store.begin_turn("s", q, None, Route::Local).await.unwrap_or_else(|e| panic!("{e}"));
            let done = TurnOutcome {
                content: a.into(),
                status: MessageStatus::Complete,
                error: None,
                stats: Some(stats("m", 2)),
            };
            store.finish_turn(t.assistant_message_id, &done).await.unwrap_or_else(|e| panic!("{e}"));
        }
        let last = LastTurn::of(&store.messages("s").await.unwrap_or_default()).unwrap_or_else(|| panic!("no turn"));
        assert_eq!(last.question, "second?");
        let t = store
            .begin_turn_replacing("s", "second?", Some("m2"), Route::Cloud, &last)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let msgs = store.messages("s").await.unwrap_or_default();
        let left: Vec<(&str, MessageStatus)> = msgs.iter().map(|m| (m.content.as_str(), m.status)).collect();
        assert_eq!(
            left,
            [
                ("first?", MessageStatus::Complete),
                ("one", MessageStatus::Complete),
                ("second?", MessageStatus::Complete),
                ("", MessageStatus::Streaming)
            ]
        );
        assert_eq!((msgs[2].id, msgs[3].id), (t.user_message_id, t.assistant_message_id));
        assert_eq!(t.history.last().map(|m| m.content.as_str()), Some("second?"));
        let stats_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM turn_stats")
            .fetch_one(store.pool())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stats_rows, 1, "the replaced answer's stats went with it");

        // The old exchange is gone now: replacing it again changes nothing.
        let before = store.messages("s").await.unwrap_or_default();
        let again = store.begin_turn_replacing("s", "second?", None, Route::Local, &last).await;
        assert!(matches!(again, Err(StoreError::TurnChanged { .. })), "{again:?}");
        assert_eq!(store.messages("s").await.unwrap_or_default(), before);

        // A session ending in a question with no answer yet has no turn to replace.
        store.begin_turn("t", "pending?", None, Route::Local).await.unwrap_or_else(|e| panic!("{e}"));
        sqlx::query("DELETE FROM messages WHERE session_id = 't' AND role = 'assistant'")
            .execute(store.pool())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(LastTurn::of(&store.messages("t").await.unwrap_or_default()), None);
    }

    #[tokio::test]
    async fn reopening_marks_answers_left_streaming_as_interrupted_and_keeps_their_text() {
        let store = store("recover").await;
        let t = store.begin_turn("s", "hi", None, Route::Local).await.unwrap_or_else(|e| panic!("{e}"));
        store.save_partial(t.assistant_message_id, "Hel").await.unwrap_or_else(|e| panic!("{e}"));
        let dir = store.path().parent().map(std::path::Path::to_path_buf).unwrap_or_default();
        let again = Store::open(&dir).await.unwrap_or_else(|e| panic!("{e}"));
        let m = again.message(t.assistant_message_id).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((m.status, m.content.as_str()), (MessageStatus::Interrupted, "Hel"));
        assert_eq!(again.history("s").await.unwrap_or_default().len(), 2, "an interrupted answer is context");
        // The writer, still alive, takes its row back at its next save.
        store.save_partial(t.assistant_message_id, "Hello").await.unwrap_or_else(|e| panic!("{e}"));
        let m = again.message(t.assistant_message_id).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((m.status, m.content.as_str()), (MessageStatus::Streaming, "Hello"));
    }

    #[tokio::test]
    async fn sessions_list_rename_search_and_delete_with_cascades() {
        let store = store("list").await;
        let a = store.create_session("  Plans  ").await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.title, "Plans");
        assert!(matches!(store.create_session(" ").await, Err(StoreError::EmptyTitle)));
        let t = store
            .begin_turn(&a.id, "Budget is 50% of 1_000", None, Route::Local)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let done = TurnOutcome {
            content: "Noted.".into(),
            status: MessageStatus::Complete,
            error: None,
            stats: Some(stats("m", 2)),
        };
        store.finish_turn(t.assistant_message_id, &done).await.unwrap_or_else(|e| panic!("{e}"));
        std::thread::sleep(std::time::Duration::from_millis(3));
        let b = store.ensure_session("b", "Other").await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.ensure_session("b", "ignored").await.ok(), Some(b.clone()));

        let list = store.list_sessions().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(list.iter().map(|s| s.session.id.as_str()).collect::<Vec<_>>(), ["b", a.id.as_str()]);
        assert_eq!((list[1].message_count, list[1].preview.as_deref()), (2, Some("Noted.")));
        assert_eq!((list[0].message_count, list[0].preview.as_deref()), (0, None));

        let renamed = store.rename_session("b", "Renamed").await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(renamed.title, "Renamed");
        assert!(matches!(store.rename_session("nope", "x").await, Err(StoreError::SessionNotFound(_))));

        // Wildcards are literal; case does not matter; titles match too.
        let hits = store.search_sessions("50%").await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(hits.len(), 1);
        assert_eq!((hits[0].session.id.as_str(), hits[0].message_id), (a.id.as_str(), Some(t.user_message_id)));
        assert_eq!(hits[0].snippet.as_deref(), Some("Budget is 50% of 1_000"));
        assert!(store.search_sessions("5_%").await.unwrap_or_default().is_empty());
        assert_eq!(store.search_sessions("NOTED").await.unwrap_or_default().len(), 1);
        let by_title = store.search_sessions("renamed").await.unwrap_or_default();
        assert_eq!((by_title.len(), by_title[0].message_id), (1, None));
        assert!(store.search_sessions("  ").await.unwrap_or_default().is_empty());

        assert!(store.delete_session(&a.id).await.unwrap_or(false));
        assert!(!store.delete_session(&a.id).await.unwrap_or(true));
        let left: i64 =
            sqlx::query_scalar("SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM turn_stats)")
                .fetch_one(store.pool())
                .await
                .unwrap_or(-1);
        assert_eq!(left, 0, "messages and stats went with their session");
    }

    #[test]
    fn snippets_and_titles_cut_on_characters() {
        let long = format!("{}needle{}", "é".repeat(50), "ü".repeat(50));
        let s = snippet(&long, "NEEDLE");
        assert!(s.starts_with('…') && s.ends_with('…') && s.contains("needle"), "{s}");
        assert_eq!(s.chars().count(), 40 + 6 + 40 + 2);
        assert_eq!(title_from("\n  \n  Hi there \nmore"), "Hi there");
        assert_eq!(title_from(&"x".repeat(70)).chars().count(), 61);
        assert_eq!(title_from(""), "New chat");
    }
}
