//! `headroom bandwidth`: this machine's memory bandwidth, STREAM-style (copy
//! and triad over arrays far larger than the caches, all threads, best of
//! k), and on Apple silicon the chip's rated figure next to it.

use std::io::Write;

use clap::Args;
use headroom_core::bench::rated_bandwidth;
use headroom_memory::bandwidth::{self, BandwidthOptions};
use serde_json::json;

use super::CliError;

#[derive(Debug, Clone, Args)]
pub struct BandwidthArgs {
    /// Size of each of the three arrays, MiB (default: 4 × the last-level cache, at least 64 MiB).
    #[arg(long, value_name = "MIB")]
    pub array_mib: Option<u64>,
    /// Threads (default: every hardware thread).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Passes per kernel; the best is reported.
    #[arg(long, default_value_t = 5)]
    pub passes: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &BandwidthArgs) -> Result<(), CliError> {
    let stdout = std::io::stdout();
    measure(args, &mut stdout.lock())
}

pub(crate) fn measure(args: &BandwidthArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let options =
        BandwidthOptions { array_bytes: args.array_mib.map(|m| m << 20), threads: args.threads, passes: args.passes };
    let report = bandwidth::measure(&options)?;
    let machine = bandwidth::machine_info()?;
    let rated = rated_bandwidth(&machine.cpu, machine.cpu_cores);
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string(&json!({ "measured": report, "rated": rated, "machine": machine }))?
        )?;
        return Ok(());
    }
    writeln!(out, "copy   {:8.1} GB/s", report.copy_gb_per_s)?;
    writeln!(out, "triad  {:8.1} GB/s", report.triad_gb_per_s)?;
    let llc = report.last_level_cache_bytes.map_or_else(|| "unknown".to_owned(), |b| format!("{} MiB", b >> 20));
    writeln!(
        out,
        "{} MiB per array × 3, {} threads, best of {} passes; last-level cache {llc}{}; bytes counted read + written, as STREAM",
        report.array_bytes >> 20,
        report.threads,
        report.passes,
        if report.capped_by_memory { " (arrays capped to a quarter of available memory)" } else { "" },
    )?;
    match rated {
        Some(r) => writeln!(out, "rated  {:8.1} GB/s (Apple {}: {})", r.gb_per_s, r.chip, r.source)?,
        None => writeln!(out, "rated: no published figure for {} ({} cores)", machine.cpu, machine.cpu_cores)?,
    }
    Ok(())
}
