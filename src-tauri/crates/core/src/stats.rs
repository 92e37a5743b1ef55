//! The one place where speed figures are defined (ARCHITECTURE.md,
//! "Definitions that must not drift"). Every number Headroom shows is
//! computed here, from timestamps an injected clock produced, so the engine,
//! the cloud client and the benchmark cannot disagree and tests are exact.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Timestamps of one turn, each measured from the moment the request was
/// accepted (so tokenization and templating count toward TTFT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnTimings {
    /// Prompt tokens that were prefilled in this turn (new tokens only when
    /// a cached prefix was reused).
    pub prompt_tokens: u32,
    /// Time spent prefilling those tokens.
    pub prefill: Duration,
    /// Tokens generated, including the first.
    pub generated_tokens: u32,
    /// Request accepted -> first generated token available.
    pub first_token_at: Option<Duration>,
    /// Request accepted -> last generated token available.
    pub last_token_at: Option<Duration>,
}

/// Rates derived from [`TurnTimings`]. A rate that is undefined for the turn
/// (no tokens, or a single token for decode) is `None`, never 0 or infinity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// Time to first token, milliseconds.
    pub ttft_ms: Option<f64>,
    /// Prompt tokens / prefill time.
    pub prefill_tps: Option<f64>,
    /// (generated - 1) / (last token - first token): the first token is not counted.
    pub decode_tps: Option<f64>,
    /// Generated tokens / (request -> last token).
    pub e2e_tps: Option<f64>,
}

fn per_second(count: u32, over: Duration) -> Option<f64> {
    let secs = over.as_secs_f64();
    (count > 0 && secs > 0.0).then(|| f64::from(count) / secs)
}

impl TurnTimings {
    pub fn rates(&self) -> Rates {
        let decode_span = match (self.first_token_at, self.last_token_at) {
            (Some(first), Some(last)) => last.checked_sub(first),
            _ => None,
        };
        Rates {
            ttft_ms: self.first_token_at.map(|t| t.as_secs_f64() * 1e3),
            prefill_tps: per_second(self.prompt_tokens, self.prefill),
            decode_tps: decode_span.and_then(|span| per_second(self.generated_tokens.saturating_sub(1), span)),
            e2e_tps: self.last_token_at.and_then(|last| per_second(self.generated_tokens, last)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn rates_follow_the_definitions() {
        let t = TurnTimings {
            prompt_tokens: 500,
            prefill: ms(250),
            generated_tokens: 101,
            first_token_at: Some(ms(300)),
            last_token_at: Some(ms(2300)),
        };
        let r = t.rates();
        assert_eq!(r.ttft_ms, Some(300.0));
        assert_eq!(r.prefill_tps, Some(2000.0));
        // 100 tokens after the first, over 2 s.
        assert_eq!(r.decode_tps, Some(50.0));
        // 101 tokens over 2.3 s, first token included.
        assert!((r.e2e_tps.unwrap_or_default() - 101.0 / 2.3).abs() < 1e-9);
    }

    #[test]
    fn undefined_rates_are_none_not_zero_or_infinite() {
        let one_token = TurnTimings {
            prompt_tokens: 0,
            prefill: Duration::ZERO,
            generated_tokens: 1,
            first_token_at: Some(ms(40)),
            last_token_at: Some(ms(40)),
        };
        let r = one_token.rates();
        assert_eq!(r.prefill_tps, None);
        assert_eq!(r.decode_tps, None);
        assert_eq!(r.e2e_tps, Some(25.0));

        let nothing = TurnTimings { generated_tokens: 0, first_token_at: None, last_token_at: None, ..one_token };
        assert_eq!(nothing.rates(), Rates { ttft_ms: None, prefill_tps: None, decode_tps: None, e2e_tps: None });
    }
}
