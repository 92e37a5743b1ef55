//! Nothing is lost: `headroom chat` killed with SIGKILL mid-answer leaves
//! the user's message and the partial answer (interrupted once the database
//! is reopened); Ctrl-C stops it cleanly as interrupted; two calls on one
//! session make one conversation.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use headroom_store::{MessageStatus, Store, StoredMessage};
use headroom_test_support::Scratch;

use crate::common::headroom_with;

/// A data folder and a tiny demo model of this test's own, in a folder
/// that goes with the first value.
fn setup(tag: &str) -> (Scratch, PathBuf, String) {
    let root = headroom_test_support::scratch(&format!("persist-{tag}"));
    let model = root.join("model").to_string_lossy().into_owned();
    let out = headroom_with(&["demo-model", &model, "--arch", "qwen2", "--bits", "4"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let data = root.join("data");
    (root, data, model)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
}

/// The session's messages as another process sees them, without recovering
/// anything: a plain pool on the file, no `Store::open`.
fn peek(rt: &tokio::runtime::Runtime, data: &Path, session: &str) -> Vec<StoredMessage> {
    let path = data.join(headroom_store::DB_FILE);
    if !path.exists() {
        return Vec::new();
    }
    rt.block_on(async {
        let Ok(store) = Store::open_file(&path).await else { return Vec::new() };
        // The schema may not exist yet if the child is still migrating.
        let msgs = store.messages(session).await.unwrap_or_default();
        store.close().await;
        msgs
    })
}

fn spawn_chat(data: &Path, model: &str, session: &str, message: &str) -> Child {
    // Far more tokens than arrive before the kill, through any EOS.
    Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["chat", model, "--session", session, "--message", message])
        .args(["--max-tokens", "30000", "--context", "32768", "--ignore-eos", "--temp", "0"])
        .env("HEADROOM_DATA_DIR", data)
        .env("HF_HUB_CACHE", std::env::temp_dir().join("headroom-cli-test-empty-hub"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run headroom")
}

/// Waits until the answer in the database has some text, and returns it.
fn wait_for_partial(rt: &tokio::runtime::Runtime, child: &mut Child, data: &Path, session: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let msgs = peek(rt, data, session);
        if let Some(answer) = msgs.get(1).filter(|m| !m.content.is_empty()) {
            assert_eq!(answer.status, MessageStatus::Streaming, "{msgs:?}");
            return answer.content.clone();
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("headroom chat ended ({status}) before any answer was saved: {msgs:?}");
        }
        assert!(Instant::now() < deadline, "no partial answer within 60 s: {msgs:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigkill_mid_answer_keeps_the_question_and_the_partial_answer_as_interrupted() {
    let (_root, data, model) = setup("kill");
    let rt = runtime();
    let mut child = spawn_chat(&data, &model, "k", "Tell me a long story");
    let seen = wait_for_partial(&rt, &mut child, &data, "k");
    child.kill().unwrap(); // SIGKILL on Unix
    let status = child.wait().unwrap();
    assert!(!status.success(), "it was killed, not finished: {status}");

    let store = rt.block_on(Store::open(&data)).unwrap();
    let msgs = rt.block_on(store.messages("k")).unwrap();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert_eq!((msgs[0].content.as_str(), msgs[0].status), ("Tell me a long story", MessageStatus::Complete));
    let answer = &msgs[1];
    assert_eq!(answer.status, MessageStatus::Interrupted);
    assert!(
        answer.content.starts_with(&seen) && !answer.content.is_empty(),
        "kept {:?}, had seen {seen:?}",
        answer.content
    );
    assert!(answer.stats.is_none(), "a killed turn never reached its stats");
    rt.block_on(store.close());
}

#[test]
fn ctrl_c_stops_the_answer_and_commits_it_interrupted_with_stats() {
    let (_root, data, model) = setup("int");
    let rt = runtime();
    let mut child = spawn_chat(&data, &model, "c", "Count slowly");
    wait_for_partial(&rt, &mut child, &data, "c");
    let sent = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(stderr.contains("saved as interrupted") && stderr.contains("| cancelled"), "{stderr}");

    let msgs = peek(&rt, &data, "c");
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert_eq!(msgs[1].status, MessageStatus::Interrupted, "committed by the process itself, not by a reopen");
    let stats = msgs[1].stats.clone().unwrap_or_else(|| panic!("no stats: {msgs:?}"));
    assert!(stats.generated_tokens > 0 && stats.generated_tokens < 30000, "{stats:?}");
}

#[test]
fn two_chat_calls_on_one_session_are_one_conversation() {
    let (_root, data, model) = setup("multi");
    let env = [("HEADROOM_DATA_DIR", data.as_os_str())];
    let turn = |message: &str| {
        let out = headroom_with(
            &[
                "chat",
                &model,
                "--session",
                "m",
                "--message",
                message,
                "--max-tokens",
                "4",
                "--ignore-eos",
                "--temp",
                "0",
                "--json",
            ],
            &env,
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let first = turn("Hello");
    let second = turn("And then?");
    let (p1, p2) =
        (first["stats"]["promptTokens"].as_i64().unwrap_or(0), second["stats"]["promptTokens"].as_i64().unwrap_or(0));
    assert!(p1 > 0 && p2 > p1 + 4, "the second prompt holds the first turn: {p1} then {p2}");

    let out = headroom_with(&["sessions", "--json"], &env);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((list[0]["id"].as_str(), list[0]["messageCount"].as_i64()), (Some("m"), Some(4)), "{list}");

    let out = headroom_with(&["export", "m", "--format", "md"], &env);
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.starts_with("# Hello\n\nSession `m`"), "{md}");
    assert_eq!(md.matches("\n## You · ").count(), 2, "{md}");
    assert_eq!(md.matches("batch 1").count(), 2, "{md}");

    // JSON out, and back in as a second session.
    let out = headroom_with(&["export", "m", "--format", "json"], &env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let file = data.join("m.json");
    std::fs::write(&file, &out.stdout).unwrap();
    let imported = headroom_with(&["import", &file.to_string_lossy()], &env);
    assert_eq!(String::from_utf8_lossy(&imported.stdout), "imported 4 messages as session `m-2` (Hello)\n");
    let again = headroom_with(&["export", "m-2", "--format", "json"], &env);
    let (a, b): (serde_json::Value, serde_json::Value) = (
        serde_json::from_slice(&out.stdout).unwrap_or_default(),
        serde_json::from_slice(&again.stdout).unwrap_or_default(),
    );
    assert_eq!(a["messages"], b["messages"]);

    let out = headroom_with(&["export", "nope"], &env);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "headroom: no session `nope`\n");
}
