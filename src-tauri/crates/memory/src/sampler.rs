//! One sampler for the whole app: a tokio task that takes a reading about
//! once a second, publishes it on a `watch` channel (the tray and the live
//! graph only ever need the latest) and keeps the last minutes in a ring
//! buffer for the graph's history.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

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
    #[serde(flatten)]
    pub reading: MemoryReading,
}

/// The running sampler; dropping it stops the task.
#[derive(Debug)]
pub struct Sampler {
    latest: watch::Receiver<Option<Sample>>,
    history: Arc<Mutex<VecDeque<Sample>>>,
    task: JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling `read` every `period` on the current tokio runtime,
    /// keeping the last `capacity` samples. `read` is a closure so tests (and
    /// the app, which adds MLX's counters) decide what a reading is.
    pub fn spawn<F>(mut read: F, period: Duration, capacity: usize) -> Self
    where
        F: FnMut() -> MemoryReading + Send + 'static,
    {
        let (tx, latest) = watch::channel(None);
        let history = Arc::new(Mutex::new(VecDeque::with_capacity(capacity)));
        let ring = Arc::clone(&history);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            // After a stall (a laptop asleep), carry on at the period rather than catching up.
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // A few /proc or sysctl reads: fast enough to run inline at 1 Hz.
                let sample = Sample { at_unix_ms: unix_ms(), reading: read() };
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
            }
        });
        Self { latest, history, task }
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
        rx.changed().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rx.borrow_and_update().map(|s| s.reading.used), Some(1));
        for expected in 2..=5 {
            tokio::time::advance(Duration::from_secs(1)).await;
            rx.changed().await.unwrap_or_else(|e| panic!("{e}"));
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
        rx.changed().await.unwrap_or_else(|e| panic!("{e}"));
        drop(sampler);
        tokio::time::advance(Duration::from_secs(5)).await;
        tokio::task::yield_now().await;
        assert!(*count.lock().unwrap_or_else(PoisonError::into_inner) <= 2);
    }

    #[tokio::test]
    async fn real_readings_flow() {
        let mut reader = crate::Reader::new().unwrap_or_else(|e| panic!("{e}"));
        let sampler = Sampler::spawn(move || reader.read(), Duration::from_millis(10), DEFAULT_HISTORY);
        let mut rx = sampler.subscribe();
        rx.changed().await.unwrap_or_else(|e| panic!("{e}"));
        let s = sampler.latest().unwrap_or_else(|| panic!("no sample"));
        assert!(s.reading.total > 0 && s.at_unix_ms > 0);
    }
}
