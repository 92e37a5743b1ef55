//! The cloud route end to end: the client and `headroom chat --route cloud`
//! against a real OpenAI-compatible server (`mlx_lm.server` serving a demo
//! model) on loopback; the failures (server down, 401, a stream cut
//! mid-way) each giving their clear error while the user's text is kept;
//! and the privacy gate from the command line: with a recording stub as the
//! cloud, no earlier secret ever reaches it (forced, routed or summarised),
//! a harmless message does, and `--allow-sensitive` sends and names the rest.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use headroom_cloud::testserver::{answer, chunk, json_reply, once, Stub, SSE_HEAD};
use headroom_cloud::{ChatParams, CloudClient, CloudConfig};
use headroom_core::chat::{FinishReason, Message, Role};
use headroom_core::gate::{gate, Outbound, Part};
use headroom_core::sensitive::ScanCache;
use headroom_store::{MessageStatus, Route, Store};

use crate::common::{headroom, headroom_with};

/// A port nothing listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("no free port")
}

/// `mlx_lm.server` on loopback; killed when dropped.
struct MlxServer {
    child: Child,
    base_url: String,
}

impl MlxServer {
    fn start(model: &Path, scratch: &Path) -> Self {
        let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.deps/venv/bin/python");
        assert!(
            python.exists(),
            "{} is missing: run scripts/setup.sh (it installs mlx-lm 0.32.2, whose mlx_lm.server these tests talk to)",
            python.display()
        );
        let port = free_port();
        // An empty HF cache: /v1/models scans it and fails without one; offline
        // so nothing is ever downloaded.
        let hub = scratch.join("hf-hub");
        std::fs::create_dir_all(&hub).unwrap();
        let child = Command::new(&python)
            .args(["-m", "mlx_lm.server", "--host", "127.0.0.1", "--port", &port.to_string(), "--model"])
            .arg(model)
            .env("HF_HUB_CACHE", &hub)
            .env("HF_HUB_OFFLINE", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start mlx_lm.server");
        let server = Self { child, base_url: format!("http://127.0.0.1:{port}/v1") };
        server.wait_ready(port);
        server
    }

    fn wait_ready(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
                let mut answer = String::new();
                let _ = s.read_to_string(&mut answer);
                if answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200") {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("mlx_lm.server did not answer /health on port {port} within 60 s");
    }
}

impl Drop for MlxServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn demo_model(dir: &Path) -> PathBuf {
    let model = dir.join("demo");
    let out = headroom(&["demo-model", &model.to_string_lossy()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    model
}

fn stored(data: &Path, session: &str) -> Vec<headroom_store::StoredMessage> {
    tauri::async_runtime::block_on(async {
        let store = Store::open(data).await.unwrap();
        store.messages(session).await.unwrap()
    })
}

/// `headroom chat … --route cloud` with its own data folder and no keychain.
fn chat_cloud(data: &Path, model: &Path, url: &str, extra: &[&str], key: Option<&str>) -> std::process::Output {
    let model = model.to_string_lossy();
    let args =
        [&["chat", &model, "--route", "cloud", "--cloud-url", url, "--cloud-model", "default_model"], extra].concat();
    let mut env = vec![
        ("HEADROOM_DATA_DIR", data.as_os_str()),
        ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/headroom-test-bus".as_ref()),
    ];
    if let Some(key) = key {
        // The environment's key goes to the URL it is bound to, and nowhere else.
        env.push(("HEADROOM_CLOUD_API_KEY", key.as_ref()));
        env.push(("HEADROOM_CLOUD_API_KEY_URL", url.as_ref()));
    }
    headroom_with(&args, &env)
}

#[test]
fn streaming_chat_against_mlx_lm_server_end_to_end() {
    let dir = headroom_test_support::scratch("cloud-chat-e2e");
    let model = demo_model(&dir);
    let server = MlxServer::start(&model, &dir);

    // The client alone: structure, not content (the demo model's tokens are random).
    let client = CloudClient::new(CloudConfig::new(&server.base_url, "default_model")).unwrap();
    let (models, events) = tauri::async_runtime::block_on(async {
        let models = client.list_models().await.unwrap();
        let msgs = gate(
            vec![Outbound::new(Part::Message, Message::new(Role::User, "Hello there"))],
            false,
            &ScanCache::default(),
        )
        .unwrap()
        .messages;
        let params = ChatParams { max_tokens: Some(8), temperature: Some(0.0), ..ChatParams::default() };
        let r =
            headroom_cloud::run_turn(&client, &msgs, &params, headroom_cloud::CancellationToken::new(), |_| true).await;
        (models, r)
    });
    let canonical = model.canonicalize().unwrap();
    assert!(models.iter().any(|m| Path::new(m) == canonical), "{models:?}");
    let finished = events.end.expect("the turn failed");
    let usage = finished.stats.usage.expect("mlx_lm.server reports usage when asked");
    assert!(usage.prompt_tokens > 0);
    assert!((1..=8).contains(&usage.completion_tokens), "{usage:?}");
    assert_eq!(finished.reason == FinishReason::Length, usage.completion_tokens == 8, "{finished:?}");
    // Chunks are not tokens: the server merges pieces of multi-byte characters.
    assert!(finished.stats.chunks >= 1 && finished.stats.chunks <= usage.completion_tokens as usize);
    assert!(!events.text.is_empty());
    assert!(finished.stats.rates.ttft_ms.is_some_and(|t| t > 0.0));
    assert_eq!(finished.stats.timings.generated_tokens, usage.completion_tokens);

    // The CLI: two persisted turns, both stored with route = cloud.
    let data = dir.join("data");
    let out = chat_cloud(
        &data,
        &model,
        &server.base_url,
        &["--session", "c", "--message", "Hi", "--max-tokens", "6", "--json"],
        Some("k"),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "complete", "{v}");
    let generated = v["stats"]["generatedTokens"].as_i64().unwrap_or(0);
    assert!((1..=6).contains(&generated), "{v}");
    assert_eq!(v["stats"]["batch"], 1);

    let out = chat_cloud(
        &data,
        &model,
        &server.base_url,
        &["--session", "c", "--message", "And?", "--max-tokens", "3"],
        Some("k"),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let streamed = String::from_utf8_lossy(&out.stdout).into_owned();
    let msgs = stored(&data, "c");
    assert_eq!(msgs.len(), 4);
    assert!(msgs.iter().all(|m| m.route == Route::Cloud && m.status == MessageStatus::Complete), "{msgs:?}");
    assert_eq!(format!("{}\n", msgs[3].content), streamed, "what streamed is what was stored");
    let prompts: Vec<i64> = msgs.iter().filter_map(|m| m.stats.as_ref().map(|s| s.prompt_tokens)).collect();
    assert!(prompts.len() == 2 && prompts[1] > prompts[0], "the second prompt holds the first turn: {prompts:?}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

fn stub(replies: Vec<headroom_cloud::testserver::Reply>) -> Stub {
    Stub::start(replies).expect("stub")
}

/// A stub that answers 401 unless the bearer key is `key`: the first
/// request is checked against it, then it answers `ok`.
fn unauthorized() -> headroom_cloud::testserver::Reply {
    json_reply("401 Unauthorized", "", r#"{"error":{"message":"Incorrect API key provided"}}"#)
}

#[test]
fn failures_give_their_clear_error_and_keep_the_users_text() {
    let dir = headroom_test_support::scratch("cloud-chat-errors");
    // The cloud route never loads MODEL; any folder name does.
    let model = dir.join("unused-model");
    let data = dir.join("data");
    let stderr = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();

    // Server down.
    let down = format!("http://127.0.0.1:{}/v1", free_port());
    let out = chat_cloud(&data, &model, &down, &["--session", "down", "--message", "keep me"], Some("k"));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("connection refused") && stderr(&out).contains(&down), "{}", stderr(&out));
    let msgs = stored(&data, "down");
    assert_eq!(
        msgs.iter().map(|m| (m.content.as_str(), m.status)).collect::<Vec<_>>(),
        [("keep me", MessageStatus::Complete), ("", MessageStatus::Error)]
    );
    assert!(msgs[1].error.as_deref().is_some_and(|e| e.contains("connection refused")));
    assert_eq!(msgs[1].route, Route::Cloud);

    // 401 from an endpoint that wants another key; then the key that works.
    let keyed = stub(vec![unauthorized(), answer(&["never"])]);
    let url = keyed.base_url.clone();
    let out = chat_cloud(&data, &model, &url, &["--session", "auth", "--message", "my question"], Some("wrong-key"));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("rejected the API key (HTTP 401)"), "{}", stderr(&out));
    assert_eq!(stored(&data, "auth")[0].content, "my question");
    assert!(keyed.requests()[0].contains("Bearer wrong-key"), "{:?}", keyed.requests());

    // The stored key (no keychain here: the user-only file) is the one sent.
    let mut set = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["cloud-key", "set", "--url", &url])
        .env("HEADROOM_DATA_DIR", &data)
        .env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/headroom-test-bus")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    set.stdin.take().map(|mut s| s.write_all(b"right-key\n")).transpose().unwrap();
    let set = set.wait_with_output().unwrap();
    assert!(set.status.success());
    assert!(String::from_utf8_lossy(&set.stdout).contains("readable only by you"));
    let out = chat_cloud(&data, &model, &url, &["--session", "auth", "--message", "again"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "never\n");
    assert!(keyed.requests()[1].contains("Bearer right-key"), "{:?}", keyed.requests());

    // A stream cut after two chunks: the partial answer is saved with the error.
    let cut = stub(vec![once(format!("{SSE_HEAD}{}{}", chunk("half "), chunk("an answer")))]);
    let out = chat_cloud(&data, &model, &cut.base_url, &["--session", "cut", "--message", "long one"], Some("k"));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cut after 2 text chunks"), "{}", stderr(&out));
    let msgs = stored(&data, "cut");
    assert_eq!((msgs[0].content.as_str(), msgs[1].content.as_str()), ("long one", "half an answer"));
    assert_eq!(msgs[1].status, MessageStatus::Error);

    // --route auto: a prompt over the local threshold (8192 estimated tokens
    // by default) goes to the cloud, and stderr says why.
    let model = demo_model(&dir);
    let routed = stub(vec![answer(&["routed"])]);
    let url = routed.base_url.clone();
    let long = "lorem ipsum ".repeat(4000);
    let mut env_args = vec!["--session", "auto", "--message", long.as_str()];
    env_args.extend(["--route", "auto"]);
    let m = model.to_string_lossy();
    let args = [&["chat", &*m, "--cloud-url", &url, "--cloud-model", "default_model"], env_args.as_slice()].concat();
    let out = headroom_with(
        &args,
        &[
            ("HEADROOM_DATA_DIR", data.as_os_str()),
            ("HEADROOM_CLOUD_API_KEY", "k".as_ref()),
            ("HEADROOM_CLOUD_API_KEY_URL", url.as_ref()),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("--route auto: the cloud"), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "routed\n");
    assert_eq!(stored(&data, "auto")[1].route, Route::Cloud);

    // "Summarise for cloud" on: the local model condenses the older turns,
    // the request carries the summary, and the route note says so.
    tauri::async_runtime::block_on(async {
        let store = Store::open(&data).await.unwrap();
        let mut settings = store.settings().await.unwrap();
        settings.summarise_for_cloud = true;
        store.set_settings(&settings).await.unwrap();
        for i in 0..3 {
            let t = store
                .begin_turn("sum", &format!("question {i}: {}", "lorem ipsum ".repeat(350)), None, Route::Cloud)
                .await
                .unwrap();
            let answer = headroom_store::TurnOutcome {
                content: format!("answer {i}: {}", "dolor sit amet ".repeat(280)),
                status: MessageStatus::Complete,
                error: None,
                stats: None,
            };
            store.finish_turn(t.assistant_message_id, &answer).await.unwrap();
        }
    });
    let recording = stub(vec![answer(&["short"])]);
    let url = recording.base_url.clone();
    let out = headroom_with(
        &[
            "chat",
            &*m,
            "--session",
            "sum",
            "--message",
            "next?",
            "--route",
            "cloud",
            "--cloud-url",
            &url,
            "--cloud-model",
            "x",
        ],
        &[
            ("HEADROOM_DATA_DIR", data.as_os_str()),
            ("HEADROOM_CLOUD_API_KEY", "k".as_ref()),
            ("HEADROOM_CLOUD_API_KEY_URL", url.as_ref()),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("went as a summary made on this Mac"), "{}", stderr(&out));
    let body = recording.bodies().concat();
    let sent: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
    let sent = sent["messages"].as_array().cloned().unwrap_or_default();
    assert!(
        sent[0]["content"].as_str().unwrap_or_default().starts_with("Summary of the earlier conversation:"),
        "{sent:?}"
    );
    assert_eq!(sent.last().map(|m| m["content"].clone()), Some("next?".into()));
    assert!(sent.len() < 7, "7 messages without the summary: {sent:?}");
    assert_eq!(stored(&data, "sum").len(), 8, "the stored history is untouched");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One secret of each kind the scanner knows, as a user would paste them.
const SECRETS: [&str; 10] = [
    "13812345678",
    "+44 20 7946 0958",
    "11010519491231002X",
    "j.doe@example.com",
    "192.168.1.20",
    "build01.corp",
    r"\\fileserver\finance",
    "/Users/alice/Documents/salary.xlsx",
    "AKIAIOSFODNN7EXAMPLE",
    "hunter2hunter2",
];

/// A session whose earlier turns (answered locally) hold every secret,
/// between harmless ones.
fn secret_history(data: &Path, session: &str) {
    tauri::async_runtime::block_on(async {
        let store = Store::open(data).await.unwrap();
        let turns = [
            ("what is a monad?".to_owned(), "A monoid in the category of endofunctors.".to_owned()),
            (format!("call me on {} or {}", SECRETS[0], SECRETS[1]), "Noted.".to_owned()),
            (format!("my ID is {}; mail {}", SECRETS[2], SECRETS[3]), "I will not repeat it.".to_owned()),
            (format!("the NAS at {} and {} share {}", SECRETS[4], SECRETS[5], SECRETS[6]), "OK.".to_owned()),
            ("and the file?".to_owned(), format!("It is {}", SECRETS[7])),
            (format!("key {} and password: {}", SECRETS[8], SECRETS[9]), "Keep them safe.".to_owned()),
            ("thanks!".to_owned(), "You are welcome.".to_owned()),
        ];
        for (q, a) in turns {
            let t = store.begin_turn(session, &q, Some("local-model"), Route::Local).await.unwrap();
            let done =
                headroom_store::TurnOutcome { content: a, status: MessageStatus::Complete, error: None, stats: None };
            store.finish_turn(t.assistant_message_id, &done).await.unwrap();
        }
    });
}

fn leaked(bodies: &[String]) -> Vec<&'static str> {
    // Bodies are JSON: a backslash arrives doubled.
    SECRETS
        .iter()
        .copied()
        .filter(|s| bodies.iter().any(|b| b.contains(s) || b.contains(&s.replace('\\', "\\\\"))))
        .collect()
}

/// The issue's report, on the command line: `--route cloud` with a secret,
/// and a harmless message after secret local turns. Nothing secret reaches
/// the endpoint unless `--allow-sensitive` says so, which names it.
#[test]
fn the_cli_never_sends_an_earlier_secret_and_allow_sensitive_names_what_it_sends() {
    let dir = headroom_test_support::scratch("cloud-chat-privacy");
    let model = demo_model(&dir);
    let data = dir.join("data");
    let cloud = stub(vec![answer(&["fine"])]);
    let stderr = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let m = model.to_string_lossy().into_owned();
    let run = |route: &str, session: &str, message: &str, extra: &[&str]| {
        let args = [
            &["chat", m.as_str(), "--session", session, "--message", message, "--route", route],
            &["--cloud-url", cloud.base_url.as_str(), "--cloud-model", "gpt-x", "--max-tokens", "4"][..],
            extra,
        ]
        .concat();
        headroom_with(
            &args,
            &[
                ("HEADROOM_DATA_DIR", data.as_os_str()),
                ("HEADROOM_CLOUD_API_KEY", "k".as_ref()),
                ("HEADROOM_CLOUD_API_KEY_URL", cloud.base_url.as_ref()),
            ],
        )
    };

    // The report itself: forcing the cloud with an ID number keeps it here.
    let out = run("cloud", "id", "my id is 11010519491231002X", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--route cloud: the local model") && stderr(&out).contains("1101************2X"),
        "{}",
        stderr(&out)
    );
    assert!(cloud.requests().is_empty(), "sent: {:?}", cloud.bodies());
    assert_eq!(stored(&data, "id")[1].route, Route::Local);

    // Earlier secrets, a harmless message, the cloud forced: the message
    // goes, the secret exchanges stay, and the route note says which.
    secret_history(&data, "s");
    let out = run("cloud", "s", "what is a functor?", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(cloud.bodies().len(), 1);
    assert!(
        cloud.bodies()[0].contains("what is a functor?") && cloud.bodies()[0].contains("what is a monad?"),
        "{:?}",
        cloud.bodies()
    );
    assert_eq!(leaked(&cloud.bodies()), Vec::<&str>::new());
    assert!(
        stderr(&out).contains("Earlier messages 3, 4, 5, 6, 7, 8, 9, 10, 11 and 12 stay on this Mac"),
        "{}",
        stderr(&out)
    );

    // --route auto with no local model to keep it here: the same.
    let out = run("auto", "s", "and an applicative?", &["--available-gb", "0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("no local model for this turn"), "{}", stderr(&out));
    assert_eq!(cloud.bodies().len(), 2);
    assert!(cloud.bodies()[1].contains("and an applicative?"));
    assert_eq!(leaked(&cloud.bodies()), Vec::<&str>::new());

    // --route auto with the model: a sensitive chat stays local.
    let before = cloud.bodies().len();
    let out = run("auto", "s", "one more?", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("--route auto: the local model"), "{}", stderr(&out));
    assert_eq!(cloud.bodies().len(), before);

    // The override, for this one message: everything goes, and stderr names it.
    let out = run("cloud", "s", "summarise all of the above", &["--allow-sensitive"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(leaked(&cloud.bodies()[before..]).len(), SECRETS.len(), "the test sees secrets when they do leave");
    let said = stderr(&out);
    assert!(
        said.contains("--allow-sensitive: sent to gpt-x although") && said.contains("1101************2X"),
        "{said}"
    );
    assert!(!said.contains("11010519491231002X"), "named masked: {said}");
    let _ = std::fs::remove_dir_all(&dir);
}
