//! The server's typed errors: starting it ([`ServerError`]) and what a
//! [`crate::ModelProvider`] can answer instead of a loaded model
//! ([`ProvideError`]).

use std::net::SocketAddr;

use headroom_core::fit::FitReport;

/// Why the server could not start (or stop cleanly).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Anything but loopback without the explicit opt-in: the server would
    /// hand this Mac's model (and memory) to the whole network.
    #[error(
        "refusing to listen on {addr}: it is not a loopback address, so anyone on the network could use this model. \
         Bind 127.0.0.1, or allow remote clients explicitly (--allow-remote) and set an API key"
    )]
    NonLoopback { addr: SocketAddr },
    /// Remote clients were allowed, but no key protects the server from them.
    #[error("refusing to listen on {addr} without an API key: remote clients are allowed, so every request must carry a key")]
    RemoteWithoutKey { addr: SocketAddr },
    /// A key that is empty or only whitespace protects nothing.
    #[error("the API key is empty")]
    EmptyApiKey,
    /// A setting outside its valid range.
    #[error("invalid server setting {name} = {value}: {reason}")]
    InvalidSetting { name: &'static str, value: String, reason: &'static str },
    /// The address is taken, or not ours to bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The server's runtime or thread could not be started.
    #[error("cannot start the server's {what}: {source}")]
    Start {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Waiting for Ctrl-C failed (no signal handler could be installed).
    #[error("cannot wait for Ctrl-C: {0}")]
    Signal(#[source] std::io::Error),
    /// The server thread panicked; it has stopped.
    #[error("the server thread stopped unexpectedly")]
    Panicked,
}

/// Why a [`crate::ModelProvider`] did not make a model ready.
#[derive(Debug, thiserror::Error)]
pub enum ProvideError {
    /// No model with this id exists.
    #[error("the model `{model}` does not exist")]
    NotFound { model: String },
    /// Loading it would push the machine into swap (or it cannot fit at all);
    /// nothing was unloaded or loaded. The report has every number.
    #[error("the model `{model}` does not fit in memory")]
    WouldNotFit { model: String, report: Box<FitReport> },
    /// The model exists and fits, but loading it failed (a corrupt folder,
    /// an unsupported architecture, the memory could not be read …); the
    /// provider says why in words its user can act on.
    #[error("the model `{model}` could not be loaded: {reason}")]
    LoadFailed { model: String, reason: String },
    /// The request's KV format cannot be used with this model (its heads
    /// are not a whole number of groups); nothing was loaded.
    #[error("the model `{model}` cannot keep its KV cache that way: {source}")]
    KvFormat {
        model: String,
        #[source]
        source: headroom_core::kv::KvFormatError,
    },
    /// The model is loaded with a KV format that needs less memory than the
    /// one asked for: serving the request would mean reloading it under
    /// whoever is using it (the popover, queued requests); refused.
    #[error("the model `{model}` is loaded with its KV cache as {loaded}; a request for a larger KV format would reload it under the other users of this model")]
    KvFormatInUse { model: String, loaded: String },
    /// Another model is loaded and in use by the app (the popover holds
    /// it); loading the requested one would take it away. Refused unless
    /// the user allowed the server to switch models.
    #[error(
        "the model `{loaded}` is loaded and in use by the Headroom app, so this server does not replace it with `{requested}`. \
         Ask for `{loaded}`, or allow the server to switch models in Headroom's Settings"
    )]
    ModelInUse { requested: String, loaded: String },
}

pub type Result<T, E = ServerError> = std::result::Result<T, E>;
