//! One turn's persistence: the user's message is committed before the run
//! starts (or, for a regenerated answer, in the same transaction that takes
//! the old exchange back, once the new run has actually started), the answer
//! is saved while it streams (at most [`SAVE_EVERY`] behind), and the end
//! (text, status, stats) is committed in one transaction. A process killed
//! mid-answer leaves a `streaming` row that the next `Store::open` marks
//! interrupted.

use std::time::{Duration, Instant};

use headroom_core::chat::FinishReason;
use headroom_core::pressure::PressureLevel;
use headroom_engine::worker::TurnStats;
use headroom_memory::MemoryReading;
use headroom_store::{LastTurn, MessageStatus, Route, Store, StoreError, TurnOutcome, TurnStart, TurnStatsRecord};

use super::events::TurnEnd;
use crate::runtime::block_on;
use crate::state::ModelLabels;

/// How often, at most, the answer's text is written while it streams: a
/// killed process loses at most about this much of it.
pub const SAVE_EVERY: Duration = Duration::from_millis(500);

/// When the turn's rows are written.
#[derive(Debug)]
enum Begin {
    /// Written: a new message is committed before its run starts.
    Done(TurnStart),
    /// A regenerated answer: written when its run starts, replacing `replaces`.
    OnStart { session: String, text: String, route: Route, replaces: LastTurn },
}

#[derive(Debug)]
pub struct TurnRecorder {
    store: Store,
    labels: ModelLabels,
    begin: Begin,
    memory_before: Option<MemoryReading>,
    last_save: Instant,
    saved_len: usize,
    /// The first failed save: reported at the end, not on every token.
    save_error: Option<StoreError>,
}

/// The message ids a turn was stored under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredIds {
    pub user: i64,
    pub assistant: i64,
}

impl TurnRecorder {
    /// Commits the user's message (creating the session if new) and an
    /// empty `streaming` answer now; with `replaces`, does that only when
    /// [`Self::started`] is called, taking the old exchange back then.
    pub fn new(
        store: &Store,
        session: &str,
        text: &str,
        labels: ModelLabels,
        route: Route,
        replaces: Option<LastTurn>,
    ) -> Result<Self, StoreError> {
        let begin = match replaces {
            None => Begin::Done(block_on(store.begin_turn(session, text, Some(&labels.model_id), route))?),
            Some(replaces) => Begin::OnStart { session: session.to_owned(), text: text.to_owned(), route, replaces },
        };
        Ok(Self {
            store: store.clone(),
            labels,
            begin,
            memory_before: headroom_memory::read().ok(),
            last_save: Instant::now(),
            saved_len: 0,
            save_error: None,
        })
    }

    /// The run started: a regenerated answer's rows are written now, the
    /// old exchange taken back in the same transaction.
    pub fn started(&mut self) -> Result<(), StoreError> {
        if let Begin::OnStart { session, text, route, replaces } = &self.begin {
            let model = Some(self.labels.model_id.as_str());
            let start = block_on(self.store.begin_turn_replacing(session, text, model, *route, replaces))?;
            self.begin = Begin::Done(start);
            self.last_save = Instant::now();
        }
        Ok(())
    }

    /// The stored ids, once the rows are written.
    pub fn ids(&self) -> Option<StoredIds> {
        match &self.begin {
            Begin::Done(s) => Some(StoredIds { user: s.user_message_id, assistant: s.assistant_message_id }),
            Begin::OnStart { .. } => None,
        }
    }

    /// The answer so far; written if the last write is [`SAVE_EVERY`] old.
    pub fn on_text(&mut self, text: &str) {
        let Some(ids) = self.ids() else { return };
        if text.len() == self.saved_len || self.last_save.elapsed() < SAVE_EVERY {
            return;
        }
        self.last_save = Instant::now();
        match block_on(self.store.save_partial(ids.assistant, text)) {
            Ok(()) => self.saved_len = text.len(),
            Err(e) => {
                tracing::warn!("could not save the answer so far: {e}");
                self.save_error.get_or_insert(e);
            }
        }
    }

    /// Commits the end: `complete` (stop/length), `interrupted` (cancelled)
    /// or `error`, with the stats and their labels. A regenerated answer
    /// whose run never started wrote nothing, and writes nothing now: the
    /// old exchange stays exactly as it was. Returns the stored ids.
    pub fn finish(self, end: &TurnEnd) -> Result<Option<StoredIds>, StoreError> {
        let Some(ids) = self.ids() else { return Ok(None) };
        let status = match end.reason {
            Some(FinishReason::Cancelled) => MessageStatus::Interrupted,
            Some(FinishReason::Stop | FinishReason::Length) => MessageStatus::Complete,
            None => MessageStatus::Error,
        };
        let around = RunLabels::around(self.memory_before.as_ref(), headroom_memory::read().ok().as_ref());
        let stats = end.stats.as_ref().filter(|_| end.reason.is_some()).map(|s| {
            let mut record = stats_record(s, &self.labels, end.reason.unwrap_or(FinishReason::Stop), &around);
            record.slowdown = end.slowdown.clone();
            record
        });
        let outcome = TurnOutcome { content: end.text.clone(), status, error: end.error.clone(), stats };
        block_on(self.store.finish_turn(ids.assistant, &outcome))?;
        Ok(Some(ids))
    }
}

/// What the machine did around a run, labelled onto its stats. Measured
/// here, once, for every kind of turn; further labels of the same kind
/// (what the live view learns about the run) belong here too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLabels {
    /// The worst pressure level read before and after.
    pub pressure: PressureLevel,
    /// Swap used after minus before, bytes; `None` if it could not be read.
    pub swap_delta_bytes: Option<i64>,
}

impl RunLabels {
    pub fn around(before: Option<&MemoryReading>, after: Option<&MemoryReading>) -> Self {
        let pressure = match (before, after) {
            (Some(b), Some(a)) => b.pressure.worst(a.pressure),
            (Some(r), None) | (None, Some(r)) => r.pressure,
            (None, None) => PressureLevel::Unknown,
        };
        let swap_delta_bytes = before.zip(after).and_then(|(b, a)| {
            i64::try_from(a.swap_used).ok().zip(i64::try_from(b.swap_used).ok()).map(|(a, b)| a - b)
        });
        Self { pressure, swap_delta_bytes }
    }
}

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1e3)
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The engine's figures plus the labels, as stored.
pub fn stats_record(s: &TurnStats, labels: &ModelLabels, reason: FinishReason, around: &RunLabels) -> TurnStatsRecord {
    TurnStatsRecord {
        model_id: labels.model_id.clone(),
        quantization: labels.quantization.clone(),
        // What the turn's cache really was (a quantized format converts at
        // its start); the load's label when the engine said nothing (a cloud turn).
        kv_dtype: if s.kv_label.is_empty() { labels.kv_dtype.clone() } else { s.kv_label.clone() },
        batch: count(s.batch),
        context_tokens: count(s.context_tokens),
        prompt_tokens: count(s.prompt_tokens),
        reused_tokens: count(s.reused_tokens),
        generated_tokens: count(s.generated_tokens),
        ttft_ms: s.rates.ttft_ms,
        prefill_tps: s.rates.prefill_tps,
        decode_tps: s.rates.decode_tps,
        e2e_tps: s.rates.e2e_tps,
        prefill_ms: s.timings.prefill.as_secs_f64() * 1e3,
        first_token_ms: ms(s.timings.first_token_at),
        last_token_ms: ms(s.timings.last_token_at),
        peak_memory_bytes: count(s.peak_memory_bytes),
        pressure: around.pressure,
        swap_delta_bytes: around.swap_delta_bytes,
        finish_reason: reason,
        quant_kernel: labels.quant_kernel.clone(),
        slowdown: None,
        speculation: s.speculation.summary(),
        two_macs: s.peer.as_ref().map(headroom_engine::worker::PeerTurn::summary),
    }
}
