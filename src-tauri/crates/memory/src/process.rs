//! This process's resident set and its peak, which the fit's calibration
//! measures each load and turn by (`headroom_engine::meter`).
//!
//! Linux keeps the peak as `VmHWM` in /proc/self/status and resets it to
//! the current resident set when "5" is written to /proc/self/clear_refs
//! (proc(5), since Linux 4.0), so every turn gets a peak of its own. macOS
//! has no resettable peak (`ru_maxrss` only grows), and there MLX's
//! buffers are Metal's, which MLX's own peak counts: the engine uses that.

/// The resident set now, bytes.
pub fn resident_bytes() -> Option<u64> {
    status_kib("VmRSS:").map(|k| k.saturating_mul(1024))
}

/// The peak resident set since the last [`reset_peak_resident`] (or the
/// process's start), bytes.
pub fn peak_resident_bytes() -> Option<u64> {
    status_kib("VmHWM:").map(|k| k.saturating_mul(1024))
}

/// Starts the peak anew from the resident set now; false where the OS
/// cannot (the next peak is then the whole process's, which errs high).
pub fn reset_peak_resident() -> bool {
    #[cfg(target_os = "linux")]
    {
        std::fs::write("/proc/self/clear_refs", "5").is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(target_os = "linux")]
fn status_kib(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_kib(&status, key)
}

#[cfg(not(target_os = "linux"))]
fn status_kib(_key: &str) -> Option<u64> {
    None
}

/// `key`'s figure in a /proc status text ("VmHWM:     320608 kB").
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].trim().strip_suffix("kB")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_parse_and_odd_ones_do_not() {
        let status = "Name:\tx\nVmHWM:\t  320608 kB\nVmRSS:\t   13568 kB\nVmBad:\t 12 pages\n";
        assert_eq!(parse_kib(status, "VmHWM:"), Some(320_608));
        assert_eq!(parse_kib(status, "VmRSS:"), Some(13_568));
        assert_eq!(parse_kib(status, "VmBad:"), None);
        assert_eq!(parse_kib(status, "VmSwap:"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_peak_sees_a_freed_allocation_until_it_is_reset() {
        let _alone = crate::RESIDENT_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        assert!(reset_peak_resident());
        let before = peak_resident_bytes().unwrap_or(0);
        let mut big = vec![0u8; 64 << 20];
        // Touch every page, so it is resident.
        for i in (0..big.len()).step_by(4096) {
            big[i] = 1;
        }
        std::hint::black_box(&big);
        drop(big);
        let peak = peak_resident_bytes().unwrap_or(0);
        assert!(peak >= before + (60 << 20), "peak {peak} before {before}");
        reset_peak_resident();
        let after = peak_resident_bytes().unwrap_or(u64::MAX);
        assert!(after + (32 << 20) < peak, "the reset peak {after} still holds the freed 64 MB ({peak})");
        assert!(resident_bytes().is_some_and(|r| r <= after + (8 << 20)));
    }
}
