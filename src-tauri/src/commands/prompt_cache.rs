//! The prompt cache's figures for Settings: what it holds in memory and on
//! disk, against its allowances, and how often it saved a prefill.

use headroom_engine::prompt_cache::PromptCacheStats;
use serde::Serialize;
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::state::AppState;

/// [`PromptCacheStats`] in the UI's shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct PromptCacheView {
    pub entries: usize,
    pub bytes: u64,
    /// Of those, the chat in use's (the fit verdict counts it as the KV cache).
    pub latest_bytes: u64,
    /// What the others may hold (from the load's fit: half of what it left, at most the setting).
    pub limit_bytes: u64,
    pub lookups: u64,
    pub hits: u64,
    pub disk_hits: u64,
    /// hits / lookups; `None` before the first request.
    pub hit_rate: Option<f64>,
    /// Of every prompt token asked for, the share not prefilled again.
    pub reused_share: Option<f64>,
    pub evictions: u64,
    pub disk_files: usize,
    pub disk_bytes: u64,
    pub disk_limit_bytes: u64,
    pub disk_errors: u64,
}

impl From<PromptCacheStats> for PromptCacheView {
    fn from(s: PromptCacheStats) -> Self {
        let share = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
        Self {
            entries: s.entries,
            bytes: s.bytes as u64,
            latest_bytes: s.latest_bytes as u64,
            limit_bytes: s.limit_bytes as u64,
            lookups: s.lookups,
            hits: s.hits,
            disk_hits: s.disk_hits,
            hit_rate: share(s.hits, s.lookups),
            reused_share: share(s.reused_tokens, s.prompt_tokens),
            evictions: s.evictions,
            disk_files: s.disk_files,
            disk_bytes: s.disk_bytes,
            disk_limit_bytes: s.disk_limit_bytes,
            disk_errors: s.disk_errors,
        }
    }
}

/// The figures now (the engine answers between runs; off the UI thread).
#[tauri::command]
pub async fn prompt_cache_stats(state: State<'_, AppState>) -> Result<PromptCacheView, CommandError> {
    let engine = state.engine.clone();
    tauri::async_runtime::spawn_blocking(move || engine.prompt_cache_stats())
        .await
        .map_err(|e| {
            CommandError::new(
                ErrorCode::EngineInternal,
                format!("The prompt cache's figures stopped unexpectedly: {e}"),
            )
        })?
        .map(PromptCacheView::from)
        .map_err(CommandError::from)
}
