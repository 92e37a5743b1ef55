//! The turn protocol that loses nothing: the user message committed first,
//! the answer saved while it streams, its end and stats in one transaction.

use sqlx::AssertSqlSafe;

use super::context::context_of;
use super::rows::{insert_stats, message_from, MESSAGE_COLUMNS};
use super::{ensure_session_in, title_from, LastTurn, Route, TurnOutcome, TurnStart};
use crate::error::{Context, Result, StoreError};
use crate::{now_ms, Store};

impl Store {
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
