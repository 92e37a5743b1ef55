//! One connection to one MCP server through `rmcp`: start it (a child
//! process on stdio, or a streamable-HTTP server on loopback), list its
//! tools, call one. Every step has a deadline, a result has a size limit,
//! and a call can be stopped: a server that does not start, answers
//! garbage, hangs or floods ends in a sentence saying which, never in a
//! wait without end.

use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::ServiceExt;
use tokio::io::AsyncReadExt;

use super::config::{ServerSpec, Transport};

/// The most of a server's stderr kept to explain why it failed.
const STDERR_TAIL: usize = 2_000;

/// The most a tool's result may hold (its text, or its content as JSON):
/// more would not fit a local model's context anyway, and 1 MB of text is
/// already about 250k tokens.
pub const MAX_RESULT_BYTES: usize = 1 << 20;

/// A tool as its server describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTool {
    pub name: String,
    pub description: Option<String>,
    /// The JSON schema of its arguments object.
    pub schema: serde_json::Value,
}

/// What a call gave back, for the model and the call card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// Its content as text (text blocks as they are, others described).
    pub text: String,
    /// The server said the call failed (`isError`): the model still reads why.
    pub is_error: bool,
}

/// Why a server could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("could not start `{command}`: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("did not finish starting within {}s{}", .after.as_secs(), said(.stderr))]
    StartTimeout { after: Duration, stderr: String },
    #[error("did not answer as an MCP server: {source}{}", said(.stderr))]
    Handshake { source: Box<rmcp::service::ClientInitializeError>, stderr: String },
    #[error("did not list its tools within {}s", .after.as_secs())]
    ListTimeout { after: Duration },
    #[error("could not list its tools: {0}")]
    List(ServiceError),
}

/// Why a call gave no result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("the arguments are not a JSON object: {0}")]
    Arguments(String),
    #[error("no answer within {}s; the call was cut off", .after.as_secs())]
    Timeout { after: Duration },
    #[error("stopped")]
    Stopped,
    #[error("the result is {bytes} bytes, more than the {MAX_RESULT_BYTES} a result may hold; it was dropped")]
    TooLarge { bytes: usize },
    #[error("the server closed the connection during the call{}", said(.stderr))]
    Closed { stderr: String },
    #[error("the server answered with an error: {0}")]
    Server(ServiceError),
}

/// " (it said: …)" with the last of a server's stderr, or nothing.
pub(super) fn said(stderr: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        String::new()
    } else {
        format!(" (it said: {s})")
    }
}

/// A started server.
pub struct Connection {
    service: RunningService<RoleClient, ()>,
    /// The last [`STDERR_TAIL`] bytes it wrote to stderr (stdio servers).
    stderr: Arc<Mutex<String>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("closed", &self.service.is_closed()).finish()
    }
}

/// Keeps the end of `stderr` in `tail` until the stream ends.
fn keep_tail(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<String>>) {
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let mut t = tail.lock().unwrap_or_else(PoisonError::into_inner);
            t.push_str(&String::from_utf8_lossy(&buf[..n]));
            if t.len() > STDERR_TAIL {
                let mut cut = t.len() - STDERR_TAIL;
                while !t.is_char_boundary(cut) {
                    cut += 1;
                }
                t.drain(..cut);
            }
        }
    });
}

impl Connection {
    /// Starts `spec`'s server and lists its tools, each within `deadline`.
    pub async fn start(spec: &ServerSpec, deadline: Duration) -> Result<(Self, Vec<ServerTool>), ServerError> {
        let stderr = Arc::new(Mutex::new(String::new()));
        let tail = || stderr.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let serving = match &spec.transport {
            Transport::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env).kill_on_drop(true);
                let (process, err) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|source| ServerError::Spawn { command: command.clone(), source })?;
                if let Some(err) = err {
                    keep_tail(err, Arc::clone(&stderr));
                }
                tokio::time::timeout(deadline, ().serve(process)).await
            }
            Transport::Http { url } => {
                let transport = StreamableHttpClientTransport::from_uri(url.as_str());
                tokio::time::timeout(deadline, ().serve(transport)).await
            }
        };
        let service = match serving {
            Err(_) => return Err(ServerError::StartTimeout { after: deadline, stderr: tail() }),
            Ok(Err(source)) => {
                // What it wrote before dying is the likeliest explanation: give it a moment to arrive.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Err(ServerError::Handshake { source: Box::new(source), stderr: tail() });
            }
            Ok(Ok(service)) => service,
        };
        let tools = match tokio::time::timeout(deadline, service.peer().list_all_tools()).await {
            Err(_) => return Err(ServerError::ListTimeout { after: deadline }),
            Ok(Err(e)) => return Err(ServerError::List(e)),
            Ok(Ok(tools)) => tools,
        };
        let tools = tools
            .into_iter()
            .map(|t| ServerTool {
                name: t.name.into_owned(),
                description: t.description.map(|d| d.into_owned()),
                schema: serde_json::Value::Object((*t.input_schema).clone()),
            })
            .collect();
        Ok((Self { service, stderr }, tools))
    }

    /// Whether the server is gone (exited, connection closed).
    pub fn is_closed(&self) -> bool {
        self.service.is_closed()
    }

    /// The last of what the server wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        self.stderr.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// A handle that calls tools without holding the connection (the
    /// service's map is not locked across a call).
    pub fn caller(&self) -> Caller {
        Caller { peer: self.service.peer().clone(), stderr: Arc::clone(&self.stderr) }
    }

    /// Ends the connection (a child process is killed if it does not exit).
    pub async fn stop(mut self) {
        let _ = self.service.close_with_timeout(Duration::from_secs(3)).await;
    }
}

/// Calls one server's tools; see [`Connection::caller`].
#[derive(Clone, Debug)]
pub struct Caller {
    peer: rmcp::service::Peer<RoleClient>,
    stderr: Arc<Mutex<String>>,
}

impl Caller {
    /// Calls `tool` with `arguments` (JSON text from the model), within
    /// `deadline`, unless `stop` resolves first.
    pub async fn call(
        &self,
        tool: &str,
        arguments: &str,
        deadline: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<ToolOutput, CallError> {
        let arguments =
            match serde_json::from_str::<serde_json::Value>(if arguments.trim().is_empty() { "{}" } else { arguments })
            {
                Ok(serde_json::Value::Object(map)) => map,
                Ok(other) => return Err(CallError::Arguments(format!("got {other}"))),
                Err(e) => return Err(CallError::Arguments(e.to_string())),
            };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        // Dropping the request (timeout, stop) tells the server it was cancelled.
        let result = tokio::select! {
            r = tokio::time::timeout(deadline, self.peer.call_tool(params)) => r,
            () = stop => return Err(CallError::Stopped),
        };
        let result = match result {
            Err(_) => return Err(CallError::Timeout { after: deadline }),
            Ok(Err(ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let stderr = self.stderr.lock().unwrap_or_else(PoisonError::into_inner).clone();
                return Err(CallError::Closed { stderr });
            }
            Ok(Err(e)) => return Err(CallError::Server(e)),
            Ok(Ok(result)) => result,
        };
        let mut text = String::new();
        for block in &result.content {
            if !text.is_empty() {
                text.push('\n');
            }
            match block {
                ContentBlock::Text(t) => text.push_str(&t.text),
                other => text.push_str(&serde_json::to_string(other).unwrap_or_default()),
            }
            if text.len() > MAX_RESULT_BYTES {
                break;
            }
        }
        if text.is_empty() {
            if let Some(structured) = &result.structured_content {
                text = structured.to_string();
            }
        }
        if text.len() > MAX_RESULT_BYTES {
            let bytes = result
                .content
                .iter()
                .map(|b| b.as_text().map_or_else(|| serde_json::to_string(b).map_or(0, |s| s.len()), |t| t.text.len()))
                .sum::<usize>()
                .max(text.len());
            return Err(CallError::TooLarge { bytes });
        }
        Ok(ToolOutput { text, is_error: result.is_error.unwrap_or(false) })
    }
}
