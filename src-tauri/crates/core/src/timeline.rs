//! The memory timeline's vocabulary and its write rule: a reading held over
//! a span of time (what the store keeps and the live graph draws), and
//! [`TimelineRecorder`], which decides when a reading is worth a row, so an
//! idle app writes nothing while nothing changes.

use serde::{Deserialize, Serialize};

use crate::pressure::PressureLevel;

/// While something is going on (the popover is open or an answer runs), one
/// row per this much time: the graph's resolution after a restart.
pub const ACTIVE_ROW_MS: u64 = 10_000;
/// While idle, readings are folded over this much time before the recorder
/// looks at them, and written only if they differ from the last row.
pub const IDLE_ROW_MS: u64 = 60_000;
/// While idle and unchanged, the last row's span is extended in memory and
/// written at most this often: after a crash the graph shows a gap, not a
/// made-up reading, for at most this long.
pub const IDLE_HEARTBEAT_MS: u64 = 10 * 60_000;
/// Swap that moved by at least this much is a change worth a row.
pub const SWAP_STEP_BYTES: u64 = 64 << 20;
/// Used memory that moved by at least this much is a change worth a row.
/// Large, because other programs move it all the time: the live graph is
/// about the budget (GBs), not about a browser tab.
pub const USED_STEP_BYTES: u64 = 1 << 30;
/// Two points further apart than their spans plus this are a gap in the
/// graph (the app was not running, or the machine slept).
pub const GAP_SLACK_MS: u64 = 2_500;

/// Rank of a pressure level for "worse than": unknown < normal < warning < critical.
/// (The enum's derived order puts `Unknown` last.)
pub fn pressure_rank(level: PressureLevel) -> u8 {
    match level {
        PressureLevel::Unknown => 0,
        PressureLevel::Normal => 1,
        PressureLevel::Warning => 2,
        PressureLevel::Critical => 3,
    }
}

/// The worse of two levels (a known level beats unknown).
pub fn worse(a: PressureLevel, b: PressureLevel) -> PressureLevel {
    if pressure_rank(b) > pressure_rank(a) {
        b
    } else {
        a
    }
}

/// The machine's memory over `[at_ms, at_ms + span_ms)`: the worst of the
/// readings in it (least available, most used and swap, highest pressure),
/// so a short spike is never averaged away. Bytes; times in Unix ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct MemoryPoint {
    pub at_ms: u64,
    pub span_ms: u64,
    pub total_bytes: u64,
    pub available_bytes: u64,
    pub used_bytes: u64,
    pub swap_total_bytes: u64,
    pub swap_used_bytes: u64,
    pub process_rss_bytes: u64,
    pub pressure: PressureLevel,
}

impl MemoryPoint {
    /// When the span ends.
    pub fn end_ms(&self) -> u64 {
        self.at_ms.saturating_add(self.span_ms)
    }

    /// Folds in a reading taken later: the span grows to cover it and each
    /// figure keeps its worst value (totals take the newer value).
    pub fn absorb(&mut self, later: &MemoryPoint) {
        let end = self.end_ms().max(later.end_ms());
        self.at_ms = self.at_ms.min(later.at_ms);
        self.span_ms = end - self.at_ms;
        self.total_bytes = later.total_bytes;
        self.swap_total_bytes = later.swap_total_bytes;
        self.available_bytes = self.available_bytes.min(later.available_bytes);
        self.used_bytes = self.used_bytes.max(later.used_bytes);
        self.swap_used_bytes = self.swap_used_bytes.max(later.swap_used_bytes);
        self.process_rss_bytes = self.process_rss_bytes.max(later.process_rss_bytes);
        self.pressure = worse(self.pressure, later.pressure);
    }

    /// Whether `next` differs enough from this one to be worth a row of its
    /// own: another pressure level, swap moved by [`SWAP_STEP_BYTES`], used
    /// by [`USED_STEP_BYTES`], other totals, or a gap between them.
    pub fn differs_from(&self, next: &MemoryPoint) -> bool {
        self.pressure != next.pressure
            || self.swap_used_bytes.abs_diff(next.swap_used_bytes) >= SWAP_STEP_BYTES
            || self.used_bytes.abs_diff(next.used_bytes) >= USED_STEP_BYTES
            || self.total_bytes != next.total_bytes
            || self.swap_total_bytes != next.swap_total_bytes
            || is_gap(self, next)
    }
}

/// Whether the graph must break its lines between two consecutive points.
pub fn is_gap(before: &MemoryPoint, after: &MemoryPoint) -> bool {
    after.at_ms > before.end_ms().saturating_add(GAP_SLACK_MS)
}

/// Decides which readings become rows of the stored timeline.
///
/// Readings are folded into an open row, closed after [`ACTIVE_ROW_MS`]
/// while active or [`IDLE_ROW_MS`] while idle. A closed row is written when
/// active, or when it differs from the last written row; an unchanged idle
/// row only stretches the last row's span, which is written every
/// [`IDLE_HEARTBEAT_MS`]. The first reading, and a reading whose pressure
/// level differs from the row before it or whose swap moved by
/// [`SWAP_STEP_BYTES`], is written at once as the start of a new row: a warning is on record even if the app
/// dies a second later. Every write is an upsert keyed by the row's start
/// (the store folds it worst-of into what is there).
#[derive(Debug, Clone, Default)]
pub struct TimelineRecorder {
    open: Option<MemoryPoint>,
    /// The last row written, as it stands in memory (maybe stretched since).
    last: Option<MemoryPoint>,
    /// The end of `last` as it was last written.
    written_end_ms: u64,
}

impl TimelineRecorder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one reading (`span_ms` = the sampler's period when it was
    /// taken); returns the rows to upsert, oldest first (usually none).
    pub fn push(&mut self, reading: MemoryPoint, active: bool) -> Vec<MemoryPoint> {
        let mut out = Vec::new();
        // The first reading of a process is a change too: it is on record at once.
        let reference = self.open.or(self.last);
        let changed = reference.is_none_or(|r| {
            r.pressure != reading.pressure || r.swap_used_bytes.abs_diff(reading.swap_used_bytes) >= SWAP_STEP_BYTES
        });
        let gap = self.open.is_some_and(|open| is_gap(&open, &reading));
        if changed || gap {
            if let Some(open) = self.open.take() {
                out.extend(self.close(open, active));
            }
            self.open = Some(reading);
            if changed {
                self.last = Some(reading);
                self.written_end_ms = reading.end_ms();
                out.push(reading);
            }
            return out;
        }
        let open = self.open.get_or_insert(reading);
        open.absorb(&reading);
        let limit = if active { ACTIVE_ROW_MS } else { IDLE_ROW_MS };
        if open.span_ms >= limit {
            let closed = *open;
            self.open = None;
            out.extend(self.close(closed, active));
        }
        out
    }

    /// The open row and any unwritten stretch of the last one, for a clean
    /// shutdown; the recorder starts over afterwards.
    pub fn flush(&mut self) -> Vec<MemoryPoint> {
        let mut out = Vec::new();
        if let Some(last) = self.last {
            if last.end_ms() > self.written_end_ms {
                out.push(last);
            }
        }
        if let Some(open) = self.open.take() {
            out.push(open);
        }
        *self = Self::default();
        out
    }

    fn close(&mut self, row: MemoryPoint, active: bool) -> Option<MemoryPoint> {
        if let Some(last) = &mut self.last {
            // The same row (its first reading was written at once), or an
            // idle row that says nothing new: the last row grows over it.
            if last.at_ms == row.at_ms || (!active && !last.differs_from(&row)) {
                last.absorb(&row);
                if active || last.end_ms().saturating_sub(self.written_end_ms) >= IDLE_HEARTBEAT_MS {
                    self.written_end_ms = last.end_ms();
                    return Some(*last);
                }
                return None;
            }
        }
        self.last = Some(row);
        self.written_end_ms = row.end_ms();
        Some(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn reading(at_s: u64, span_s: u64, used_gib: f64, swap_mib: u64, pressure: PressureLevel) -> MemoryPoint {
        let used = (used_gib * GIB as f64) as u64;
        MemoryPoint {
            at_ms: at_s * 1000,
            span_ms: span_s * 1000,
            total_bytes: 24 * GIB,
            available_bytes: 24 * GIB - used,
            used_bytes: used,
            swap_total_bytes: 2 * GIB,
            swap_used_bytes: swap_mib * MIB,
            process_rss_bytes: 100 * MIB,
            pressure,
        }
    }

    #[test]
    fn absorbing_keeps_the_worst_and_covers_both_spans() {
        let mut a = reading(100, 1, 10.0, 0, PressureLevel::Warning);
        a.absorb(&reading(101, 1, 12.0, 5, PressureLevel::Normal));
        a.absorb(&reading(102, 1, 11.0, 3, PressureLevel::Critical));
        assert_eq!((a.at_ms, a.span_ms, a.end_ms()), (100_000, 3_000, 103_000));
        assert_eq!((a.used_bytes, a.available_bytes), (12 * GIB, 12 * GIB));
        assert_eq!((a.swap_used_bytes, a.pressure), (5 * MIB, PressureLevel::Critical));
        assert_eq!(worse(PressureLevel::Unknown, PressureLevel::Normal), PressureLevel::Normal);
        assert_eq!(worse(PressureLevel::Warning, PressureLevel::Unknown), PressureLevel::Warning);
    }

    #[test]
    fn active_readings_make_one_row_per_ten_seconds() {
        let mut r = TimelineRecorder::new();
        let rows: Vec<MemoryPoint> =
            (0..35).flat_map(|s| r.push(reading(1_000 + s, 1, 8.0, 0, PressureLevel::Normal), true)).collect();
        // The first reading at once, then its row when it closes, then a row per 10 s.
        assert_eq!(rows.len(), 4, "{rows:?}");
        assert_eq!((rows[0].at_ms, rows[0].span_ms), (1_000_000, 1_000));
        assert_eq!((rows[1].at_ms, rows[1].span_ms), (1_000_000, 10_000));
        assert_eq!(rows[2].at_ms, 1_010_000);
        assert_eq!(r.flush().len(), 1, "the open row of 5 s");
    }

    #[test]
    fn idle_and_unchanged_writes_nothing_until_the_heartbeat() {
        let mut r = TimelineRecorder::new();
        // An hour of readings every 5 s, used wobbling by 300 MB.
        let mut rows = Vec::new();
        for k in 0..720u64 {
            let used = 8.0 + if k % 2 == 0 { 0.0 } else { 0.3 };
            rows.extend(r.push(reading(10_000 + k * 5, 5, used, 0, PressureLevel::Normal), false));
        }
        // The first reading, then only a heartbeat every 10 minutes stretching its row.
        assert!((1..=1 + 6).contains(&rows.len()), "{} rows in an idle hour", rows.len());
        assert!(rows.iter().all(|row| row.at_ms == 10_000_000), "every write is the same row, stretched: {rows:?}");
        let last = rows.last().copied().unwrap_or_default();
        assert!(last.span_ms >= 50 * 60_000, "the heartbeat keeps the coverage: {last:?}");
        assert_eq!(last.used_bytes, (8.3 * GIB as f64) as u64, "the worst reading is kept");
    }

    #[test]
    fn idle_changes_are_written_and_a_pressure_change_at_once() {
        let mut r = TimelineRecorder::new();
        let mut rows = Vec::new();
        for k in 0..24u64 {
            rows.extend(r.push(reading(k * 5, 5, 8.0, 0, PressureLevel::Normal), false));
        }
        assert_eq!(rows.len(), 1, "the first reading, then nothing new for two minutes");
        // Swap grows by 100 MiB: written as soon as it is seen.
        rows.extend(r.push(reading(120, 5, 8.0, 100, PressureLevel::Normal), false));
        assert_eq!(rows.len(), 2);
        // A warning: the row before it closes at once, then the warning is on record within a minute.
        rows.extend(r.push(reading(125, 5, 8.0, 100, PressureLevel::Warning), false));
        for k in 0..12u64 {
            rows.extend(r.push(reading(130 + k * 5, 5, 8.0, 100, PressureLevel::Warning), false));
        }
        assert!(rows.iter().any(|row| row.pressure == PressureLevel::Warning), "{rows:?}");
        // Used memory jumping by 2 GiB while idle is a change too.
        let before = rows.len();
        for k in 0..13u64 {
            rows.extend(r.push(reading(200 + k * 5, 5, 10.0, 100, PressureLevel::Warning), false));
        }
        assert!(rows.len() > before, "a 2 GiB jump is written");
    }

    #[test]
    fn a_gap_closes_the_row_and_is_seen_by_the_graph() {
        let mut r = TimelineRecorder::new();
        let mut rows = Vec::new();
        for s in 0..5u64 {
            rows.extend(r.push(reading(s, 1, 8.0, 0, PressureLevel::Normal), true));
        }
        // The machine slept for an hour.
        rows.extend(r.push(reading(3_600, 1, 8.0, 0, PressureLevel::Normal), true));
        assert_eq!(rows.len(), 2, "the first reading, then its row closed by the gap");
        assert_eq!((rows[1].at_ms, rows[1].span_ms), (0, 5_000));
        assert!(is_gap(&rows[1], &reading(3_600, 1, 8.0, 0, PressureLevel::Normal)));
        assert!(!is_gap(&rows[1], &reading(6, 1, 8.0, 0, PressureLevel::Normal)));
    }

    #[test]
    fn pressure_ranks_put_unknown_lowest() {
        let ranks: Vec<u8> =
            [PressureLevel::Unknown, PressureLevel::Normal, PressureLevel::Warning, PressureLevel::Critical]
                .into_iter()
                .map(pressure_rank)
                .collect();
        assert_eq!(ranks, vec![0, 1, 2, 3]);
        let json = serde_json::to_value(reading(1, 1, 1.0, 0, PressureLevel::Normal)).unwrap_or_default();
        assert!(json.get("spanMs").is_some() && json.get("swapUsedBytes").is_some(), "{json}");
    }
}
