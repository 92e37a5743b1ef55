//! What loads and turns really take, for estimates that learn from this
//! machine (`headroom_core::calibration`). The engine knows MLX's own peak;
//! what the process holds beyond it (the engine's side of MLX, the
//! allocator's arenas) only the OS can say, and reading the OS is
//! `headroom-memory`'s job, so the app hands the engine a [`Meter`] that
//! reads it and keeps what was measured (the store). Without one nothing is
//! measured beyond the turn's stats.

use std::sync::Arc;

pub use headroom_core::calibration::{MeasuredKind, PeakMeasurement};

/// The OS's side of a measurement and where measurements go; called on the
/// engine thread, so `record` must not block for long.
pub trait Meter: Send + Sync {
    /// This process's resident set now.
    fn resident_bytes(&self) -> Option<u64>;
    /// Starts the process's peak resident set anew from what it holds now.
    fn reset_peak_resident(&self);
    /// The process's peak resident set since the last reset.
    fn peak_resident_bytes(&self) -> Option<u64>;
    /// Keeps a measurement.
    fn record(&self, measurement: PeakMeasurement);
}

/// A shared meter.
pub type SharedMeter = Arc<dyn Meter>;

/// A meter that reads a fixed resident set (100 MB, peaking at 130 MB) and
/// keeps what it is handed, for the engine's tests.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct TestMeter {
    pub resets: std::sync::atomic::AtomicUsize,
    pub kept: std::sync::Mutex<Vec<PeakMeasurement>>,
}

#[cfg(test)]
impl TestMeter {
    /// What it was handed so far.
    pub fn kept(&self) -> Vec<PeakMeasurement> {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
impl Meter for TestMeter {
    fn resident_bytes(&self) -> Option<u64> {
        Some(100 << 20)
    }
    fn reset_peak_resident(&self) {
        self.resets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn peak_resident_bytes(&self) -> Option<u64> {
        Some(130 << 20)
    }
    fn record(&self, measurement: PeakMeasurement) {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(measurement);
    }
}
