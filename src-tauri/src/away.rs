//! Getting out of the way, wired: each memory reading goes through
//! `core::away`'s state machine with what the app is doing (a run in the
//! registry or a server request in flight is use), and its actions are
//! carried out on the engine: drop every session's KV cache, unload the
//! model. Each action becomes a [`Notice`] the popover shows (the `away`
//! event, and `away_notice` for a popover opened later) and, while the
//! popover is hidden, a system notification. A model Headroom unloaded on
//! its own is loaded again by the next message ([`reload`]), through the
//! picker's fit-checked load, and the answer's route note says how long it
//! took.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use headroom_core::away::{Action, Away, AwayPolicy, Cause, Doing, Reading};
use headroom_core::fit::GIB;
use headroom_core::pressure::PressureLevel;
use headroom_core::settings::Settings;
use serde::Serialize;

use crate::error::CommandError;
use crate::live::unix_ms;
use crate::state::AppState;
use crate::turn::RouteReason;

/// The event each notice is emitted as.
pub const AWAY_EVENT: &str = "away";

/// Overrides the pressure level Headroom acts at (`normal`, `warning` or `critical`;
/// `off` turns the pressure reaction off): for the end-to-end check on a
/// machine whose PSI reaches only warning. Users never need it.
pub const ACT_AT_ENV: &str = "HEADROOM_AWAY_ACT_AT";

/// Overrides the idle time in seconds (the settings count minutes): for
/// the end-to-end check. Users never need it.
pub const IDLE_SECONDS_ENV: &str = "HEADROOM_AWAY_IDLE_SECONDS";

/// A chat's KV state goes to disk once the chat has been idle this long
/// (and at quit, or when it must leave memory): soon enough that a crash
/// or a restart loses little, late enough not to write after every answer
/// of a conversation in full flow.
pub const SAVE_STATES_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The route-note code of an answer whose model was loaded again first.
pub const RELOADED_CODE: &str = "RELOADED";

/// What Headroom did, for the popover and the notification.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct Notice {
    pub at_unix_ms: u64,
    #[serde(flatten)]
    pub action: Action,
    /// The model concerned.
    pub model_id: Option<String>,
    /// MLX memory given back (active + buffer cache), when something was freed.
    pub freed_bytes: Option<u64>,
    /// The notice in words.
    pub message: String,
}

/// A model Headroom unloaded on its own, for the next message to load again.
#[derive(Debug, Clone, PartialEq)]
pub struct Unloaded {
    pub id: String,
    pub context_limit: usize,
    /// How its KV cache was stored: the reload keeps it so.
    pub kv: headroom_core::kv::KvFormat,
    pub cause: Cause,
}

#[derive(Debug)]
struct Inner {
    machine: Away,
    unloaded: Option<Unloaded>,
    notice: Option<Notice>,
    /// The server's request count at the last reading: a change is use.
    server_requests: u64,
}

/// The app's handle on the state machine; cheap to clone.
#[derive(Debug, Clone)]
pub struct AwayHandle {
    inner: Arc<Mutex<Inner>>,
}

impl Default for AwayHandle {
    fn default() -> Self {
        Self::new(policy_from_env(AwayPolicy::default()))
    }
}

/// `policy` with the test overrides of the environment applied.
pub fn policy_from_env(mut policy: AwayPolicy) -> AwayPolicy {
    match std::env::var(ACT_AT_ENV).as_deref() {
        // Acts at any reading: for the tests of what acting does (a lender
        // stepping aside) on a machine whose pressure is normal.
        Ok("normal") => policy.act_at = PressureLevel::Normal,
        Ok("warning") => policy.act_at = PressureLevel::Warning,
        Ok("critical") => policy.act_at = PressureLevel::Critical,
        Ok("off") => policy.act_at = PressureLevel::Unknown,
        Ok(other) => tracing::warn!("{ACT_AT_ENV}={other} is not normal, warning, critical or off; ignored"),
        Err(_) => {}
    }
    if let Some(secs) = std::env::var(IDLE_SECONDS_ENV).ok().and_then(|v| v.parse::<u64>().ok()) {
        policy.idle_unload_ms = Some(secs * 1000);
    }
    policy
}

impl AwayHandle {
    pub fn new(policy: AwayPolicy) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                machine: Away::new(policy),
                unloaded: None,
                notice: None,
                server_requests: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The settings' idle time (with the environment's overrides).
    pub fn apply_settings(&self, settings: &Settings) {
        let policy = policy_from_env(AwayPolicy::with_idle_minutes(settings.idle_unload_minutes));
        self.lock().machine.set_policy(policy);
    }

    pub fn policy(&self) -> AwayPolicy {
        self.lock().machine.policy()
    }

    /// The model was used now (a turn started or ended, a model loaded).
    pub fn note_use(&self) {
        self.lock().machine.note_use(unix_ms());
    }

    /// A model was loaded: used now, and nothing is waiting to be reloaded.
    pub fn note_loaded(&self) {
        let mut inner = self.lock();
        inner.machine.note_use(unix_ms());
        inner.unloaded = None;
    }

    /// The model Headroom unloaded on its own, if the next message should load it again.
    pub fn unloaded(&self) -> Option<Unloaded> {
        self.lock().unloaded.clone()
    }

    /// The latest notice (the popover asks when it opens).
    pub fn notice(&self) -> Option<Notice> {
        self.lock().notice.clone()
    }

    fn set_notice(&self, notice: Notice) {
        self.lock().notice = Some(notice);
    }

    /// One reading: what to do now. `server_requests` is the local server's
    /// request count (0 without one); a change since the last reading is use.
    pub fn step(&self, reading: Reading, doing: Doing, server_requests: u64) -> Option<Action> {
        let mut inner = self.lock();
        if server_requests != inner.server_requests {
            inner.server_requests = server_requests;
            inner.machine.note_use(reading.at_ms);
        }
        inner.machine.step(reading, doing)
    }
}

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

fn capitalized(s: &str) -> String {
    let mut chars = s.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
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
    let why = capitalized(&cause.sentence());
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
                    state.away.lock().unloaded =
                        Some(Unloaded {
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
pub fn reload(state: &AppState) -> Result<Option<RouteReason>, CommandError> {
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
    Ok(Some(RouteReason { code: RELOADED_CODE, message }))
}

/// Starts feeding the sampler's readings to the state machine and carrying
/// out its actions; call once, after the sampler has started.
pub fn start<R: tauri::Runtime>(app: &tauri::AppHandle<R>) {
    use tauri::Manager;
    let state = AppState::clone(&app.state::<AppState>());
    let app = app.clone();
    let told = AppState::clone(&state);
    if !watch(state, move |notice| tell(&app, &told, notice)) {
        tracing::warn!("no memory readings: Headroom cannot react to memory pressure");
    }
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
fn watch(state: AppState, tell: impl Fn(&Notice) + Send + 'static) -> bool {
    let Some(sampler) = state.memory.get() else { return false };
    let mut latest = sampler.subscribe();
    tauri::async_runtime::spawn(async move {
        let mut saved_at = std::time::Instant::now();
        while latest.changed().await.is_ok() {
            let Some(sample) = *latest.borrow_and_update() else { continue };
            let (doing, requests) = doing(&state);
            // Idle chats' KV states to disk, checked every half minute between runs.
            if saved_at.elapsed() >= SAVE_STATES_AFTER / 2 && !state.runs.any() {
                saved_at = std::time::Instant::now();
                let saver = AppState::clone(&state);
                let _ = tauri::async_runtime::spawn_blocking(move || saver.save_chat_states(SAVE_STATES_AFTER, "idle"))
                    .await;
            }
            let reading = Reading {
                at_ms: sample.at_unix_ms,
                pressure: sample.reading.pressure,
                swap_used: sample.reading.swap_used,
            };
            let Some(action) = state.away.step(reading, doing, requests) else { continue };
            let worker = AppState::clone(&state);
            let done = tauri::async_runtime::spawn_blocking(move || carry_out(&worker, action)).await;
            match done {
                Ok(Some(notice)) => tell(&notice),
                Ok(None) => {}
                Err(e) => tracing::warn!("the memory action stopped unexpectedly: {e}"),
            }
        }
    });
    true
}

/// Shows `notice` in the popover and, while it is hidden, as a system
/// notification. A desktop without a notification service (a Linux box
/// without a D-Bus notification daemon) just logs it: the popover still
/// has the notice when it opens.
fn tell<R: tauri::Runtime>(app: &tauri::AppHandle<R>, state: &AppState, notice: &Notice) {
    use tauri::Emitter;
    if let Err(e) = app.emit(AWAY_EVENT, notice) {
        tracing::debug!("could not emit the notice: {e}");
    }
    // The picker shows that nothing is loaded now.
    if matches!(notice.action, Action::Unload { .. }) {
        if let Err(e) = app.emit(crate::MODELS_CHANGED_EVENT, ()) {
            tracing::debug!("could not tell the UI about the models: {e}");
        }
    }
    if state.live.activity().visible {
        return;
    }
    let app = app.clone();
    let body = notice.message.clone();
    // Off the runtime: a session bus that is slow to answer must not hold the readings up.
    let spawned = std::thread::Builder::new().name("headroom-notify".into()).spawn(move || {
        use tauri_plugin_notification::NotificationExt;
        if let Err(e) = app.notification().builder().title("Headroom").body(body).show() {
            tracing::debug!("no system notification (no notification service?): {e}");
        }
    });
    if let Err(e) = spawned {
        tracing::debug!("could not start the notification thread: {e}");
    }
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

    #[test]
    fn server_requests_count_as_use_and_the_policy_follows_the_settings() {
        let away = AwayHandle::new(AwayPolicy::with_idle_minutes(Some(1)));
        let idle = Doing { busy: false, model_loaded: true };
        let at = |ms| Reading { at_ms: ms, pressure: PressureLevel::Normal, swap_used: 0 };
        assert_eq!(away.step(at(0), idle, 0), None);
        // A request every 30 s keeps the model; the count is all the server says.
        for (i, t) in (30_000..=150_000).step_by(30_000).enumerate() {
            assert_eq!(away.step(at(t), idle, i as u64 + 1), None, "at {t}");
        }
        assert!(matches!(away.step(at(210_000), idle, 5), Some(Action::Unload { .. })));
        away.apply_settings(&Settings { idle_unload_minutes: None, ..Settings::default() });
        assert_eq!(away.policy().idle_unload_ms, None);
        away.apply_settings(&Settings::default());
        assert_eq!(away.policy().idle_unload_ms, Some(15 * 60_000));
    }
}
