//! What a hub check or pull can fail with; every variant names the repo,
//! file, URL or path it is about.

use std::path::PathBuf;

/// A failed hub request, fit check or download.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("`{repo}` is not a Hugging Face repo id: expected `org/name` (letters, digits, `-`, `_`, `.`)")]
    InvalidRepoId { repo: String },
    #[error("`{revision}` is not a revision Headroom can pull: expected a branch, tag or commit without `/`, `..` or spaces")]
    InvalidRevision { revision: String },
    #[error("`{endpoint}` is not a hub endpoint: expected an http:// or https:// URL")]
    InvalidEndpoint { endpoint: String },
    /// Plain http:// to another machine: the token, the file list and every
    /// byte would cross the network unencrypted and could be altered on the way.
    #[error("`{endpoint}` is plain http:// to another machine: the token and the files would cross the network unencrypted; use https:// (http:// is allowed on this machine's loopback only)")]
    PlainHttpEndpoint { endpoint: String },
    /// The hub answers 401/404 alike for a missing and a private repo.
    #[error(
        "repository {repo} was not found at {endpoint} (HTTP {status}); check the id (if it is private or gated, log in with `huggingface-cli login` or set HF_TOKEN)"
    )]
    RepoNotFound { repo: String, endpoint: String, status: u16 },
    /// 401/403 without a token: a gated repo (Llama, Gemma, Mistral …) or a private one.
    #[error(
        "{repo} is gated: the hub refused it without a Hugging Face token (HTTP {status}). Accept the license on the model's page ({page}), then log in with `huggingface-cli login` or set HF_TOKEN, and pull again"
    )]
    Gated { repo: String, page: String, status: u16 },
    /// 401/403 although a token was sent: expired, revoked, without read
    /// access, or the license not (yet) accepted for this account.
    #[error(
        "the hub refused {repo} (HTTP {status}) although a Hugging Face token was sent (from {origin}): check that the token is valid and can read ({endpoint}/settings/tokens) and that your access request on {page} was accepted"
    )]
    TokenRefused { repo: String, page: String, endpoint: String, status: u16, origin: String },
    /// The token file exists but cannot be read (a missing file is no token).
    #[error("cannot read the Hugging Face token file {}: {source}", path.display())]
    TokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A token that cannot go into an HTTP header; `origin` names where it came from, never the token.
    #[error("the Hugging Face token from {origin} cannot be used: {reason}")]
    InvalidToken { origin: String, reason: &'static str },
    #[error("revision `{revision}` of {repo} was not found at {endpoint}")]
    RevisionNotFound { repo: String, revision: String, endpoint: String },
    #[error("{file} was not found in {repo} at revision {revision}")]
    FileNotFound { repo: String, revision: String, file: String },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("cannot reach {url}: {source}")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} sent an answer Headroom cannot use: {reason}")]
    Protocol { url: String, reason: String },
    #[error("{repo} has no weights Headroom can run: expected model.safetensors or model.safetensors.index.json")]
    NoWeights { repo: String },
    #[error("{repo} has no config.json: it is not a model Headroom can run")]
    NoConfig { repo: String },
    /// config.json, the shard index or a safetensors header cannot be used (the reason names the field or tensor).
    #[error("{file} in {repo}: {source}")]
    Format {
        repo: String,
        file: String,
        #[source]
        source: Box<headroom_core::format::FormatError>,
    },
    #[error("{file} is listed in model.safetensors.index.json of {repo} but the repo has no such file")]
    MissingShard { repo: String, file: String },
    /// A name from the hub (commit, etag, file path) that cannot be a path in the cache.
    #[error("{repo}: {source}")]
    CacheName {
        repo: String,
        #[source]
        source: Box<headroom_core::format::FormatError>,
    },
    #[error("{file} arrived with sha256 {actual}, but the hub says {expected}: the download was deleted and nothing was added to the cache")]
    HashMismatch { file: String, expected: String, actual: String },
    #[error("{file} arrived with git blob id {actual}, but the hub says {expected}: the download was deleted and nothing was added to the cache")]
    BlobIdMismatch { file: String, expected: String, actual: String },
    #[error("{file} arrived with {actual} bytes, but the hub says {expected}: the download was deleted and nothing was added to the cache")]
    SizeMismatch { file: String, expected: u64, actual: u64 },
    #[error("{file}: the transfer kept failing ({attempts} attempts); the {kept} bytes received are kept and the next pull resumes from there: {reason}")]
    TransferFailed { file: String, attempts: u32, kept: u64, reason: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Cancelled by the user; partial blobs stay as `*.incomplete` for the next pull.
    #[error("the pull of {repo} was cancelled; nothing was added to the model list, and the next pull resumes what was received")]
    Cancelled { repo: String },
}

pub type Result<T, E = HubError> = std::result::Result<T, E>;

/// An `Io` error about `path`, for `map_err`.
pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> HubError {
    let path = path.into();
    move |source| HubError::Io { path, source }
}
