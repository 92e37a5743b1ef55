//! A tiny MCP server for the tools' tests (`mcp/fake_server.py`, Python's
//! standard library only): well-behaved, or hostile on request.

use std::path::PathBuf;

/// The server's script.
pub fn fake_server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/fake_server.py")
}

/// An `mcp.json` entry starting the fake server in `mode` (ok, crash,
/// garbage, silent; see the script).
pub fn entry(mode: &str) -> String {
    format!(r#"{{"command": "python3", "args": [{:?}, {mode:?}]}}"#, fake_server().display().to_string())
}

/// The secret its `secret` tool returns (the scanner finds an API key in it).
pub const SECRET: &str = "sk-proj-4fZq8T2mLw9RbX7yKc3VnE6pHs1Ud0Ja";
