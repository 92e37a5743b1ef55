//! `headroom-server`: a local OpenAI-compatible HTTP server (axum) in front
//! of the app's engine handle. `GET /v1/models`, `POST /v1/chat/completions`
//! (plain and streamed as server-sent events ending in `data: [DONE]`),
//! `usage` with token counts plus our measured figures under `headroom`,
//! and errors in OpenAI's shape. Loopback only unless explicitly allowed
//! with an API key; a model that would swap is refused with its numbers.

mod accept;
mod api;
mod api_error;
mod config;
mod error;
mod limits;
mod provider;
mod routes;
mod run;
mod server;

pub use accept::{DEFAULT_MAX_CONNECTIONS, HEADER_TIMEOUT};
pub use api::{tool_choice, tools, HeadroomStats, Usage, MAX_TOKENS_LIMIT};
pub use api_error::ApiError;
pub use config::{ServeConfig, DEFAULT_MAX_REQUESTS, DEFAULT_MAX_TOKENS};
pub use error::{ProvideError, ServerError};
pub use provider::{ModelCard, ModelProvider, ReadyModel};
pub use server::{Server, ServerStats, DEFAULT_PORT, STOP_DEADLINE};

#[cfg(test)]
mod tests;
