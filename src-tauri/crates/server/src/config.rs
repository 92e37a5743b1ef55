//! How the server behaves ([`ServeConfig`]), checked before anything listens.

use std::net::SocketAddr;
use std::time::Duration;

use headroom_core::speculative::SpeculativeMode;

use crate::error::{Result, ServerError};

/// Max new tokens for a request that sets none (the app's chat default).
pub const DEFAULT_MAX_TOKENS: usize = 512;
/// Chat completions admitted at once, running or waiting for the engine
/// (which runs one at a time); one more is answered 429 with Retry-After.
pub const DEFAULT_MAX_REQUESTS: usize = 4;
/// How the server behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// Listen on a non-loopback address. Also requires `api_keys`.
    pub allow_non_loopback: bool,
    /// When any is set, every request must send one of them
    /// (`Authorization: Bearer <key>`). Each key's clients are a prompt-cache
    /// partition of their own: one key's requests never reuse (nor report in
    /// `cached_tokens`) a state another key's made.
    pub api_keys: Vec<String>,
    /// The context limit models the server loads get (`None`: the
    /// provider's default). A model already loaded keeps its own.
    pub context_limit: Option<usize>,
    pub default_max_tokens: usize,
    /// Chat completions admitted at once (running or queued); at least 1.
    pub max_requests: usize,
    /// How long a connection has to send a request's headers, the first and
    /// each next one on a kept-alive connection; also how long a kept-alive
    /// connection may sit idle (crate::accept).
    pub header_timeout: Duration,
    /// Connections open at once; beyond it one is closed as it is accepted.
    /// Also held to half the process's file-descriptor limit.
    pub max_connections: usize,
    /// How every request decodes (greedy output is the same either way).
    pub speculative: SpeculativeMode,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            allow_non_loopback: false,
            api_keys: Vec::new(),
            context_limit: None,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            max_requests: DEFAULT_MAX_REQUESTS,
            header_timeout: crate::accept::HEADER_TIMEOUT,
            max_connections: crate::accept::DEFAULT_MAX_CONNECTIONS,
            speculative: SpeculativeMode::None,
        }
    }
}

impl ServeConfig {
    /// Refuses settings that would expose the model, before anything listens.
    pub fn check(&self, addr: SocketAddr) -> Result<()> {
        if self.api_keys.iter().any(|k| k.trim().is_empty()) {
            return Err(ServerError::EmptyApiKey);
        }
        if self.max_requests == 0 {
            return Err(ServerError::InvalidSetting {
                name: "max_requests",
                value: "0".into(),
                reason: "at least one request must be admitted",
            });
        }
        if self.max_connections == 0 {
            return Err(ServerError::InvalidSetting {
                name: "max_connections",
                value: "0".into(),
                reason: "at least one connection must be accepted",
            });
        }
        if self.header_timeout.is_zero() {
            return Err(ServerError::InvalidSetting {
                name: "header_timeout",
                value: "0".into(),
                reason: "a request needs some time to send its headers",
            });
        }
        if !addr.ip().is_loopback() {
            if !self.allow_non_loopback {
                return Err(ServerError::NonLoopback { addr });
            }
            if self.api_keys.is_empty() {
                return Err(ServerError::RemoteWithoutKey { addr });
            }
        }
        if self.context_limit == Some(0) {
            return Err(ServerError::InvalidSetting {
                name: "context_limit",
                value: "0".into(),
                reason: "must be at least 1",
            });
        }
        if self.default_max_tokens == 0 {
            return Err(ServerError::InvalidSetting {
                name: "default_max_tokens",
                value: "0".into(),
                reason: "must be at least 1",
            });
        }
        Ok(())
    }
}
