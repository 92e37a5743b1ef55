//! Getting out of the way, carried out: each memory reading goes through
//! the away state machine ([`crate::away`]) with what the app is doing (a
//! run in the registry or a server request in flight is use), and its
//! actions are carried out on the engine: drop every session's KV cache,
//! unload the model. Each action becomes a [`Notice`] the front end shows
//! (the app: the popover and a system notification; `headroom serve`: a log
//! line). A model Headroom unloaded on its own is loaded again by the next
//! message ([`reload`]), through the picker's fit-checked load, and the
//! answer's route note says how long it took.

use std::sync::PoisonError;

use headroom_core::away::{Action, Doing, Reading};
use headroom_core::fit::GIB;

use crate::away::{Notice, Unloaded, SAVE_STATES_AFTER};
use crate::live::unix_ms;
use crate::state::AppState;

/// What the app is doing now, and the server's request count.
pub fn doing(state: &AppState) -> (Doing, u64) {
    let server = state.server.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|s| s.stats());
    let server_busy = server.is_some_and(|s| s.active > 0);
    let requests = server.map_or(0, |s| s.requests);
    (Doing { busy: state.runs.any() || server_busy, model_loaded: state.loaded_model().is_some() }, requests)
}

/// A size as the notice says it: "1.25 GB", or "3 MB" below a tenth of a GB.
fn size(bytes: u64) -> String {
    if bytes >= GIB / 10 {
        format!("{:.2} GB", bytes as f64 / GIB as f64)
    } else {
        format!("{} MB", bytes.div_ceil(1 << 20))
    }
}

/// Carries out `action` on the engine (blocking: call it off async
/// threads) and says what was done. The engine queues jobs in order, so an
/// unload asked while a turn is about to start waits for it; the registry is
/// checked once more first, so a run that started since the reading keeps
/// its model.
pub fn carry_out(state: &AppState, action: Action) -> Option<Notice> {
    let model = state.loaded_model();
    let model_id = model.as_ref().map(|m| m.id.clone());
    let name = model_id.clone().unwrap_or_else(|| "the model".to_owned());
    let cause = action.cause();
    let why = crate::codes::upper_first(&cause.sentence());
    let notice = |freed_bytes: Option<u64>, message: String| Notice {
        at_unix_ms: unix_ms(),
        action,
        model_id: model_id.clone(),
        freed_bytes,
        message,
    };
    let notice = match action {
        Action::BlameRun { .. } => notice(
            None,
            format!(
                "{why} during this answer: this answer is the cause. Headroom frees memory once it ends, if the pressure stays."
            ),
        ),
        Action::DropSessions { .. } => {
            if state.runs.any() {
                return None;
            }
            match state.engine.drop_sessions() {
                Ok(d) => notice(
                    Some(d.freed_bytes),
                    format!(
                        "{why}: Headroom dropped the cached chat states of {} chat{} ({}){}; {name} stays loaded.",
                        d.sessions,
                        if d.sessions == 1 { "" } else { "s" },
                        size(d.cache_bytes),
                        match d.saved_to_disk {
                            0 => String::new(),
                            1 => ", kept on disk so that chat continues without a new prefill".to_owned(),
                            n => format!(", {n} kept on disk so those chats continue without a new prefill"),
                        }
                    ),
                ),
                Err(e) => {
                    tracing::warn!("could not drop the session caches: {e}");
                    return None;
                }
            }
        }
        Action::Unload { .. } => {
            let model = model?;
            // One switch at a time: no load checks a budget this unload is changing.
            let _switch = state.switching.lock().unwrap_or_else(PoisonError::into_inner);
            if state.runs.any() {
                return None;
            }
            match state.engine.unload() {
                Ok(report) => {
                    state.set_loaded(None);
                    state.away.set_unloaded(Unloaded {
                        id: model.id.clone(),
                        context_limit: model.info.context_limit,
                        kv: model.info.kv_format,
                        cause,
                    });
                    notice(
                        Some(report.freed_bytes),
                        format!(
                            "{why}: Headroom unloaded {name} and gave back {}. Your next message loads it again.",
                            size(report.freed_bytes)
                        ),
                    )
                }
                Err(e) => {
                    tracing::warn!("could not unload the model: {e}");
                    return None;
                }
            }
        }
    };
    tracing::info!(action = ?notice.action, "{}", notice.message);
    state.away.set_notice(notice.clone());
    Some(notice)
}

/// If Headroom unloaded a model on its own and nothing else was loaded
/// since, loads it again (the picker's load: a fresh fit check first, so a
/// Mac that is still short of memory refuses it with the numbers) and says
/// so for the answer's route note, with the load time. Blocking.
pub fn reload(state: &AppState) -> Result<Option<String>, crate::models::LoadError> {
    if state.loaded_model().is_some() {
        return Ok(None);
    }
    let Some(unloaded) = state.away.unloaded() else { return Ok(None) };
    let loaded =
        crate::models::load(state, &unloaded.id, Some(unloaded.context_limit), Some(unloaded.kv), false, false)?;
    let message = format!(
        "{} was unloaded because {}; it was loaded again for this message (fit checked first) in {:.1} s.",
        unloaded.id,
        unloaded.cause.sentence(),
        loaded.load_ms as f64 / 1000.0
    );
    tracing::info!("{message}");
    Ok(Some(message))
}

/// The same for a process without a window (`headroom serve`): a sampler
/// of its own at the idle pace, the same state machine and actions, each
/// notice a line on stderr. The next request loads an unloaded model again
/// through the server's fit-checked load.
pub fn start_headless(state: &AppState) -> Result<(), headroom_memory::MemoryError> {
    crate::memory::spawn_sampler(state, crate::memory::IDLE_PERIOD)?;
    // Each notice is already a log line on stderr (carry_out logs it).
    watch(AppState::clone(state), |_| {});
    Ok(())
}

/// The loop behind both: each reading through the state machine with what
/// `state` is doing (its runs, its server's requests), each action carried
/// out off the async threads and its notice handed to `tell`; and, between
/// runs, idle chats' KV states saved to disk. Returns false when there is
/// no sampler to read from.
pub fn watch(state: AppState, tell: impl Fn(&Notice) + Send + 'static) -> bool {
    let Some(sampler) = state.memory.get() else { return false };
    let mut latest = sampler.subscribe();
    crate::runtime::spawn(async move {
        let mut saved_at = std::time::Instant::now();
        while latest.changed().await.is_ok() {
            let Some(sample) = *latest.borrow_and_update() else { continue };
            let (doing, requests) = doing(&state);
            // Idle chats' KV states to disk, checked every half minute between runs.
            if saved_at.elapsed() >= SAVE_STATES_AFTER / 2 && !state.runs.any() {
                saved_at = std::time::Instant::now();
                let saver = AppState::clone(&state);
                let _ = crate::runtime::spawn_blocking(move || saver.save_chat_states(SAVE_STATES_AFTER, "idle")).await;
            }
            let reading = Reading {
                at_ms: sample.at_unix_ms,
                pressure: sample.reading.pressure,
                swap_used: sample.reading.swap_used,
            };
            let Some(action) = state.away.step(reading, doing, requests) else { continue };
            let worker = AppState::clone(&state);
            let done = crate::runtime::spawn_blocking(move || carry_out(&worker, action)).await;
            match done {
                Ok(Some(notice)) => tell(&notice),
                Ok(None) => {}
                Err(e) => tracing::warn!("the memory action stopped unexpectedly: {e}"),
            }
        }
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_gb_or_in_mb_when_small() {
        assert_eq!(size(3 * GIB / 2), "1.50 GB");
        assert_eq!(size(2_000_000), "2 MB");
        assert_eq!(size(0), "0 MB");
    }
}
