//! The benchmark in the app: `headroom bench`'s plan on the loaded model,
//! progress over a Channel, the result saved with the machine's description
//! and returned with its depth chart (decode and prefill tok/s vs depth).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use headroom_charts::{bench_depth_svg, ChartStyle, DepthPoint, Theme};
use headroom_memory::bandwidth::{self, BandwidthOptions};
use tauri::ipc::Channel;
use tauri::State;

use crate::bench::{run_plan, Bandwidth, BenchError, BenchJson, BenchPlan, BenchProgress, BenchRunReply, StoreRecord};
use crate::error::{CommandError, ErrorCode};
use crate::runs::{RunKind, Stopper};
use crate::state::AppState;

/// Runs p prompt + n generated tokens at each depth, r counted runs after a
/// warm-up, on the model loaded now; resolves to the report (`headroom bench
/// --json`'s object plus the stored `id` and `chart_svg`, drawn in `theme`).
#[tauri::command]
pub async fn bench_run(
    depths: Vec<usize>,
    p: usize,
    n: usize,
    r: usize,
    theme: String,
    on_progress: Channel<BenchProgress>,
    state: State<'_, AppState>,
) -> Result<BenchRunReply, CommandError> {
    let theme: Theme = theme.parse()?;
    let state = AppState::clone(&state);
    let loaded = state.loaded_model().ok_or_else(|| CommandError::from(headroom_engine::EngineError::NoModelLoaded))?;
    // The runs decode as chat turns do: the setting.
    let speculative = state.settings().speculative;
    let plan = BenchPlan { depths, prompt_tokens: p, gen_tokens: n, repetitions: r, seed: 0, speculative };
    let engine = state.engine.clone();
    let cancel = Arc::new(AtomicBool::new(false));
    // One benchmark at a time: two would measure each other.
    let _running = state.runs.register_only(RunKind::Bench, Stopper::Flag(Arc::clone(&cancel))).map_err(|_| {
        CommandError::new(ErrorCode::BenchRunning, "A benchmark is already running; stop it or wait for it to finish.")
    })?;
    let report = tauri::async_runtime::spawn_blocking(move || {
        let bandwidth =
            Bandwidth::Measured(bandwidth::measure(&BandwidthOptions { passes: 2, ..BandwidthOptions::default() })?);
        if cancel.load(Ordering::Relaxed) {
            return Err(BenchError::Engine(headroom_engine::EngineError::BenchCancelled));
        }
        run_plan(&engine, &loaded.id, &loaded.path, &plan, bandwidth, &cancel, |p| {
            let _ = on_progress.send(p.clone());
        })
    })
    .await
    .map_err(|e| CommandError::new(ErrorCode::EngineInternal, format!("The benchmark stopped unexpectedly: {e}")))?
    .map_err(bench_error)?;
    let record = StoreRecord::of(&report);
    let id = state
        .store
        .add_bench_run(&report.model, &record.labels, &record.machine, &record.summary, &record.runs)
        .await
        .map_err(|e| CommandError::new(ErrorCode::Store, e.to_string()))?;
    let points: Vec<DepthPoint> = report
        .depths
        .iter()
        .map(|d| DepthPoint {
            depth_tokens: u32::try_from(d.case.case.shape.depth).unwrap_or(u32::MAX),
            decode_tps: d.summary.decode_tps.map(|m| m.mean),
            prefill_tps: d.summary.prefill_tps.map(|m| m.mean),
        })
        .collect();
    let chart_svg = bench_depth_svg(&points, &ChartStyle::popover(theme))?;
    Ok(BenchRunReply { report: BenchJson::of(&report), id, chart_svg })
}

/// Stops the running benchmark between tokens or runs; its `bench_run`
/// then fails with `BENCH_CANCELLED` and nothing is saved. Resolves to
/// whether a benchmark was running.
#[tauri::command]
pub fn bench_cancel(state: State<'_, AppState>) -> bool {
    state.runs.cancel_kind(RunKind::Bench)
}

fn bench_error(e: BenchError) -> CommandError {
    match e {
        BenchError::Engine(e) => CommandError::from(e),
        BenchError::Memory(e) => {
            CommandError::new(ErrorCode::Memory, format!("This Mac's memory could not be read: {e}"))
        }
    }
}
