//! The MCP client against a real server process (the fake one in
//! headroom-test-support, Python's standard library only): well-behaved,
//! and each way a server can go wrong ending in a sentence within its
//! deadline.

use std::time::{Duration, Instant};

use headroom_test_support::mcp;

use super::*;
use crate::runtime::block_on;

/// A service over a scratch folder whose `mcp.json` holds `servers` (name, entry).
fn tools_with(servers: &[(&str, String)], call: Duration) -> (tempfile::TempDir, Tools) {
    let dir = tempfile::tempdir().unwrap();
    let entries: Vec<String> = servers.iter().map(|(name, entry)| format!("{name:?}: {entry}")).collect();
    std::fs::write(dir.path().join(config::FILE), format!(r#"{{"mcpServers": {{{}}}}}"#, entries.join(","))).unwrap();
    let tools = Tools::new(dir.path().to_owned()).with_deadlines(Duration::from_secs(10), call);
    (dir, tools)
}

fn state_of(view: &ToolsView, name: &str) -> ServerState {
    view.servers.iter().find(|s| s.name == name).unwrap().state.clone()
}

fn never() -> impl std::future::Future<Output = ()> {
    std::future::pending()
}

#[test]
fn a_server_starts_lists_its_tools_and_answers_a_call() {
    let (_dir, tools) = tools_with(&[("fake", mcp::entry("ok"))], Duration::from_secs(10));
    let view = block_on(tools.restart());
    assert_eq!(view.config_error, None);
    assert_eq!(state_of(&view, "fake"), ServerState::Running);
    let names: Vec<_> = view.servers[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["echo", "secret", "big", "hang", "exit", "fail"]);
    assert!(view.servers[0].endpoint.starts_with("python3 "), "{}", view.servers[0].endpoint);
    let offered = tools.offered();
    assert_eq!(offered.len(), 6);
    assert_eq!(offered[0].tool.parameters["required"], serde_json::json!(["text"]));
    let out = block_on(tools.call("fake", "echo", r#"{"text": "hello"}"#, never())).unwrap();
    assert_eq!(out, ToolOutput { text: "echo: hello".into(), is_error: false });
    // A tool that fails says why, and the model gets to read it.
    let out = block_on(tools.call("fake", "fail", "{}", never())).unwrap();
    assert!(out.is_error && out.text.contains("no such file"), "{out:?}");
    // Arguments that are not an object are refused before anything is sent.
    let e = block_on(tools.call("fake", "echo", "[1]", never())).unwrap_err();
    assert!(matches!(e.call_error(), Some(CallError::Arguments(_))), "{e}");
    block_on(tools.stop_all());
    assert_eq!(state_of(&tools.view(), "fake"), ServerState::Stopped);
    assert!(matches!(block_on(tools.call("fake", "echo", "{}", never())), Err(ToolsError::NotRunning(_))));
}

#[test]
fn switches_are_kept_and_a_disabled_tool_is_not_offered() {
    let (dir, tools) =
        tools_with(&[("fake", mcp::entry("ok")), ("filesystem", mcp::entry("ok"))], Duration::from_secs(10));
    block_on(tools.restart());
    // A filesystem server's results are private by default; another's are not.
    assert!(tools.flags("filesystem", "echo").unwrap().private);
    assert!(!tools.flags("fake", "echo").unwrap().private);
    // Both have `echo`: the model is offered one (the first server's).
    let offered = tools.offered();
    assert_eq!(offered.iter().filter(|o| o.tool.name == "echo").count(), 1);
    assert_eq!(offered.iter().find(|o| o.tool.name == "echo").unwrap().server, "fake");
    let off = ToolFlags { enabled: false, always_allow: true, private: true };
    tools.set_flags("fake", "echo", off).unwrap();
    assert!(matches!(tools.set_flags("fake", "nope", off), Err(ToolsError::NoTool { .. })));
    assert!(matches!(tools.set_flags("nope", "echo", off), Err(ToolsError::NoServer(_))));
    block_on(tools.stop_all());
    // After a restart of the app, read from tools.json.
    let again = Tools::new(dir.path().to_owned());
    block_on(again.restart());
    assert_eq!(again.flags("fake", "echo"), Some(off));
    assert_eq!(again.offered().iter().find(|o| o.tool.name == "echo").unwrap().server, "filesystem");
    block_on(again.stop_all());
}

#[test]
fn servers_that_cannot_start_fail_with_the_reason_and_hold_up_no_other() {
    let (_dir, tools) = tools_with(
        &[
            ("crash", mcp::entry("crash")),
            ("missing", r#"{"command": "/nonexistent/headroom-mcp-server"}"#.to_owned()),
            ("garbage", mcp::entry("garbage")),
            ("silent", mcp::entry("silent")),
            ("off", r#"{"command": "python3", "disabled": true}"#.to_owned()),
            ("fine", mcp::entry("ok")),
        ],
        Duration::from_secs(10),
    );
    let tools = tools.with_deadlines(Duration::from_secs(3), Duration::from_secs(3));
    let t0 = Instant::now();
    let view = block_on(tools.restart());
    // Started together: the two that never answer cost one deadline, not two.
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    let reason = |name| match state_of(&view, name) {
        ServerState::Failed { reason } => reason,
        other => panic!("{name}: {other:?}"),
    };
    assert!(reason("crash").contains("FAKE_TOKEN is not set"), "{}", reason("crash"));
    assert!(
        reason("missing").contains("Could not start `/nonexistent/headroom-mcp-server`: No such file"),
        "{}",
        reason("missing")
    );
    assert!(reason("garbage").contains("within 3s"), "{}", reason("garbage"));
    assert!(reason("silent").contains("within 3s"), "{}", reason("silent"));
    assert_eq!(state_of(&view, "off"), ServerState::Stopped);
    assert_eq!(state_of(&view, "fine"), ServerState::Running);
    block_on(tools.stop_all());
}

#[test]
fn a_bad_config_file_is_reported_not_started() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(config::FILE), r#"{"mcpServers": {"x": {"url": "https://example.com/"}}}"#).unwrap();
    let view = block_on(Tools::new(dir.path().to_owned()).restart());
    assert!(view.servers.is_empty());
    assert!(view.config_error.unwrap().contains("not a loopback"));
}

#[test]
fn a_hanging_call_is_cut_off_at_the_deadline_and_stop_ends_one_at_once() {
    let (_dir, tools) = tools_with(&[("fake", mcp::entry("ok"))], Duration::from_secs(2));
    block_on(tools.restart());
    let t0 = Instant::now();
    let e = block_on(tools.call("fake", "hang", "{}", never())).unwrap_err();
    assert!(matches!(e.call_error(), Some(CallError::Timeout { .. })), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    assert_eq!(e.code(), ErrorCode::ToolTimeout);
    assert!(e.message().contains("no answer within 2s"), "{}", e.message());
    // Stop: the call ends when stop resolves, long before the deadline.
    let t0 = Instant::now();
    let stop = async { tokio::time::sleep(Duration::from_millis(200)).await };
    let e = block_on(tools.call("fake", "hang", "{}", stop)).unwrap_err();
    assert!(matches!(e.call_error(), Some(CallError::Stopped)), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    // The server still answers the next call.
    assert_eq!(block_on(tools.call("fake", "echo", r#"{"text":"x"}"#, never())).unwrap().text, "echo: x");
    block_on(tools.stop_all());
}

#[test]
fn a_flood_is_dropped_and_a_server_that_dies_mid_call_says_so() {
    let (_dir, tools) = tools_with(&[("fake", mcp::entry("ok"))], Duration::from_secs(10));
    block_on(tools.restart());
    let e = block_on(tools.call("fake", "big", "{}", never())).unwrap_err();
    assert!(matches!(e.call_error(), Some(CallError::TooLarge { bytes: 10_485_760 })), "{e}");
    let t0 = Instant::now();
    let e = block_on(tools.call("fake", "exit", "{}", never())).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(matches!(e.call_error(), Some(CallError::Closed { .. })), "{e}");
    assert!(e.to_string().contains("lost my database connection"), "{e}");
    match state_of(&tools.view(), "fake") {
        ServerState::Failed { reason } => assert!(reason.contains("during a call to exit"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(tools.offered().is_empty());
}
