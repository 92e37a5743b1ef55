//! Getting out of the way: the pure decision of when Headroom gives its
//! model's memory back to the Mac. Readings (pressure level, swap used), a
//! clock (milliseconds from any fixed origin) and "is anything running / is
//! a model loaded" go in; actions come out. The app feeds it the memory
//! sampler's readings and carries the actions out on the engine; the tests
//! feed it scripted readings and a fake clock through the same functions.
//!
//! The rules, in order:
//!
//! 1. **Never in the middle of a run.** While a chat turn, a benchmark or a
//!    server request runs, nothing is freed. If memory turns tight then, the
//!    answer running is the cause, and the machine says so once per run
//!    ([`Action::BlameRun`]); it acts once the run is over, if the pressure
//!    is still there.
//! 2. **Under pressure, the cheap step first.** When the pressure level
//!    reaches [`AwayPolicy::act_at`] (critical by default: on macOS the
//!    kernel's own "critical"; on Linux PSI `full avg10 >= 10`, see
//!    `headroom-memory`'s `psi` module), or swap grew by
//!    [`AwayPolicy::swap_growth_bytes`] within [`AwayPolicy::swap_window_ms`]
//!    while nothing ran, the cached session KV states are dropped
//!    ([`Action::DropSessions`]); the model stays and the next turn re-reads
//!    its prompt. If the trouble is still there [`AwayPolicy::escalate_after_ms`]
//!    later, the model is unloaded ([`Action::Unload`]).
//! 3. **Idle unload.** A loaded model that has not been used for
//!    [`AwayPolicy::idle_unload_ms`] (none: never) is unloaded.
//!
//! "Used" is any run seen busy by a reading, and whatever the app reports
//! through [`Away::note_use`] (a turn starting or ending between two
//! readings, a load, a server request), so a turn shorter than the
//! sampler's period still counts.

use std::collections::VecDeque;

use serde::Serialize;

use crate::pressure::PressureLevel;

/// The default idle time before a model is unloaded (the settings' 15 minutes).
pub const DEFAULT_IDLE_UNLOAD_MINUTES: u32 = 15;
/// Swap growing by this much while nothing runs means the Mac is paging
/// something out for lack of memory: 256 MiB is a few hundred pages a
/// second over the window, well above the trickle a quiet Mac swaps.
pub const DEFAULT_SWAP_GROWTH_BYTES: u64 = 256 << 20;
/// The window that swap growth is measured over.
pub const DEFAULT_SWAP_WINDOW_MS: u64 = 60_000;
/// How long the pressure may last after the sessions were dropped before the
/// model goes too: long enough for PSI's 10-second average (and macOS's
/// level) to reflect the freed memory, short enough that a Mac in trouble
/// is not left in it.
pub const DEFAULT_ESCALATE_AFTER_MS: u64 = 15_000;

/// The thresholds the machine decides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AwayPolicy {
    /// Unload after this long without use; `None`: never.
    pub idle_unload_ms: Option<u64>,
    /// The pressure level Headroom frees memory at: the "critical"
    /// threshold. `Critical` unless a test or a probe says otherwise
    /// (`Warning` for the end-to-end check on a machine whose PSI only
    /// reaches warning; `Unknown` is never reached).
    pub act_at: PressureLevel,
    pub swap_growth_bytes: u64,
    pub swap_window_ms: u64,
    pub escalate_after_ms: u64,
}

impl Default for AwayPolicy {
    fn default() -> Self {
        Self {
            idle_unload_ms: Some(minutes_ms(DEFAULT_IDLE_UNLOAD_MINUTES)),
            act_at: PressureLevel::Critical,
            swap_growth_bytes: DEFAULT_SWAP_GROWTH_BYTES,
            swap_window_ms: DEFAULT_SWAP_WINDOW_MS,
            escalate_after_ms: DEFAULT_ESCALATE_AFTER_MS,
        }
    }
}

impl AwayPolicy {
    /// The default policy with the settings' idle time (`None`: never).
    pub fn with_idle_minutes(idle_unload_minutes: Option<u32>) -> Self {
        Self { idle_unload_ms: idle_unload_minutes.map(minutes_ms), ..Self::default() }
    }

    /// Whether `level` is at or past the level this policy acts at.
    /// `Unknown` says nothing and never is.
    pub fn is_tight(&self, level: PressureLevel) -> bool {
        level != PressureLevel::Unknown && self.act_at != PressureLevel::Unknown && level >= self.act_at
    }
}

fn minutes_ms(minutes: u32) -> u64 {
    u64::from(minutes) * 60_000
}

/// One memory reading, as the machine needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub at_ms: u64,
    pub pressure: PressureLevel,
    pub swap_used: u64,
}

/// What the app is doing at a reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Doing {
    /// A chat turn, a benchmark, a download or a server request runs.
    pub busy: bool,
    /// A local model is loaded.
    pub model_loaded: bool,
}

/// Why memory is being given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Cause {
    /// Not used for this long.
    #[serde(rename_all = "camelCase")]
    Idle { idle_ms: u64 },
    /// The pressure level reached the policy's threshold.
    Pressure { level: PressureLevel },
    /// Swap grew this much over this long while nothing ran.
    #[serde(rename_all = "camelCase")]
    SwapGrowing { grew_bytes: u64, over_ms: u64 },
}

impl Cause {
    /// The cause in words, for the notice ("memory pressure reached critical").
    pub fn sentence(&self) -> String {
        match *self {
            Self::Idle { idle_ms } => {
                let minutes = idle_ms / 60_000;
                if minutes >= 1 {
                    format!("it was not used for {minutes} min")
                } else {
                    format!("it was not used for {} s", idle_ms / 1000)
                }
            }
            Self::Pressure { level } => format!("memory pressure reached {level}"),
            Self::SwapGrowing { grew_bytes, over_ms } => format!(
                "swap grew {:.2} GB in {} s while nothing ran",
                grew_bytes as f64 / (1u64 << 30) as f64,
                over_ms / 1000
            ),
        }
    }
}

/// What to do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum Action {
    /// Memory turned tight during a run: nothing is freed mid-answer; say
    /// that the answer running is the cause.
    BlameRun { cause: Cause },
    /// Drop every session's cached KV state; keep the model.
    DropSessions { cause: Cause },
    /// Unload the model.
    Unload { cause: Cause },
}

impl Action {
    pub fn cause(&self) -> Cause {
        match *self {
            Self::BlameRun { cause } | Self::DropSessions { cause } | Self::Unload { cause } => cause,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Nothing done since the model was loaded (or since the trouble passed).
    Calm,
    /// The sessions were dropped at this time; the model follows if the trouble lasts.
    SessionsDropped { at_ms: u64 },
    /// The unload was asked for; nothing more until the model is gone or used again.
    Unloading,
}

/// The state machine; one per app.
#[derive(Debug, Clone)]
pub struct Away {
    policy: AwayPolicy,
    last_use_ms: Option<u64>,
    /// Swap readings while nothing ran, oldest first, within the window.
    swap: VecDeque<(u64, u64)>,
    stage: Stage,
    /// The run going on was already blamed (once per run).
    blamed: bool,
}

impl Away {
    pub fn new(policy: AwayPolicy) -> Self {
        Self { policy, last_use_ms: None, swap: VecDeque::new(), stage: Stage::Calm, blamed: false }
    }

    pub fn policy(&self) -> AwayPolicy {
        self.policy
    }

    /// New thresholds (the settings changed); the idle timer keeps running.
    pub fn set_policy(&mut self, policy: AwayPolicy) {
        self.policy = policy;
    }

    /// The model was used (or loaded) at `at_ms`: the idle timer restarts,
    /// and a model loaded after an unload starts calm.
    pub fn note_use(&mut self, at_ms: u64) {
        self.last_use_ms = Some(self.last_use_ms.map_or(at_ms, |t| t.max(at_ms)));
        if self.stage == Stage::Unloading {
            self.stage = Stage::Calm;
        }
    }

    /// When the model was last used, if it was.
    pub fn last_use_ms(&self) -> Option<u64> {
        self.last_use_ms
    }

    /// Takes one reading; returns what to do now, if anything.
    pub fn step(&mut self, reading: Reading, doing: Doing) -> Option<Action> {
        let now = reading.at_ms;
        let tight = self.policy.is_tight(reading.pressure);
        if doing.busy {
            self.note_use(now);
            // Swap a run grows is its own; growth is measured between runs.
            self.swap.clear();
            if tight && !self.blamed {
                self.blamed = true;
                return Some(Action::BlameRun { cause: Cause::Pressure { level: reading.pressure } });
            }
            return None;
        }
        self.blamed = false;
        if !doing.model_loaded {
            // Nothing to give back; a later load starts calm.
            self.stage = Stage::Calm;
            self.swap.clear();
            return None;
        }
        // A model found loaded without a use noted (loaded at start) is used from now.
        let last_use = *self.last_use_ms.get_or_insert(now);
        if self.stage == Stage::Unloading {
            return None;
        }

        self.swap.push_back((now, reading.swap_used));
        while self.swap.front().is_some_and(|&(t, _)| now.saturating_sub(t) > self.policy.swap_window_ms) {
            self.swap.pop_front();
        }
        // The latest of the lowest readings: growth is timed from where it began.
        let swap_growth =
            self.swap.iter().min_by_key(|&&(t, used)| (used, std::cmp::Reverse(t))).and_then(|&(t, low)| {
                let grew = reading.swap_used.saturating_sub(low);
                (grew >= self.policy.swap_growth_bytes)
                    .then_some(Cause::SwapGrowing { grew_bytes: grew, over_ms: now.saturating_sub(t) })
            });
        let trouble = if tight { Some(Cause::Pressure { level: reading.pressure }) } else { swap_growth };

        match (trouble, self.stage) {
            (Some(cause), Stage::Calm) => {
                self.stage = Stage::SessionsDropped { at_ms: now };
                return Some(Action::DropSessions { cause });
            }
            (Some(cause), Stage::SessionsDropped { at_ms }) => {
                if now.saturating_sub(at_ms) >= self.policy.escalate_after_ms {
                    self.stage = Stage::Unloading;
                    return Some(Action::Unload { cause });
                }
                return None;
            }
            (None, Stage::SessionsDropped { .. }) => self.stage = Stage::Calm,
            _ => {}
        }

        let idle = now.saturating_sub(last_use);
        if self.policy.idle_unload_ms.is_some_and(|limit| idle >= limit) {
            self.stage = Stage::Unloading;
            return Some(Action::Unload { cause: Cause::Idle { idle_ms: idle } });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PressureLevel::*;

    const MIB: u64 = 1 << 20;

    /// A fake clock and scripted readings: one reading every `period_ms`.
    struct Script {
        away: Away,
        now: u64,
        swap: u64,
    }

    impl Script {
        fn new(policy: AwayPolicy) -> Self {
            Self { away: Away::new(policy), now: 0, swap: 0 }
        }

        fn at(&mut self, ms: u64, pressure: PressureLevel, doing: Doing) -> Option<Action> {
            self.now = ms;
            self.away.step(Reading { at_ms: ms, pressure, swap_used: self.swap }, doing)
        }

        /// Readings every `period` ms from now to `until` (inclusive); every action taken, with its time.
        fn run(&mut self, until: u64, period: u64, pressure: PressureLevel, doing: Doing) -> Vec<(u64, Action)> {
            let mut out = Vec::new();
            let mut t = self.now + period;
            while t <= until {
                if let Some(a) = self.at(t, pressure, doing) {
                    out.push((t, a));
                }
                t += period;
            }
            out
        }
    }

    const IDLE: Doing = Doing { busy: false, model_loaded: true };
    const BUSY: Doing = Doing { busy: true, model_loaded: true };
    const EMPTY: Doing = Doing { busy: false, model_loaded: false };

    #[test]
    fn an_unused_model_unloads_after_the_idle_time_and_not_a_reading_before() {
        let mut s = Script::new(AwayPolicy::with_idle_minutes(Some(15)));
        s.away.note_use(0);
        let actions = s.run(20 * 60_000, 5_000, Normal, IDLE);
        assert_eq!(actions, vec![(15 * 60_000, Action::Unload { cause: Cause::Idle { idle_ms: 15 * 60_000 } })]);
        assert_eq!(actions[0].1.cause().sentence(), "it was not used for 15 min");
    }

    #[test]
    fn never_means_never_and_the_setting_applies_to_the_running_timer() {
        let mut s = Script::new(AwayPolicy::with_idle_minutes(None));
        s.away.note_use(0);
        assert!(s.run(24 * 60 * 60_000, 60_000, Normal, IDLE).is_empty(), "a day idle, never unloaded");
        // Changing the setting to 1 minute: the model has been idle a day already.
        s.away.set_policy(AwayPolicy::with_idle_minutes(Some(1)));
        assert!(matches!(s.at(s.now + 5_000, Normal, IDLE), Some(Action::Unload { cause: Cause::Idle { .. } })));
    }

    #[test]
    fn runs_and_noted_uses_restart_the_idle_timer_and_a_long_run_is_never_cut() {
        let mut s = Script::new(AwayPolicy::with_idle_minutes(Some(1)));
        s.away.note_use(0);
        assert!(s.run(50_000, 5_000, Normal, IDLE).is_empty());
        // A turn shorter than a sampling period, reported by the app.
        s.away.note_use(52_000);
        assert!(s.run(110_000, 5_000, Normal, IDLE).is_empty(), "idle since 52 s: not a minute yet");
        // A two-minute benchmark (or server request): busy at every reading.
        assert!(s.run(230_000, 5_000, Normal, BUSY).is_empty(), "never during a run");
        let after = s.run(400_000, 5_000, Normal, IDLE);
        assert_eq!(after, vec![(290_000, Action::Unload { cause: Cause::Idle { idle_ms: 60_000 } })]);
        // Once asked, not asked again while the model is still there.
        assert!(s.run(500_000, 5_000, Normal, IDLE).is_empty());
    }

    #[test]
    fn a_model_found_loaded_is_idle_from_the_first_reading_and_no_model_means_nothing_to_do() {
        let mut s = Script::new(AwayPolicy::with_idle_minutes(Some(1)));
        assert!(s.run(10 * 60_000, 5_000, Critical, EMPTY).is_empty(), "nothing loaded: nothing to free");
        let first = s.now + 5_000;
        let actions = s.run(first + 70_000, 5_000, Normal, IDLE);
        assert_eq!(actions, vec![(first + 60_000, Action::Unload { cause: Cause::Idle { idle_ms: 60_000 } })]);
        // The model goes; a reload (noted as a use) starts a fresh timer.
        assert!(s.at(s.now + 5_000, Normal, EMPTY).is_none());
        s.away.note_use(s.now + 1);
        let reload = s.now;
        assert!(s.run(reload + 55_000, 5_000, Normal, IDLE).is_empty());
        assert!(s.at(reload + 61_000, Normal, IDLE).is_some());
    }

    #[test]
    fn critical_pressure_drops_sessions_first_then_unloads_if_it_lasts() {
        let mut s = Script::new(AwayPolicy::with_idle_minutes(None));
        s.away.note_use(0);
        assert!(s.run(10_000, 1_000, Warning, IDLE).is_empty(), "warning is below the default threshold");
        let cause = Cause::Pressure { level: Critical };
        let actions = s.run(40_000, 1_000, Critical, IDLE);
        assert_eq!(
            actions,
            vec![(11_000, Action::DropSessions { cause }), (26_000, Action::Unload { cause })],
            "drop at once, unload {DEFAULT_ESCALATE_AFTER_MS} ms later"
        );
        assert_eq!(cause.sentence(), "memory pressure reached critical");
    }

    #[test]
    fn pressure_that_passes_after_the_drop_keeps_the_model() {
        let mut s = Script::new(AwayPolicy::with_idle_minutes(None));
        s.away.note_use(0);
        assert!(matches!(s.at(1_000, Critical, IDLE), Some(Action::DropSessions { .. })));
        assert!(s.run(10_000, 1_000, Critical, IDLE).is_empty(), "waiting for the drop to show");
        assert!(s.run(60_000, 1_000, Normal, IDLE).is_empty(), "relief: the model stays");
        // A new episode starts again at the cheap step.
        assert!(matches!(s.at(61_000, Critical, IDLE), Some(Action::DropSessions { .. })));
    }

    #[test]
    fn pressure_during_a_run_blames_that_run_once_and_acts_only_after_it() {
        let mut s = Script::new(AwayPolicy::with_idle_minutes(None));
        s.away.note_use(0);
        let during = s.run(30_000, 1_000, Critical, BUSY);
        assert_eq!(during, vec![(1_000, Action::BlameRun { cause: Cause::Pressure { level: Critical } })]);
        // The run ends with the pressure still there: now the cheap step, then the unload.
        let after = s.run(50_000, 1_000, Critical, IDLE);
        assert_eq!(after.len(), 2, "{after:?}");
        assert!(matches!(after[0], (31_000, Action::DropSessions { .. })));
        assert!(matches!(after[1], (46_000, Action::Unload { .. })));
        // A second run under pressure is blamed again (once).
        s.away.note_use(50_500);
        let again = s.run(55_000, 1_000, Critical, BUSY);
        assert_eq!(again.len(), 1);
    }

    #[test]
    fn a_run_that_starts_after_the_drop_postpones_the_unload() {
        let mut s = Script::new(AwayPolicy::with_idle_minutes(None));
        s.away.note_use(0);
        assert!(matches!(s.at(1_000, Critical, IDLE), Some(Action::DropSessions { .. })));
        // The user asks something before the escalation: never mid-answer.
        let during = s.run(40_000, 1_000, Critical, BUSY);
        assert!(!during.is_empty(), "the run is blamed");
        assert!(during.iter().all(|(_, a)| matches!(a, Action::BlameRun { .. })), "{during:?}");
        // After it, still critical, past the escalation time: unload.
        assert!(matches!(s.at(41_000, Critical, IDLE), Some(Action::Unload { .. })));
    }

    #[test]
    fn swap_growing_while_idle_counts_and_growth_during_a_run_does_not() {
        let mut s = Script::new(AwayPolicy::with_idle_minutes(None));
        s.away.note_use(0);
        // A run grows swap by 1 GB: its own, not a trigger after it.
        for t in (1_000..=20_000).step_by(1_000) {
            s.swap += 50 * MIB;
            assert!(s.at(t, Normal, BUSY).is_none());
        }
        assert!(s.run(30_000, 1_000, Normal, IDLE).is_empty());
        // Idle, swap creeps 10 MiB a second: 256 MiB within 60 s after 26 s.
        let mut fired = None;
        for t in (31_000..=120_000).step_by(1_000) {
            s.swap += 10 * MIB;
            if let Some(a) = s.at(t, Normal, IDLE) {
                fired = Some((t, a));
                break;
            }
        }
        let (t, action) = fired.expect("swap growth never acted");
        assert_eq!(t, 56_000);
        assert_eq!(
            action,
            Action::DropSessions { cause: Cause::SwapGrowing { grew_bytes: 260 * MIB, over_ms: 26_000 } }
        );
        assert_eq!(action.cause().sentence(), "swap grew 0.25 GB in 26 s while nothing ran");
    }

    #[test]
    fn slow_swap_growth_below_the_window_rate_never_acts() {
        let mut s = Script::new(AwayPolicy::with_idle_minutes(None));
        s.away.note_use(0);
        // 2 MiB every 5 s: 24 MiB a minute, for an hour (1.4 GB in all).
        for t in (5_000..=3_600_000).step_by(5_000) {
            s.swap += 2 * MIB;
            assert!(s.at(t, Normal, IDLE).is_none(), "acted at {t}");
        }
    }

    #[test]
    fn the_threshold_is_explicit_and_unknown_never_reaches_it() {
        let critical = AwayPolicy::default();
        assert_eq!(critical.act_at, Critical);
        assert!(critical.is_tight(Critical) && !critical.is_tight(Warning) && !critical.is_tight(Unknown));
        let warning = AwayPolicy { act_at: Warning, ..critical };
        assert!(warning.is_tight(Warning) && warning.is_tight(Critical) && !warning.is_tight(Normal));
        assert!(!warning.is_tight(Unknown));
        let off = AwayPolicy { act_at: Unknown, ..critical };
        assert!(!off.is_tight(Critical), "Unknown as a threshold turns the pressure reaction off");
        // A warning-threshold policy acts on warning readings.
        let mut s = Script::new(AwayPolicy { idle_unload_ms: None, ..warning });
        s.away.note_use(0);
        assert!(matches!(s.at(1_000, Warning, IDLE), Some(Action::DropSessions { .. })));
        assert_eq!(AwayPolicy::default().idle_unload_ms, Some(15 * 60_000));
    }

    #[test]
    fn actions_serialize_with_their_cause_for_the_ui() {
        let a = Action::Unload { cause: Cause::SwapGrowing { grew_bytes: 5, over_ms: 6 } };
        let v = serde_json::to_value(a).unwrap_or_default();
        assert_eq!(v["action"], "unload");
        assert_eq!(v["cause"]["kind"], "swapGrowing");
        assert_eq!(v["cause"]["grewBytes"], 5);
        let b =
            serde_json::to_value(Action::BlameRun { cause: Cause::Pressure { level: Critical } }).unwrap_or_default();
        assert_eq!((b["action"].as_str(), b["cause"]["level"].as_str()), (Some("blameRun"), Some("critical")));
    }
}
