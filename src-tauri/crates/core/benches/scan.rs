//! How long `sensitive::scan` takes on 1 MB inputs built to be its
//! worst cases: long runs of what each detector looks for (`pwd=`, `sk-`,
//! digits and dots, `/home/`, `smb://`, private-key headers, e-mail `@`s),
//! plus a plain English paste as the baseline. Prints one line per input
//! (best of 5 runs, release build) and fails if any takes 100 ms or more.
//!
//! `cargo bench -p headroom-core --bench scan` (`SCAN_BENCH_BYTES=65536`
//! for other sizes, e.g. to see how the time grows with the input;
//! `SCAN_BENCH_ONLY=digits` for the inputs whose name contains that).

use std::io::Write;
use std::time::{Duration, Instant};

use headroom_core::sensitive::scan;

/// 1 MiB unless `SCAN_BENCH_BYTES` says otherwise.
fn size() -> usize {
    std::env::var("SCAN_BENCH_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 20)
}

/// `unit` repeated to exactly [`size`] bytes (cut at a char boundary).
fn fill(unit: &str) -> String {
    let bytes = size();
    let mut s = unit.repeat(bytes / unit.len() + 1);
    let mut end = bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s
}

fn inputs() -> Vec<(&'static str, String)> {
    vec![
        ("english prose", fill("The quick brown fox jumps over the lazy dog near the river bank. ")),
        ("pwd= without spaces", fill("pwd=")),
        ("pwd=secret1 pairs", fill("pwd=s3cret9x ")),
        ("sk- without spaces", fill("sk-")),
        ("sk- keys", fill("sk-proj-a1B2c3D4e5F6g7H8i9J0k ")),
        ("digits and dots", fill("1.2.3.4.")),
        ("digits and spaces", fill("1 2 3 4 5 6 7 8 9 ")),
        ("long digit run", fill("1234567890")),
        ("private IPs", fill("10.0.0.1 ")),
        ("phone words + digits", fill("phone 12345678 ")),
        ("mobile numbers", fill("13812345678 ")),
        ("/home/ paths, no spaces", fill("/home/a")),
        ("smb:// without spaces", fill("smb://")),
        ("~/ without spaces", fill("~/")),
        ("private-key headers", fill("-----BEGIN RSA PRIVATE KEY-----")),
        ("@ runs", fill("a.b@")),
        ("e-mails", fill("jane.doe@example.com ")),
        (".corp hosts", fill("build.corp ")),
        ("token=, no spaces", fill("token=")),
        ("key words + hex", fill("key deadbeefdeadbeefdeadbeefdeadbeef ")),
        ("bearer tokens", fill("bearer ")),
        ("mixed", fill("pwd=x sk-1 1.2.3.4 10.0.0.1 a@b.co /home/u ~/x smb://s http://wiki 138 1234 5678 ")),
    ]
}

/// This thread's CPU time so far, where the OS says (Linux); else `None`.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok().map(Duration::from_nanos)
}

/// One scan's CPU time (wall time where that is unknown) and wall time.
fn timed(text: &str) -> (usize, Duration, Duration) {
    let (cpu, wall) = (cpu_time(), Instant::now());
    let found = scan(text).len();
    let wall = wall.elapsed();
    (found, cpu.zip(cpu_time()).map_or(wall, |(a, b)| b.saturating_sub(a)), wall)
}

fn main() {
    let mut worst = Duration::ZERO;
    let clock = if cpu_time().is_some() { "cpu" } else { "wall" };
    println!(
        "{:<26} {:>9} {:>14} {:>10} {:>8}",
        format!("input ({} bytes)", size()),
        "findings",
        format!("{clock}, best of 5"),
        "wall",
        "MB/s"
    );
    let only = std::env::var("SCAN_BENCH_ONLY").unwrap_or_default();
    for (name, text) in inputs().into_iter().filter(|(name, _)| name.contains(only.as_str())) {
        let (mut best, mut best_wall, mut found) = (Duration::MAX, Duration::MAX, 0);
        for _ in 0..5 {
            let (n, cpu, wall) = timed(&text);
            (found, best, best_wall) = (n, best.min(cpu), best_wall.min(wall));
        }
        worst = worst.max(best);
        let mbs = text.len() as f64 / 1e6 / best.as_secs_f64();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!("{name:<26} {found:>9} {:>11.1} ms {:>7.1} ms {mbs:>8.0}", ms(best), ms(best_wall));
        let _ = std::io::stdout().flush();
    }
    println!("worst: {:.1} ms ({clock})", worst.as_secs_f64() * 1e3);
    if size() >= 1 << 20 && worst >= Duration::from_millis(100) {
        eprintln!("scan took {:.0} ms on a 1 MiB input; the target is well under 100 ms", worst.as_secs_f64() * 1e3);
        std::process::exit(1);
    }
}
