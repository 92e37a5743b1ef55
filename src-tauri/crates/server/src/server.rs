//! Starting and stopping the server. It runs on a thread of its own with
//! its own small tokio runtime, so the CLI (no runtime) and the app (Tauri's
//! runtime) embed it the same way: [`Server::bind`] returns once it listens,
//! [`Server::stop`] (or dropping it) cancels the runs in flight, stops
//! accepting and joins the thread.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use headroom_engine::worker::EngineHandle;
use tokio::sync::oneshot;

use crate::config::ServeConfig;
use crate::error::{Result, ServerError};
use crate::provider::ModelProvider;
use crate::routes::{router, Ctx};
use crate::run::Tally;

/// The port `headroom serve` and the app's toggle use unless told otherwise.
pub const DEFAULT_PORT: u16 = 8080;
/// How long stopping waits for work already on the blocking threads (a load).
const STOP_GRACE: Duration = Duration::from_secs(2);
/// How long open connections get to end after a stop: a client holding a
/// half-sent request cannot keep the server (or `headroom serve`) alive.
pub const STOP_DEADLINE: Duration = Duration::from_secs(3);

/// What the server has done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerStats {
    /// Chat-completion requests received (valid or not).
    pub requests: u64,
    /// Runs that ended on their own (finished, or failed in the engine).
    pub completed: u64,
    /// Runs cancelled because the client went away (or the server stopped).
    pub cancelled: u64,
    /// Requests answered 429 because every admitted place was taken.
    pub refused: u64,
    /// Runs queued or generating now.
    pub active: usize,
}

/// A running server. Dropping it stops it.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    engine: EngineHandle,
    tally: Arc<Tally>,
    requires_key: bool,
    runtime: tokio::runtime::Handle,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Checks `config`, listens on `addr` (port 0: any free port) and serves
    /// on a thread of its own until stopped. Runs go to `engine`, the same
    /// handle the app's chat uses, so they queue behind each other.
    pub fn bind(
        addr: SocketAddr,
        config: ServeConfig,
        engine: EngineHandle,
        provider: Arc<dyn ModelProvider>,
    ) -> Result<Self> {
        config.check(addr)?;
        // Bound here, synchronously, so a taken port is the caller's error.
        let listener = std::net::TcpListener::bind(addr).map_err(|source| ServerError::Bind { addr, source })?;
        let local = listener.local_addr().map_err(|source| ServerError::Bind { addr, source })?;
        listener.set_nonblocking(true).map_err(|source| ServerError::Bind { addr, source })?;

        let tally = Arc::new(Tally::default());
        let requires_key = !config.api_keys.is_empty();
        let admission = Arc::new(tokio::sync::Semaphore::new(config.max_requests));
        let header_timeout = config.header_timeout;
        let max_connections = crate::limits::connection_cap(config.max_connections, crate::limits::raise_fd_limit());
        let epoch = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let ctx = Ctx {
            engine: engine.clone(),
            provider,
            loopback_only: !config.allow_non_loopback,
            config: Arc::new(config),
            turn: Arc::default(),
            admission,
            tally: Arc::clone(&tally),
            epoch,
        };
        let (shutdown, shutdown_rx) = oneshot::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        // The runtime is built, used and dropped on this thread: dropping a
        // runtime inside another (Tauri's) panics.
        let thread = std::thread::Builder::new()
            .name("headroom-server".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("headroom-server-io")
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(source) => {
                        let _ = ready_tx.send(Err(ServerError::Start { what: "runtime", source }));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(source) => {
                            let _ = ready_tx.send(Err(ServerError::Bind { addr: local, source }));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(tokio::runtime::Handle::current()));
                    let (stopping_tx, stopping_rx) = oneshot::channel::<()>();
                    let serve = crate::accept::serve(listener, router(ctx), header_timeout, max_connections, async move {
                        let _ = shutdown_rx.await;
                        let _ = stopping_tx.send(());
                    });
                    // A graceful stop waits for every open connection, a
                    // half-sent request's included: it gets STOP_DEADLINE.
                    let deadline = async move {
                        match stopping_rx.await {
                            Ok(()) => tokio::time::sleep(STOP_DEADLINE).await,
                            Err(_) => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        () = serve => {}
                        () = deadline => {
                            tracing::warn!("connections still open {} s after the stop: closed", STOP_DEADLINE.as_secs());
                        }
                    }
                });
                runtime.shutdown_timeout(STOP_GRACE);
            })
            .map_err(|source| ServerError::Start { what: "thread", source })?;
        let runtime = match ready_rx.recv() {
            Ok(Ok(handle)) => handle,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(ServerError::Panicked);
            }
        };
        tracing::info!("serving the OpenAI-compatible API on http://{local}/v1");
        Ok(Self { addr: local, engine, tally, requires_key, runtime, shutdown: Some(shutdown), thread: Some(thread) })
    }

    /// The address it listens on (with the port chosen, if 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL clients use (`OPENAI_BASE_URL`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Whether every request must send one of its API keys.
    pub fn requires_key(&self) -> bool {
        self.requires_key
    }

    pub fn stats(&self) -> ServerStats {
        ServerStats {
            requests: self.tally.requests.load(Ordering::Relaxed),
            completed: self.tally.completed.load(Ordering::Relaxed),
            cancelled: self.tally.cancelled.load(Ordering::Relaxed),
            refused: self.tally.refused.load(Ordering::Relaxed),
            active: self.tally.active(),
        }
    }

    /// Blocks until the process gets Ctrl-C (SIGINT), for `headroom serve`.
    /// Call it from a thread outside any async runtime.
    pub fn wait_for_ctrl_c(&self) -> Result<()> {
        self.runtime.block_on(tokio::signal::ctrl_c()).map_err(ServerError::Signal)
    }

    /// Stops accepting, cancels the runs in flight, lets their responses end
    /// and joins the server thread. Blocks (briefly): call it off async threads.
    pub fn stop(mut self) -> Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<()> {
        let Some(thread) = self.thread.take() else { return Ok(()) };
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        // Graceful shutdown waits for open responses; a stream ends once its run does.
        self.tally.cancel_all(&self.engine);
        thread.join().map_err(|_| ServerError::Panicked)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Err(e) = self.stop_inner() {
            tracing::warn!("stopping the server: {e}");
        }
    }
}
