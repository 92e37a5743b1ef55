//! The Linux (and any non-macOS) twin of `macos.rs`: pressure from PSI, swap
//! from sysinfo's `/proc/meminfo`.

use headroom_core::pressure::PressureLevel;

use crate::os::{OsSignals, SwapUsage};
use crate::psi::PsiSource;

/// PSI at an injectable path (default `/proc/pressure/memory`).
#[derive(Debug, Clone, Default)]
pub struct PlatformSignals {
    pub psi: PsiSource,
}

impl PlatformSignals {
    /// PSI at the kernel's path.
    pub fn new() -> Self {
        Self::default()
    }
}

impl OsSignals for PlatformSignals {
    fn pressure(&mut self) -> PressureLevel {
        self.psi.level()
    }
    fn swap(&mut self) -> Option<SwapUsage> {
        // sysinfo reads SwapTotal / SwapFree from /proc/meminfo: already direct.
        None
    }
}
