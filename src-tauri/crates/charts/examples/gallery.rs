//! Writes every chart, with made-up but plausible numbers, in both themes to
//! a folder, to look at them: `cargo run -p headroom-charts --example gallery -- DIR`
//! then e.g. `rsvg-convert -o DIR/session-light.png DIR/session-light.svg`.

use std::path::PathBuf;

use headroom_charts::{
    bench_depth_svg, live_svg, session_svg, ChartStyle, DepthPoint, MemoryPoint, Theme, TpsPoint, TurnPoint,
};
use headroom_core::pressure::PressureLevel;

const GIB: f64 = (1u64 << 30) as f64;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: gallery DIR")?);
    std::fs::create_dir_all(&dir)?;
    // A 7B 4-bit model: decode slows and TTFT grows as the context fills;
    // turn 5 was a one-token answer, so it has no decode rate.
    let turns: Vec<TurnPoint> = (1..=12u32)
        .map(|turn| {
            let ctx = (turn - 1) * 640 + turn * turn * 20;
            let c = f64::from(ctx);
            TurnPoint {
                turn,
                context_tokens: ctx,
                decode_tps: (turn != 5).then(|| 62.0 / (1.0 + c / 9_000.0)),
                ttft_ms: Some(180.0 + c * 0.11),
            }
        })
        .collect();
    // Three minutes at 1 Hz on a 32 GB Mac: a 14B model loads at -150 s,
    // memory fills, swap starts at -60 s and decode drops with it.
    let now = 1_800_000_000_000u64;
    let memory: Vec<MemoryPoint> = (0..180u64)
        .map(|i| {
            let t = i as f64;
            let used = 14.0 + (t - 30.0).clamp(0.0, 40.0) * 0.3 + (t - 120.0).max(0.0) * 0.01;
            let swap = ((t - 120.0).max(0.0) * 0.05).min(2.5);
            let pressure = match i {
                0..=109 => PressureLevel::Normal,
                110..=149 => PressureLevel::Warning,
                _ => PressureLevel::Critical,
            };
            MemoryPoint {
                at_ms: now - (179 - i) * 1_000,
                used_bytes: (used * GIB) as u64,
                available_bytes: ((32.0 - used - 1.5) * GIB).max(0.4 * GIB) as u64,
                swap_used_bytes: (swap * GIB) as u64,
                pressure,
            }
        })
        .collect();
    let tps: Vec<TpsPoint> =
        [(-140, 24.0), (-118, 23.1), (-95, 22.8), (-70, 22.0), (-52, 21.4), (-35, 12.3), (-12, 7.9)]
            .iter()
            .map(|&(s, tps): &(i64, f64)| TpsPoint { at_ms: now - (s.unsigned_abs() * 1_000), tps })
            .collect();
    let depths: Vec<DepthPoint> = [0u32, 512, 1024, 2048, 4096, 8192, 16384]
        .iter()
        .map(|&d| {
            let c = f64::from(d);
            DepthPoint {
                depth_tokens: d,
                decode_tps: Some(61.0 / (1.0 + c / 12_000.0)),
                prefill_tps: Some(820.0 / (1.0 + c / 6_000.0)),
            }
        })
        .collect();
    for theme in [Theme::Light, Theme::Dark] {
        let style = ChartStyle::popover(theme);
        std::fs::write(dir.join(format!("session-{theme}.svg")), session_svg(&turns, &style)?)?;
        std::fs::write(dir.join(format!("session-empty-{theme}.svg")), session_svg(&[], &style)?)?;
        std::fs::write(dir.join(format!("live-{theme}.svg")), live_svg(&memory, &tps, &style)?)?;
        std::fs::write(dir.join(format!("bench-{theme}.svg")), bench_depth_svg(&depths, &style)?)?;
    }
    println!("wrote charts to {}", dir.display());
    Ok(())
}
