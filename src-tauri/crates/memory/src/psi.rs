//! Linux pressure-stall information (`/proc/pressure/memory`) and how it maps
//! to the three pressure levels.
//!
//! The file holds two lines:
//!
//! ```text
//! some avg10=0.00 avg60=0.00 avg300=0.00 total=0
//! full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//! ```
//!
//! `some` is the share of the last 10 s in which at least one task waited on
//! memory (reclaim, swap-in, refaults); `full` the share in which every
//! non-idle task did, i.e. the machine made no progress at all (thrashing).
//!
//! Thresholds (percent of wall time over the last 10 s):
//!
//! | level    | rule                                  |
//! |----------|---------------------------------------|
//! | critical | `full avg10 >= 10`                    |
//! | warning  | `some avg10 >= 10` or `full avg10 >= 1` |
//! | normal   | otherwise                             |
//!
//! Why these: a desktop that is not short of memory shows `some` at 0–2 %
//! (brief page-cache refaults); sustained `some` above ~10 % is when
//! interactive latency becomes visible, which is what macOS's "warning" is
//! for. Any sustained `full` stall means the whole system stopped for memory;
//! 10 % of wall time is where Android's lmkd and Facebook's oomd start
//! killing, so it is our "critical".

use std::path::{Path, PathBuf};

use headroom_core::pressure::PressureLevel;

/// Where the kernel publishes memory PSI.
pub const DEFAULT_PSI_PATH: &str = "/proc/pressure/memory";

/// `some` avg10 at or above this (percent) is a warning.
pub const WARNING_SOME_AVG10: f64 = 10.0;
/// `full` avg10 at or above this (percent) is a warning.
pub const WARNING_FULL_AVG10: f64 = 1.0;
/// `full` avg10 at or above this (percent) is critical.
pub const CRITICAL_FULL_AVG10: f64 = 10.0;

/// The two avg10 figures of one reading, in percent.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Psi {
    pub some_avg10: f64,
    /// Absent on kernels before 5.13's `full` line for the system (it has
    /// always existed for memory, but a parser should not insist).
    pub full_avg10: Option<f64>,
}

impl Psi {
    /// Parses the file's text; `None` if it has no `some avg10=` figure.
    pub fn parse(text: &str) -> Option<Self> {
        let avg10 = |kind: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(kind)?.strip_prefix(' '))
                .and_then(|rest| rest.split_whitespace().find_map(|kv| kv.strip_prefix("avg10=")))
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
        };
        Some(Self { some_avg10: avg10("some")?, full_avg10: avg10("full") })
    }

    /// The level these figures mean (see the module docs for the thresholds).
    pub fn level(self) -> PressureLevel {
        let full = self.full_avg10.unwrap_or(0.0);
        if full >= CRITICAL_FULL_AVG10 {
            PressureLevel::Critical
        } else if self.some_avg10 >= WARNING_SOME_AVG10 || full >= WARNING_FULL_AVG10 {
            PressureLevel::Warning
        } else {
            PressureLevel::Normal
        }
    }
}

/// Reads PSI from a file (injectable for tests).
#[derive(Debug, Clone)]
pub struct PsiSource {
    path: PathBuf,
}

impl Default for PsiSource {
    fn default() -> Self {
        Self::new(DEFAULT_PSI_PATH)
    }
}

impl PsiSource {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current figures; `None` when the file is missing (an old kernel, a
    /// container, PSI disabled at boot) or unreadable: never an error.
    pub fn read(&self) -> Option<Psi> {
        std::fs::read_to_string(&self.path).ok().as_deref().and_then(Psi::parse)
    }

    /// The current level, `Unknown` when there is no PSI.
    pub fn level(&self) -> PressureLevel {
        self.read().map_or(PressureLevel::Unknown, Psi::level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: &str =
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
    const BUSY: &str =
        "some avg10=12.50 avg60=4.10 avg300=1.00 total=123456\nfull avg10=0.40 avg60=0.10 avg300=0.00 total=789\n";
    const THRASHING: &str = "some avg10=87.21 avg60=60.00 avg300=20.00 total=9999999\nfull avg10=41.03 avg60=30.00 avg300=9.00 total=888888\n";

    #[test]
    fn parses_some_and_full_avg10() {
        assert_eq!(Psi::parse(IDLE), Some(Psi { some_avg10: 0.0, full_avg10: Some(0.0) }));
        assert_eq!(Psi::parse(BUSY), Some(Psi { some_avg10: 12.5, full_avg10: Some(0.4) }));
        assert_eq!(Psi::parse(THRASHING), Some(Psi { some_avg10: 87.21, full_avg10: Some(41.03) }));
        // Only a `some` line (older kernels for some resources): still a reading.
        assert_eq!(
            Psi::parse("some avg10=3.00 avg60=0.00 avg300=0.00 total=1\n"),
            Some(Psi { some_avg10: 3.0, full_avg10: None })
        );
    }

    #[test]
    fn garbage_is_not_a_reading() {
        for text in [
            "",
            "hello",
            "some avg60=1.00",
            "some avg10=abc",
            "some avg10=-1.0",
            "something avg10=5.0",
            "full avg10=5.00",
        ] {
            assert_eq!(Psi::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn thresholds_map_to_levels() {
        let psi = |some, full| Psi { some_avg10: some, full_avg10: Some(full) };
        assert_eq!(Psi::parse(IDLE).map(Psi::level), Some(PressureLevel::Normal));
        assert_eq!(Psi::parse(BUSY).map(Psi::level), Some(PressureLevel::Warning));
        assert_eq!(Psi::parse(THRASHING).map(Psi::level), Some(PressureLevel::Critical));
        assert_eq!(psi(9.99, 0.99).level(), PressureLevel::Normal);
        assert_eq!(psi(10.0, 0.0).level(), PressureLevel::Warning);
        assert_eq!(psi(2.0, 1.0).level(), PressureLevel::Warning);
        assert_eq!(psi(50.0, 9.99).level(), PressureLevel::Warning);
        assert_eq!(psi(50.0, 10.0).level(), PressureLevel::Critical);
        assert_eq!(Psi { some_avg10: 5.0, full_avg10: None }.level(), PressureLevel::Normal);
    }

    #[test]
    fn a_missing_or_bad_file_is_unknown_not_an_error() {
        let dir = headroom_test_support::scratch("psi");
        assert_eq!(PsiSource::new(dir.join("absent")).level(), PressureLevel::Unknown);
        let bad = dir.join("bad");
        std::fs::write(&bad, "not psi").unwrap();
        assert_eq!(PsiSource::new(&bad).level(), PressureLevel::Unknown);
        let busy = dir.join("busy");
        std::fs::write(&busy, BUSY).unwrap();
        assert_eq!(PsiSource::new(&busy).level(), PressureLevel::Warning);
    }
}
