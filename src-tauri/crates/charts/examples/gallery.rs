//! Writes every chart, with made-up but plausible numbers, in both themes to
//! a folder, to look at them: `cargo run -p headroom-charts --example gallery -- DIR`
//! then e.g. `rsvg-convert -o DIR/session-light.png DIR/session-light.svg`.

use std::path::PathBuf;

use headroom_charts::{bench_depth_svg, live_svg, session_svg, ChartStyle, DepthPoint, LiveData, Theme, TurnPoint};
use headroom_core::pressure::PressureLevel;
use headroom_core::slowdown::{find_stretches, MemoryMark, Policy, RatePoint};
use headroom_core::timeline::MemoryPoint;

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
    // Five minutes at 1 Hz on a 32 GB Mac: a 14B model loads at -250 s,
    // memory fills, swap starts at -120 s and decode drops with it.
    let now = 1_800_000_000_000u64;
    let memory: Vec<MemoryPoint> = (0..300u64)
        .map(|i| {
            let t = i as f64;
            let used = 14.0 + (t - 50.0).clamp(0.0, 40.0) * 0.3 + (t - 180.0).max(0.0) * 0.01;
            let swap = ((t - 180.0).max(0.0) * 0.03).min(2.5);
            let pressure = match i {
                0..=169 => PressureLevel::Normal,
                170..=229 => PressureLevel::Warning,
                _ => PressureLevel::Critical,
            };
            MemoryPoint {
                at_ms: now - (299 - i) * 1_000,
                span_ms: 1_000,
                total_bytes: (32.0 * GIB) as u64,
                used_bytes: (used * GIB) as u64,
                available_bytes: ((32.0 - used - 1.5) * GIB).max(0.4 * GIB) as u64,
                swap_total_bytes: (4.0 * GIB) as u64,
                swap_used_bytes: (swap * GIB) as u64,
                process_rss_bytes: (9.0 * GIB) as u64,
                pressure,
            }
        })
        .collect();
    // Two answers: one before the swap (about 24 tok/s), one that slows
    // from 22 to about 7 tok/s as swap grows.
    let tps: Vec<RatePoint> = (70..130u64)
        .chain(200..280)
        .filter_map(|i| {
            let n = if i < 130 {
                24 - (i % 3) as u32
            } else if i < 225 {
                22
            } else {
                7 + (i % 2) as u32
            };
            RatePoint::from_ms(now - (300 - i) * 1_000, now - (299 - i) * 1_000, n)
        })
        .collect();
    let marks: Vec<MemoryMark> = memory.iter().map(MemoryMark::from).collect();
    let slowdowns = find_stretches(&[], &tps, &marks, &Policy::default());
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
        let live = LiveData {
            end_ms: now,
            window_ms: 300_000,
            memory: &memory,
            rates: &tps,
            slowdowns: &slowdowns,
            budget_bytes: Some((28.0 * GIB) as u64),
        };
        std::fs::write(dir.join(format!("live-{theme}.svg")), live_svg(&live, &ChartStyle::live(theme))?)?;
        std::fs::write(dir.join(format!("bench-{theme}.svg")), bench_depth_svg(&depths, &style)?)?;
    }
    println!("wrote charts to {}", dir.display());
    Ok(())
}
