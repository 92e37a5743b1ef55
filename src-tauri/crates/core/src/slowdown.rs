//! Per-second decode rates of a streaming answer, and slowdown attribution:
//! when an answer's decode rate falls well below the model's own recent
//! rate while swap grows or memory pressure rises, that stretch is blamed on
//! memory and said in words ("slowed by swap: 3.1 → 0.8 tok/s while swap
//! grew 1.2 GB"). Pure: the app feeds it token times and memory readings,
//! the tests feed it recorded or synthetic ones through the same functions.

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::pressure::PressureLevel;
use crate::timeline::{pressure_rank, worse, MemoryPoint};

/// A rate point closes once at least this much time has passed since the
/// last one: one mark per second on the live graph.
pub const RATE_INTERVAL: Duration = Duration::from_secs(1);

/// Per-second decode rates from token arrival times, by the same definition
/// as the answer's decode tok/s (`stats`): the first token is not counted,
/// and each point is the tokens that arrived after the previous point's last
/// token divided by the time between the two. A point closes on the first
/// token at least [`RATE_INTERVAL`] after the last one, so a second with no
/// token gives no point (a gap, never a 0) and the next point spans the
/// longer wait (a slow rate, measured). Summed, the points are the answer's
/// decode rate, (tokens − 1) / (last − first token), except for a last
/// stretch under half a second, which is no point of its own (a rate over a
/// few tokens is noise, and the graph shows one mark a second) unless the
/// answer has no other and it spans a quarter of a second (tokens that
/// arrive in a burst say nothing about a rate).
#[derive(Debug, Clone, Default)]
pub struct DecodeMeter {
    /// When the last point closed (at first, the first token).
    mark: Option<Duration>,
    tokens: u32,
    last: Duration,
    /// Whether a point was given yet.
    emitted: bool,
}

/// Tokens that arrived in `(start, end]`, times from any fixed origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeterPoint {
    pub start: Duration,
    pub end: Duration,
    pub tokens: u32,
}

impl MeterPoint {
    pub fn tps(&self) -> f64 {
        f64::from(self.tokens) / (self.end - self.start).as_secs_f64()
    }
}

impl DecodeMeter {
    pub fn new() -> Self {
        Self::default()
    }

    /// A token became available at `at`; returns a point when one closes.
    pub fn token(&mut self, at: Duration) -> Option<MeterPoint> {
        let Some(mark) = self.mark else {
            self.mark = Some(at);
            self.last = at;
            return None;
        };
        let at = at.max(self.last);
        self.tokens += 1;
        self.last = at;
        if at.saturating_sub(mark) < RATE_INTERVAL {
            return None;
        }
        let point = MeterPoint { start: mark, end: at, tokens: self.tokens };
        self.mark = Some(at);
        self.tokens = 0;
        self.emitted = true;
        Some(point)
    }

    /// The answer ended: the tokens since the last point, if they span at
    /// least half a second or the answer has no point yet.
    pub fn finish(&mut self) -> Option<MeterPoint> {
        let mark = self.mark?;
        if self.tokens == 0 || self.last <= mark {
            return None;
        }
        let least = if self.emitted { RATE_INTERVAL / 2 } else { RATE_INTERVAL / 4 };
        if self.last - mark < least {
            self.tokens = 0;
            return None;
        }
        let point = MeterPoint { start: mark, end: self.last, tokens: self.tokens };
        self.mark = Some(self.last);
        self.tokens = 0;
        self.emitted = true;
        Some(point)
    }
}

/// One decode-rate point of an answer on the wall clock (Unix ms): `tokens`
/// arrived in `(start_ms, at_ms]`, at `tps`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct RatePoint {
    pub start_ms: u64,
    pub at_ms: u64,
    pub tokens: u32,
    pub tps: f64,
}

impl RatePoint {
    /// A point from wall-clock ms (recorded or synthetic readings); the rate
    /// is computed from them. `None` for an empty or backwards interval.
    pub fn from_ms(start_ms: u64, at_ms: u64, tokens: u32) -> Option<Self> {
        (at_ms > start_ms && tokens > 0).then(|| Self {
            start_ms,
            at_ms,
            tokens,
            tps: f64::from(tokens) / ((at_ms - start_ms) as f64 / 1e3),
        })
    }
}

/// What the attribution needs of a memory reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryMark {
    pub at_ms: u64,
    pub swap_used_bytes: u64,
    pub pressure: PressureLevel,
}

impl From<&MemoryPoint> for MemoryMark {
    fn from(p: &MemoryPoint) -> Self {
        Self { at_ms: p.at_ms, swap_used_bytes: p.swap_used_bytes, pressure: p.pressure }
    }
}

/// A model's own recent decode rates (per-second points of its answers that
/// were not slowed), newest last: what "well below its usual rate" means
/// for this model on this machine, not a fixed number.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RateHistory {
    rates: VecDeque<f64>,
}

impl RateHistory {
    /// How many points are kept: two minutes of decoding.
    pub const KEPT: usize = 120;

    pub fn new() -> Self {
        Self::default()
    }

    /// A history from rates oldest first (the store's, after a restart).
    pub fn from_rates(rates: impl IntoIterator<Item = f64>) -> Self {
        let mut h = Self::new();
        for r in rates {
            h.push(r);
        }
        h
    }

    pub fn push(&mut self, tps: f64) {
        if !tps.is_finite() || tps <= 0.0 {
            return;
        }
        if self.rates.len() == Self::KEPT {
            self.rates.pop_front();
        }
        self.rates.push_back(tps);
    }

    pub fn len(&self) -> usize {
        self.rates.len()
    }

    /// The kept rates, oldest first.
    pub fn rates(&self) -> impl Iterator<Item = f64> + '_ {
        self.rates.iter().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.rates.is_empty()
    }

    /// The median of the kept rates, once there are `min_points` of them:
    /// robust to a stray fast or slow second.
    pub fn reference(&self, min_points: usize) -> Option<f64> {
        if self.rates.len() < min_points.max(1) {
            return None;
        }
        let mut sorted: Vec<f64> = self.rates.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        Some(if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 })
    }
}

/// The thresholds of the attribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// A point at or below this share of the model's reference rate is slow
    /// ("well below": 60 % leaves room for the noise of a shared machine,
    /// measured at ±15–18 % here).
    pub slow_ratio: f64,
    /// A stretch is at least this many consecutive slow points (seconds):
    /// one slow second is noise.
    pub min_slow_points: usize,
    /// No reference (and so no verdict) before this many rates of the model.
    pub min_reference_points: usize,
    /// Swap that grew at least this much over a stretch is blamed.
    pub min_swap_growth_bytes: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Self { slow_ratio: 0.6, min_slow_points: 2, min_reference_points: 3, min_swap_growth_bytes: 64 << 20 }
    }
}

/// Why a slow stretch is blamed on memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cause {
    /// Swap growth over the stretch, when it reached the policy's threshold.
    pub swap_growth_bytes: Option<u64>,
    /// The level pressure rose to (warning or critical), when it rose.
    pub pressure_rose_to: Option<PressureLevel>,
}

/// A run of consecutive slow points of one answer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stretch {
    pub start_ms: u64,
    pub end_ms: u64,
    /// The model's reference rate when the stretch began.
    pub reference_tps: f64,
    /// The rate over the stretch: its tokens over its time.
    pub tps: f64,
    pub tokens: u32,
    /// Swap used at the start, and its highest value during the stretch.
    pub swap_before_bytes: u64,
    pub swap_peak_bytes: u64,
    pub pressure_before: PressureLevel,
    pub pressure_peak: PressureLevel,
    /// `None`: slow, but memory did not change (CPU contention, a longer
    /// context): not blamed.
    pub cause: Option<Cause>,
}

impl Stretch {
    pub fn swap_growth_bytes(&self) -> u64 {
        self.swap_peak_bytes.saturating_sub(self.swap_before_bytes)
    }

    /// The graph's short label: "slowed by swap" / "slowed by memory pressure".
    pub fn label(&self) -> Option<&'static str> {
        let cause = self.cause?;
        Some(if cause.swap_growth_bytes.is_some() { "slowed by swap" } else { "slowed by memory pressure" })
    }

    /// The sentence for the answer's stats, e.g. "slowed by swap: 3.1 → 0.8
    /// tok/s while swap grew 1.2 GB"; `None` when not blamed.
    pub fn sentence(&self) -> Option<String> {
        let cause = self.cause?;
        let rates = format!("{} → {} tok/s", rate(self.reference_tps), rate(self.tps));
        let pressure = cause.pressure_rose_to.map(|l| format!("pressure rose to {l}"));
        Some(match (cause.swap_growth_bytes, pressure) {
            (Some(g), Some(p)) => format!("slowed by swap: {rates} while swap grew {} and {p}", bytes(g)),
            (Some(g), None) => format!("slowed by swap: {rates} while swap grew {}", bytes(g)),
            (None, Some(p)) => format!("slowed by memory pressure: {rates} while {p}"),
            (None, None) => return None,
        })
    }
}

fn rate(tps: f64) -> String {
    if tps >= 100.0 {
        format!("{tps:.0}")
    } else {
        format!("{tps:.1}")
    }
}

/// GB as the UI prints memory (2^30 bytes), MB below a tenth of one.
fn bytes(b: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    let gb = b as f64 / GIB;
    if gb >= 0.1 {
        format!("{gb:.1} GB")
    } else {
        format!("{} MB", b >> 20)
    }
}

/// Finds the slow stretches of one answer and blames those where memory
/// changed.
///
/// `history` is the model's own recent rates before this answer (oldest
/// first); the answer's healthy points join it as they come, so a model
/// seen for the first time is judged against its own first seconds.
/// `rates` are the answer's points in time order; `memory` the readings
/// around it (any order). A point is slow at or below
/// [`Policy::slow_ratio`] of the median of the reference so far; a stretch
/// is [`Policy::min_slow_points`] or more slow points in a row. It is
/// blamed when swap grew by [`Policy::min_swap_growth_bytes`] from its start
/// to its peak within the stretch, or pressure rose from a known level to
/// warning or critical. Swap or pressure at a time is that of the last
/// reading at or before it (the first reading, before all of them).
pub fn find_stretches(history: &[f64], rates: &[RatePoint], memory: &[MemoryMark], policy: &Policy) -> Vec<Stretch> {
    let mut reference = RateHistory::from_rates(history.iter().copied());
    let mut memory = memory.to_vec();
    memory.sort_by_key(|m| m.at_ms);
    let mut out = Vec::new();
    let mut open: Option<(usize, f64)> = None;
    for (i, p) in rates.iter().enumerate() {
        let r = reference.reference(policy.min_reference_points);
        match r {
            Some(r) if p.tps <= policy.slow_ratio * r => {
                open.get_or_insert((i, r));
            }
            _ => {
                if let Some((start, r)) = open.take() {
                    out.extend(stretch(&rates[start..i], r, &memory, policy));
                }
                reference.push(p.tps);
            }
        }
    }
    if let Some((start, r)) = open {
        out.extend(stretch(&rates[start..], r, &memory, policy));
    }
    out
}

/// The healthy points of an answer (not inside a stretch): what joins the
/// model's history once the answer ends, so a swap storm does not become
/// the model's "usual" rate.
pub fn healthy_rates<'a>(rates: &'a [RatePoint], stretches: &'a [Stretch]) -> impl Iterator<Item = f64> + 'a {
    rates.iter().filter(|p| !stretches.iter().any(|s| p.at_ms > s.start_ms && p.at_ms <= s.end_ms)).map(|p| p.tps)
}

/// The stretch that speaks for the answer: the longest blamed one.
pub fn worst_blamed(stretches: &[Stretch]) -> Option<&Stretch> {
    stretches.iter().filter(|s| s.cause.is_some()).max_by_key(|s| s.end_ms - s.start_ms)
}

fn stretch(points: &[RatePoint], reference_tps: f64, memory: &[MemoryMark], policy: &Policy) -> Option<Stretch> {
    let (first, last) = (points.first()?, points.last()?);
    if points.len() < policy.min_slow_points {
        return None;
    }
    let (start_ms, end_ms) = (first.start_ms, last.at_ms);
    let tokens: u32 = points.iter().map(|p| p.tokens).sum();
    let seconds: f64 = points.iter().map(|p| p.tokens as f64 / p.tps).sum();
    let tps = if seconds > 0.0 { f64::from(tokens) / seconds } else { 0.0 };
    let before = memory.iter().rev().find(|m| m.at_ms <= start_ms).or_else(|| memory.first());
    let during = memory.iter().filter(|m| m.at_ms > start_ms && m.at_ms <= end_ms);
    let (swap_before, pressure_before) =
        before.map_or((0, PressureLevel::Unknown), |m| (m.swap_used_bytes, m.pressure));
    let (swap_peak, pressure_peak) = during.fold((swap_before, pressure_before), |(swap, level), m| {
        (swap.max(m.swap_used_bytes), worse(level, m.pressure))
    });
    let growth = swap_peak.saturating_sub(swap_before);
    let swap_grew = before.is_some() && growth >= policy.min_swap_growth_bytes;
    let pressure_rose = pressure_rank(pressure_before) >= pressure_rank(PressureLevel::Normal)
        && pressure_rank(pressure_peak) > pressure_rank(pressure_before);
    let cause = (swap_grew || pressure_rose).then_some(Cause {
        swap_growth_bytes: swap_grew.then_some(growth),
        pressure_rose_to: pressure_rose.then_some(pressure_peak),
    });
    Some(Stretch {
        start_ms,
        end_ms,
        reference_tps,
        tps,
        tokens,
        swap_before_bytes: swap_before,
        swap_peak_bytes: swap_peak,
        pressure_before,
        pressure_peak,
        cause,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const T0: u64 = 1_800_000_000_000;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// One point per second from `from_s`, each with the given rate (tokens
    /// per second, whole numbers).
    fn run(from_s: u64, rates: &[u32]) -> Vec<RatePoint> {
        rates
            .iter()
            .enumerate()
            .filter_map(|(i, &n)| {
                let start = T0 + (from_s + i as u64) * 1000;
                RatePoint::from_ms(start, start + 1000, n)
            })
            .collect()
    }

    /// A reading per second over `seconds`, swap from `swap_at(s)` MiB.
    fn readings(
        seconds: u64,
        swap_at: impl Fn(u64) -> u64,
        level_at: impl Fn(u64) -> PressureLevel,
    ) -> Vec<MemoryMark> {
        (0..=seconds)
            .map(|s| MemoryMark { at_ms: T0 + s * 1000, swap_used_bytes: swap_at(s) * MIB, pressure: level_at(s) })
            .collect()
    }

    fn normal(_: u64) -> PressureLevel {
        PressureLevel::Normal
    }

    #[test]
    fn the_meter_gives_one_point_per_second_and_sums_to_the_decode_rate() {
        let mut m = DecodeMeter::new();
        // 31 tokens 100 ms apart: the first is not counted, then 30 in 3 s.
        let points: Vec<MeterPoint> = (0..31).filter_map(|k| m.token(secs(5.0 + 0.1 * k as f64))).collect();
        let tail = m.finish();
        assert_eq!(points.len(), 3, "{points:?}");
        assert!(points.iter().all(|p| (p.tps() - 10.0).abs() < 1e-6), "{points:?}");
        assert_eq!(tail, None, "the last token closed the third point");
        let tokens: u32 = points.iter().map(|p| p.tokens).sum();
        assert_eq!(tokens, 30);
        // (tokens − 1) / (last − first), as core::stats defines decode tok/s.
        let span = points.last().map_or(0.0, |p| p.end.as_secs_f64()) - 5.0;
        assert!((f64::from(tokens) / span - 10.0).abs() < 1e-6);
    }

    #[test]
    fn a_silent_second_is_a_gap_not_a_zero_and_the_next_point_is_slow() {
        let mut m = DecodeMeter::new();
        let mut points = Vec::new();
        for at in [0.0, 0.5, 1.0, 3.5, 4.1] {
            points.extend(m.token(secs(at)));
        }
        points.extend(m.finish());
        assert_eq!(points.len(), 3, "{points:?}");
        assert_eq!((points[0].tokens, points[0].tps()), (2, 2.0));
        // Nothing between 1.0 and 3.5 s: one point over the wait, at 0.4 tok/s.
        assert_eq!(points[1].tokens, 1);
        assert!((points[1].tps() - 0.4).abs() < 1e-9);
        // The tail, over half a second but under one, at finish.
        assert_eq!(points[2], MeterPoint { start: secs(3.5), end: secs(4.1), tokens: 1 });
        assert!(points.iter().all(|p| p.tps() > 0.0));
        // A tail under half a second is no point of its own…
        let mut m = DecodeMeter::new();
        let points: Vec<MeterPoint> = [0.0, 0.6, 1.2, 1.4].iter().filter_map(|&at| m.token(secs(at))).collect();
        assert_eq!((points.len(), m.finish()), (1, None));
        // …unless the answer has no other (a short, fast answer still shows its rate)…
        let mut m = DecodeMeter::new();
        assert!((0..40).all(|k| m.token(secs(0.01 * f64::from(k))).is_none()));
        assert_eq!(m.finish().map(|p| p.tokens), Some(39));
        // …and spans a quarter of a second: a burst of tokens is no rate.
        let mut m = DecodeMeter::new();
        assert!((0..5).all(|k| m.token(secs(1.0 + 0.001 * f64::from(k))).is_none()));
        assert_eq!(m.finish(), None);
        // A single token gives no point at all (no decode rate), and finish is idempotent.
        let mut one = DecodeMeter::new();
        assert_eq!(one.token(secs(1.0)), None);
        assert_eq!((one.finish(), one.finish()), (None, None));
    }

    #[test]
    fn the_reference_is_the_median_of_the_models_recent_rates() {
        let mut h = RateHistory::from_rates([3.0, 100.0, 3.2, 2.9]);
        assert_eq!(h.reference(3), Some((3.0 + 3.2) / 2.0), "one stray second does not move it");
        assert_eq!(RateHistory::from_rates([3.0, 3.1]).reference(3), None);
        h.push(f64::NAN);
        h.push(0.0);
        assert_eq!(h.len(), 4, "no rate is not a rate");
        for _ in 0..RateHistory::KEPT {
            h.push(10.0);
        }
        assert_eq!((h.len(), h.reference(3)), (RateHistory::KEPT, Some(10.0)));
    }

    #[test]
    fn a_slowdown_while_swap_grows_is_blamed_on_swap() {
        // The model's usual rate is about 3 tok/s (from earlier answers);
        // this answer runs at 3, then falls to 1 while swap grows 1.2 GB.
        let history = [3.0, 3.1, 2.9, 3.0, 3.2];
        let rates = run(0, &[3, 3, 3, 3, 1, 1, 1, 1, 1, 3]);
        let memory = readings(10, |s| if s <= 4 { 200 } else { 200 + (s - 4) * 240 }, normal);
        let found = find_stretches(&history, &rates, &memory, &Policy::default());
        assert_eq!(found.len(), 1, "{found:?}");
        let s = found[0];
        assert_eq!((s.start_ms, s.end_ms, s.tokens), (T0 + 4_000, T0 + 9_000, 5));
        assert!((s.tps - 1.0).abs() < 1e-9 && (s.reference_tps - 3.0).abs() < 1e-9, "{s:?}");
        assert_eq!(s.swap_growth_bytes(), 1200 * MIB);
        assert_eq!(s.cause, Some(Cause { swap_growth_bytes: Some(1200 * MIB), pressure_rose_to: None }));
        assert_eq!(s.label(), Some("slowed by swap"));
        assert_eq!(s.sentence().as_deref(), Some("slowed by swap: 3.0 → 1.0 tok/s while swap grew 1.2 GB"));
        assert_eq!(worst_blamed(&found), Some(&s));
        // The slow seconds stay out of the model's history.
        assert_eq!(healthy_rates(&rates, &found).collect::<Vec<_>>(), vec![3.0, 3.0, 3.0, 3.0, 3.0]);
    }

    #[test]
    fn a_slowdown_without_memory_change_is_found_but_not_blamed() {
        let history = [3.0; 5];
        let rates = run(0, &[3, 3, 1, 1, 1, 3]);
        // Swap grows only 40 MiB (below the threshold) and pressure stays normal.
        let memory = readings(6, |s| 100 + s * 8, normal);
        let found = find_stretches(&history, &rates, &memory, &Policy::default());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].cause, None, "{found:?}");
        assert_eq!((found[0].label(), found[0].sentence()), (None, None));
        assert_eq!(worst_blamed(&found), None);
        // No memory readings at all: nothing can be blamed.
        let found = find_stretches(&history, &rates, &[], &Policy::default());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].cause, None);
    }

    #[test]
    fn a_steady_run_is_not_a_slowdown_even_while_swap_grows() {
        let history = [3.0; 5];
        let rates = run(0, &[3, 3, 3, 2, 3, 3, 3, 3]);
        // Swap grows the whole time (another program is paging), the model keeps its rate.
        let memory = readings(8, |s| s * 500, |s| if s > 4 { PressureLevel::Warning } else { PressureLevel::Normal });
        assert!(find_stretches(&history, &rates, &memory, &Policy::default()).is_empty());
        // One slow second is noise, not a stretch.
        let rates = run(0, &[3, 3, 1, 3, 3]);
        assert!(find_stretches(&history, &rates, &memory, &Policy::default()).is_empty());
    }

    #[test]
    fn the_comparison_is_with_the_models_own_rate_not_a_fixed_number() {
        // A big model at 0.9 tok/s is normal for it: nothing is slow.
        let slow_model = [0.9, 0.9, 1.0, 0.8];
        let rates: Vec<RatePoint> =
            (0..6).filter_map(|i| RatePoint::from_ms(T0 + i * 2000, T0 + (i + 1) * 2000, 2)).collect();
        let memory = readings(12, |s| s * 200, normal);
        assert!(find_stretches(&slow_model, &rates, &memory, &Policy::default()).is_empty());
        // The same 1 tok/s from a model that usually runs at 40 is a slowdown, blamed on the swap growth.
        let fast_model = [40.0, 41.0, 39.0];
        let found = find_stretches(&fast_model, &rates, &memory, &Policy::default());
        assert_eq!(found.len(), 1);
        assert!(found[0].sentence().is_some_and(|s| s.starts_with("slowed by swap: 40.0 → 1.0 tok/s")), "{found:?}");
    }

    #[test]
    fn a_first_answer_is_judged_against_its_own_first_seconds() {
        let rates = run(0, &[20, 21, 19, 20, 4, 5, 4, 20]);
        let memory = readings(8, |s| if s <= 4 { 0 } else { 300 }, normal);
        let found = find_stretches(&[], &rates, &memory, &Policy::default());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!((found[0].reference_tps - 20.0).abs() < 1e-9);
        assert_eq!(found[0].cause.and_then(|c| c.swap_growth_bytes), Some(300 * MIB));
        // Too few points to know the model's rate: no verdict.
        assert!(find_stretches(&[], &run(0, &[20, 2, 2]), &memory, &Policy::default()).is_empty());
    }

    #[test]
    fn rising_pressure_is_blamed_and_said_alone_or_with_swap() {
        let history = [10.0; 5];
        let rates = run(0, &[10, 10, 3, 3, 3]);
        let warning_from_3 = |s: u64| if s >= 3 { PressureLevel::Critical } else { PressureLevel::Normal };
        let found = find_stretches(&history, &rates, &readings(5, |_| 0, warning_from_3), &Policy::default());
        assert_eq!(
            found[0].sentence().as_deref(),
            Some("slowed by memory pressure: 10.0 → 3.0 tok/s while pressure rose to critical")
        );
        assert_eq!(found[0].label(), Some("slowed by memory pressure"));
        // Swap grew 60 MiB: under the threshold, so pressure alone is named.
        let found = find_stretches(&history, &rates, &readings(5, |s| s * 20, warning_from_3), &Policy::default());
        assert_eq!(found[0].swap_growth_bytes(), 60 * MIB);
        assert_eq!(found[0].label(), Some("slowed by memory pressure"));
        let found = find_stretches(&history, &rates, &readings(5, |s| s * 100, warning_from_3), &Policy::default());
        assert_eq!(
            found[0].sentence().as_deref(),
            Some("slowed by swap: 10.0 → 3.0 tok/s while swap grew 0.3 GB and pressure rose to critical")
        );
        // From an unknown level (no PSI) nothing "rose".
        let unknown_then_critical = |s: u64| if s >= 3 { PressureLevel::Critical } else { PressureLevel::Unknown };
        let found = find_stretches(&history, &rates, &readings(5, |_| 0, unknown_then_critical), &Policy::default());
        assert_eq!(found[0].cause, None);
    }

    #[test]
    fn synthetic_points_reject_empty_intervals() {
        assert_eq!(RatePoint::from_ms(10, 10, 3), None);
        assert_eq!(RatePoint::from_ms(10, 5, 3), None);
        assert_eq!(RatePoint::from_ms(0, 500, 0), None);
        assert_eq!(RatePoint::from_ms(0, 500, 1).map(|p| p.tps), Some(2.0));
    }
}
