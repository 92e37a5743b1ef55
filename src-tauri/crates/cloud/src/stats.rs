//! A cloud turn's speed figures, through the same `headroom_core::stats`
//! definitions as a local turn, from the token counts the server reports.

use std::time::Duration;

use headroom_core::stats::{Rates, TurnTimings};
use serde::{Deserialize, Serialize};

/// Shown instead of rates when the server sent no `usage`.
pub const NO_USAGE_NOTE: &str = "server reported no token counts";

/// Token counts from the server's `usage` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    #[serde(default)]
    pub total_tokens: Option<u32>,
}

/// Stats of one streamed turn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CloudStats {
    /// `prefill` is zero: over HTTP it cannot be told apart from network
    /// and queueing time, so `rates.prefill_tps` is `None` (never a guess).
    pub timings: TurnTimings,
    pub rates: Rates,
    /// `None` when the server reported no counts: then no token rate is
    /// computed (chunks are not tokens), only TTFT.
    pub usage: Option<Usage>,
    /// Text-carrying chunks received (for the "cut after N chunks" story).
    pub chunks: usize,
    /// HTTP attempts, retries included.
    pub attempts: u32,
}

impl CloudStats {
    /// `first_token_at` / `last_token_at` are measured from the moment the
    /// (first) request was sent.
    pub fn new(
        usage: Option<Usage>,
        first_token_at: Option<Duration>,
        last_token_at: Option<Duration>,
        chunks: usize,
        attempts: u32,
    ) -> Self {
        let timings = TurnTimings {
            prompt_tokens: usage.map_or(0, |u| u.prompt_tokens),
            prefill: Duration::ZERO,
            generated_tokens: usage.map_or(0, |u| u.completion_tokens),
            first_token_at,
            last_token_at,
        };
        Self { timings, rates: timings.rates(), usage, chunks, attempts }
    }

    /// Why the token rates are missing, if they are.
    pub fn note(&self) -> Option<&'static str> {
        self.usage.is_none().then_some(NO_USAGE_NOTE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Option<Duration> {
        Some(Duration::from_millis(v))
    }

    #[test]
    fn rates_come_from_reported_tokens_not_chunks() {
        // 3 chunks on the wire, but the server says it generated 41 tokens.
        let usage = Usage { prompt_tokens: 12, completion_tokens: 41, total_tokens: Some(53) };
        let s = CloudStats::new(Some(usage), ms(200), ms(2200), 3, 1);
        assert_eq!(s.rates.ttft_ms, Some(200.0));
        assert_eq!(s.rates.decode_tps, Some(20.0));
        assert_eq!(s.rates.e2e_tps, Some(41.0 / 2.2));
        assert_eq!(s.rates.prefill_tps, None);
        assert_eq!(s.timings.prompt_tokens, 12);
        assert_eq!(s.note(), None);
    }

    #[test]
    fn without_usage_only_ttft_is_known_and_the_note_says_why() {
        let s = CloudStats::new(None, ms(150), ms(900), 30, 2);
        assert_eq!(s.rates.ttft_ms, Some(150.0));
        assert_eq!((s.rates.decode_tps, s.rates.e2e_tps, s.rates.prefill_tps), (None, None, None));
        assert_eq!(s.note(), Some(NO_USAGE_NOTE));
    }
}
