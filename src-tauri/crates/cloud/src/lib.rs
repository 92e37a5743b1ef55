//! headroom-cloud: an OpenAI-compatible streaming chat client (retries,
//! timeouts, cancellation, typed errors), API keys in the OS keychain (or a
//! user-only file where there is none), and the pure logic that summarises
//! older turns locally before a long history goes to the cloud.

pub mod client;
pub mod config;
pub mod error;
pub mod keys;
pub mod stats;
pub mod summarize;
#[cfg(any(test, feature = "test-server"))]
pub mod testserver;
pub mod turn;

pub use client::{ChatParams, CloudClient, CloudEvent};
pub use config::{normalize_base_url, redact_url, ApiKey, CloudConfig, RetryPolicy, Timeouts};
pub use error::{CloudError, KeyError, TimeoutPhase};
pub use keys::{KeyStorage, KeyStore};
pub use stats::{CloudStats, Usage, NO_USAGE_NOTE};
pub use turn::{run_turn, Finished, TurnResult};
// Callers cancel runs with it; re-exported so they need no tokio-util of their own.
pub use tokio_util::sync::CancellationToken;
