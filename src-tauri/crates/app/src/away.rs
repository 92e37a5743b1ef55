//! Getting out of the way, decided: each memory reading goes through
//! `core::away`'s state machine (held in an [`AwayHandle`] with what was
//! unloaded and the latest [`Notice`]). `crate::give_back` carries its
//! actions out on the engine and reloads what it unloaded; this module
//! knows nothing of the app's state, which holds the handle.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use headroom_core::away::{Action, Away, AwayPolicy, Cause, Doing, Reading};
use headroom_core::pressure::PressureLevel;
use headroom_core::settings::Settings;
use serde::Serialize;

use crate::live::unix_ms;

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

    /// What Headroom unloaded on its own, for the next message to load again.
    pub(crate) fn set_unloaded(&self, unloaded: Unloaded) {
        self.lock().unloaded = Some(unloaded);
    }

    pub(crate) fn set_notice(&self, notice: Notice) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
