//! The live view's state: whether anyone is looking (the popover is visible)
//! or anything runs (an answer streams), which sets how often memory is
//! sampled; and the per-second decode rates of streaming answers with their
//! slowdown attribution (`core::slowdown`), kept for the live graph and
//! written to the store's timeline.
//!
//! The turn path reports an answer's tokens through a [`LiveRun`]:
//!
//! ```ignore
//! let mut live_run = state.live.begin_run(&model_id);           // before streaming
//! live_run.on_token_now();                                     // each generated token
//! let note = live_run.finish();                                // Option<SlowdownNote> for the stats
//! ```

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use headroom_core::slowdown::{
    find_stretches, healthy_rates, worst_blamed, DecodeMeter, MemoryMark, MeterPoint, Policy, RateHistory, RatePoint,
    Stretch,
};
use headroom_memory::Reader;
use headroom_store::{RateRow, Store};
use serde::Serialize;
use tokio::sync::watch;

/// How long the in-memory rates and slowdowns are kept: the graph's longest window.
pub const KEPT_MS: u64 = 60 * 60_000;
/// While an answer streams, its points are written every this many.
const FLUSH_EVERY: usize = 10;

/// Who needs fresh readings: the sampler runs fast while either is true.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Activity {
    /// The popover is on screen (the webview says so).
    pub visible: bool,
    /// Answers streaming now.
    pub runs: usize,
}

impl Activity {
    pub fn active(&self) -> bool {
        self.visible || self.runs > 0
    }
}

/// What an answer's stats say when it was slowed by memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlowdownNote {
    /// "slowed by swap: 3.1 → 0.8 tok/s while swap grew 1.2 GB"
    pub sentence: String,
    pub stretch: Stretch,
}

/// A rate point and whose it is.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct ModelRate {
    pub model_id: String,
    #[serde(flatten)]
    pub point: RatePoint,
}

/// A blamed stretch and whose it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelSlowdown {
    pub model_id: String,
    pub stretch: Stretch,
}

/// The live view's shared state: a cheap handle.
#[derive(Debug, Clone)]
pub struct Live {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    activity: watch::Sender<Activity>,
    state: Mutex<State>,
    /// Memory at each rate point, for the attribution.
    memory: Mutex<MemorySource>,
    /// When a token became available: the wall clock, or a test's
    /// fixed-cost clock (so a point's rate does not hang on this machine's speed).
    clock: Mutex<TokenClock>,
    store: OnceLock<Store>,
    policy: Policy,
}

#[derive(Debug, Default)]
struct State {
    /// Each model's recent healthy rates: its reference.
    histories: HashMap<String, RateHistory>,
    /// Models whose history was read from the store (once per process).
    seeded: HashSet<String>,
    rates: VecDeque<ModelRate>,
    slowdowns: Vec<ModelSlowdown>,
}

/// Where a run's memory readings come from.
struct MemorySource(Box<dyn FnMut() -> Option<(u64, headroom_core::pressure::PressureLevel)> + Send>);

impl std::fmt::Debug for MemorySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemorySource")
    }
}

/// Where a run's token times come from.
struct TokenClock(Box<dyn FnMut() -> Instant + Send>);

impl std::fmt::Debug for TokenClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenClock")
    }
}

impl Default for Live {
    fn default() -> Self {
        Self::new()
    }
}

impl Live {
    pub fn new() -> Self {
        Self::with_policy(Policy::default())
    }

    /// With the policy's thresholds and memory read from this machine.
    pub fn with_policy(policy: Policy) -> Self {
        // No readings on this platform: nothing will ever be blamed.
        let mut reader = Reader::new().ok();
        Self::with_memory(policy, move || reader.as_mut().map(|r| r.read()).map(|r| (r.swap_used, r.pressure)))
    }

    /// With memory from `read` (swap used, pressure level): tests script it.
    pub fn with_memory(
        policy: Policy,
        read: impl FnMut() -> Option<(u64, headroom_core::pressure::PressureLevel)> + Send + 'static,
    ) -> Self {
        let (activity, _) = watch::channel(Activity::default());
        Self {
            inner: Arc::new(Inner {
                activity,
                state: Mutex::default(),
                memory: Mutex::new(MemorySource(Box::new(read))),
                clock: Mutex::new(TokenClock(Box::new(Instant::now))),
                store: OnceLock::new(),
                policy,
            }),
        }
    }

    /// Token times from `now` instead of the wall clock: tests give a
    /// fixed cost per token, so the points a real answer makes do not
    /// depend on how fast this machine decodes.
    pub fn set_token_clock(&self, now: impl FnMut() -> Instant + Send + 'static) {
        *self.inner.clock.lock().unwrap_or_else(PoisonError::into_inner) = TokenClock(Box::new(now));
    }

    /// Where rates and slowdowns are written, and models' histories read
    /// from. Without one they are kept in memory only.
    pub fn attach_store(&self, store: Store) {
        let _ = self.inner.store.set(store);
    }

    pub fn activity(&self) -> Activity {
        *self.inner.activity.borrow()
    }

    /// Each change of the activity.
    pub fn subscribe(&self) -> watch::Receiver<Activity> {
        self.inner.activity.subscribe()
    }

    /// The webview reports whether it is on screen; true if that changed.
    pub fn set_visible(&self, visible: bool) -> bool {
        self.inner.activity.send_if_modified(|a| std::mem::replace(&mut a.visible, visible) != visible)
    }

    /// An answer of `model_id` starts streaming: the sampler speeds up until
    /// it ends. The model's reference rate is its recent history (read from
    /// the store the first time a model is seen in this process).
    pub fn begin_run(&self, model_id: &str) -> LiveRun {
        self.seed_history(model_id);
        let history: Vec<f64> = self.state().histories.get(model_id).map(|h| h.rates().collect()).unwrap_or_default();
        self.inner.activity.send_modify(|a| a.runs += 1);
        let mut run = LiveRun {
            live: self.clone(),
            model_id: model_id.to_owned(),
            origin: Instant::now(),
            origin_ms: unix_ms(),
            meter: DecodeMeter::new(),
            history,
            points: Vec::new(),
            marks: Vec::new(),
            stretches: Vec::new(),
            flushed: 0,
            pending: None,
            ended: false,
        };
        run.mark_memory(run.origin_ms);
        run
    }

    /// The rates and blamed stretches kept in memory that reach into
    /// `[since_ms, …)`, oldest first.
    pub fn recent(&self, since_ms: u64) -> (Vec<ModelRate>, Vec<ModelSlowdown>) {
        let state = self.state();
        let rates = state.rates.iter().filter(|r| r.point.at_ms >= since_ms).cloned().collect();
        let slowdowns = state.slowdowns.iter().filter(|s| s.stretch.end_ms >= since_ms).cloned().collect();
        (rates, slowdowns)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn seed_history(&self, model_id: &str) {
        if !self.state().seeded.insert(model_id.to_owned()) {
            return;
        }
        let Some(store) = self.inner.store.get() else { return };
        match crate::runtime::block_on(store.recent_rates(model_id, RateHistory::KEPT)) {
            Ok(rates) if !rates.is_empty() => {
                let mut state = self.state();
                let mut history = RateHistory::from_rates(rates);
                // Rates of this process (if any) are newer than the stored ones.
                if let Some(h) = state.histories.remove(model_id) {
                    for r in h.rates() {
                        history.push(r);
                    }
                }
                state.histories.insert(model_id.to_owned(), history);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!("could not read {model_id}'s recent rates: {e}"),
        }
    }

    fn store(&self) -> Option<&Store> {
        self.inner.store.get()
    }
}

/// The rates of one streaming answer.
#[derive(Debug)]
pub struct LiveRun {
    live: Live,
    model_id: String,
    origin: Instant,
    origin_ms: u64,
    meter: DecodeMeter,
    /// The model's history when the answer began.
    history: Vec<f64>,
    points: Vec<RatePoint>,
    marks: Vec<MemoryMark>,
    stretches: Vec<Stretch>,
    /// Points already written.
    flushed: usize,
    /// The last background write: writes go to the store in order, so an
    /// older stretch never replaces a newer one.
    pending: Option<crate::runtime::JoinHandle<()>>,
    ended: bool,
}

impl LiveRun {
    /// A generated token became available at `at`.
    pub fn on_token(&mut self, at: Instant) {
        let since = at.saturating_duration_since(self.origin);
        if let Some(p) = self.meter.token(since) {
            self.add(p);
        }
    }

    /// A generated token became available now, by the live view's clock.
    pub fn on_token_now(&mut self) {
        let at = (self.live.inner.clock.lock().unwrap_or_else(PoisonError::into_inner).0)();
        self.on_token(at);
    }

    /// The answer ended (however): its last point, the final attribution,
    /// everything written. The note, when a stretch was blamed on memory.
    pub fn finish(mut self) -> Option<SlowdownNote> {
        self.end()
    }

    /// The points so far (for tests and the CLI's report).
    pub fn points(&self) -> &[RatePoint] {
        &self.points
    }

    /// The slow stretches found so far, blamed or not.
    pub fn stretches(&self) -> &[Stretch] {
        &self.stretches
    }

    fn end(&mut self) -> Option<SlowdownNote> {
        if self.ended {
            return None;
        }
        self.ended = true;
        if let Some(p) = self.meter.finish() {
            self.add(p);
        }
        self.live.inner.activity.send_modify(|a| a.runs = a.runs.saturating_sub(1));
        {
            let mut state = self.live.state();
            let history = state.histories.entry(self.model_id.clone()).or_default();
            for r in healthy_rates(&self.points, &self.stretches) {
                history.push(r);
            }
        }
        if let Some(store) = self.live.store() {
            // At the end of an answer, on its own thread: a short wait is fine,
            // and what the graph shows next is on disk. After the last
            // background write, so an older stretch never replaces this one.
            let earlier = self.pending.take();
            let written = crate::runtime::block_on(async {
                if let Some(earlier) = earlier {
                    let _ = earlier.await;
                }
                write(store, &self.model_id, &self.points, &self.stretches).await
            });
            if let Err(e) = written {
                tracing::warn!("could not store the answer's rates: {e}");
            }
        }
        let stretch = *worst_blamed(&self.stretches)?;
        Some(SlowdownNote { sentence: stretch.sentence()?, stretch })
    }

    fn add(&mut self, p: MeterPoint) {
        let ms = |d: std::time::Duration| self.origin_ms + u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let (start_ms, at_ms) = (ms(p.start), ms(p.end));
        // A last point under a millisecond long keeps its rate but needs an interval.
        let point = RatePoint { start_ms, at_ms: at_ms.max(start_ms + 1), tokens: p.tokens, tps: p.tps() };
        self.points.push(point);
        self.mark_memory(point.at_ms);
        self.stretches = find_stretches(&self.history, &self.points, &self.marks, &self.live.inner.policy);
        {
            let mut state = self.live.state();
            let cutoff = point.at_ms.saturating_sub(KEPT_MS);
            while state.rates.front().is_some_and(|r| r.point.at_ms < cutoff) {
                state.rates.pop_front();
            }
            state.rates.push_back(ModelRate { model_id: self.model_id.clone(), point });
            // This answer's blamed stretches replace what it showed before.
            let first = self.points.first().map_or(0, |p| p.start_ms);
            let model = &self.model_id;
            state
                .slowdowns
                .retain(|s| !(&s.model_id == model && s.stretch.start_ms >= first) && s.stretch.end_ms >= cutoff);
            state.slowdowns.extend(
                self.stretches
                    .iter()
                    .filter(|s| s.cause.is_some())
                    .map(|s| ModelSlowdown { model_id: model.clone(), stretch: *s }),
            );
        }
        if self.points.len() - self.flushed >= FLUSH_EVERY {
            self.flush_in_background();
        }
    }

    fn mark_memory(&mut self, at_ms: u64) {
        let reading = (self.live.inner.memory.lock().unwrap_or_else(PoisonError::into_inner).0)();
        if let Some((swap_used_bytes, pressure)) = reading {
            self.marks.push(MemoryMark { at_ms, swap_used_bytes, pressure });
        }
    }

    /// Writes the points so far without holding up the token stream (a
    /// killed app keeps all but the last few seconds).
    fn flush_in_background(&mut self) {
        let Some(store) = self.live.store().cloned() else {
            self.flushed = self.points.len();
            return;
        };
        let (model, points, stretches) = (self.model_id.clone(), self.points.clone(), self.stretches.clone());
        self.flushed = self.points.len();
        let earlier = self.pending.take();
        self.pending = Some(crate::runtime::spawn(async move {
            if let Some(earlier) = earlier {
                let _ = earlier.await;
            }
            if let Err(e) = write(&store, &model, &points, &stretches).await {
                tracing::debug!("could not store the answer's rates: {e}");
            }
        }));
    }
}

impl Drop for LiveRun {
    /// A run dropped without `finish` (an early return, a panic) still ends:
    /// the sampler slows down again and what was measured is kept.
    fn drop(&mut self) {
        let _ = self.end();
    }
}

async fn write(store: &Store, model: &str, points: &[RatePoint], stretches: &[Stretch]) -> headroom_store::Result<()> {
    let slowed =
        |p: &RatePoint| stretches.iter().any(|s| s.cause.is_some() && p.at_ms > s.start_ms && p.at_ms <= s.end_ms);
    let rows: Vec<RateRow<'_>> =
        points.iter().map(|&p| RateRow { model_id: model, point: p, slowed: slowed(&p) }).collect();
    store.record_rates(&rows).await?;
    for s in stretches.iter().filter(|s| s.cause.is_some()) {
        store.record_slowdown(model, s).await?;
    }
    Ok(())
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A blamed stretch as the graph's hover read-out shows it.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct SlowdownView {
    pub model_id: String,
    pub start_ms: u64,
    pub end_ms: u64,
    pub sentence: String,
}

/// The live graph and the figures behind it (for the read-out on hover or
/// focus): what `live_chart` returns and `headroom chart live` draws.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct LiveView {
    pub svg: String,
    pub plot: headroom_charts::PlotBox,
    pub budget_bytes: Option<u64>,
    pub memory: Vec<headroom_core::timeline::MemoryPoint>,
    pub rates: Vec<ModelRate>,
    pub slowdowns: Vec<SlowdownView>,
}

/// What drawing the live graph can fail with.
#[derive(Debug, thiserror::Error)]
pub enum LiveChartError {
    #[error(transparent)]
    Store(#[from] headroom_store::StoreError),
    #[error(transparent)]
    Chart(#[from] headroom_charts::ChartError),
}

/// What the live graph is drawn from.
#[derive(Debug, Clone, Copy)]
pub struct ViewRequest<'a> {
    pub now_ms: u64,
    pub window_ms: u64,
    /// The sampler's kept readings (newer and finer than the store's rows).
    pub recent_memory: &'a [headroom_core::timeline::MemoryPoint],
    /// Memory never given to a model: the budget line is total minus this.
    pub os_headroom_bytes: u64,
    pub style: headroom_charts::ChartStyle,
}

/// The items with the first of each `(model, time)` key, sorted by time.
fn once_each<T>(items: impl IntoIterator<Item = T>, key: impl Fn(&T) -> (String, u64)) -> Vec<T> {
    let mut seen = HashSet::new();
    let mut out: Vec<T> = items.into_iter().filter(|item| seen.insert(key(item))).collect();
    out.sort_by_key(|item| key(item).1);
    out
}

/// Draws the live graph over `[now − window, now]` from the store's
/// timeline (what happened before this process, or before its buffers
/// reach) and what `live` and the sampler hold in memory.
pub async fn view(store: &Store, live: &Live, req: &ViewRequest<'_>) -> Result<LiveView, LiveChartError> {
    let since = req.now_ms.saturating_sub(req.window_ms);
    // Stored rows up to where the sampler's readings begin, then those.
    let first_recent = req.recent_memory.first().map_or(u64::MAX, |m| m.at_ms);
    let mut memory: Vec<_> =
        store.memory_timeline(since).await?.into_iter().filter(|m| m.at_ms < first_recent).collect();
    memory.extend(req.recent_memory.iter().copied().filter(|m| m.end_ms() > since));

    // Rates and slowdowns: this process's and the store's, each once, by time.
    let (recent_rates, recent_slowdowns) = live.recent(since);
    let stored_rates = store.rate_timeline(since).await?;
    let rates = once_each(
        recent_rates
            .into_iter()
            .chain(stored_rates.into_iter().map(|r| ModelRate { model_id: r.model_id, point: r.point })),
        |r| (r.model_id.clone(), r.point.at_ms),
    );
    let stored_slowdowns = store.slowdowns(since).await?;
    let slowdowns = once_each(
        recent_slowdowns
            .into_iter()
            .chain(stored_slowdowns.into_iter().map(|s| ModelSlowdown { model_id: s.model_id, stretch: s.stretch })),
        |s| (s.model_id.clone(), s.stretch.start_ms),
    );

    let total = memory.last().map(|m| m.total_bytes).filter(|&t| t > 0);
    let budget_bytes = total.map(|t| t.saturating_sub(req.os_headroom_bytes));
    let points: Vec<RatePoint> = rates.iter().map(|r| r.point).collect();
    let stretches: Vec<Stretch> = slowdowns.iter().map(|s| s.stretch).collect();
    let chart = headroom_charts::live_chart(
        &headroom_charts::LiveData {
            end_ms: req.now_ms,
            window_ms: req.window_ms,
            memory: &memory,
            rates: &points,
            slowdowns: &stretches,
            budget_bytes,
        },
        &req.style,
    )?;
    Ok(LiveView {
        svg: chart.svg,
        plot: chart.plot,
        budget_bytes,
        memory,
        rates,
        slowdowns: slowdowns
            .into_iter()
            .filter_map(|s| {
                Some(SlowdownView {
                    sentence: s.stretch.sentence()?,
                    model_id: s.model_id,
                    start_ms: s.stretch.start_ms,
                    end_ms: s.stretch.end_ms,
                })
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use headroom_core::pressure::PressureLevel;
    use headroom_core::timeline::MemoryPoint;
    use headroom_test_support::{fresh_store, FreshStore};

    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// A store in a scratch folder of its own, removed on drop.
    /// A store on a new database, removed with its folder after the test.
    fn store(tag: &str) -> FreshStore {
        crate::runtime::block_on(fresh_store(&format!("live-{tag}")))
    }

    /// Swap (MiB) set by the test as it goes; pressure normal.
    fn scripted(swap_mib: &Arc<AtomicU64>) -> Live {
        let swap = Arc::clone(swap_mib);
        Live::with_memory(Policy::default(), move || Some((swap.load(Ordering::Relaxed) * MIB, PressureLevel::Normal)))
    }

    /// Feeds `seconds` of tokens at `rate` per second from `from` (seconds after the run began).
    fn tokens(run: &mut LiveRun, from: f64, seconds: f64, rate: f64, on_second: &mut dyn FnMut(u64)) {
        let n = (seconds * rate).round() as u64;
        let mut last_second = u64::MAX;
        for k in 0..n {
            let t = from + k as f64 / rate;
            if t.floor() as u64 != last_second {
                last_second = t.floor() as u64;
                on_second(last_second);
            }
            run.on_token(run.origin + Duration::from_secs_f64(t));
        }
    }

    #[test]
    fn a_slowdown_while_swap_grows_is_reported_stored_and_shown() {
        let s = store("swap");
        let swap = Arc::new(AtomicU64::new(100));
        let live = scripted(&swap);
        live.attach_store(Store::clone(&s));
        let mut run = live.begin_run("demo");
        assert_eq!(live.activity().runs, 1, "a streaming answer keeps the sampler fast");
        // 6 s at 20 tok/s, then 6 s at 4 tok/s while swap grows 150 MiB a second.
        tokens(&mut run, 0.0, 6.0, 20.0, &mut |_| {});
        let grow = Arc::clone(&swap);
        tokens(&mut run, 6.0, 6.0, 4.0, &mut |_| {
            grow.fetch_add(150, Ordering::Relaxed);
        });
        let points = run.points().len();
        assert!((10..=13).contains(&points), "about one point a second: {points}");
        let note = run.finish().expect("the slowdown was not blamed");
        assert!(note.sentence.starts_with("slowed by swap: 20.0 → 4.0 tok/s while swap grew"), "{}", note.sentence);
        assert!(note.stretch.swap_growth_bytes() >= 600 * MIB, "{:?}", note.stretch);
        assert_eq!(live.activity().runs, 0);

        // Shown: in memory for the graph, and on disk for after a restart.
        let (rates, slowdowns) = live.recent(0);
        assert_eq!(rates.len(), points + 1, "and the tail at finish");
        assert!(rates.iter().all(|r| r.model_id == "demo" && r.point.tps > 0.0));
        assert_eq!(slowdowns.len(), 1);
        let stored = crate::runtime::block_on(s.rate_timeline(0)).unwrap_or_default();
        assert_eq!(stored.len(), rates.len());
        assert!(stored.iter().filter(|r| r.slowed).count() >= 4, "the slow seconds are marked");
        let kept = crate::runtime::block_on(s.slowdowns(0)).unwrap_or_default();
        assert_eq!(kept.iter().map(|k| k.sentence.clone()).collect::<Vec<_>>(), vec![note.sentence]);
    }

    #[test]
    fn a_slowdown_without_swap_growth_is_not_blamed_and_a_steady_run_not_at_all() {
        let swap = Arc::new(AtomicU64::new(100));
        let live = scripted(&swap);
        let mut run = live.begin_run("demo");
        tokens(&mut run, 0.0, 5.0, 20.0, &mut |_| {});
        tokens(&mut run, 5.0, 5.0, 4.0, &mut |_| {});
        assert!(!run.stretches().is_empty(), "it was slow");
        assert_eq!(run.finish(), None, "but memory did not change");
        let mut steady = live.begin_run("demo");
        let grow = Arc::clone(&swap);
        tokens(&mut steady, 0.0, 8.0, 19.0, &mut |_| {
            grow.fetch_add(200, Ordering::Relaxed);
        });
        assert!(steady.stretches().is_empty(), "{:?}", steady.stretches());
        assert_eq!(steady.finish(), None);
        assert!(live.recent(0).1.is_empty());
    }

    #[test]
    fn the_models_own_history_is_the_reference_and_survives_a_restart() {
        let s = store("history");
        let swap = Arc::new(AtomicU64::new(0));
        let first = scripted(&swap);
        first.attach_store(Store::clone(&s));
        let mut run = first.begin_run("big-model");
        tokens(&mut run, 0.0, 8.0, 30.0, &mut |_| {});
        assert_eq!(run.finish(), None);

        // Another process (a restart): an answer that runs at 9 tok/s from its
        // first second while swap grows is slow only against the stored history.
        let second = scripted(&swap);
        second.attach_store(Store::clone(&s));
        let mut run = second.begin_run("big-model");
        assert!(run.history.len() >= 7, "read from the store: {:?}", run.history);
        let grow = Arc::clone(&swap);
        tokens(&mut run, 0.0, 6.0, 9.0, &mut |_| {
            grow.fetch_add(100, Ordering::Relaxed);
        });
        let note = run.finish().expect("not judged against the model's history");
        assert!(note.sentence.starts_with("slowed by swap: 30.0 → 9.0 tok/s"), "{}", note.sentence);
        // Another model has no history: the same answer is just its rate.
        let mut other = second.begin_run("small-model");
        tokens(&mut other, 0.0, 6.0, 9.0, &mut |_| {
            swap.fetch_add(100, Ordering::Relaxed);
        });
        assert_eq!(other.finish(), None);
    }

    #[test]
    fn a_dropped_run_ends_and_visibility_is_reported_once() {
        let live = Live::with_memory(Policy::default(), || None);
        let mut rx = live.subscribe();
        {
            let mut run = live.begin_run("demo");
            tokens(&mut run, 0.0, 2.7, 10.0, &mut |_| {});
            assert_eq!(live.activity(), Activity { visible: false, runs: 1 });
        }
        assert_eq!(live.activity().runs, 0, "dropped without finish, still ended");
        assert_eq!(live.recent(0).0.len(), 3, "two points and the tail (0.6 s)");
        rx.borrow_and_update();
        assert!(live.set_visible(true));
        assert!(!live.set_visible(true), "no change, no wake-up");
        assert!(rx.has_changed().unwrap_or(false));
        assert!(live.activity().active());
    }

    fn reading(at_ms: u64, used: u64) -> MemoryPoint {
        MemoryPoint {
            at_ms,
            span_ms: 1000,
            total_bytes: 24 * GIB,
            available_bytes: 24 * GIB - used,
            used_bytes: used,
            swap_total_bytes: 0,
            swap_used_bytes: 0,
            process_rss_bytes: 100 * MIB,
            pressure: PressureLevel::Normal,
        }
    }

    #[test]
    fn the_view_joins_the_store_and_this_process_each_reading_once() {
        let s = store("view");
        let now = unix_ms();
        // Stored: a row from 4 minutes ago (before this process) and one the
        // sampler also holds.
        for p in [MemoryPoint { span_ms: 60_000, ..reading(now - 240_000, 6 * GIB) }, reading(now - 30_000, 7 * GIB)] {
            crate::runtime::block_on(s.record_memory(&p)).unwrap();
        }
        let recent: Vec<MemoryPoint> = (0..30).map(|k| reading(now - 30_000 + k * 1000, 7 * GIB)).collect();
        let live = Live::with_memory(Policy::default(), || Some((0, PressureLevel::Normal)));
        live.attach_store(Store::clone(&s));
        let mut run = live.begin_run("demo");
        run.origin_ms = now - 20_000;
        tokens(&mut run, 0.0, 3.0, 10.0, &mut |_| {});
        assert_eq!(run.finish(), None);
        let req = ViewRequest {
            now_ms: now,
            window_ms: 300_000,
            recent_memory: &recent,
            os_headroom_bytes: 4 * GIB,
            style: headroom_charts::ChartStyle::live(headroom_charts::Theme::Dark),
        };
        let view = crate::runtime::block_on(view(&s, &live, &req)).unwrap();
        assert_eq!(view.memory.len(), 31, "the old stored row, then the sampler's readings (not the stored copy)");
        assert_eq!(view.rates.len(), 3, "each rate once, though both the store and memory hold it");
        assert_eq!(view.budget_bytes, Some(20 * GIB));
        assert!(view.svg.contains(r#"data-series="tps" data-points="3""#), "{}", &view.svg[..300.min(view.svg.len())]);
        assert!(view.svg.contains(r#"data-series="memory-used" data-points="31""#));
        assert!(view.plot.right > view.plot.left && view.plot.end_ms == now);
        // The UI's names.
        let json = serde_json::to_value(&view).unwrap_or_default();
        for key in ["svg", "plot", "budgetBytes", "memory", "rates", "slowdowns"] {
            assert!(json.get(key).is_some(), "{key}");
        }
        assert!(
            json["rates"][0].get("modelId").is_some() && json["rates"][0].get("atMs").is_some(),
            "{}",
            json["rates"]
        );
    }
}
