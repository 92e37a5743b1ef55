//! What the OS says beyond sysinfo's totals: the pressure level and, where
//! the OS reports it more directly than sysinfo, swap. One trait, a macOS
//! implementation (`macos.rs`, sysctl) and its Linux twin (`linux.rs`, PSI),
//! so everything above is tested here on Linux.

use headroom_core::pressure::PressureLevel;

/// Swap in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct SwapUsage {
    pub total: u64,
    pub used: u64,
}

/// The platform-specific signals.
pub trait OsSignals: Send {
    /// The current pressure level; `Unknown` when the platform cannot say.
    fn pressure(&mut self) -> PressureLevel;
    /// Swap straight from the OS, if it has a better source than sysinfo.
    fn swap(&mut self) -> Option<SwapUsage>;
}

/// A fixed answer, for tests of the layers above.
#[derive(Debug, Clone, Copy, Default)]
pub struct FixedSignals {
    pub pressure: PressureLevel,
    pub swap: Option<SwapUsage>,
}

impl OsSignals for FixedSignals {
    fn pressure(&mut self) -> PressureLevel {
        self.pressure
    }
    fn swap(&mut self) -> Option<SwapUsage> {
        self.swap
    }
}
