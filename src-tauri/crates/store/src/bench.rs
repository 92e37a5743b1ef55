//! Benchmark runs as measured: the raw per-repetition JSON, the summary,
//! the machine and the labels, kept whole so later analysis can redo it.

use serde::{Deserialize, Serialize};
use sqlx::Row;

use crate::error::{Context, Result};
use crate::{now_ms, Store};

/// A stored benchmark run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchRun {
    pub id: i64,
    pub created_at: i64,
    pub model_id: String,
    /// Context tokens, prompt/generated tokens, batch, quantization, KV dtype, …
    pub labels: serde_json::Value,
    /// The machine it ran on (chip, memory, OS, MLX version, …).
    pub machine: serde_json::Value,
    pub summary: serde_json::Value,
    /// Every repetition, raw.
    pub runs: serde_json::Value,
}

impl Store {
    /// Stores a run; returns its id.
    pub async fn add_bench_run(
        &self,
        model_id: &str,
        labels: &serde_json::Value,
        machine: &serde_json::Value,
        summary: &serde_json::Value,
        runs: &serde_json::Value,
    ) -> Result<i64> {
        let done = sqlx::query(
            "INSERT INTO bench_runs (created_at, model_id, labels, machine, summary, runs) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .bind(now_ms())
        .bind(model_id)
        .bind(labels.to_string())
        .bind(machine.to_string())
        .bind(summary.to_string())
        .bind(runs.to_string())
        .execute(&self.pool)
        .await
        .ctx("store benchmark run")?;
        Ok(done.last_insert_rowid())
    }

    /// Runs, newest first; of one model if `model_id` is given.
    pub async fn bench_runs(&self, model_id: Option<&str>) -> Result<Vec<BenchRun>> {
        let rows = sqlx::query(
            "SELECT id, created_at, model_id, labels, machine, summary, runs FROM bench_runs
             WHERE ?1 IS NULL OR model_id = ?1 ORDER BY created_at DESC, id DESC",
        )
        .bind(model_id)
        .fetch_all(&self.pool)
        .await
        .ctx("read benchmark runs")?;
        rows.iter()
            .map(|row| {
                let json = |col: &str| -> Result<serde_json::Value> {
                    let text: String = row.try_get(col).ctx("read benchmark runs")?;
                    Ok(serde_json::from_str(&text)?)
                };
                Ok(BenchRun {
                    id: row.try_get("id").ctx("read benchmark runs")?,
                    created_at: row.try_get("created_at").ctx("read benchmark runs")?,
                    model_id: row.try_get("model_id").ctx("read benchmark runs")?,
                    labels: json("labels")?,
                    machine: json("machine")?,
                    summary: json("summary")?,
                    runs: json("runs")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testutil::store;

    #[tokio::test]
    async fn bench_runs_keep_their_raw_json_and_filter_by_model() {
        let store = store("bench").await;
        let labels =
            json!({"contextTokens": 512, "promptTokens": 512, "generatedTokens": 128, "batch": 1, "kvDtype": "bf16"});
        let runs = json!([{"ttftMs": 80.5, "decodeTps": 41.25}, {"ttftMs": 79.0, "decodeTps": 41.5}]);
        let a = store
            .add_bench_run(
                "qwen-7b",
                &labels,
                &json!({"os": "linux"}),
                &json!({"decodeTps": {"median": 41.375}}),
                &runs,
            )
            .await
            .unwrap();
        let b = store.add_bench_run("llama-8b", &labels, &json!({}), &json!({}), &json!([])).await.unwrap();
        assert!(b > a);
        let all = store.bench_runs(None).await.unwrap();
        assert_eq!(all.iter().map(|r| r.id).collect::<Vec<_>>(), [b, a]);
        let qwen = store.bench_runs(Some("qwen-7b")).await.unwrap();
        assert_eq!(qwen.len(), 1);
        assert_eq!((&qwen[0].labels, &qwen[0].runs), (&labels, &runs));
        assert_eq!(qwen[0].summary["decodeTps"]["median"], 41.375);
    }
}
