//! The live graph's history: the memory timeline (each row the worst of the
//! readings over its span, so a short spike is never averaged away), the
//! per-second decode rates of answers, and the stretches slowed by memory.
//! Which readings become rows is decided above (`core::timeline`); here
//! they are kept, read back by time, and pruned.

use headroom_core::pressure::PressureLevel;
use headroom_core::slowdown::{Cause, RatePoint, Stretch};
pub use headroom_core::timeline::MemoryPoint;
use serde::Serialize;
// AssertSqlSafe: the statement is built from constants only, never from input.
use sqlx::{AssertSqlSafe, Row};

use crate::error::{Context, Result};
use crate::sessions::parse_pressure;
use crate::Store;

/// One decode-rate point of a model's answer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RateRow<'a> {
    pub model_id: &'a str,
    pub point: RatePoint,
    /// Inside a stretch slowed by memory.
    pub slowed: bool,
}

/// A stored rate point (owned).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredRate {
    pub model_id: String,
    pub point: RatePoint,
    pub slowed: bool,
}

/// A stored slowdown: a stretch of one model's answer blamed on memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredSlowdown {
    pub model_id: String,
    pub stretch: Stretch,
    pub sentence: String,
}

/// SQL rank of a pressure level: unknown < normal < warning < critical.
fn rank_sql(column: &str) -> String {
    format!("(CASE {column} WHEN 'critical' THEN 3 WHEN 'warning' THEN 2 WHEN 'normal' THEN 1 ELSE 0 END)")
}

/// Bytes and Unix ms as SQLite's INTEGER (i64); nothing real reaches 2^63.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn uint(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl Store {
    /// Writes a row of the memory timeline, folding it worst-of into a row
    /// that starts at the same time (the recorder rewrites a row it
    /// stretched): the span reaches the later end, each figure keeps its
    /// worst value.
    pub async fn record_memory(&self, p: &MemoryPoint) -> Result<()> {
        let sql = format!(
            "INSERT INTO memory_timeline (at_ms, span_ms, total_bytes, available_bytes, used_bytes, swap_total_bytes,
                swap_used_bytes, process_rss_bytes, pressure) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (at_ms) DO UPDATE SET
                span_ms = max(span_ms, excluded.span_ms),
                total_bytes = excluded.total_bytes,
                available_bytes = min(available_bytes, excluded.available_bytes),
                used_bytes = max(used_bytes, excluded.used_bytes),
                swap_total_bytes = excluded.swap_total_bytes,
                swap_used_bytes = max(swap_used_bytes, excluded.swap_used_bytes),
                process_rss_bytes = max(process_rss_bytes, excluded.process_rss_bytes),
                pressure = CASE WHEN {} > {} THEN excluded.pressure ELSE pressure END",
            rank_sql("excluded.pressure"),
            rank_sql("pressure"),
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(int(p.at_ms))
            .bind(int(p.span_ms))
            .bind(int(p.total_bytes))
            .bind(int(p.available_bytes))
            .bind(int(p.used_bytes))
            .bind(int(p.swap_total_bytes))
            .bind(int(p.swap_used_bytes))
            .bind(int(p.process_rss_bytes))
            .bind(p.pressure.as_str())
            .execute(&self.pool)
            .await
            .ctx("record memory reading")?;
        Ok(())
    }

    /// The rows that reach into `[since_ms, …)`, oldest first.
    pub async fn memory_timeline(&self, since_ms: u64) -> Result<Vec<MemoryPoint>> {
        let rows = sqlx::query(
            "SELECT at_ms, span_ms, total_bytes, available_bytes, used_bytes, swap_total_bytes, swap_used_bytes,
                process_rss_bytes, pressure FROM memory_timeline WHERE at_ms + span_ms > ?1 ORDER BY at_ms",
        )
        .bind(int(since_ms))
        .fetch_all(&self.pool)
        .await
        .ctx("read memory timeline")?;
        let what = "read memory timeline";
        rows.iter()
            .map(|r| {
                Ok(MemoryPoint {
                    at_ms: uint(r.try_get("at_ms").ctx(what)?),
                    span_ms: uint(r.try_get("span_ms").ctx(what)?),
                    total_bytes: uint(r.try_get("total_bytes").ctx(what)?),
                    available_bytes: uint(r.try_get("available_bytes").ctx(what)?),
                    used_bytes: uint(r.try_get("used_bytes").ctx(what)?),
                    swap_total_bytes: uint(r.try_get("swap_total_bytes").ctx(what)?),
                    swap_used_bytes: uint(r.try_get("swap_used_bytes").ctx(what)?),
                    process_rss_bytes: uint(r.try_get("process_rss_bytes").ctx(what)?),
                    pressure: parse_pressure(r.try_get("pressure").ctx(what)?, "memory_timeline.pressure")?,
                })
            })
            .collect()
    }

    /// Keeps decode-rate points (one transaction; a point already kept is replaced).
    pub async fn record_rates(&self, rows: &[RateRow<'_>]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await.ctx("record decode rates")?;
        for row in rows {
            let p = row.point;
            sqlx::query(
                "INSERT INTO rate_timeline (model_id, at_ms, start_ms, tokens, tps, slowed) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (model_id, at_ms) DO UPDATE SET start_ms = excluded.start_ms, tokens = excluded.tokens,
                    tps = excluded.tps, slowed = excluded.slowed",
            )
            .bind(row.model_id)
            .bind(int(p.at_ms))
            .bind(int(p.start_ms))
            .bind(i64::from(p.tokens))
            .bind(p.tps)
            .bind(row.slowed)
            .execute(&mut *tx)
            .await
            .ctx("record decode rates")?;
        }
        tx.commit().await.ctx("record decode rates")?;
        Ok(())
    }

    /// The rate points from `since_ms` on, of every model, oldest first.
    pub async fn rate_timeline(&self, since_ms: u64) -> Result<Vec<StoredRate>> {
        let rows = sqlx::query(
            "SELECT model_id, at_ms, start_ms, tokens, tps, slowed FROM rate_timeline WHERE at_ms >= ?1 ORDER BY at_ms",
        )
        .bind(int(since_ms))
        .fetch_all(&self.pool)
        .await
        .ctx("read decode rates")?;
        let what = "read decode rates";
        rows.iter()
            .map(|r| {
                Ok(StoredRate {
                    model_id: r.try_get("model_id").ctx(what)?,
                    point: RatePoint {
                        start_ms: uint(r.try_get("start_ms").ctx(what)?),
                        at_ms: uint(r.try_get("at_ms").ctx(what)?),
                        tokens: u32::try_from(r.try_get::<i64, _>("tokens").ctx(what)?).unwrap_or(0),
                        tps: r.try_get("tps").ctx(what)?,
                    },
                    slowed: r.try_get("slowed").ctx(what)?,
                })
            })
            .collect()
    }

    /// A model's last `limit` rates that were not slowed, oldest first: its
    /// reference rate after a restart.
    pub async fn recent_rates(&self, model_id: &str, limit: usize) -> Result<Vec<f64>> {
        let mut rates: Vec<f64> = sqlx::query_scalar(
            "SELECT tps FROM rate_timeline WHERE model_id = ?1 AND slowed = 0 ORDER BY at_ms DESC LIMIT ?2",
        )
        .bind(model_id)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .ctx("read a model's recent rates")?;
        rates.reverse();
        Ok(rates)
    }

    /// Keeps a stretch blamed on memory (a stretch without a cause is not
    /// kept: the graph does not mark it). Replaces the model's stretch with
    /// the same start (it grows while the answer streams).
    pub async fn record_slowdown(&self, model_id: &str, s: &Stretch) -> Result<()> {
        let (Some(cause), Some(sentence)) = (s.cause, s.sentence()) else { return Ok(()) };
        sqlx::query(
            "INSERT OR REPLACE INTO slowdowns (model_id, start_ms, end_ms, reference_tps, tps, tokens, swap_before_bytes,
                swap_peak_bytes, pressure_before, pressure_peak, swap_growth_bytes, pressure_rose_to, sentence)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )
        .bind(model_id)
        .bind(int(s.start_ms))
        .bind(int(s.end_ms))
        .bind(s.reference_tps)
        .bind(s.tps)
        .bind(i64::from(s.tokens))
        .bind(int(s.swap_before_bytes))
        .bind(int(s.swap_peak_bytes))
        .bind(s.pressure_before.as_str())
        .bind(s.pressure_peak.as_str())
        .bind(cause.swap_growth_bytes.map(int))
        .bind(cause.pressure_rose_to.map(PressureLevel::as_str))
        .bind(sentence)
        .execute(&self.pool)
        .await
        .ctx("record a slowdown")?;
        Ok(())
    }

    /// The slowdowns that end at or after `since_ms`, oldest first.
    pub async fn slowdowns(&self, since_ms: u64) -> Result<Vec<StoredSlowdown>> {
        let rows = sqlx::query(
            "SELECT model_id, start_ms, end_ms, reference_tps, tps, tokens, swap_before_bytes, swap_peak_bytes,
                pressure_before, pressure_peak, swap_growth_bytes, pressure_rose_to, sentence
             FROM slowdowns WHERE end_ms >= ?1 ORDER BY start_ms",
        )
        .bind(int(since_ms))
        .fetch_all(&self.pool)
        .await
        .ctx("read slowdowns")?;
        let what = "read slowdowns";
        rows.iter()
            .map(|r| {
                let rose: Option<String> = r.try_get("pressure_rose_to").ctx(what)?;
                let cause = Cause {
                    swap_growth_bytes: r.try_get::<Option<i64>, _>("swap_growth_bytes").ctx(what)?.map(uint),
                    pressure_rose_to: rose.map(|l| parse_pressure(&l, "slowdowns.pressure_rose_to")).transpose()?,
                };
                Ok(StoredSlowdown {
                    model_id: r.try_get("model_id").ctx(what)?,
                    stretch: Stretch {
                        start_ms: uint(r.try_get("start_ms").ctx(what)?),
                        end_ms: uint(r.try_get("end_ms").ctx(what)?),
                        reference_tps: r.try_get("reference_tps").ctx(what)?,
                        tps: r.try_get("tps").ctx(what)?,
                        tokens: u32::try_from(r.try_get::<i64, _>("tokens").ctx(what)?).unwrap_or(0),
                        swap_before_bytes: uint(r.try_get("swap_before_bytes").ctx(what)?),
                        swap_peak_bytes: uint(r.try_get("swap_peak_bytes").ctx(what)?),
                        pressure_before: parse_pressure(
                            r.try_get("pressure_before").ctx(what)?,
                            "slowdowns.pressure_before",
                        )?,
                        pressure_peak: parse_pressure(
                            r.try_get("pressure_peak").ctx(what)?,
                            "slowdowns.pressure_peak",
                        )?,
                        cause: Some(cause),
                    },
                    sentence: r.try_get("sentence").ctx(what)?,
                })
            })
            .collect()
    }

    /// Drops what ended before `before_ms` from all three timelines;
    /// returns how many rows went.
    pub async fn prune_timeline(&self, before_ms: u64) -> Result<u64> {
        let mut tx = self.pool.begin().await.ctx("prune the timeline")?;
        let mut gone = 0;
        for sql in [
            "DELETE FROM memory_timeline WHERE at_ms + span_ms < ?1",
            "DELETE FROM rate_timeline WHERE at_ms < ?1",
            "DELETE FROM slowdowns WHERE end_ms < ?1",
        ] {
            gone += sqlx::query(sql)
                .bind(int(before_ms))
                .execute(&mut *tx)
                .await
                .ctx("prune the timeline")?
                .rows_affected();
        }
        tx.commit().await.ctx("prune the timeline")?;
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::slowdown::{find_stretches, MemoryMark, Policy};

    use super::*;
    use crate::testutil::store;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn point(at_ms: u64, span_ms: u64, available: u64, swap: u64, pressure: PressureLevel) -> MemoryPoint {
        MemoryPoint {
            at_ms,
            span_ms,
            total_bytes: 32 * GIB,
            available_bytes: available,
            used_bytes: 32 * GIB - available,
            swap_total_bytes: 2 * GIB,
            swap_used_bytes: swap,
            process_rss_bytes: 100 * MIB,
            pressure,
        }
    }

    #[tokio::test]
    async fn memory_rows_upsert_worst_of_and_are_read_by_overlap() {
        let store = store("timeline").await;
        let t0 = 1_700_000_000_000;
        for p in [
            point(t0, 10_000, 10 * GIB, 0, PressureLevel::Normal),
            // The same row rewritten, stretched and with a worse reading.
            point(t0, 60_000, 4 * GIB, 5 * MIB, PressureLevel::Critical),
            point(t0, 20_000, 12 * GIB, MIB, PressureLevel::Warning),
            point(t0 + 60_000, 10_000, 11 * GIB, 0, PressureLevel::Unknown),
        ] {
            store.record_memory(&p).await.unwrap();
        }
        let tl = store.memory_timeline(t0).await.unwrap();
        assert_eq!(tl.len(), 2);
        assert_eq!(tl[0], point(t0, 60_000, 4 * GIB, 5 * MIB, PressureLevel::Critical));
        assert_eq!((tl[1].at_ms, tl[1].pressure), (t0 + 60_000, PressureLevel::Unknown));
        // A row that started before `since` but reaches into it is part of the answer.
        assert_eq!(store.memory_timeline(t0 + 59_999).await.map(|t| t.len()).ok(), Some(2));
        assert_eq!(store.memory_timeline(t0 + 60_000).await.map(|t| t.len()).ok(), Some(1));
        assert_eq!(store.prune_timeline(t0 + 60_001).await.ok(), Some(1));
        assert_eq!(store.memory_timeline(0).await.map(|t| t.len()).ok(), Some(1));
    }

    #[tokio::test]
    async fn rates_and_slowdowns_round_trip_and_feed_a_models_history() {
        let store = store("rates").await;
        let t0 = 1_800_000_000_000;
        let pts: Vec<RatePoint> = [3u32, 3, 3, 1, 1, 1, 3]
            .iter()
            .enumerate()
            .filter_map(|(i, &n)| RatePoint::from_ms(t0 + i as u64 * 1000, t0 + (i as u64 + 1) * 1000, n))
            .collect();
        let memory: Vec<MemoryMark> = (0..=7u64)
            .map(|s| MemoryMark {
                at_ms: t0 + s * 1000,
                swap_used_bytes: if s <= 3 { 0 } else { s * 300 * MIB },
                pressure: PressureLevel::Normal,
            })
            .collect();
        let stretches = find_stretches(&[3.0; 4], &pts, &memory, &Policy::default());
        assert_eq!(stretches.len(), 1);
        let rows: Vec<RateRow<'_>> = pts
            .iter()
            .map(|&p| RateRow { model_id: "qwen", point: p, slowed: p.tps < 2.0 })
            .chain([RateRow { model_id: "llama", point: pts[0], slowed: false }])
            .collect();
        store.record_rates(&rows).await.unwrap();
        store.record_rates(&rows[..1]).await.unwrap();
        store.record_slowdown("qwen", &stretches[0]).await.unwrap();

        let back = store.rate_timeline(t0).await.unwrap();
        assert_eq!(back.len(), 8, "a point kept twice is one row");
        assert_eq!(back.iter().filter(|r| r.model_id == "qwen").map(|r| r.point).collect::<Vec<_>>(), pts);
        assert_eq!(store.recent_rates("qwen", 3).await.ok(), Some(vec![3.0, 3.0, 3.0]), "slowed points left out");
        assert_eq!(store.recent_rates("llama", 10).await.ok(), Some(vec![3.0]));
        assert_eq!(store.recent_rates("mistral", 10).await.ok(), Some(vec![]));

        let kept = store.slowdowns(t0).await.unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].stretch, stretches[0]);
        assert_eq!(Some(kept[0].sentence.clone()), stretches[0].sentence());
        assert!(
            kept[0].sentence.starts_with("slowed by swap: 3.0 → 1.0 tok/s while swap grew"),
            "{}",
            kept[0].sentence
        );
        // A stretch that is not blamed is not kept.
        let unblamed = Stretch { cause: None, start_ms: t0 + 99_000, ..stretches[0] };
        store.record_slowdown("qwen", &unblamed).await.unwrap();
        assert_eq!(store.slowdowns(0).await.map(|s| s.len()).ok(), Some(1));
        assert!(store.slowdowns(t0 + 7_001).await.is_ok_and(|s| s.is_empty()), "ended before `since`");

        assert_eq!(store.prune_timeline(t0 + 10_000).await.ok(), Some(9), "8 rates and the slowdown");
        assert!(store.rate_timeline(0).await.is_ok_and(|r| r.is_empty()));
    }
}
