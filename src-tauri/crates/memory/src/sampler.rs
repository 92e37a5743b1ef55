//! One sampler for the whole app: a tokio task that takes a reading every
//! period, publishes it on a `watch` channel (the tray and the live graph
//! only ever need the latest) and keeps the last minutes in a ring buffer
//! for the graph's history. The period can change while it runs (the app
//! backs off to a slow period while it is idle) and a reading can be asked
//! for at once (the popover opened).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::MemoryReading;

/// The default period.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(1);
/// The default history: 10 minutes at 1 Hz.
pub const DEFAULT_HISTORY: usize = 600;

/// A reading and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// The sampler's period when it was taken: how long the reading stands
    /// for (the live graph breaks its lines where readings are further apart).
    pub period_ms: u64,
    #[serde(flatten)]
    pub reading: MemoryReading,
}

/// The running sampler; dropping it stops the task.
#[derive(Debug)]
pub struct Sampler {
    latest: watch::Receiver<Option<Sample>>,
    history: Arc<Mutex<VecDeque<Sample>>>,
    period: watch::Sender<Duration>,
    now: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling `read` every `period` on the current tokio runtime
    /// (the first reading at once), keeping the last `capacity` samples.
    /// `read` is a closure so tests (and the app, which adds MLX's counters)
    /// decide what a reading is.
    pub fn spawn<F>(mut read: F, period: Duration, capacity: usize) -> Self
    where
        F: FnMut() -> MemoryReading + Send + 'static,
    {
        let (tx, latest) = watch::channel(None);
        let history = Arc::new(Mutex::new(VecDeque::with_capacity(capacity)));
        let (period_tx, mut period_rx) = watch::channel(period);
        let now = Arc::new(Notify::new());
        let ring = Arc::clone(&history);
        let poke = Arc::clone(&now);
        let task = tokio::spawn(async move {
            let mut last: Option<Instant> = None;
            let mut next = Instant::now();
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {}
                    () = poke.notified() => {}
                    changed = period_rx.changed() => {
                        if changed.is_err() {
                            break; // the Sampler was dropped
                        }
                        // A new period counts from the last reading, so a
                        // faster one takes its first reading soon, not after
                        // the rest of a slow wait.
                        let period = *period_rx.borrow_and_update();
                        next = last.map_or_else(Instant::now, |at| at + period);
                        continue;
                    }
                }
                let period = *period_rx.borrow();
                // A few /proc or sysctl reads: fast enough to run inline.
                let sample = Sample {
                    at_unix_ms: unix_ms(),
                    period_ms: u64::try_from(period.as_millis()).unwrap_or(u64::MAX),
                    reading: read(),
                };
                {
                    let mut ring = ring.lock().unwrap_or_else(PoisonError::into_inner);
                    if capacity > 0 {
                        if ring.len() == capacity {
                            ring.pop_front();
                        }
                        ring.push_back(sample);
                    }
                }
                if tx.send(Some(sample)).is_err() {
                    // Nobody can subscribe any more: the Sampler was dropped.
                    break;
                }
                // After a stall (a laptop asleep), carry on at the period
                // rather than catching up.
                let taken = Instant::now();
                last = Some(taken);
                next = taken + period;
            }
        });
        Self { latest, history, period: period_tx, now, task }
    }

    /// Changes the period; the next reading comes one new period after the last.
    pub fn set_period(&self, period: Duration) {
        self.period.send_if_modified(|p| {
            let changed = *p != period;
            *p = period;
            changed
        });
    }

    /// The period now.
    pub fn period(&self) -> Duration {
        *self.period.borrow()
    }

    /// Takes a reading now (published as usual); the period restarts from it.
    pub fn read_now(&self) {
        self.now.notify_one();
    }

    /// A receiver of each new sample (the latest one only, if it lags).
    pub fn subscribe(&self) -> watch::Receiver<Option<Sample>> {
        self.latest.clone()
    }

    /// The most recent sample, if one was taken yet.
    pub fn latest(&self) -> Option<Sample> {
        *self.latest.borrow()
    }

    /// The kept samples, oldest first.
    pub fn history(&self) -> Vec<Sample> {
        self.history.lock().unwrap_or_else(PoisonError::into_inner).iter().copied().collect()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PressureLevel;

    fn fake(n: &Arc<Mutex<u64>>) -> impl FnMut() -> MemoryReading + Send + 'static {
        let n = Arc::clone(n);
        move || {
            let mut n = n.lock().unwrap_or_else(PoisonError::into_inner);
            *n += 1;
            MemoryReading { used: *n, pressure: PressureLevel::Normal, ..MemoryReading::default() }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn samples_each_period_publishes_and_keeps_the_last_n() {
        let count = Arc::new(Mutex::new(0));
        let sampler = Sampler::spawn(fake(&count), Duration::from_secs(1), 3);
        let mut rx = sampler.subscribe();
        // The first tick is immediate.
        rx.changed().await.unwrap();
        assert_eq!(rx.borrow_and_update().map(|s| s.reading.used), Some(1));
        for expected in 2..=5 {
            tokio::time::advance(Duration::from_secs(1)).await;
            rx.changed().await.unwrap();
            assert_eq!(rx.borrow_and_update().map(|s| s.reading.used), Some(expected));
        }
        let kept: Vec<u64> = sampler.history().iter().map(|s| s.reading.used).collect();
        assert_eq!(kept, vec![3, 4, 5]);
        assert_eq!(sampler.latest().map(|s| s.reading.used), Some(5));
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_sampler_stops_the_task() {
        let count = Arc::new(Mutex::new(0));
        let sampler = Sampler::spawn(fake(&count), Duration::from_secs(1), 10);
        let mut rx = sampler.subscribe();
        rx.changed().await.unwrap();
        drop(sampler);
        tokio::time::advance(Duration::from_secs(5)).await;
        tokio::task::yield_now().await;
        assert!(*count.lock().unwrap_or_else(PoisonError::into_inner) <= 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_period_changes_while_running_and_a_reading_can_be_asked_for() {
        let count = Arc::new(Mutex::new(0));
        let sampler = Sampler::spawn(fake(&count), Duration::from_secs(1), 100);
        let mut rx = sampler.subscribe();
        rx.changed().await.unwrap();
        assert_eq!(rx.borrow_and_update().map(|s| s.period_ms), Some(1000));
        // Back off to 5 s: nothing for the next 4.9 s, then one reading.
        sampler.set_period(Duration::from_secs(5));
        assert_eq!(sampler.period(), Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(4_900)).await;
        assert!(!rx.has_changed().unwrap_or(true), "a reading came before the slow period ended");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(rx.has_changed().unwrap_or(false));
        assert_eq!(rx.borrow_and_update().map(|s| (s.reading.used, s.period_ms)), Some((2, 5000)));
        // Asked for one now: it comes at once, not after the 5 s.
        tokio::time::sleep(Duration::from_secs(1)).await;
        sampler.read_now();
        tokio::time::timeout(Duration::from_millis(10), rx.changed())
            .await
            .expect("read_now did not read at once")
            .unwrap();
        assert_eq!(rx.borrow_and_update().map(|s| s.reading.used), Some(3));
        // Back to 1 s: the next reading one second after the last.
        sampler.set_period(Duration::from_secs(1));
        tokio::time::timeout(Duration::from_millis(1_100), rx.changed())
            .await
            .expect("the faster period did not start")
            .unwrap();
        assert_eq!(rx.borrow_and_update().map(|s| (s.reading.used, s.period_ms)), Some((4, 1000)));
    }

    #[tokio::test]
    async fn real_readings_flow() {
        let mut reader = crate::Reader::new().unwrap();
        let sampler = Sampler::spawn(move || reader.read(), Duration::from_millis(10), DEFAULT_HISTORY);
        let mut rx = sampler.subscribe();
        rx.changed().await.unwrap();
        let s = sampler.latest().expect("no sample");
        assert!(s.reading.total > 0 && s.at_unix_ms > 0);
    }
}
