//! The MCP client: the servers `mcp.json` names, started by the app (stdio)
//! or reached on loopback (streamable HTTP); each one's state (starting,
//! running with its tools, failed with the reason, stopped); the user's
//! switches per tool (`flags`); and the one way a turn calls a tool
//! ([`Tools::call`]), with a deadline, a size limit and Stop. What a tool
//! returns goes through the privacy gate with the rest of the turn (see
//! `crate::turn::gate`): that is why the switches include "results are
//! private".
//!
//! Only the popover's turns call tools. The local OpenAI server passes a
//! request's `tools` to the model and the calls back to its client, which
//! runs them.

pub mod client;
pub mod config;
pub mod flags;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;

pub use client::{CallError, ServerError, ServerTool, ToolOutput, MAX_RESULT_BYTES};
pub use config::{ServerSpec, Transport};
pub use flags::{FlagStore, ToolFlags};

use crate::codes::{capitalized, Coded, ErrorCode};

/// How long a server may take to start and to list its tools.
pub const START_DEADLINE: Duration = Duration::from_secs(20);
/// How long one call may take.
pub const CALL_DEADLINE: Duration = Duration::from_secs(60);

/// Where a server stands, as Settings → Tools shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum ServerState {
    Starting,
    Running,
    /// It could not be started or used; `reason` says why, in words.
    Failed {
        reason: String,
    },
    /// Not started (`"disabled": true`), or stopped by the user or at quit.
    Stopped,
}

/// One tool as Settings → Tools lists it.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct ToolView {
    pub name: String,
    pub description: Option<String>,
    pub flags: ToolFlags,
}

/// One server as Settings → Tools lists it.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct ServerView {
    pub name: String,
    /// How it is reached, in words: its command line, or its URL.
    pub endpoint: String,
    #[serde(flatten)]
    pub state: ServerState,
    pub tools: Vec<ToolView>,
}

/// Settings → Tools: every configured server, and what is wrong with `mcp.json` if anything.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct ToolsView {
    /// The `mcp.json` the servers come from.
    pub config_path: String,
    /// Why `mcp.json` could not be read; then no server is listed.
    pub config_error: Option<String>,
    pub servers: Vec<ServerView>,
}

/// A tool offered to the model this turn, with where it lives.
#[derive(Debug, Clone, PartialEq)]
pub struct Offered {
    pub server: String,
    pub tool: headroom_core::chat::Tool,
    pub flags: ToolFlags,
}

/// What the tools service could not do.
#[derive(Debug, thiserror::Error)]
pub enum ToolsError {
    #[error("there is no MCP server named \"{0}\"")]
    NoServer(String),
    #[error("server \"{server}\" has no tool named \"{tool}\"")]
    NoTool { server: String, tool: String },
    #[error("server \"{0}\" is not running")]
    NotRunning(String),
    #[error(transparent)]
    Flags(#[from] flags::FlagsError),
    // Boxed: a call's error carries the protocol's, and every result would be that large.
    #[error("{tool} from {server}: {source}")]
    Call { server: String, tool: String, source: Box<CallError> },
}

impl ToolsError {
    /// Why a call gave no result, for a call's error.
    pub fn call_error(&self) -> Option<&CallError> {
        match self {
            Self::Call { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Coded for ToolsError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::NoServer(_) | Self::NoTool { .. } => ErrorCode::ToolNotFound,
            Self::NotRunning(_) => ErrorCode::ToolServerDown,
            Self::Flags(_) => ErrorCode::Io,
            Self::Call { source, .. } if matches!(**source, CallError::Timeout { .. }) => ErrorCode::ToolTimeout,
            Self::Call { .. } => ErrorCode::ToolFailed,
        }
    }

    fn message(&self) -> String {
        capitalized(&self.to_string())
    }
}

/// One configured server and what the app holds of it.
struct Server {
    spec: ServerSpec,
    state: ServerState,
    tools: Vec<ServerTool>,
    connection: Option<client::Connection>,
    /// Bumped at each start, so a slow start that lost a race to a stop or
    /// a restart does not install itself afterwards.
    generation: u64,
}

#[derive(Default)]
struct Inner {
    /// The results each chat's turns got from tools, by session, for the
    /// privacy rule (this process's; a chat's results are not stored).
    results: std::collections::HashMap<String, Vec<headroom_core::router::ToolResult>>,
    /// The calls waiting for the user's answer, by (run, call id).
    waiting: std::collections::HashMap<(u64, String), tokio::sync::oneshot::Sender<Approval>>,
    config_error: Option<String>,
    servers: Vec<Server>,
    flags: FlagStore,
    generation: u64,
}

/// The tools service: a cheap handle in `AppState`. The map is behind a std
/// mutex touched briefly, never across an `.await` (a call clones a
/// [`client::Caller`] out of it first).
#[derive(Clone)]
pub struct Tools {
    dir: PathBuf,
    inner: Arc<Mutex<Inner>>,
    start_deadline: Duration,
    call_deadline: Duration,
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Tools {
    /// The service for the data folder `dir` (its `mcp.json`, its `tools.json`). Starts nothing.
    pub fn new(dir: PathBuf) -> Self {
        let flags = FlagStore::read(&dir);
        let inner = Inner { flags, ..Inner::default() };
        Self { dir, inner: Arc::new(Mutex::new(inner)), start_deadline: START_DEADLINE, call_deadline: CALL_DEADLINE }
    }

    /// The same service with other deadlines (tests, where a hang must end in seconds).
    pub fn with_deadlines(mut self, start: Duration, call: Duration) -> Self {
        self.start_deadline = start;
        self.call_deadline = call;
        self
    }

    pub fn call_deadline(&self) -> Duration {
        self.call_deadline
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the servers are configured.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join(config::FILE)
    }

    /// Reads `mcp.json` again and starts every server it names (those
    /// running are stopped first), each within the start deadline;
    /// returns when all have started or failed. A server that fails says
    /// why in its state; the others are not held up by it.
    pub async fn restart(&self) -> ToolsView {
        self.stop_all().await;
        let specs = match config::read(&self.dir) {
            Ok(specs) => specs,
            Err(e) => {
                tracing::warn!("MCP servers not started: {e}");
                let mut inner = self.lock();
                inner.config_error = Some(capitalized(&e.to_string()));
                inner.servers.clear();
                drop(inner);
                return self.view();
            }
        };
        let generation = {
            let mut inner = self.lock();
            inner.generation += 1;
            inner.config_error = None;
            let generation = inner.generation;
            inner.servers = specs
                .into_iter()
                .map(|spec| Server {
                    state: if spec.disabled { ServerState::Stopped } else { ServerState::Starting },
                    spec,
                    tools: Vec::new(),
                    connection: None,
                    generation,
                })
                .collect();
            generation
        };
        let starting: Vec<ServerSpec> =
            self.lock().servers.iter().filter(|s| !s.spec.disabled).map(|s| s.spec.clone()).collect();
        let deadline = self.start_deadline;
        let tasks: Vec<_> = starting
            .into_iter()
            .map(|spec| {
                let this = self.clone();
                crate::runtime::spawn(async move {
                    let started = client::Connection::start(&spec, deadline).await;
                    this.install(&spec.name, generation, started);
                })
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
        self.view()
    }

    /// Puts a start's outcome in place, unless the server was stopped or restarted meanwhile.
    fn install(
        &self,
        name: &str,
        generation: u64,
        started: Result<(client::Connection, Vec<ServerTool>), ServerError>,
    ) {
        let mut inner = self.lock();
        let Some(server) = inner.servers.iter_mut().find(|s| s.spec.name == name && s.generation == generation) else {
            return;
        };
        if server.state != ServerState::Starting {
            return;
        }
        match started {
            Ok((connection, tools)) => {
                tracing::info!(server = name, tools = tools.len(), "MCP server started");
                server.state = ServerState::Running;
                server.tools = tools;
                server.connection = Some(connection);
            }
            Err(e) => {
                tracing::warn!(server = name, "MCP server failed: {e}");
                server.state = ServerState::Failed { reason: capitalized(&e.to_string()) };
            }
        }
    }

    /// Stops every server (at quit, before a restart).
    pub async fn stop_all(&self) {
        let connections: Vec<_> = {
            let mut inner = self.lock();
            inner.generation += 1;
            inner
                .servers
                .iter_mut()
                .filter_map(|s| {
                    if matches!(s.state, ServerState::Running | ServerState::Starting) {
                        s.state = ServerState::Stopped;
                    }
                    s.connection.take()
                })
                .collect()
        };
        for c in connections {
            c.stop().await;
        }
    }

    /// What Settings → Tools shows. A running server found closed (it
    /// exited on its own) is shown failed, with what it said last.
    pub fn view(&self) -> ToolsView {
        let mut inner = self.lock();
        let Inner { config_error, servers, flags, .. } = &mut *inner;
        for s in servers.iter_mut() {
            mark_if_gone(s);
        }
        ToolsView {
            config_path: self.config_path().display().to_string(),
            config_error: config_error.clone(),
            servers: servers
                .iter()
                .map(|s| ServerView {
                    name: s.spec.name.clone(),
                    endpoint: endpoint(&s.spec.transport),
                    state: s.state.clone(),
                    tools: s
                        .tools
                        .iter()
                        .map(|t| ToolView {
                            name: t.name.clone(),
                            description: t.description.clone(),
                            flags: flags.get(&s.spec.name, &t.name, s.spec.private_by_default()),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// Sets one tool's switches and keeps them in `tools.json`.
    pub fn set_flags(&self, server: &str, tool: &str, new: ToolFlags) -> Result<ToolsView, ToolsError> {
        let mut inner = self.lock();
        let s =
            inner.servers.iter().find(|s| s.spec.name == server).ok_or_else(|| ToolsError::NoServer(server.into()))?;
        if !s.tools.iter().any(|t| t.name == tool) {
            return Err(ToolsError::NoTool { server: server.into(), tool: tool.into() });
        }
        let mut flags = inner.flags.clone();
        flags.set(server, tool, new);
        flags.write(&self.dir)?;
        inner.flags = flags;
        drop(inner);
        Ok(self.view())
    }

    /// One tool's switches (the defaults where none were set).
    pub fn flags(&self, server: &str, tool: &str) -> Option<ToolFlags> {
        let inner = self.lock();
        let s = inner.servers.iter().find(|s| s.spec.name == server)?;
        Some(inner.flags.get(server, tool, s.spec.private_by_default()))
    }

    /// The enabled tools of the running servers, as the model is offered
    /// them. Where two servers have a tool of one name, the later one's is
    /// left out (and logged): the model calls tools by name alone.
    pub fn offered(&self) -> Vec<Offered> {
        let mut inner = self.lock();
        let Inner { servers, flags, .. } = &mut *inner;
        let mut out: Vec<Offered> = Vec::new();
        for s in servers.iter_mut() {
            mark_if_gone(s);
            if s.state != ServerState::Running {
                continue;
            }
            for t in &s.tools {
                let f = flags.get(&s.spec.name, &t.name, s.spec.private_by_default());
                if !f.enabled {
                    continue;
                }
                if out.iter().any(|o| o.tool.name == t.name) {
                    tracing::warn!(server = s.spec.name, tool = t.name, "a tool of this name is offered already");
                    continue;
                }
                out.push(Offered {
                    server: s.spec.name.clone(),
                    tool: headroom_core::chat::Tool {
                        name: t.name.clone(),
                        description: t.description.clone(),
                        parameters: t.schema.clone(),
                    },
                    flags: f,
                });
            }
        }
        out
    }

    /// Calls `tool` on `server` with `arguments` (JSON text), within the
    /// call deadline, unless `stop` resolves first. A server that closed
    /// during the call is marked failed with what it said.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: &str,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<ToolOutput, ToolsError> {
        let caller = {
            let inner = self.lock();
            let s = inner
                .servers
                .iter()
                .find(|s| s.spec.name == server)
                .ok_or_else(|| ToolsError::NoServer(server.into()))?;
            match (&s.state, &s.connection) {
                (ServerState::Running, Some(c)) if !c.is_closed() => c.caller(),
                _ => return Err(ToolsError::NotRunning(server.into())),
            }
        };
        let result = caller.call(tool, arguments, self.call_deadline, stop).await;
        if let Err(CallError::Closed { stderr }) = &result {
            let mut inner = self.lock();
            if let Some(s) = inner.servers.iter_mut().find(|s| s.spec.name == server) {
                s.state = ServerState::Failed {
                    reason: capitalized(&format!("stopped during a call to {tool}{}", client::said(stderr))),
                };
                s.connection = None;
            }
        }
        result.map_err(|source| ToolsError::Call { server: server.into(), tool: tool.into(), source: Box::new(source) })
    }
}

/// A call waiting for the user's answer; see [`Tools::ask`].
#[derive(Debug)]
pub struct Pending {
    tools: Tools,
    key: (u64, String),
    rx: Option<tokio::sync::oneshot::Receiver<Approval>>,
}

impl Pending {
    /// Waits (from a turn's thread) for the answer, until `stop` resolves (`None` then).
    pub fn wait(mut self, stop: impl std::future::Future<Output = ()>) -> Option<Approval> {
        let rx = self.rx.take()?;
        crate::runtime::block_on(async {
            tokio::select! {
                a = rx => a.ok(),
                () = stop => None,
            }
        })
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.tools.lock().waiting.remove(&self.key);
    }
}

/// The user's answer to "Allow `tool` from server?".
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub enum Approval {
    /// Run this call.
    Once,
    /// Run this call and every later one of this tool without asking.
    Always,
    /// Do not run it; the model is told it was refused.
    Deny,
}

impl Tools {
    /// Keeps a tool's result as part of `session`'s context for the privacy rule.
    pub fn note_result(&self, session: &str, tool: &str, text: &str, private: bool) {
        let result = headroom_core::router::ToolResult { tool: tool.to_owned(), text: text.to_owned(), private };
        self.lock().results.entry(session.to_owned()).or_default().push(result);
    }

    /// The tool results in `session`'s context.
    pub fn results_in(&self, session: &str) -> Vec<headroom_core::router::ToolResult> {
        self.lock().results.get(session).cloned().unwrap_or_default()
    }

    /// Registers call `call_id` of run `run` as waiting for the user's
    /// answer, before the UI is told (so an answer cannot arrive first).
    pub fn ask(&self, run: u64, call_id: &str) -> Pending {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let key = (run, call_id.to_owned());
        self.lock().waiting.insert(key.clone(), tx);
        Pending { tools: self.clone(), key, rx: Some(rx) }
    }

    /// The user's answer to a waiting call; false when no such call waits
    /// (it was stopped, or answered already).
    pub fn answer(&self, run: u64, call_id: &str, approval: Approval) -> bool {
        let waiting = self.lock().waiting.remove(&(run, call_id.to_owned()));
        waiting.is_some_and(|tx| tx.send(approval).is_ok())
    }
}

/// A running server whose connection closed is failed, with what it said last.
fn mark_if_gone(s: &mut Server) {
    if s.state == ServerState::Running && s.connection.as_ref().is_some_and(client::Connection::is_closed) {
        let stderr = s.connection.take().map(|c| c.stderr_tail()).unwrap_or_default();
        s.state = ServerState::Failed { reason: capitalized(&format!("the server exited{}", client::said(&stderr))) };
    }
}

/// A server's command line or URL, in words.
fn endpoint(t: &Transport) -> String {
    match t {
        Transport::Stdio { command, args, .. } => {
            std::iter::once(command.as_str()).chain(args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
        }
        Transport::Http { url } => url.clone(),
    }
}

#[cfg(test)]
mod tests;
