//! `mcp.json`, the servers the user configured, in the notation LM Studio
//! and Cursor use (`{"mcpServers": {"name": {"command", "args", "env"}}}` or
//! `{"url": …}`), so a file written for either works here unchanged. Keys
//! this client does not use (`type`, `headers`, `disabled` …) are read and
//! ignored, except `disabled: true`, which leaves the server stopped.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The file's name in the app's data folder.
pub const FILE: &str = "mcp.json";

/// The most a config file may hold: it is a short list of servers.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// How the app reaches one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A program the app starts, spoken to over its stdin and stdout.
    Stdio { command: String, args: Vec<String>, env: BTreeMap<String, String> },
    /// A streamable-HTTP server on this Mac (loopback only: a tool's
    /// arguments can hold what the privacy gate keeps from the network).
    Http { url: String },
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    pub name: String,
    pub transport: Transport,
    /// `"disabled": true` in the file: listed, never started.
    pub disabled: bool,
}

impl ServerSpec {
    /// Whether its tools' results are private unless the user says
    /// otherwise: a filesystem server's are (they are the user's files).
    pub fn private_by_default(&self) -> bool {
        let mentions = |s: &str| s.to_ascii_lowercase().contains("filesystem");
        mentions(&self.name)
            || match &self.transport {
                Transport::Stdio { command, args, .. } => mentions(command) || args.iter().any(|a| mentions(a)),
                Transport::Http { url } => mentions(url),
            }
    }
}

/// Why `mcp.json` could not be used. Nothing starts from a file that fails.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("could not read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is {bytes} bytes; a server list is at most {MAX_FILE_BYTES}")]
    TooLarge { path: PathBuf, bytes: u64 },
    #[error("{path} is not valid JSON in the mcpServers notation: {source}")]
    Json { path: PathBuf, source: serde_json::Error },
    #[error("server \"{name}\" in {path} has neither a \"command\" nor a \"url\"")]
    NoTransport { path: PathBuf, name: String },
    #[error("server \"{name}\" in {path} has both a \"command\" and a \"url\"; keep one")]
    BothTransports { path: PathBuf, name: String },
    #[error("server \"{name}\" in {path} has an empty \"command\"")]
    EmptyCommand { path: PathBuf, name: String },
    #[error("server \"{name}\" in {path}: \"{url}\" is not a loopback http:// URL (Headroom only talks to MCP servers on this Mac)")]
    NotLoopback { path: PathBuf, name: String, url: String },
    #[error("a server in {path} has an empty name")]
    EmptyName { path: PathBuf },
}

#[derive(Deserialize)]
struct File {
    #[serde(rename = "mcpServers", default)]
    servers: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct Entry {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
    #[serde(default)]
    disabled: bool,
}

/// The servers in `dir/mcp.json`, in the file's order; none where there is no file.
pub fn read(dir: &Path) -> Result<Vec<ServerSpec>, ConfigError> {
    let path = dir.join(FILE);
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(ConfigError::Read { path, source }),
    };
    if meta.len() > MAX_FILE_BYTES {
        return Err(ConfigError::TooLarge { path, bytes: meta.len() });
    }
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
    parse(&path, &text)
}

/// The servers `text` (the contents of `path`) configures.
pub fn parse(path: &Path, text: &str) -> Result<Vec<ServerSpec>, ConfigError> {
    let json = |source| ConfigError::Json { path: path.to_owned(), source };
    let file: File = serde_json::from_str(text).map_err(json)?;
    let mut out = Vec::with_capacity(file.servers.len());
    for (name, value) in file.servers {
        let path = path.to_owned();
        if name.trim().is_empty() {
            return Err(ConfigError::EmptyName { path });
        }
        let entry: Entry = serde_json::from_value(value).map_err(json)?;
        let transport = match (entry.command, entry.url) {
            (Some(_), Some(_)) => return Err(ConfigError::BothTransports { path, name }),
            (None, None) => return Err(ConfigError::NoTransport { path, name }),
            (Some(command), None) if command.trim().is_empty() => return Err(ConfigError::EmptyCommand { path, name }),
            (Some(command), None) => Transport::Stdio { command, args: entry.args, env: entry.env },
            (None, Some(url)) if !is_loopback_http(&url) => return Err(ConfigError::NotLoopback { path, name, url }),
            (None, Some(url)) => Transport::Http { url },
        };
        out.push(ServerSpec { name, transport, disabled: entry.disabled });
    }
    Ok(out)
}

/// `http://` to localhost, 127.0.0.0/8 or [::1], with a port or not.
fn is_loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return false;
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Vec<ServerSpec>, ConfigError> {
        parse(Path::new("mcp.json"), text)
    }

    #[test]
    fn reads_lm_studio_and_cursor_files() {
        let servers = parsed(
            r#"{"mcpServers": {
                "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
                "weather": {"command": "uvx", "args": ["weather"], "env": {"UNITS": "metric"}, "type": "stdio"},
                "local-http": {"url": "http://127.0.0.1:8931/mcp", "headers": {"X": "y"}},
                "off": {"command": "x", "disabled": true}
            }, "other": 1}"#,
        )
        .unwrap();
        let names: Vec<_> = servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["filesystem", "weather", "local-http", "off"]);
        assert!(servers[0].private_by_default());
        assert!(!servers[1].private_by_default());
        assert_eq!(
            servers[1].transport,
            Transport::Stdio {
                command: "uvx".into(),
                args: vec!["weather".into()],
                env: [("UNITS".to_owned(), "metric".to_owned())].into()
            }
        );
        assert_eq!(servers[2].transport, Transport::Http { url: "http://127.0.0.1:8931/mcp".into() });
        assert!(servers[3].disabled && !servers[0].disabled);
    }

    #[test]
    fn refuses_what_it_cannot_start_with_the_reason() {
        let cases = [
            (r#"{"mcpServers": {"a": {}}}"#, "neither a \"command\" nor a \"url\""),
            (r#"{"mcpServers": {"a": {"command": "x", "url": "http://localhost/"}}}"#, "both"),
            (r#"{"mcpServers": {"a": {"command": "  "}}}"#, "empty \"command\""),
            (r#"{"mcpServers": {"a": {"url": "https://example.com/mcp"}}}"#, "not a loopback"),
            (r#"{"mcpServers": {"a": {"url": "http://localhost.evil.com/"}}}"#, "not a loopback"),
            (r#"{"mcpServers": {"a": {"url": "http://127.0.0.1@evil.com/"}}}"#, "not a loopback"),
            (r#"{"mcpServers": {"a": {"command": 3}}}"#, "not valid JSON"),
            (r#"{"mcpServers": [1]}"#, "not valid JSON"),
            ("garbage", "not valid JSON"),
        ];
        for (text, says) in cases {
            let e = parsed(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn loopback_urls() {
        for ok in ["http://localhost:3000/mcp", "http://127.0.0.1/mcp", "http://[::1]:8080/", "http://127.1.2.3"] {
            assert!(is_loopback_http(ok), "{ok}");
        }
        for bad in ["https://localhost/", "http://10.0.0.1/", "http://[::2]/", "ftp://127.0.0.1/", "http://example.com"]
        {
            assert!(!is_loopback_http(bad), "{bad}");
        }
    }

    #[test]
    fn no_file_is_no_servers_and_a_huge_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
        std::fs::write(dir.path().join(FILE), vec![b' '; 2 << 20]).unwrap();
        assert!(matches!(read(dir.path()), Err(ConfigError::TooLarge { .. })));
    }
}
