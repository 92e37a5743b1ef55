//! What loads and turns really took (`core::calibration::PeakMeasurement`),
//! kept per model as loaded, for estimates that learn from this machine.

use headroom_core::calibration::{MeasuredKind, PeakMeasurement};
use headroom_core::kv::KvFormat;
use sqlx::Row;

use crate::error::{Context, Result};
use crate::{now_ms, Store};

/// Rows kept per model: plenty for every context a user runs at, and a
/// table that cannot grow without bound however long the app runs.
pub const KEPT_PER_MODEL: i64 = 256;

fn kind_name(kind: MeasuredKind) -> &'static str {
    match kind {
        MeasuredKind::Load => "load",
        MeasuredKind::Turn => "turn",
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Store {
    /// Keeps `m`, dropping the model's oldest rows past [`KEPT_PER_MODEL`].
    pub async fn add_peak_measurement(&self, m: &PeakMeasurement) -> Result<()> {
        let mut tx = self.pool.begin().await.ctx("begin recording a measurement")?;
        sqlx::query(
            "INSERT INTO peak_measurements (measured_at, fingerprint, kind, kv, context_tokens, prompt_tokens,
             reused_tokens, mlx_peak_bytes, mlx_active_bytes, resident_peak_bytes, cached_bytes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )
        .bind(now_ms())
        .bind(&m.fingerprint)
        .bind(kind_name(m.kind))
        .bind(serde_json::to_string(&m.kv)?)
        .bind(to_i64(m.context_tokens))
        .bind(to_i64(m.prompt_tokens))
        .bind(to_i64(m.reused_tokens))
        .bind(to_i64(m.mlx_peak_bytes))
        .bind(to_i64(m.mlx_active_bytes))
        .bind(m.resident_peak_bytes.map(to_i64))
        .bind(to_i64(m.cached_bytes))
        .execute(&mut *tx)
        .await
        .ctx("record a measurement")?;
        sqlx::query(
            "DELETE FROM peak_measurements WHERE fingerprint = ?1 AND id NOT IN
             (SELECT id FROM peak_measurements WHERE fingerprint = ?1 ORDER BY measured_at DESC, id DESC LIMIT ?2)",
        )
        .bind(&m.fingerprint)
        .bind(KEPT_PER_MODEL)
        .execute(&mut *tx)
        .await
        .ctx("drop old measurements")?;
        tx.commit().await.ctx("commit a measurement")?;
        Ok(())
    }

    /// The model's measurements, newest first. A row this version cannot
    /// read (a KV format from a later one) is skipped, never an error.
    pub async fn peak_measurements(&self, fingerprint: &str) -> Result<Vec<PeakMeasurement>> {
        let rows = sqlx::query(
            "SELECT kind, kv, context_tokens, prompt_tokens, reused_tokens, mlx_peak_bytes, mlx_active_bytes,
             resident_peak_bytes, cached_bytes FROM peak_measurements WHERE fingerprint = ?1 ORDER BY measured_at DESC, id DESC",
        )
        .bind(fingerprint)
        .fetch_all(&self.pool)
        .await
        .ctx("read measurements")?;
        let read = |row: &sqlx::sqlite::SqliteRow| -> Option<PeakMeasurement> {
            let n = |col: &str| row.try_get::<i64, _>(col).ok().and_then(|v| u64::try_from(v).ok());
            let kind = match row.try_get::<String, _>("kind").ok()?.as_str() {
                "load" => MeasuredKind::Load,
                "turn" => MeasuredKind::Turn,
                _ => return None,
            };
            let kv: KvFormat = serde_json::from_str(&row.try_get::<String, _>("kv").ok()?).ok()?;
            Some(PeakMeasurement {
                fingerprint: fingerprint.to_owned(),
                kind,
                kv,
                context_tokens: n("context_tokens")?,
                prompt_tokens: n("prompt_tokens")?,
                reused_tokens: n("reused_tokens")?,
                mlx_peak_bytes: n("mlx_peak_bytes")?,
                mlx_active_bytes: n("mlx_active_bytes")?,
                resident_peak_bytes: row
                    .try_get::<Option<i64>, _>("resident_peak_bytes")
                    .ok()?
                    .and_then(|v| u64::try_from(v).ok()),
                cached_bytes: n("cached_bytes")?,
            })
        };
        Ok(rows.iter().filter_map(read).collect())
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::calibration::Measured;

    use super::*;
    use headroom_test_support::scratch;

    fn turn(fingerprint: &str, context: u64, reused: u64, peak: u64) -> PeakMeasurement {
        PeakMeasurement {
            fingerprint: fingerprint.into(),
            kind: MeasuredKind::Turn,
            kv: KvFormat::Float,
            context_tokens: context,
            prompt_tokens: context - 2,
            reused_tokens: reused,
            mlx_peak_bytes: peak,
            mlx_active_bytes: peak / 2,
            resident_peak_bytes: Some(peak + 7),
            cached_bytes: 0,
        }
    }

    #[tokio::test]
    async fn measurements_come_back_per_model_newest_first_and_are_bounded() -> Result<()> {
        let dir = scratch("store-peaks");
        let store = Store::open(&dir).await?;
        let q8 = KvFormat::bits_from_start(8);
        let load = PeakMeasurement {
            kind: MeasuredKind::Load,
            context_tokens: 0,
            kv: q8,
            resident_peak_bytes: None,
            cached_bytes: 3,
            ..turn("a", 2, 0, 5)
        };
        store.add_peak_measurement(&load).await?;
        store.add_peak_measurement(&turn("a", 300, 0, 1000)).await?;
        store.add_peak_measurement(&turn("a", 900, 600, 1100)).await?;
        store.add_peak_measurement(&turn("b", 300, 0, 9)).await?;
        let a = store.peak_measurements("a").await?;
        assert_eq!(a.len(), 3);
        assert_eq!(a[2], load, "a load and its KV format come back as written");
        assert_eq!(a[0].reused_tokens, 600);
        // Only the whole prefill is a calibration point.
        let points: Vec<Measured> = a.iter().filter_map(PeakMeasurement::calibration_point).collect();
        assert_eq!(points, [Measured { kv: KvFormat::Float, context_tokens: 300, peak_bytes: 1007 }]);
        assert_eq!(store.peak_measurements("b").await?.len(), 1);
        assert!(store.peak_measurements("c").await?.is_empty());

        for i in 0..KEPT_PER_MODEL + 5 {
            store.add_peak_measurement(&turn("b", 400, 0, 10 + i as u64)).await?;
        }
        let b = store.peak_measurements("b").await?;
        assert_eq!(b.len() as i64, KEPT_PER_MODEL);
        assert_eq!(b[0].mlx_peak_bytes, 10 + KEPT_PER_MODEL as u64 + 4, "the newest are kept");
        assert_eq!(store.peak_measurements("a").await?.len(), 3, "another model's rows are left alone");

        // A row a later version wrote with a KV format this one cannot read is skipped.
        sqlx::query(
            "UPDATE peak_measurements SET kv = '{\"kind\":\"future\"}' WHERE fingerprint = 'a' AND kind = 'load'",
        )
        .execute(store.pool())
        .await
        .ctx("test")?;
        assert_eq!(store.peak_measurements("a").await?.len(), 2);
        Ok(())
    }
}
