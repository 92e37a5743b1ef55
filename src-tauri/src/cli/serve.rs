//! `headroom serve`: the local OpenAI-compatible server in the foreground,
//! on the models the app knows (plus any folders named here), until Ctrl-C.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use headroom_core::settings::Settings;
use headroom_engine::worker::{EngineHandle, DEFAULT_CONTEXT_LIMIT};
use headroom_engine::EngineError;
use headroom_server::{
    ModelProvider, ProvideError, ServeConfig, Server, ServerError, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_REQUESTS,
    DEFAULT_MAX_TOKENS, DEFAULT_PORT, HEADER_TIMEOUT,
};

use super::kernel::KernelArgs;
use super::kv::KvArgs;
use super::speculative::SpeculativeArgs;
use super::CliError;
use crate::serve::AppModels;
use crate::{AppState, Locations};

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The port to listen on (0: any free port; the URL printed says which).
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// The address to listen on. Anything but loopback needs --allow-remote and --api-key-env.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub host: IpAddr,
    /// Load this model before serving: a model folder, or an id from `headroom models`.
    #[arg(long)]
    pub model: Option<String>,
    /// Also offer every model folder inside this folder.
    #[arg(long, value_name = "DIR")]
    pub models_dir: Option<PathBuf>,
    /// Context limit in tokens (prompt + reply) for the models the server loads.
    #[arg(long, default_value_t = DEFAULT_CONTEXT_LIMIT)]
    pub context: usize,
    #[command(flatten)]
    pub kernel: KernelArgs,
    /// The KV cache of the models the server loads (a request may ask for
    /// another with `kv_bits`, `kv_group_size`, `quantized_kv_start`).
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub speculative: SpeculativeArgs,
    #[command(flatten)]
    pub peer: super::lend::PeerArgs,
    /// Max new tokens for a request that sets none.
    #[arg(long, default_value_t = DEFAULT_MAX_TOKENS)]
    pub max_tokens: usize,
    /// Chat completions admitted at once, the one running and those waiting
    /// for it; one more is answered 429 with Retry-After.
    #[arg(long, default_value_t = DEFAULT_MAX_REQUESTS)]
    pub max_requests: usize,
    /// Connections open at once (also at most half the open-file limit);
    /// one more is closed as it is accepted, and the log says so.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Accept clients from other machines (with --host 0.0.0.0 or a LAN address).
    #[arg(long, requires = "api_key_env")]
    pub allow_remote: bool,
    /// The environment variable holding an API key every request must send
    /// one of (a variable, not the key itself, so it stays out of `ps` and
    /// shell history). Repeat it for several keys: each key's clients get a
    /// prompt cache of their own, so none can read another's prompts.
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Vec<String>,
}

/// What `serve` can fail with, beyond the other subcommands' errors.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Cli(#[from] CliError),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("the environment variable {var} named by --api-key-env is not set or is empty")]
    MissingKey { var: String },
    #[error("cannot read --models-dir {}: {source}", dir.display())]
    ModelsDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Load(ProvideError),
    /// The menu-bar app's own server (Settings → Local server) has the port.
    #[error(
        "the Headroom app already serves the OpenAI-compatible API on http://127.0.0.1:{port}/v1 \
         (Settings → Local server): use that, stop it there first, or pick another --port"
    )]
    AppServes { port: u16 },
    /// --model is neither a folder nor an id of a model Headroom knows.
    #[error(
        "model `{model}` not found: not a folder, nor a model in {} or the Hugging Face cache ({}); `headroom models` lists them",
        models_dir.display(),
        hubs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    UnknownModel { model: String, models_dir: PathBuf, hubs: Vec<PathBuf> },
}

impl From<EngineError> for ServeError {
    fn from(e: EngineError) -> Self {
        Self::Cli(CliError::from(e))
    }
}

/// A test knob, never for users: `HEADROOM_SERVE_HEADER_TIMEOUT_MS` shortens
/// the deadline for a request's headers (default [`HEADER_TIMEOUT`]) so the
/// connection-limit test (tests/serve_limits.rs) sees idle connections
/// closed in a second instead of ten. Listed in docs/testing.md.
fn header_timeout() -> std::time::Duration {
    std::env::var("HEADROOM_SERVE_HEADER_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map_or(HEADER_TIMEOUT, std::time::Duration::from_millis)
}

/// Runs the server until Ctrl-C; errors are one line on stderr, exit code 1.
pub fn run(args: &ServeArgs) -> ExitCode {
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("headroom: {}", headroom_core::terminal::error_line(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

fn serve(args: &ServeArgs) -> Result<(), ServeError> {
    let api_keys = args
        .api_key_env
        .iter()
        .map(|var| {
            std::env::var(var)
                .ok()
                .filter(|k| !k.trim().is_empty())
                .ok_or_else(|| ServeError::MissingKey { var: var.clone() })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let config = ServeConfig {
        allow_non_loopback: args.allow_remote,
        api_keys,
        context_limit: Some(args.context),
        default_max_tokens: args.max_tokens,
        max_requests: args.max_requests,
        max_connections: args.max_connections,
        header_timeout: header_timeout(),
        speculative: args.speculative.mode(),
    };
    let addr = SocketAddr::new(args.host, args.port);
    // Refused before a model is loaded: a misconfigured server costs nothing.
    config.check(addr)?;

    let locations = Locations::from_env(|| crate::platform_app_data_dir().ok_or(CliError::NoDataDir))?;
    // Before anything loads: the app holds the port, and the model with it.
    if crate::serve_marker::app_serves_on(&locations.data_dir, args.port) {
        return Err(ServeError::AppServes { port: args.port });
    }
    // The app's state needs its database, though the server stores nothing yet.
    let store = crate::runtime::block_on(headroom_store::Store::open(&locations.data_dir)).map_err(CliError::from)?;
    let engine = EngineHandle::spawn()?;
    let state = AppState::new(engine.clone(), locations, store);
    // Each model's thinking setting, as the app keeps it: a request that
    // sends no reasoning_effort gets it here as in the app's own server.
    match crate::runtime::block_on(state.store.settings()) {
        Ok(stored) => state.apply_settings(&Settings { thinking: stored.thinking, ..state.settings() }),
        Err(e) => tracing::warn!("the models' thinking settings were not read: {e}"),
    }
    state.override_loads(args.context, args.kernel.kernel, args.kv.format()?);
    let draft = args.speculative.draft_dir(None, &state.locations.hub)?;
    let mut provider = AppModels::new(state.clone()).with_peer(args.peer.peer.clone()).with_draft(draft);
    if let Some(dir) = &args.models_dir {
        provider.add_models_dir(dir).map_err(|source| ServeError::ModelsDir { dir: dir.clone(), source })?;
    }
    let preload = match &args.model {
        // A folder or a .gguf file, as `generate` takes them; else an id.
        Some(m) if std::path::Path::new(m).exists() => {
            let path = std::path::Path::new(m);
            Some(provider.add_model(path).ok_or_else(|| EngineError::MissingConfig { dir: path.to_owned() })?)
        }
        Some(id) => Some(id.clone()),
        // No --model: the default model is offered like every other door
        // offers it, and loaded by the first request that names it.
        None => {
            provider.add_default_model();
            None
        }
    };
    // Listening first: a taken port fails in milliseconds, not after a load.
    let server = Server::bind(addr, config, engine.clone(), Arc::new(provider.clone()))?;
    let loaded = match &preload {
        Some(id) => Some(provider.ensure_loaded(id, Some(args.context), None).map_err(|e| match e {
            ProvideError::NotFound { model } => ServeError::UnknownModel {
                model,
                models_dir: state.locations.data_dir.join(crate::locations::MODELS_DIR),
                hubs: state.locations.hub.hub_dirs(),
            },
            ProvideError::WouldNotFit { model, report } => {
                ServeError::Cli(CliError::WouldNotFit { model, report, remedies: None })
            }
            other => ServeError::Load(other),
        })?),
        None => None,
    };
    let offered = provider.entries().len();
    let mut out = std::io::stdout().lock();
    let model = loaded.map_or_else(|| "none yet: the first request loads the one it names".to_owned(), |m| m.id);
    // The first line is the URL alone, so scripts (and tests) can read it.
    writeln!(out, "{}", server.base_url()).map_err(CliError::from)?;
    writeln!(out, "OpenAI-compatible API. Models on offer: {offered}; loaded: {model}. Ctrl-C stops.")
        .and_then(|()| out.flush())
        .map_err(CliError::from)?;
    drop(out);

    // Getting out of the way as the app does: idle unload, and under
    // pressure the cached chat states first, then the model (said on
    // stderr); the server's requests count as use, as in the app.
    *state.server.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(server);
    if let Err(e) = crate::give_back::start_headless(&state) {
        eprintln!("headroom: no memory readings, so no reaction to memory pressure: {e}");
    }
    let signal = crate::runtime::block_on(tokio::signal::ctrl_c());
    eprintln!("headroom: stopping the server");
    let server = state.server.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    signal.map_err(headroom_server::ServerError::Signal)?;
    if let Some(server) = server {
        server.stop()?;
    }
    // The model goes on its own thread before the process's exit handlers run.
    engine.shutdown();
    Ok(())
}
