//! Rows to records and back: the columns a message is read with, and the
//! turn-stats row a finished (or imported) answer writes.

use sqlx::sqlite::SqliteRow;
use sqlx::{Row, Sqlite, Transaction};

use super::records::{finish_str, parse_finish, parse_pressure, parse_role};
use super::{MessageStatus, Route, Session, StoredMessage, TurnStatsRecord};
use crate::error::{Context, Result};

pub(super) fn session_from(row: &SqliteRow) -> Result<Session> {
    Ok(Session {
        id: row.try_get("id").ctx("read session")?,
        title: row.try_get("title").ctx("read session")?,
        created_at: row.try_get("created_at").ctx("read session")?,
        updated_at: row.try_get("updated_at").ctx("read session")?,
    })
}

pub(super) const MESSAGE_COLUMNS: &str =
    "m.id, m.session_id, m.role, m.content, m.model, m.route, m.status, m.error, m.created_at, m.updated_at,
    t.message_id AS t_message_id, t.model_id, t.quantization, t.kv_dtype, t.batch, t.context_tokens, t.prompt_tokens,
    t.reused_tokens, t.generated_tokens, t.ttft_ms, t.prefill_tps, t.decode_tps, t.e2e_tps, t.prefill_ms,
    t.first_token_ms, t.last_token_ms, t.peak_memory_bytes, t.pressure, t.swap_delta_bytes, t.finish_reason, t.quant_kernel, t.slowdown,
    t.speculation, t.two_macs";

pub(super) fn message_from(row: &SqliteRow) -> Result<StoredMessage> {
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
            speculation: row.try_get("speculation").ctx(what)?,
            two_macs: row.try_get("two_macs").ctx(what)?,
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

pub(crate) async fn insert_stats(tx: &mut Transaction<'_, Sqlite>, message_id: i64, s: &TurnStatsRecord) -> Result<()> {
    sqlx::query(
        "INSERT INTO turn_stats (message_id, model_id, quantization, kv_dtype, batch, context_tokens, prompt_tokens,
            reused_tokens, generated_tokens, ttft_ms, prefill_tps, decode_tps, e2e_tps, prefill_ms, first_token_ms,
            last_token_ms, peak_memory_bytes, pressure, swap_delta_bytes, finish_reason, quant_kernel, slowdown,
            speculation, two_macs)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)",
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
    .bind(&s.speculation)
    .bind(&s.two_macs)
    .execute(&mut **tx)
    .await
    .ctx("insert turn stats")?;
    Ok(())
}
