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
