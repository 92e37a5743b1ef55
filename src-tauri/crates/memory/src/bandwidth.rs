//! Memory bandwidth, measured the way STREAM does: copy (`c = b`) and
//! triad (`a = b + s·c`) over f64 arrays each at least 4× the last-level
//! cache, split across threads, best of k passes, bytes counted as read +
//! written (16 per element for copy, 24 for triad). This is the roofline's
//! denominator: decoding a token must read every weight once, so no
//! decoder beats bandwidth ÷ bytes per token.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{MemoryError, Result};

/// Array size when the last-level cache is unknown.
pub const DEFAULT_ARRAY_BYTES: u64 = 256 << 20;
/// STREAM's rule: each array at least this many times the last-level cache.
pub const CACHE_MULTIPLE: u64 = 4;
/// The three arrays together stay under this fraction of available memory,
/// so a measurement cannot push the machine into swap.
const MAX_AVAILABLE_FRACTION: u64 = 4;

/// How to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BandwidthOptions {
    /// Bytes of each of the three arrays; `None`: 4 × the last-level cache
    /// (256 MiB if unknown), capped at a quarter of available memory for all three.
    pub array_bytes: Option<u64>,
    /// `None`: every hardware thread.
    pub threads: Option<usize>,
    /// Passes per kernel; the best (fastest) one is reported, as STREAM does.
    pub passes: usize,
}

impl Default for BandwidthOptions {
    fn default() -> Self {
        Self { array_bytes: None, threads: None, passes: 5 }
    }
}

/// The measurement and how it was made.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct BandwidthReport {
    /// Best copy rate, GB/s (10^9 bytes per second).
    pub copy_gb_per_s: f64,
    /// Best triad rate, GB/s. Plain loops: in a debug build this is the
    /// compiler's unoptimized code, well below the memory's rate.
    pub triad_gb_per_s: f64,
    pub array_bytes: u64,
    pub threads: usize,
    pub passes: usize,
    /// The cache the array size was derived from, if it could be read.
    pub last_level_cache_bytes: Option<u64>,
    /// Whether the arrays were made smaller than 4 × that cache to stay
    /// within available memory (the figure may then be inflated by the cache).
    pub capped_by_memory: bool,
}

impl BandwidthReport {
    /// The figure the roofline divides by: the faster kernel (a debug build
    /// runs the triad loop unoptimized, while the copy is always a memcpy).
    pub fn best_gb_per_s(&self) -> f64 {
        self.copy_gb_per_s.max(self.triad_gb_per_s)
    }
}

/// Measures copy and triad bandwidth.
pub fn measure(options: &BandwidthOptions) -> Result<BandwidthReport> {
    if options.passes == 0 {
        return Err(MemoryError::InvalidOption { name: "passes", reason: "must be at least 1".into() });
    }
    let llc = last_level_cache_bytes();
    let (array_bytes, capped_by_memory) = match options.array_bytes {
        Some(b) => (b, false),
        None => {
            let wanted = llc.map_or(DEFAULT_ARRAY_BYTES, |c| (c * CACHE_MULTIPLE).max(DEFAULT_ARRAY_BYTES / 4));
            let cap = crate::read()?.available / MAX_AVAILABLE_FRACTION / 3;
            (wanted.min(cap), wanted > cap)
        }
    };
    let threads = options
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
        .max(1);
    let elems = usize::try_from(array_bytes / 8).unwrap_or(usize::MAX);
    // Each thread needs a chunk of at least a few cache lines to be meaningful.
    if elems < threads * 64 {
        return Err(MemoryError::InvalidOption {
            name: "array_bytes",
            reason: format!(
                "{array_bytes} bytes is too small for {threads} threads (at least {} needed)",
                threads * 64 * 8
            ),
        });
    }
    let chunk = elems.div_ceil(threads);

    let mut a = vec![0.0f64; elems];
    let mut b = vec![0.0f64; elems];
    let mut c = vec![0.0f64; elems];
    // First touch from the threads that will use each chunk (pages land in
    // the right NUMA node, and no kernel zero-page shortcut is timed).
    parallel3(&mut a, &mut b, &mut c, chunk, |a, b, c| {
        a.fill(1.0);
        b.fill(2.0);
        c.fill(0.0);
    });

    const SCALAR: f64 = 3.0;
    let mut best_copy = Duration::MAX;
    let mut best_triad = Duration::MAX;
    for _ in 0..options.passes {
        best_copy = best_copy.min(parallel3(&mut a, &mut b, &mut c, chunk, |_, b, c| copy(c, b)));
        best_triad = best_triad.min(parallel3(&mut a, &mut b, &mut c, chunk, |a, b, c| triad(a, b, c, SCALAR)));
    }
    // Check the kernels really ran (STREAM validates its arrays too):
    // b stays 2, so every pass leaves c = 2 (the copy) and a = 2 + 3·2 = 8 (the triad).
    if std::hint::black_box(&a).iter().step_by(4099).any(|&v| v != 8.0) || c.iter().step_by(4099).any(|&v| v != 2.0) {
        return Err(MemoryError::InvalidOption { name: "kernels", reason: "arrays hold unexpected values".into() });
    }
    let rate = |bytes_per_elem: u64, t: Duration| (bytes_per_elem * elems as u64) as f64 / t.as_secs_f64() / 1e9;
    Ok(BandwidthReport {
        copy_gb_per_s: rate(16, best_copy),
        triad_gb_per_s: rate(24, best_triad),
        array_bytes: elems as u64 * 8,
        threads,
        passes: options.passes,
        last_level_cache_bytes: llc,
        capped_by_memory,
    })
}

/// `c = b`: `copy_from_slice` is a memcpy, fast in every build profile
/// (an unoptimized debug build's own loops would measure the compiler, not memory).
fn copy(c: &mut [f64], b: &[f64]) {
    c.copy_from_slice(b);
    std::hint::black_box(c);
}

/// `a = b + s·c`.
fn triad(a: &mut [f64], b: &[f64], c: &[f64], s: f64) {
    for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
        *a = *b + s * *c;
    }
    std::hint::black_box(a);
}

/// Runs `kernel` on matching chunks of the three arrays, one thread per
/// chunk, and returns the wall time from before the first thread starts to
/// after the last one ends (what STREAM times).
fn parallel3(
    a: &mut [f64],
    b: &mut [f64],
    c: &mut [f64],
    chunk: usize,
    kernel: impl Fn(&mut [f64], &mut [f64], &mut [f64]) + Sync,
) -> Duration {
    let kernel = &kernel;
    let started = Instant::now();
    std::thread::scope(|s| {
        for ((a, b), c) in a.chunks_mut(chunk).zip(b.chunks_mut(chunk)).zip(c.chunks_mut(chunk)) {
            s.spawn(move || kernel(a, b, c));
        }
    });
    started.elapsed()
}

/// The largest data or unified cache this machine reports, bytes.
pub fn last_level_cache_bytes() -> Option<u64> {
    #[cfg(target_os = "macos")]
    {
        macos_cache_bytes()
    }
    #[cfg(not(target_os = "macos"))]
    {
        linux_cache_bytes(Path::new("/sys/devices/system/cpu/cpu0/cache"))
    }
}

/// Reads `index*/{level,type,size}` under a sysfs cache folder and returns
/// the size of the highest-level data or unified cache.
pub fn linux_cache_bytes(dir: &Path) -> Option<u64> {
    let mut best: Option<(u32, u64)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let read = |name: &str| std::fs::read_to_string(path.join(name)).ok().map(|s| s.trim().to_owned());
        if read("type").as_deref() == Some("Instruction") {
            continue;
        }
        let (Some(level), Some(size)) =
            (read("level").and_then(|l| l.parse().ok()), read("size").and_then(|s| parse_size(&s)))
        else {
            continue;
        };
        if best.is_none_or(|(l, s)| (level, size) > (l, s)) {
            best = Some((level, size));
        }
    }
    best.map(|(_, size)| size)
}

/// sysfs cache sizes: "48K", "2048K", "32M", or plain bytes.
fn parse_size(s: &str) -> Option<u64> {
    let (digits, unit) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits.trim().parse::<u64>().ok().map(|v| v * unit)
}

/// The performance cores' L2 (Apple silicon's largest cache the OS names;
/// the system-level cache is not reported, which the 256 MiB floor covers).
/// `sysctl` the command, not the call: this crate keeps its unsafe code in macos.rs.
#[cfg(target_os = "macos")]
fn macos_cache_bytes() -> Option<u64> {
    ["hw.perflevel0.l2cachesize", "hw.l2cachesize"].iter().find_map(|key| {
        let out = std::process::Command::new("/usr/sbin/sysctl").args(["-n", key]).output().ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse::<u64>().ok().filter(|&v| v > 0)
    })
}

/// What the machine is, to label saved benchmark results with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct MachineInfo {
    /// The CPU's brand string ("Apple M2 Pro", "Intel(R) Xeon(R) …").
    pub cpu: String,
    pub cpu_cores: u32,
    pub total_memory_bytes: u64,
    /// "macos 15.1", "linux 6.1.0" …
    pub os: String,
    pub arch: &'static str,
}

/// Reads the machine's description.
pub fn machine_info() -> Result<MachineInfo> {
    let mut sys = sysinfo::System::new()?;
    sys.refresh_cpu_list(sysinfo::CpuRefreshKind::nothing());
    sys.refresh_memory_specifics(sysinfo::MemoryRefreshKind::nothing().with_ram());
    let cpu = sys.cpus().first().map(|c| c.brand().trim().to_owned()).unwrap_or_default();
    let cpu_cores = u32::try_from(sys.cpus().len()).unwrap_or(u32::MAX);
    let os = format!(
        "{} {}",
        std::env::consts::OS,
        sysinfo::System::os_version().or_else(|_| sysinfo::System::kernel_version()).unwrap_or_default()
    );
    Ok(MachineInfo {
        cpu,
        cpu_cores,
        total_memory_bytes: sys.total_memory(),
        os: os.trim().to_owned(),
        arch: std::env::consts::ARCH,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_measurement_gives_plausible_rates_and_says_how_it_was_made() {
        // Small arrays: this process's RSS test runs alongside and must not
        // see tens of MB come and go (real measurements use far larger ones).
        let r = measure(&BandwidthOptions { array_bytes: Some(1 << 20), threads: Some(2), passes: 2 }).unwrap();
        assert_eq!((r.array_bytes, r.threads, r.passes, r.capped_by_memory), (1 << 20, 2, 2, false));
        // Any machine this runs on moves between 0.1 and 10 000 GB/s.
        for rate in [r.copy_gb_per_s, r.triad_gb_per_s] {
            assert!(rate > 0.1 && rate < 10_000.0, "{r:?}");
        }
    }

    #[test]
    fn bad_options_are_refused_with_the_reason() {
        let e = measure(&BandwidthOptions { array_bytes: Some(1024), threads: Some(4), passes: 1 }).err();
        assert!(e.map(|e| e.to_string()).unwrap_or_default().contains("too small for 4 threads"));
        let e = measure(&BandwidthOptions { passes: 0, ..BandwidthOptions::default() }).err();
        assert!(e.map(|e| e.to_string()).unwrap_or_default().contains("passes"));
    }

    #[test]
    fn the_sysfs_cache_reader_takes_the_highest_data_level() {
        let dir = headroom_test_support::scratch("llc");
        let write = |index: &str, level: &str, kind: &str, size: &str| {
            let d = dir.join(index);
            std::fs::create_dir_all(&d).unwrap();
            for (name, value) in [("level", level), ("type", kind), ("size", size)] {
                std::fs::write(d.join(name), format!("{value}\n")).unwrap();
            }
        };
        write("index0", "1", "Data", "48K");
        write("index1", "1", "Instruction", "32K");
        write("index2", "2", "Unified", "2048K");
        write("index3", "3", "Unified", "32M");
        assert_eq!(linux_cache_bytes(&dir), Some(32 << 20));
        write("index4", "4", "Instruction", "64M");
        assert_eq!(linux_cache_bytes(&dir), Some(32 << 20), "an instruction cache is not where data streams");
        assert_eq!(linux_cache_bytes(&dir.join("absent")), None);
        assert_eq!((parse_size("1536"), parse_size("x")), (Some(1536), None));
    }

    #[test]
    fn the_machine_is_described() {
        let m = machine_info().unwrap();
        assert!(m.cpu_cores >= 1 && m.total_memory_bytes > 0 && !m.os.is_empty(), "{m:?}");
    }
}
