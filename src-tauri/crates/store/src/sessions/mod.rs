//! Sessions, their messages and per-turn stats: the turn protocol that loses
//! nothing (user message committed first, answer saved while it streams,
//! the end and its stats in one transaction), listing, search, rename, delete.

mod context;
mod records;
mod rows;
mod search;
mod turn;

use headroom_core::chat::Message;
use sqlx::{AssertSqlSafe, Row, Sqlite, Transaction};

pub use context::{in_context, LastTurn};
pub(crate) use records::{finish_str, parse_pressure, role_str};
pub use records::{
    MessageStatus, Route, SearchHit, Session, SessionSummary, StoredMessage, TurnOutcome, TurnStart, TurnStatsRecord,
};
pub(crate) use rows::insert_stats;

use context::context_of;
use rows::{message_from, session_from, MESSAGE_COLUMNS};

use crate::error::{Context, Result, StoreError};
use crate::{now_ms, Store};

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

/// A unique-enough id for a new session: time and a per-process counter.
fn new_session_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("s{:x}-{:x}-{n:x}", now_ms(), std::process::id())
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
pub(crate) mod tests;
