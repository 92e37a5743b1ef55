//! `headroom serve` against a client none of us wrote: the official `openai`
//! Python package (tests/openai/client_test.py) on loopback, on a demo
//! model, then Ctrl-C stops the server cleanly.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use headroom_test_support::Scratch;

use crate::common::{headroom, headroom_with};

/// The context limit the server loads with: small, so the test's
/// over-the-limit prompt is cheap.
const CONTEXT: &str = "256";

/// Kills the server if the test fails before stopping it; holds its stdout open.
struct Running(Child, Option<BufReader<std::process::ChildStdout>>);

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    let python = workspace().join(".deps/venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/setup.sh (it installs the openai client this test drives)",
        python.display()
    );
    python
}

/// `headroom serve` on a tiny demo model written under a scratch folder
/// named for `tag`, with `env` set: the folder, the server, and its URL (the
/// first line it prints). The server's stdout stays open with the server
/// (closed, its next line would fail to write).
fn serve_demo(tag: &str, env: &[(&str, &str)]) -> (Scratch, Running, String) {
    let root = headroom_test_support::scratch(tag);
    let model = root.join("demo-tiny");
    let out = headroom(&["demo-model", &model.to_string_lossy(), "--preset", "tiny"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut command = Command::new(env!("CARGO_BIN_EXE_headroom"));
    command.args(["serve", "--port", "0", "--context", CONTEXT, "--model"]).arg(&model).envs(env.iter().copied());
    let (server, url) = serve_in(&root, command, Stdio::piped());
    (root, server, url)
}

/// `command` (a `headroom serve`) started with an empty app data folder and
/// HF cache under `root`: the server and its URL (the first line it prints).
fn serve_in(root: &Path, mut command: Command, stderr: Stdio) -> (Running, String) {
    let child = command
        .env("HEADROOM_DATA_DIR", root.join("data"))
        .env("HF_HUB_CACHE", root.join("empty-hub"))
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("cannot run headroom serve");
    let mut server = Running(child, None);
    let mut stdout = BufReader::new(server.0.stdout.take().expect("no stdout"));
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    let url = url.trim().to_owned();
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/v1"), "first line: {url:?}");
    server.1 = Some(stdout);
    (server, url)
}

#[test]
fn the_official_openai_client_talks_to_headroom_serve() {
    let python = python();
    let (_root, mut server, url) = serve_demo("openai-client", &[]);

    let started = Instant::now();
    let client = Command::new(&python)
        .arg(workspace().join("tests/openai/client_test.py"))
        .args([url.as_str(), "demo-tiny", CONTEXT])
        .output()
        .expect("the venv's python runs");
    let (report, errors) = (String::from_utf8_lossy(&client.stdout), String::from_utf8_lossy(&client.stderr));
    assert!(client.status.success(), "the openai client failed ({:?}):\n{report}\n{errors}", client.status);
    for check in [
        "models",
        "plain_completion",
        "streamed_completion",
        "unknown_model_404",
        "malformed_json_400",
        "missing_messages_400",
        "context_length_exceeded_400",
    ] {
        assert!(report.lines().any(|l| l == format!("ok {check}")), "{check} in:\n{report}");
    }
    assert!(report.contains(": 7/7 passed"), "{report}");
    eprintln!("openai client checks took {:.1} s", started.elapsed().as_secs_f64());

    // Ctrl-C: the server stops, joins the engine and exits 0.
    let pid = server.0.id().to_string();
    let sent = Command::new("kill").args(["-INT", &pid]).status().expect("kill");
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        match server.0.try_wait().unwrap() {
            Some(status) => break status,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            None => panic!("headroom serve did not stop within 20 s of Ctrl-C"),
        }
    };
    let mut stderr = String::new();
    if let Some(mut e) = server.0.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("stopping the server"), "{stderr}");
}

#[test]
fn serve_refuses_a_non_loopback_address_without_opt_in_and_key() {
    let out = headroom(&["serve", "--host", "0.0.0.0", "--port", "0"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("headroom: refusing to listen on 0.0.0.0:0"), "{stderr}");
    assert!(stderr.contains("--allow-remote"), "{stderr}");

    let out = headroom(&["serve", "--host", "0.0.0.0", "--allow-remote", "--api-key-env", "HEADROOM_TEST_UNSET_KEY"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("HEADROOM_TEST_UNSET_KEY") && stderr.contains("not set"), "{stderr}");

    let tmp = headroom_test_support::scratch("serve-empty");
    let empty = tmp.join("data");
    let out = headroom_with(
        &["serve", "--port", "0", "--model", "nobody/nothing"],
        &[("HEADROOM_DATA_DIR", empty.as_os_str())],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // After the server's own log line (it listens before it loads): the error, one line.
    assert!(stderr.lines().any(|l| l.starts_with("headroom: model `nobody/nothing` not found")), "{stderr}");
    assert!(stderr.contains("`headroom models` lists them"), "{stderr}");
    let _ = std::fs::remove_dir_all(&empty);

    // --allow-remote without a key is a usage error clap reports.
    let out = headroom(&["serve", "--allow-remote"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--api-key-env"));
}

/// `headroom serve` gets out of the way as the app does: unused for its idle
/// time (2 s here), it unloads the model and says so on stderr; the next
/// request loads it again (fit-checked) and is answered.
#[test]
fn headroom_serve_unloads_when_idle_and_the_next_request_loads_again() {
    let (_root, mut server, url) = serve_demo("serve-idle", &[("HEADROOM_AWAY_IDLE_SECONDS", "2")]);
    let addr = url.trim_start_matches("http://").trim_end_matches("/v1").to_owned();
    // stderr, line by line, as it comes.
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let stderr = server.0.stderr.take().expect("no stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let ask = || {
        use std::io::Write;
        let body = r#"{"model":"demo-tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2}"#;
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        reply
    };
    let wait_for = |needle: &str, within: Duration| -> String {
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("no stderr line with {needle:?} within {within:?}");
    };
    assert!(ask().starts_with("HTTP/1.1 200"));
    let said = wait_for("Headroom unloaded demo-tiny", Duration::from_secs(30));
    assert!(said.contains("not used for"), "{said}");
    let again = ask();
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    wait_for("the server loaded a model", Duration::from_secs(10));
    let pid = server.0.id().to_string();
    let _ = Command::new("kill").args(["-INT", &pid]).status();
    let _ = server.0.wait();
}

/// What agents send, asked by the official client of a bare `headroom
/// serve` (no arguments: it offers the bundled default model, the real
/// SmolLM2-135M-Instruct, and loads it on the first request): JSON that
/// validates against five schemas (streamed and not), forced tool calls
/// whose arguments validate against the tool's schema, stops that cut where
/// they should, and 400s naming a bad schema and too many stops.
#[test]
fn a_bare_serve_answers_schemas_tool_calls_and_stops_to_the_official_client() {
    let python = python();
    let root = headroom_test_support::scratch("openai-structured");
    let mut command = Command::new(env!("CARGO_BIN_EXE_headroom"));
    command.args(["serve", "--port", "0"]);
    let (_server, url) = serve_in(&root, command, Stdio::inherit());

    let started = Instant::now();
    let client = Command::new(&python)
        .arg(workspace().join("tests/openai/structured_test.py"))
        // Twenty answers per schema, as the issue asks: half streamed.
        .args([url.as_str(), "SmolLM2-135M-Instruct", "20"])
        .output()
        .expect("the venv's python runs");
    let (report, errors) = (String::from_utf8_lossy(&client.stdout), String::from_utf8_lossy(&client.stderr));
    assert!(client.status.success(), "the openai client failed ({:?}):\n{report}\n{errors}", client.status);
    assert!(report.contains("structured: 6/6 passed"), "{report}");
    eprintln!("structured checks took {:.1} s", started.elapsed().as_secs_f64());
}
