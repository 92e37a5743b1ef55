//! headroom-hub: pulls models from the Hugging Face hub (or any server that
//! speaks its API) into the standard HF cache, after a fit check that reads
//! only config.json and the safetensors headers (read by
//! `headroom_core::format`, the reader the engine uses for files on disk).

pub mod cache;
pub mod client;
pub mod error;
pub mod pull;
pub mod repo;
#[cfg(any(test, feature = "test-server"))]
pub mod testserver;
pub mod token;

pub use client::HubClient;
pub use error::{HubError, Result};
pub use pull::{download, inspect, PullEvent, PullOutcome, RemoteFile, RemoteModel, Verified};
pub use repo::{Endpoint, RepoId, DEFAULT_ENDPOINT};
pub use token::{HfToken, TokenOrigin};
pub use tokio_util::sync::CancellationToken;
#[cfg(test)]
mod tests;
