//! The memory timeline, downsampled: readings fall into fixed buckets and
//! each bucket keeps the worst of them (least available, most swap, highest
//! pressure), so a short spike is never averaged away.

use headroom_core::pressure::PressureLevel;
use serde::{Deserialize, Serialize};
// AssertSqlSafe: the statement is built from constants only, never from input.
use sqlx::{AssertSqlSafe, Row};

use crate::error::{Context, Result};
use crate::sessions::parse_pressure;
use crate::Store;

/// One bucket's width: a day of 1 Hz readings becomes 8 640 rows.
pub const BUCKET_MS: i64 = 10_000;

/// One point of the timeline (bytes; `at_ms` is the bucket's start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryPoint {
    pub at_ms: i64,
    pub total_bytes: i64,
    pub available_bytes: i64,
    pub used_bytes: i64,
    pub swap_total_bytes: i64,
    pub swap_used_bytes: i64,
    pub process_rss_bytes: i64,
    pub pressure: PressureLevel,
}

/// SQL rank of a pressure level: unknown < normal < warning < critical.
fn rank_sql(column: &str) -> String {
    format!("(CASE {column} WHEN 'critical' THEN 3 WHEN 'warning' THEN 2 WHEN 'normal' THEN 1 ELSE 0 END)")
}

impl Store {
    /// Folds one reading into its bucket.
    pub async fn record_memory(&self, p: &MemoryPoint) -> Result<()> {
        let sql = format!(
            "INSERT INTO memory_timeline (at_ms, total_bytes, available_bytes, used_bytes, swap_total_bytes,
                swap_used_bytes, process_rss_bytes, pressure) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (at_ms) DO UPDATE SET
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
            .bind(p.at_ms - p.at_ms.rem_euclid(BUCKET_MS))
            .bind(p.total_bytes)
            .bind(p.available_bytes)
            .bind(p.used_bytes)
            .bind(p.swap_total_bytes)
            .bind(p.swap_used_bytes)
            .bind(p.process_rss_bytes)
            .bind(p.pressure.as_str())
            .execute(&self.pool)
            .await
            .ctx("record memory reading")?;
        Ok(())
    }

    /// The buckets from `since_ms` on, oldest first.
    pub async fn memory_timeline(&self, since_ms: i64) -> Result<Vec<MemoryPoint>> {
        let rows = sqlx::query(
            "SELECT at_ms, total_bytes, available_bytes, used_bytes, swap_total_bytes, swap_used_bytes,
                process_rss_bytes, pressure FROM memory_timeline WHERE at_ms >= ?1 ORDER BY at_ms",
        )
        .bind(since_ms - since_ms.rem_euclid(BUCKET_MS))
        .fetch_all(&self.pool)
        .await
        .ctx("read memory timeline")?;
        let what = "read memory timeline";
        rows.iter()
            .map(|r| {
                Ok(MemoryPoint {
                    at_ms: r.try_get("at_ms").ctx(what)?,
                    total_bytes: r.try_get("total_bytes").ctx(what)?,
                    available_bytes: r.try_get("available_bytes").ctx(what)?,
                    used_bytes: r.try_get("used_bytes").ctx(what)?,
                    swap_total_bytes: r.try_get("swap_total_bytes").ctx(what)?,
                    swap_used_bytes: r.try_get("swap_used_bytes").ctx(what)?,
                    process_rss_bytes: r.try_get("process_rss_bytes").ctx(what)?,
                    pressure: parse_pressure(r.try_get("pressure").ctx(what)?, "memory_timeline.pressure")?,
                })
            })
            .collect()
    }

    /// Drops buckets older than `before_ms`; returns how many.
    pub async fn prune_memory_timeline(&self, before_ms: i64) -> Result<u64> {
        let done = sqlx::query("DELETE FROM memory_timeline WHERE at_ms < ?1")
            .bind(before_ms)
            .execute(&self.pool)
            .await
            .ctx("prune memory timeline")?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::store;

    fn point(at_ms: i64, available: i64, swap: i64, pressure: PressureLevel) -> MemoryPoint {
        MemoryPoint {
            at_ms,
            total_bytes: 32 << 30,
            available_bytes: available,
            used_bytes: (32 << 30) - available,
            swap_total_bytes: 2 << 30,
            swap_used_bytes: swap,
            process_rss_bytes: 100 << 20,
            pressure,
        }
    }

    #[tokio::test]
    async fn readings_fold_into_buckets_keeping_the_worst() {
        let store = store("timeline").await;
        let t0 = 1_700_000_000_000; // a bucket boundary
        for p in [
            point(t0 + 1_000, 10 << 30, 0, PressureLevel::Normal),
            point(t0 + 2_000, 4 << 30, 5 << 20, PressureLevel::Critical),
            point(t0 + 3_000, 12 << 30, 1 << 20, PressureLevel::Warning),
            point(t0 + BUCKET_MS + 500, 11 << 30, 0, PressureLevel::Unknown),
        ] {
            store.record_memory(&p).await.unwrap_or_else(|e| panic!("{e}"));
        }
        let tl = store.memory_timeline(t0).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tl.len(), 2);
        assert_eq!(
            tl[0],
            MemoryPoint { at_ms: t0, used_bytes: 28 << 30, ..point(t0, 4 << 30, 5 << 20, PressureLevel::Critical) }
        );
        assert_eq!((tl[1].at_ms, tl[1].pressure), (t0 + BUCKET_MS, PressureLevel::Unknown));
        assert_eq!(store.memory_timeline(t0 + BUCKET_MS + 1).await.map(|t| t.len()).ok(), Some(1));
        assert_eq!(store.prune_memory_timeline(t0 + BUCKET_MS).await.ok(), Some(1));
        assert_eq!(store.memory_timeline(0).await.map(|t| t.len()).ok(), Some(1));
    }
}
