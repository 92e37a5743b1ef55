//! The memory-pressure level shared by the readings, the tray, the live graph
//! and the stats labels, so every part of the app names it the same way.

use serde::{Deserialize, Serialize};

/// How hard the OS is working to find memory, in three steps plus "unknown".
///
/// On macOS these are the kernel's dispatch levels (1 / 2 / 4 from
/// `kern.memorystatus_vm_pressure_level`); on Linux they are derived from PSI
/// (`/proc/pressure/memory`, see `headroom-memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum PressureLevel {
    Normal,
    Warning,
    Critical,
    /// No source on this machine (an old kernel, a container without PSI).
    #[default]
    Unknown,
}

impl PressureLevel {
    /// The macOS dispatch encoding (`DISPATCH_MEMORYPRESSURE_{NORMAL,WARN,CRITICAL}`).
    /// Any other value is not a level we know how to read.
    pub fn from_macos_dispatch(level: i64) -> Self {
        match level {
            1 => Self::Normal,
            2 => Self::Warning,
            4 => Self::Critical,
            _ => Self::Unknown,
        }
    }

    /// The worse of two readings. `Unknown` says nothing, so any real
    /// reading is worse than it; it is the answer only when both are.
    pub fn worst(self, other: Self) -> Self {
        match (self, other) {
            (Self::Unknown, x) | (x, Self::Unknown) => x,
            (a, b) => a.max(b),
        }
    }

    /// The lower-case name used in JSON and in the UI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Warning => "warning",
            Self::Critical => "critical",
            Self::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for PressureLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_reading_wins_and_unknown_says_nothing() {
        use PressureLevel::*;
        assert_eq!(Normal.worst(Critical), Critical);
        assert_eq!(Warning.worst(Normal), Warning);
        assert_eq!(Unknown.worst(Warning), Warning);
        assert_eq!(Normal.worst(Unknown), Normal);
        assert_eq!(Unknown.worst(Unknown), Unknown);
    }

    #[test]
    fn macos_dispatch_levels_map_one_two_four() {
        assert_eq!(PressureLevel::from_macos_dispatch(1), PressureLevel::Normal);
        assert_eq!(PressureLevel::from_macos_dispatch(2), PressureLevel::Warning);
        assert_eq!(PressureLevel::from_macos_dispatch(4), PressureLevel::Critical);
        for other in [0, 3, 8, -1] {
            assert_eq!(PressureLevel::from_macos_dispatch(other), PressureLevel::Unknown);
        }
    }

    #[test]
    fn serializes_as_snake_case_names() {
        assert_eq!(serde_json::to_string(&PressureLevel::Warning).ok().as_deref(), Some("\"warning\""));
        assert_eq!(PressureLevel::Critical.to_string(), "critical");
    }
}
