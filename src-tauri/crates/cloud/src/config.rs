//! What a cloud endpoint is: base URL, model, key, timeouts and retry policy.

use std::fmt;
use std::time::Duration;

use crate::error::{CloudError, Result};

/// An API key that never shows up in logs or `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key itself, for the `Authorization` header and the key store only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// How long to wait, per phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP (and TLS) connect.
    pub connect: Duration,
    /// Request sent -> response headers. A server that queues or prefills a
    /// long prompt answers late, so this is generous.
    pub response: Duration,
    /// Longest silence between two pieces of an open stream.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self { connect: Duration::from_secs(10), response: Duration::from_secs(120), idle: Duration::from_secs(60) }
    }
}

/// Retries on 429 and 5xx, only before any token was streamed (after that a
/// retry would show the user a different answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so `max_retries + 1` attempts in all).
    pub max_retries: u32,
    /// Backoff before the first retry; doubled each time, then jittered.
    pub base_delay: Duration,
    /// Cap on one backoff, and on how long a `Retry-After` is honoured:
    /// a server asking for more than this gets a `RateLimited` error instead.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_retries: 3, base_delay: Duration::from_millis(500), max_delay: Duration::from_secs(30) }
    }
}

impl RetryPolicy {
    /// Backoff before retry number `retry` (0-based): exponential, capped,
    /// with "equal jitter" (half fixed, half random) so that many clients
    /// hit by the same outage do not come back in lockstep. `unit` is a
    /// random number in [0, 1).
    pub fn backoff(&self, retry: u32, unit: f64) -> Duration {
        let exp = self.base_delay.saturating_mul(2u32.saturating_pow(retry.min(16)));
        let capped = exp.min(self.max_delay);
        capped / 2 + capped.mul_f64(unit.clamp(0.0, 1.0) / 2.0)
    }
}

/// One OpenAI-compatible endpoint.
#[derive(Debug, Clone)]
pub struct CloudConfig {
    /// Up to and including the API version, e.g. `https://api.openai.com/v1`
    /// or `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    pub model: String,
    pub api_key: Option<ApiKey>,
    pub timeouts: Timeouts,
    pub retry: RetryPolicy,
}

impl CloudConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
        }
    }

    /// The base URL without trailing slashes, checked to be http(s).
    pub fn normalized_base_url(&self) -> Result<String> {
        normalize_base_url(&self.base_url)
    }

    /// `{base}/{path}`.
    pub fn endpoint(&self, path: &str) -> Result<String> {
        Ok(format!("{}/{}", self.normalized_base_url()?, path.trim_start_matches('/')))
    }
}

/// Trims surrounding space and trailing slashes; rejects anything that is
/// not an absolute http(s) URL with a host, saying what was wrong.
pub fn normalize_base_url(raw: &str) -> Result<String> {
    let url = raw.trim().trim_end_matches('/');
    let invalid = |why: &str| CloudError::InvalidConfig { what: format!("base URL \"{raw}\" {why}") };
    if url.is_empty() {
        return Err(invalid("is empty"));
    }
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| invalid("must start with http:// or https://"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(invalid("has no host"));
    }
    if rest.contains(char::is_whitespace) {
        return Err(invalid("contains spaces"));
    }
    // `user:secret@host` would put a secret in settings, logs and error
    // messages; the key store is where a key belongs.
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(invalid(
            "holds a user name or password (user:secret@): remove it, and store the key with `headroom cloud-key set` or in Settings",
        ));
    }
    Ok(url.to_owned())
}

/// `url` as logs and error messages show it: the values of its query string
/// and any user:password are replaced, since some providers take the API
/// key as `?key=…` and a log file is no place for it.
pub fn redact_url(url: &str) -> String {
    let (without_fragment, fragment) = match url.split_once('#') {
        Some((u, _)) => (u, "#…"),
        None => (url, ""),
    };
    let (base, query) = match without_fragment.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (without_fragment, None),
    };
    let base = match base.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            match authority.rsplit_once('@') {
                Some((_, host)) => format!("{scheme}://REDACTED@{host}{path}"),
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    let query = query.map(|q| {
        let pairs: Vec<String> = q
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) => format!("{name}=REDACTED"),
                None => pair.to_owned(),
            })
            .collect();
        format!("?{}", pairs.join("&"))
    });
    format!("{base}{}{fragment}", query.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_key_in_the_query_string_or_the_user_info_never_reaches_a_log() {
        let url = "https://generativelanguage.example/v1beta/chat?key=AIzaSECRET&alt=sse";
        let shown = redact_url(url);
        assert_eq!(shown, "https://generativelanguage.example/v1beta/chat?key=REDACTED&alt=REDACTED");
        assert!(!redact_url("https://user:sk-SECRET@api.example/v1/chat?x#frag").contains("SECRET"));
        assert_eq!(
            redact_url("http://127.0.0.1:8080/v1/chat/completions"),
            "http://127.0.0.1:8080/v1/chat/completions"
        );
    }

    use super::*;

    #[test]
    fn api_key_is_redacted_in_debug_output() {
        let c = CloudConfig { api_key: Some(ApiKey::new("sk-secret-123")), ..CloudConfig::new("http://h/v1", "m") };
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-secret-123"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn base_urls_are_normalized_or_rejected_with_the_reason() {
        assert_eq!(normalize_base_url(" http://127.0.0.1:8080/v1/ ").ok().as_deref(), Some("http://127.0.0.1:8080/v1"));
        let c = CloudConfig::new("https://api.example.com/v1//", "m");
        assert_eq!(
            c.endpoint("/chat/completions").ok().as_deref(),
            Some("https://api.example.com/v1/chat/completions")
        );
        for (bad, why) in [
            ("", "is empty"),
            ("api.example.com/v1", "must start with http:// or https://"),
            ("ftp://x/v1", "must start with http"),
            ("http:///v1", "has no host"),
            ("http://a b/v1", "contains spaces"),
            ("https://user:sk-secret@api.example.com/v1", "holds a user name or password"),
            ("http://me@127.0.0.1:8080", "holds a user name or password"),
        ] {
            match normalize_base_url(bad) {
                Err(CloudError::InvalidConfig { what }) => {
                    assert!(what.contains(why), "{bad}: {what}")
                }
                other => panic!("{bad}: expected InvalidConfig, got {other:?}"),
            }
        }
    }

    #[test]
    fn backoff_doubles_is_capped_and_jitters_within_half() {
        let p = RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
        };
        assert_eq!(p.backoff(0, 0.0), Duration::from_millis(50));
        assert_eq!(p.backoff(0, 1.0), Duration::from_millis(100));
        assert_eq!(p.backoff(1, 0.0), Duration::from_millis(100));
        assert_eq!(p.backoff(2, 0.5), Duration::from_millis(300));
        // 100 ms · 2^4 = 1.6 s is capped at 1 s.
        assert_eq!(p.backoff(4, 1.0), Duration::from_millis(1000));
        assert_eq!(p.backoff(40, 0.0), Duration::from_millis(500));
    }
}
