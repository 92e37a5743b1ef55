//! headroom-memory: readings of the machine's memory (sysinfo, plus the
//! kernel's pressure level and swap: sysctl on macOS, PSI on Linux) and one
//! sampler that publishes them at a pace the app sets (once a second while
//! someone looks, every few seconds while idle). MLX's own counters live
//! in the engine (`headroom_engine::mlx_memory`); the app shows both.

pub mod bandwidth;
mod error;
#[cfg(not(target_os = "macos"))]
mod linux;
#[cfg(target_os = "macos")]
mod macos;
pub mod os;
pub mod process;
pub mod psi;
pub mod sampler;

/// Held by the tests that measure this process's resident set. They run on
/// threads of one process, so one test's 64 MB block, freed while another
/// reads, would move the other's figures (a CI run saw 39 MB of growth where
/// 64 MB were touched).
#[cfg(test)]
pub(crate) static RESIDENT_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

use serde::Serialize;
use sysinfo::{MemoryRefreshKind, Pid, ProcessRefreshKind, ProcessesToUpdate, System};

pub use error::{MemoryError, Result};
pub use headroom_core::pressure::PressureLevel;
#[cfg(not(target_os = "macos"))]
pub use linux::PlatformSignals;
#[cfg(target_os = "macos")]
pub use macos::PlatformSignals;
pub use os::{FixedSignals, OsSignals, SwapUsage};
pub use sampler::{Sample, Sampler};

/// One reading of the machine and this process, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct MemoryReading {
    pub total: u64,
    /// What can be given to a new allocation without swapping (sysinfo's
    /// `available_memory`: MemAvailable on Linux, active+inactive+free on macOS).
    pub available: u64,
    pub used: u64,
    pub swap_total: u64,
    pub swap_used: u64,
    pub pressure: PressureLevel,
    /// This process's resident set.
    pub process_rss: u64,
}

/// Reads memory, reusing its sysinfo handle between readings.
#[derive(Debug)]
pub struct Reader<S = PlatformSignals> {
    system: System,
    pid: Option<Pid>,
    signals: S,
}

impl Reader<PlatformSignals> {
    /// A reader with this platform's signals.
    pub fn new() -> Result<Self> {
        Self::with_signals(PlatformSignals::new())
    }
}

impl<S: OsSignals> Reader<S> {
    /// A reader with injected signals (a fixture PSI path, a fixed level).
    pub fn with_signals(signals: S) -> Result<Self> {
        Ok(Self { system: System::new()?, pid: sysinfo::get_current_pid().ok(), signals })
    }

    /// One reading now. Cheap (well under a millisecond): a few /proc or
    /// sysctl reads, no process table scan.
    pub fn read(&mut self) -> MemoryReading {
        self.system.refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram().with_swap());
        let process_rss = self.pid.map_or(0, |pid| {
            self.system.refresh_processes_specifics(
                ProcessesToUpdate::Some(&[pid]),
                false,
                ProcessRefreshKind::nothing().with_memory(),
            );
            self.system.process(pid).map_or(0, sysinfo::Process::memory)
        });
        let swap =
            self.signals.swap().unwrap_or(SwapUsage { total: self.system.total_swap(), used: self.system.used_swap() });
        MemoryReading {
            total: self.system.total_memory(),
            available: self.system.available_memory(),
            used: self.system.used_memory(),
            swap_total: swap.total,
            swap_used: swap.used,
            pressure: self.signals.pressure(),
            process_rss,
        }
    }
}

/// One reading with this platform's signals.
pub fn read() -> Result<MemoryReading> {
    Ok(Reader::new()?.read())
}

/// This process's resident set now, bytes.
pub fn process_rss() -> Result<u64> {
    Ok(read()?.process_rss)
}

/// This machine's name as the OS reports it ("Studio.local"), for telling a
/// paired Mac apart; "this Mac" where the OS gives none.
pub fn machine_name() -> String {
    sysinfo::System::host_name().ok().filter(|n| !n.is_empty()).unwrap_or_else(|| "this Mac".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_is_self_consistent() {
        let r = read().unwrap();
        assert!(r.total > 0, "{r:?}");
        assert!(r.available <= r.total && r.used <= r.total, "{r:?}");
        assert!(r.swap_used <= r.swap_total, "{r:?}");
        assert!(r.process_rss > 1 << 20, "this test binary is resident: {r:?}");
    }

    #[test]
    fn rss_sees_memory_this_process_touches() {
        let _alone = RESIDENT_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut reader = Reader::new().unwrap();
        let before = reader.read().process_rss;
        let block = vec![1u8; 64 << 20];
        let after = reader.read().process_rss;
        assert_eq!(block.len(), 64 << 20);
        assert!(block.iter().step_by(4096).all(|&b| b == 1));
        assert!(after >= before + (48 << 20), "before {before}, after {after}");
    }

    #[test]
    fn injected_signals_are_used() {
        let signals = FixedSignals { pressure: PressureLevel::Critical, swap: Some(SwapUsage { total: 8, used: 3 }) };
        let r = Reader::with_signals(signals).unwrap().read();
        assert_eq!((r.pressure, r.swap_total, r.swap_used), (PressureLevel::Critical, 8, 3));
    }

    #[cfg(not(target_os = "macos"))]
    #[test]
    fn linux_pressure_comes_from_the_psi_file() {
        let dir = headroom_test_support::scratch("mem-psi");
        let file = dir.join("memory");
        std::fs::write(
            &file,
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=25.00 avg60=0.00 avg300=0.00 total=0\n",
        )
        .unwrap();
        let signals = PlatformSignals { psi: psi::PsiSource::new(&file) };
        let r = Reader::with_signals(signals).unwrap().read();
        assert_eq!(r.pressure, PressureLevel::Critical);
        let signals = PlatformSignals { psi: psi::PsiSource::new(dir.join("absent")) };
        assert_eq!(Reader::with_signals(signals).unwrap().read().pressure, PressureLevel::Unknown);
    }
}
