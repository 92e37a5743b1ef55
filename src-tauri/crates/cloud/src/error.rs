//! The cloud crate's typed errors, worded for the person who has to fix them.

use std::path::PathBuf;
use std::time::Duration;

/// What talking to an OpenAI-compatible server can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// The configuration itself is unusable (an empty or non-HTTP base URL …).
    #[error("invalid cloud setting: {what}")]
    InvalidConfig { what: String },

    #[error("the server at {url} rejected the API key (HTTP 401): check the key set for this URL")]
    Unauthorized { url: String },

    #[error(
        "the server answered 404 for {url}: check the base URL (it usually ends in /v1) and the model name \"{model}\""
    )]
    NotFound { url: String, model: String },

    #[error("no server is listening at {url} (connection refused): is it running, and is the URL right?")]
    ConnectionRefused { url: String },

    /// Any other failure to reach the server: DNS, TLS, a reset connection.
    #[error("could not reach {url}: {detail}")]
    Connect { url: String, detail: String },

    #[error("{url} did not answer within {} s ({phase})", .after.as_secs_f64())]
    Timeout { url: String, phase: TimeoutPhase, after: Duration },

    #[error("the server at {url} is still rate-limiting (HTTP 429) after {attempts} attempts{}", retry_hint(*.retry_after))]
    RateLimited { url: String, attempts: u32, retry_after: Option<Duration> },

    #[error("the server at {url} failed with HTTP {status} after {attempts} attempts: {body}")]
    Server { url: String, status: u16, attempts: u32, body: String },

    /// A 4xx other than 401/404/429: the request itself was refused (a context
    /// too long for the model, an unknown parameter …); the body says why.
    #[error("the server at {url} refused the request with HTTP {status}: {body}")]
    Rejected { url: String, status: u16, body: String },

    #[error("the server's stream is malformed at event {event}: {what}")]
    MalformedStream { event: usize, what: String },

    #[error("the stream was cut after {chunks} text chunks ({detail}); the partial answer is kept")]
    StreamCut { chunks: usize, detail: String },

    #[error("unexpected answer from {url}: {what}")]
    BadResponse { url: String, what: String },

    /// A 3xx: redirects are not followed (the conversation would go wherever
    /// they point, `http://` included); the configured URL should be the final one.
    #[error("the server at {url} redirected the request (HTTP {status}) to {}; redirects are not followed: set the base URL to where the API really is", .location.as_deref().unwrap_or("no stated place"))]
    Redirected { url: String, status: u16, location: Option<String> },

    #[error("could not set up the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// Which wait ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPhase {
    /// Connecting, or waiting for the response headers.
    Response,
    /// Waiting for the next piece of an open stream.
    Idle,
}

impl std::fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Response => "waiting for the response",
            Self::Idle => "waiting for the next part of the stream",
        })
    }
}

fn retry_hint(retry_after: Option<Duration>) -> String {
    retry_after.map(|d| format!("; it asks to wait {} s", d.as_secs())).unwrap_or_default()
}

impl CloudError {
    /// A stable code for the app's `CommandError`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidConfig { .. } => "CLOUD_INVALID_CONFIG",
            Self::Unauthorized { .. } => "CLOUD_UNAUTHORIZED",
            Self::NotFound { .. } => "CLOUD_NOT_FOUND",
            Self::ConnectionRefused { .. } => "CLOUD_CONNECTION_REFUSED",
            Self::Connect { .. } => "CLOUD_UNREACHABLE",
            Self::Timeout { .. } => "CLOUD_TIMEOUT",
            Self::RateLimited { .. } => "CLOUD_RATE_LIMITED",
            Self::Server { .. } => "CLOUD_SERVER_ERROR",
            Self::Rejected { .. } => "CLOUD_REJECTED",
            Self::MalformedStream { .. } => "CLOUD_MALFORMED_STREAM",
            Self::StreamCut { .. } => "CLOUD_STREAM_CUT",
            Self::BadResponse { .. } => "CLOUD_BAD_RESPONSE",
            Self::Redirected { .. } => "CLOUD_REDIRECTED",
            Self::Client(_) => "CLOUD_CLIENT",
        }
    }
}

/// What storing or reading an API key can fail with.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the API key is empty")]
    EmptyKey,

    #[error("{0}")]
    InvalidUrl(String),

    #[error("cannot use the key file {path}: {source}")]
    File { path: PathBuf, source: std::io::Error },

    #[error("the key file {path} is corrupt: {detail}")]
    CorruptFile { path: PathBuf, detail: String },

    #[error("the OS keychain failed: {0}")]
    Keychain(#[source] keyring::Error),

    /// An API key from the environment with no URL to bind it to: it is sent nowhere.
    #[error("{key_var} is set but {url_var} is not: set {url_var} to the base URL the key is for (it is sent to that URL only)")]
    EnvKeyWithoutUrl { key_var: &'static str, url_var: &'static str },
}

pub type Result<T, E = CloudError> = std::result::Result<T, E>;
