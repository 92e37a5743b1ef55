//! Live memory for the UI and the tray: the `headroom-memory` sampler runs
//! on the shared async runtime, once a second while the popover is visible or
//! an answer streams and once every few seconds otherwise (still enough to
//! warn). Each sample is handed to the front end (the app emits it while
//! the popover is visible, never to a hidden webview), kept in the sampler's ring buffer
//! for the live strip's and graph's first paint (`memory_history`),
//! summarized in the tray's tooltip, and recorded in the store's memory
//! timeline (kept a week) when the recorder says it changed
//! (`core::timeline::TimelineRecorder`): an idle app writes nothing.

use headroom_core::fit::GIB;
use headroom_core::timeline::{MemoryPoint, TimelineRecorder};
use std::time::Duration;

use headroom_memory::{PressureLevel, Reader, Sample, Sampler};
use serde::Serialize;

use crate::live::Activity;
use crate::state::AppState;

/// While the popover is visible or an answer streams: the graph's pace.
pub const ACTIVE_PERIOD: Duration = Duration::from_secs(1);
/// While idle: a reading every 5 s, enough for the tray to warn.
pub const IDLE_PERIOD: Duration = Duration::from_secs(5);
/// Ten minutes of history at 1 Hz (longer while idle).
const HISTORY: usize = 600;
/// How long the stored timeline keeps its readings.
pub const TIMELINE_KEPT_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// The sampler's period for an activity.
pub fn period(activity: Activity) -> Duration {
    if activity.active() {
        ACTIVE_PERIOD
    } else {
        IDLE_PERIOD
    }
}

/// One sample as the UI sees it (bytes; camelCase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct MemorySample {
    pub at_unix_ms: u64,
    pub total: u64,
    pub available: u64,
    pub used: u64,
    pub swap_total: u64,
    pub swap_used: u64,
    pub pressure: PressureLevel,
    pub process_rss: u64,
    /// MLX's live arrays now; `None` in the history (not kept there).
    pub mlx_active: Option<u64>,
    /// MLX's peak since the last reset; `None` in the history.
    pub mlx_peak: Option<u64>,
}

impl MemorySample {
    pub fn from_sample(s: &Sample, mlx: Option<headroom_engine::MlxMemory>) -> Self {
        let r = &s.reading;
        Self {
            at_unix_ms: s.at_unix_ms,
            total: r.total,
            available: r.available,
            used: r.used,
            swap_total: r.swap_total,
            swap_used: r.swap_used,
            pressure: r.pressure,
            process_rss: r.process_rss,
            mlx_active: mlx.map(|m| m.active),
            mlx_peak: mlx.map(|m| m.peak),
        }
    }
}

/// A sample as a point of the timeline: it stands for one sampling period.
pub fn timeline_point(s: &Sample) -> MemoryPoint {
    let r = &s.reading;
    MemoryPoint {
        at_ms: s.at_unix_ms,
        span_ms: s.period_ms,
        total_bytes: r.total,
        available_bytes: r.available,
        used_bytes: r.used,
        swap_total_bytes: r.swap_total,
        swap_used_bytes: r.swap_used,
        process_rss_bytes: r.process_rss,
        pressure: r.pressure,
    }
}

/// The tray's tooltip for a sample: the pressure level, then used / total.
pub fn tooltip(s: &MemorySample) -> String {
    let level = match s.pressure {
        PressureLevel::Normal => "normal",
        PressureLevel::Warning => "warning",
        PressureLevel::Critical => "critical",
        PressureLevel::Unknown => "unknown",
    };
    let gb = |b: u64| b as f64 / GIB as f64;
    format!("Headroom — memory pressure {level}, {:.1} / {:.1} GB used", gb(s.used), gb(s.total))
}

/// The kept samples, oldest first (empty before the sampler has started).
pub fn history(state: &AppState) -> Vec<MemorySample> {
    state
        .memory
        .get()
        .map(|m| m.history().iter().map(|s| MemorySample::from_sample(s, None)).collect())
        .unwrap_or_default()
}

/// The kept samples as timeline points, oldest first.
pub fn history_points(state: &AppState) -> Vec<MemoryPoint> {
    state.memory.get().map(|m| m.history().iter().map(timeline_point).collect()).unwrap_or_default()
}

/// Starts the sampler on Tauri's runtime at `pace` and keeps it in the
/// state (the app's, and `headroom serve`'s, which has no window); a
/// receiver of its samples, or `None` when one was running already.
pub fn spawn_sampler(
    state: &AppState,
    pace: Duration,
) -> Result<Option<tokio::sync::watch::Receiver<Option<Sample>>>, headroom_memory::MemoryError> {
    let mut reader = Reader::new()?;
    let sampler = {
        // Sampler::spawn needs a tokio context: the shared runtime.
        let _runtime = crate::runtime::handle().enter();
        Sampler::spawn(move || reader.read(), pace, HISTORY)
    };
    let latest = sampler.subscribe();
    if state.memory.set(sampler).is_err() {
        tracing::warn!("the memory sampler was already running");
        return Ok(None);
    }
    Ok(Some(latest))
}

/// Starts the sampler, sets its pace from the live activity, records each
/// sample in the store's timeline (when it changed) and hands it to `show`
/// with whether the popover is visible (the app emits it to the popover and
/// puts it in the tray's tooltip). Call once.
pub fn start(
    state: &AppState,
    mut show: impl FnMut(&MemorySample, bool) + Send + 'static,
) -> Result<(), headroom_memory::MemoryError> {
    let live = state.live.clone();
    let Some(mut latest) = spawn_sampler(state, period(live.activity()))? else { return Ok(()) };

    // The pace follows the activity; the popover opening asks for a reading
    // at once, so the graph is fresh within a second.
    let mut activity = live.subscribe();
    let memory = std::sync::Arc::clone(&state.memory);
    crate::runtime::spawn(async move {
        let mut was_visible = activity.borrow().visible;
        while activity.changed().await.is_ok() {
            let now = *activity.borrow_and_update();
            if let Some(sampler) = memory.get() {
                sampler.set_period(period(now));
                if now.visible && !was_visible {
                    sampler.read_now();
                }
            }
            was_visible = now.visible;
        }
    });

    let store = state.store.clone();
    crate::runtime::spawn(async move {
        let week_ago = crate::live::unix_ms().saturating_sub(TIMELINE_KEPT_MS);
        if let Err(e) = store.prune_timeline(week_ago).await {
            tracing::warn!("could not prune the stored timeline: {e}");
        }
        let mut recorder = TimelineRecorder::new();
        while latest.changed().await.is_ok() {
            let Some(sample) = *latest.borrow_and_update() else { continue };
            let now = live.activity();
            let ui =
                MemorySample::from_sample(&sample, if now.visible { headroom_engine::mlx_memory().ok() } else { None });
            show(&ui, now.visible);
            for row in recorder.push(timeline_point(&sample), now.active()) {
                // A failed write loses one point of history, never the app.
                if let Err(e) = store.record_memory(&row).await {
                    tracing::debug!("could not store the memory reading: {e}");
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use headroom_memory::MemoryReading;

    use super::*;

    #[test]
    fn samples_serialize_in_camel_case_and_the_tooltip_names_the_level() {
        let reading = MemoryReading {
            total: 32 * GIB,
            available: 12 * GIB,
            used: 19 * GIB + GIB / 10,
            swap_total: 2 * GIB,
            swap_used: 0,
            pressure: PressureLevel::Warning,
            process_rss: 1 << 20,
        };
        let mlx = headroom_engine::MlxMemory { active: 7, cache: 8, peak: 9 };
        let s = MemorySample::from_sample(&Sample { at_unix_ms: 5, period_ms: 1000, reading }, Some(mlx));
        let v = serde_json::to_value(s).unwrap_or_default();
        for key in [
            "atUnixMs",
            "total",
            "available",
            "used",
            "swapTotal",
            "swapUsed",
            "pressure",
            "processRss",
            "mlxActive",
            "mlxPeak",
        ] {
            assert!(v.get(key).is_some(), "{key} in {v}");
        }
        assert_eq!(
            (v["pressure"].as_str(), v["mlxActive"].as_u64(), v["mlxPeak"].as_u64()),
            (Some("warning"), Some(7), Some(9))
        );
        assert_eq!(tooltip(&s), "Headroom — memory pressure warning, 19.1 / 32.0 GB used");
        let p = timeline_point(&Sample { at_unix_ms: 5, period_ms: 1000, reading });
        assert_eq!(
            (p.at_ms, p.span_ms, p.used_bytes, p.available_bytes, p.pressure),
            (5, 1000, 19 * GIB + GIB / 10, 12 * GIB, PressureLevel::Warning)
        );
        assert_eq!(period(Activity::default()), IDLE_PERIOD);
        assert_eq!(period(Activity { visible: true, runs: 0 }), ACTIVE_PERIOD);
        assert_eq!(period(Activity { visible: false, runs: 1 }), ACTIVE_PERIOD);
        let none = MemorySample::from_sample(&Sample { at_unix_ms: 5, period_ms: 1000, reading }, None);
        assert!(serde_json::to_value(none).unwrap_or_default()["mlxActive"].is_null());
    }
}
