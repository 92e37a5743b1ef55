//! One model across two Macs (issue #28), as two processes on 127.0.0.1:
//! `headroom lend` and `headroom generate --peer`, over MLX's ring backend.
//! The split's output is the one-process output token for token (dense and
//! mixture-of-experts); a killed or frozen lender ends the answer with a
//! typed error, what was generated kept; `fit --peer` shows each Mac's
//! numbers, and a split that would swap a Mac is refused with them.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::headroom;

/// A `headroom lend` in a process group of its own (it and its session
/// processes), killed with the test.
struct Lender {
    child: Child,
    addr: String,
    /// The pairing code it shows.
    code: String,
}

impl Lender {
    fn start(data: &Path, extra: &[&str]) -> Self {
        Self::start_with(data, extra, &[])
    }

    fn start_with(data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
            .args(["lend", "--port", "0"])
            .args(extra)
            .env("HEADROOM_DATA_DIR", data)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        // "lending NAME on 127.0.0.1:PORT (budget …); …"
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        let addr = line.split(" on ").nth(1).and_then(|s| s.split_whitespace().next()).unwrap_or_default().to_owned();
        assert!(addr.starts_with("127.0.0.1:"), "lend printed {line:?}");
        let code = line.split("pairing code ").nth(1).unwrap_or_default().chars().take(6).collect();
        Self { child, addr, code }
    }

    /// A code of six digits, each unlike the one it shows.
    fn wrong_code(&self) -> String {
        self.code.chars().map(|c| if c == '9' { '0' } else { char::from(c as u8 + 1) }).collect()
    }

    /// Sends `signal` to the lender and its session processes.
    fn signal(&self, signal: &str) {
        let group = format!("-{}", self.child.id());
        let status = Command::new("kill").args(["-s", signal, "--", &group]).status().unwrap();
        assert!(status.success(), "kill -s {signal} -- {group}");
    }
}

impl Drop for Lender {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-s", "KILL", "--", &format!("-{}", self.child.id())]).status();
        let _ = self.child.wait();
    }
}

/// `generate --json` greedily with the fused kernel (both sides multiply
/// alike), 24 tokens through any EOS; the whole JSON object.
fn generate(model: Option<&str>, peer: Option<&str>) -> Value {
    let mut args = vec!["generate"];
    args.extend(model);
    args.extend(["--prompt", "Name three colours of the sea.", "--kernel", "fused", "--temp", "0"]);
    args.extend(["--max-tokens", "24", "--ignore-eos", "--json"]);
    if let Some(peer) = peer {
        args.extend(["--peer", peer]);
    }
    let out = headroom(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "generate {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.trim()).unwrap()
}

#[test]
fn a_model_split_across_two_processes_answers_token_for_token_as_one() {
    let tmp = headroom_test_support::scratch("two-macs-parity");
    let moe = tmp.join("moe");
    let made = headroom(&["demo-model", moe.to_str().unwrap(), "--arch", "qwen3_moe"]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    // The real default model (dense, GGUF) and a mixture-of-experts one.
    for model in [None, moe.to_str()] {
        // The default model is on every lender's shelves; the demo one is lent from its folder.
        let lender = Lender::start(&tmp.join("lender"), &["--models", tmp.to_str().unwrap()]);
        let alone = generate(model, None);
        let split = generate(model, Some(&lender.addr));
        let ids = |v: &Value| v["token_ids"].as_array().cloned().unwrap_or_default();
        assert_eq!(ids(&alone).len(), 24, "{alone}");
        assert_eq!(ids(&split), ids(&alone), "{model:?}: split {split} vs alone {alone}");
        let peer = &split["stats"]["peer"];
        assert_eq!(peer["peer"], lender.addr.as_str(), "{split}");
        let (first, layers) = (peer["first_peer_layer"].as_u64().unwrap(), peer["layers"].as_u64().unwrap());
        assert!(first >= 1 && first < layers, "{peer}");
        // One hand-off per pass: the prompt and then at most one per token.
        let passes = peer["passes"].as_u64().unwrap();
        assert!((2..=25).contains(&passes), "{peer}");
        assert!(alone["stats"]["peer"].is_null(), "{alone}");
    }
}

/// Runs `args` (a long answer with `--peer` to `lender`) on the data folder
/// `data`, waits until it has streamed some text, then sends `to_lender` to
/// the lender: the answer must end within `limit` with the typed error.
/// Returns what it printed on stdout and stderr.
fn answer_ends_when_the_lender(
    args: &[&str],
    data: &Path,
    lender: &Lender,
    to_lender: &str,
    stall_secs: &str,
    limit: Duration,
) -> (String, String) {
    let mut host = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .args(["--kernel", "fused", "--temp", "0", "--max-tokens", "4000", "--ignore-eos", "--peer", &lender.addr])
        .env("HEADROOM_DATA_DIR", data)
        .env("HEADROOM_PEER_STALL_SECS", stall_secs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = host.stdout.take().unwrap();
    let mut seen = vec![0u8; 64];
    if let Err(e) = stdout.read_exact(&mut seen) {
        let _ = host.wait();
        let mut stderr = String::new();
        let _ = host.stderr.take().map(|mut s| s.read_to_string(&mut stderr));
        panic!("the answer ended before it streamed 64 bytes ({e}): {stderr}");
    }
    lender.signal(to_lender);
    let since = Instant::now();
    let status = loop {
        if let Some(status) = host.try_wait().unwrap() {
            break status;
        }
        assert!(since.elapsed() < limit, "the answer still runs {limit:?} after the lender got SIG{to_lender}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let mut stderr = String::new();
    host.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    println!("SIG{to_lender}: the answer ended {:.2} s later", since.elapsed().as_secs_f64());
    assert!(!status.success());
    assert!(stderr.contains("the peer Mac is gone"), "{stderr}");
    assert!(!stderr.contains(" at /"), "no source paths in the message: {stderr}");
    (String::from_utf8_lossy(&seen).into_owned() + &rest, stderr)
}

#[test]
fn killing_the_lender_mid_answer_ends_it_within_30_s_keeps_it_and_the_next_answer_is_local() {
    let tmp = headroom_test_support::scratch("two-macs-kill");
    let data = tmp.join("host");
    let lender = Lender::start(&tmp.join("lender"), &[]);
    let chat = ["chat", "--session", "s", "--message", "Tell me a long story about a lighthouse."];
    let (streamed, stderr) = answer_ends_when_the_lender(&chat, &data, &lender, "KILL", "60", Duration::from_secs(30));
    assert!(stderr.contains("what arrived is saved"), "{stderr}");

    // What arrived is stored, marked as an error with the reason.
    let env = [("HEADROOM_DATA_DIR", data.as_os_str())];
    let export = crate::common::headroom_with(&["export", "s", "--format", "json"], &env);
    assert!(export.status.success(), "{}", String::from_utf8_lossy(&export.stderr));
    let v: Value = serde_json::from_slice(&export.stdout).unwrap();
    let answer = &v["messages"][1];
    assert_eq!(answer["status"], "error", "{v}");
    assert!(answer["error"].as_str().is_some_and(|e| e.contains("peer")), "{answer}");
    let kept = answer["content"].as_str().unwrap_or_default();
    assert!(
        kept.len() >= 32 && streamed.contains(kept.get(..32).unwrap_or(kept)),
        "stored {kept:?}, streamed {streamed:?}"
    );

    // The same chat goes on, on this Mac alone, with the model that fits here.
    let local = ["chat", "--session", "s", "--message", "What is the capital of France?", "--temp", "0"];
    let next = crate::common::headroom_with(&local, &env);
    assert!(next.status.success(), "{}", String::from_utf8_lossy(&next.stderr));
    assert!(String::from_utf8_lossy(&next.stdout).contains("Paris"), "{}", String::from_utf8_lossy(&next.stdout));
}

#[test]
fn a_frozen_lender_is_cut_off_by_the_watchdog() {
    let tmp = headroom_test_support::scratch("two-macs-frozen");
    let lender = Lender::start(&tmp.join("lender"), &[]);
    // The watchdog's deadline shortened to 10 s (60 s by default). At 3 s
    // a lender that was only slow on a loaded 2-core CI machine was cut
    // off before the first 64 bytes streamed (a cold CI run, 2026-12-04).
    let generate = ["generate", "--prompt", "Tell me a long story about a lighthouse."];
    let (streamed, _) =
        answer_ends_when_the_lender(&generate, &tmp.join("host"), &lender, "STOP", "10", Duration::from_secs(40));
    assert!(streamed.chars().any(char::is_alphabetic), "the text so far stays on stdout: {streamed:?}");
    lender.signal("CONT");
}

#[test]
fn fit_with_a_peer_shows_each_macs_numbers_and_refuses_a_split_that_would_swap() {
    let tmp = headroom_test_support::scratch("two-macs-fit");
    // Qwen2.5-7B's real headers, no data: 4 GB of weights.
    let model = tmp.join("q7");
    let made = headroom(&["demo-model", model.to_str().unwrap(), "--preset", "qwen2.5-7b", "--sparse"]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let model = model.to_str().unwrap();
    let fit = |peer: &str| {
        let out = headroom(&["fit", model, "--available-gb", "9", "--context", "8192", "--json", "--peer", peer]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_str::<Value>(String::from_utf8_lossy(&out.stdout).trim()).unwrap()
    };
    let refuses = |v: &Value| matches!(v["kind"].as_str(), Some("would_swap" | "cannot_fit"));

    // A lender with 14 GB available: the 7B does not fit here (5 GB of
    // budget) but fits across both, the lender taking more layers.
    let roomy = Lender::start(&tmp.join("roomy"), &["--available-gb", "14"]);
    let v = fit(&roomy.addr);
    assert!(refuses(&v["verdict"]), "alone: {}", v["verdict"]);
    let (host, peer) = (&v["split"]["host"], &v["split"]["peer"]);
    for share in [host, peer] {
        assert!(!refuses(&share["fit"]["verdict"]), "{share}");
        assert!(share["fit"]["estimate"]["weight_bytes"].as_u64().unwrap() > 0, "{share}");
        assert!(share["fit"]["budget"]["budget_bytes"].as_u64().unwrap() > 0, "{share}");
    }
    assert_eq!(host["layers"].as_u64().unwrap() + peer["layers"].as_u64().unwrap(), 28);
    assert!(peer["layers"].as_u64() > host["layers"].as_u64(), "the roomier Mac takes more: {v}");
    assert_eq!(peer["first_layer"], host["layers"]);
    assert_eq!(v["split"]["machine"].as_str().map(str::is_empty), Some(false));

    // A lender with 5 GB available (1 GB of budget): no split fits; the
    // split is shown with its numbers, and generate refuses it.
    let tight = Lender::start(&tmp.join("tight"), &["--available-gb", "5"]);
    let v = fit(&tight.addr);
    assert!(refuses(&v["split"]["peer"]["fit"]["verdict"]) || refuses(&v["split"]["host"]["fit"]["verdict"]), "{v}");
    let out = headroom(&["generate", model, "--prompt", "hi", "--available-gb", "9", "--peer", &tight.addr]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("refusing to load") && stderr.contains("one of them would swap"), "{stderr}");
    assert!(stderr.contains("layers") && stderr.contains("budget"), "each Mac's numbers: {stderr}");
}

/// One greedy chat completion over plain HTTP (`Connection: close`): the body.
fn complete(addr: &str, model: &str, content: &str) -> Value {
    use std::io::Write;
    let body = serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 16,
        "temperature": 0,
    })
    .to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{reply}");
    serde_json::from_str(body).unwrap()
}

#[test]
fn serve_with_a_peer_answers_across_two_macs_turn_after_turn() {
    let tmp = headroom_test_support::scratch("two-macs-serve");
    let lender = Lender::start(&tmp.join("lender"), &[]);
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.deps/models/SmolLM2-135M-Instruct");
    let mut server = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["serve", "--port", "0", "--kernel", "fused", "--peer", &lender.addr, "--model"])
        .arg(&model)
        .env("HEADROOM_DATA_DIR", tmp.join("host"))
        .env("HF_HUB_CACHE", tmp.join("empty-hub"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(server.stdout.as_mut().unwrap()).read_line(&mut url).unwrap();
    let addr = url.trim().trim_start_matches("http://").trim_end_matches("/v1").to_owned();
    // Two turns: each starts afresh on both Macs (the lender rolls its cache back).
    let answers: Vec<Value> =
        (0..2).map(|_| complete(&addr, "SmolLM2-135M-Instruct", "What is the capital of France?")).collect();
    let _ = server.kill();
    let _ = server.wait();
    for v in &answers {
        let text = v["choices"][0]["message"]["content"].as_str().unwrap_or_default();
        assert!(text.contains("Paris"), "{v}");
        let two = &v["usage"]["headroom"]["two_macs"];
        assert_eq!(two["peer"], lender.addr.as_str(), "{v}");
        assert!(two["passes"].as_u64().is_some_and(|p| p >= 2), "{v}");
    }
    assert_eq!(answers[0]["choices"], answers[1]["choices"]);
}

#[test]
fn a_lender_under_memory_pressure_steps_aside_and_the_host_is_told() {
    let tmp = headroom_test_support::scratch("two-macs-pressure");
    // Acting at "normal" pressure: whatever this machine's PSI reads, the
    // lender finds memory tight at its first pass (the real level is
    // critical, as for a local model).
    let lender = Lender::start_with(&tmp.join("lender"), &[], &[("HEADROOM_AWAY_ACT_AT", "normal")]);
    let out = headroom(&["generate", "--prompt", "Hello", "--max-tokens", "8", "--peer", &lender.addr]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("gave its memory back (memory pressure there)"), "{stderr}");
}

#[test]
fn a_host_not_allowed_by_address_must_pair_with_the_code_the_lender_shows() {
    let tmp = headroom_test_support::scratch("two-macs-pair");
    // Loopback is not among the addresses allowed without pairing.
    let lender = Lender::start(&tmp.join("lender"), &["--allow", "10.255.255.1"]);
    assert_eq!(lender.code.len(), 6, "a six-digit code: {:?}", lender.code);
    let host = tmp.join("host");
    let env = [("HEADROOM_DATA_DIR", host.as_os_str())];
    let generate =
        ["generate", "--prompt", "What is the capital of France?", "--max-tokens", "12", "--peer", &lender.addr];

    let refused = crate::common::headroom_with(&generate, &env);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("not paired with this Mac") && stderr.contains("headroom pair"), "{stderr}");

    let wrong = lender.wrong_code();
    let bad = crate::common::headroom_with(&["pair", &lender.addr, &wrong], &env);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("wrong pairing code"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    let paired = crate::common::headroom_with(&["pair", &lender.addr, &lender.code], &env);
    assert!(paired.status.success(), "{}", String::from_utf8_lossy(&paired.stderr));
    assert!(
        String::from_utf8_lossy(&paired.stdout).starts_with("paired with "),
        "{}",
        String::from_utf8_lossy(&paired.stdout)
    );

    // Paired, and the lender's owner has not said yes yet: refused, saying so.
    let waiting = crate::common::headroom_with(&generate, &env);
    let stderr = String::from_utf8_lossy(&waiting.stderr);
    assert!(!waiting.status.success() && stderr.contains("has not allowed"), "{stderr}");
    // The code was spent: pairing again with it is refused.
    let again = crate::common::headroom_with(&["pair", &lender.addr, &lender.code], &env);
    assert!(!again.status.success(), "the code paired twice");
    // The owner allows the host (by its key, as `lend --hosts` lists it).
    let lender_env = [("HEADROOM_DATA_DIR", tmp.join("lender").into_os_string())];
    let lender_env: Vec<_> = lender_env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let hosts = crate::common::headroom_with(&["lend", "--hosts"], &lender_env);
    let listed = String::from_utf8_lossy(&hosts.stdout).into_owned();
    let key = listed.split("key ").nth(1).and_then(|s| s.split_whitespace().next()).unwrap_or_default().to_owned();
    assert!(listed.contains("waiting") && key.len() > 8, "{listed}");
    let allowed = crate::common::headroom_with(&["lend", "--allow-host", &key], &lender_env);
    assert!(allowed.status.success(), "{}", String::from_utf8_lossy(&allowed.stderr));

    let answered = crate::common::headroom_with(&generate, &env);
    assert!(answered.status.success(), "{}", String::from_utf8_lossy(&answered.stderr));
    assert!(
        String::from_utf8_lossy(&answered.stdout).contains("Paris"),
        "{}",
        String::from_utf8_lossy(&answered.stdout)
    );
    assert!(
        String::from_utf8_lossy(&answered.stderr).contains("two Macs: layers"),
        "{}",
        String::from_utf8_lossy(&answered.stderr)
    );
}

#[test]
fn a_lender_is_found_with_bonjour_by_name_address_and_budget() {
    let tmp = headroom_test_support::scratch("two-macs-bonjour");
    let lender = Lender::start(&tmp.join("lender"), &["--available-gb", "12"]);
    let out = headroom(&["peers", "--json", "--seconds", "4"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let found: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = found
        .as_array()
        .and_then(|all| all.iter().find(|f| f["address"] == lender.addr.as_str()))
        .unwrap_or_else(|| panic!("{} not among {found}", lender.addr));
    assert!(entry["machine"].as_str().is_some_and(|m| !m.is_empty()), "{entry}");
    // 12 GB available less the default 4 GB left to the OS.
    assert_eq!(entry["budget_bytes"].as_u64(), Some(8 << 30), "{entry}");
}

/// The app's way (Settings → Two Macs): find the lender with Bonjour, pair
/// with the code it shows, and its budget is answered to the token kept.
#[test]
fn the_app_finds_a_lender_pairs_with_its_code_and_is_answered_from_then_on() {
    use headroom::peers::{self, PairError};
    let tmp = headroom_test_support::scratch("two-macs-app-pair");
    // Loopback is not among the addresses allowed without pairing.
    // The owner allows every host that proves the code (`--allow-paired`).
    let lender =
        Lender::start(&tmp.join("lender"), &["--allow", "10.255.255.1", "--available-gb", "12", "--allow-paired"]);
    let host = tmp.join("host");
    let listed = |wait| {
        let all = peers::find(&host, Duration::from_secs(wait), None).unwrap();
        all.into_iter().find(|l| l.address == lender.addr).unwrap_or_else(|| panic!("{} not found", lender.addr))
    };
    let found = listed(4);
    assert!(!found.paired && !found.machine.is_empty(), "{found:?}");
    assert_eq!(found.budget_bytes, Some(8 << 30), "{found:?}");
    let budget = || {
        let trust = peers::trust_in(&host, &found.address).unwrap();
        headroom_engine::peer::host::peer_budget(&found.address, &trust)
    };
    assert!(budget().is_err(), "answered a host it did not pair with");

    let wrong = lender.wrong_code();
    let refused = peers::pair(&host, &found.address, &wrong).unwrap_err();
    assert!(matches!(refused, PairError::Refused { .. }), "{refused:?}");
    assert!(refused.to_string().ends_with("refused: wrong pairing code."), "{refused}");
    assert!(peers::list(&host).is_empty());

    let paired = peers::pair(&host, &found.address, &lender.code).unwrap();
    assert_eq!((paired.machine.as_str(), paired.allowed), (found.machine.as_str(), true));
    assert!(peers::trust_in(&host, &found.address).unwrap().pinned.is_some(), "the lender's key is pinned");
    let (machine, _) = budget().unwrap();
    assert_eq!(machine, found.machine);
    assert!(listed(3).paired);
}

#[test]
fn a_lender_without_the_model_pulls_the_hosts_revision_once_and_then_answers_as_one_mac() {
    use headroom_hub::testserver::TestHub;
    const REPO: &str = "mlx-community/Demo-Lent-4bit";
    let tmp = headroom_test_support::scratch("two-macs-pull");
    let source = tmp.join("source");
    let made = headroom(&["demo-model", source.to_str().unwrap()]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let hub = TestHub::start().unwrap();
    let commit = hub.add_repo(REPO, &source).unwrap();
    let endpoint = hub.endpoint();
    // The host pulled it into its own cache; the lender's is empty.
    let host_hub = tmp.join("host-hub");
    let pulled = crate::common::headroom_with(
        &["pull", REPO, "--endpoint", &endpoint, "--available-gb", "16"],
        &[("HF_HUB_CACHE", host_hub.as_os_str())],
    );
    assert!(pulled.status.success(), "{}", String::from_utf8_lossy(&pulled.stderr));
    let snapshot = host_hub.join("models--mlx-community--Demo-Lent-4bit/snapshots").join(&commit);
    let model = snapshot.to_str().unwrap();
    let lender_hub = tmp.join("lender-hub");
    let env = [("HF_HUB_CACHE", lender_hub.to_str().unwrap()), ("HF_ENDPOINT", endpoint.as_str())];
    let downloads = || hub.log().into_iter().filter(|r| r.path.starts_with("/cdn/") && r.range.is_none()).count();

    // Too little room there for its share: refused from the repo's headers, nothing downloaded.
    let tight = Lender::start_with(&tmp.join("tight"), &["--available-gb", "0.01", "--allow-pulls"], &env);
    let before = downloads();
    let out =
        headroom(&["generate", model, "--prompt", "hi", "--max-tokens", "2", "--override-fit", "--peer", &tight.addr]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("would not fit on"), "the lender's own verdict: {stderr}");
    assert_eq!(downloads(), before, "no weight was downloaded for a share that does not fit");
    drop(tight);

    let lender = Lender::start_with(&tmp.join("lender"), &["--allow-pulls"], &env);
    let alone = generate(Some(model), None);
    let split = generate(Some(model), Some(&lender.addr));
    let ids = |v: &Value| v["token_ids"].as_array().cloned().unwrap_or_default();
    assert_eq!(ids(&alone).len(), 24, "{alone}");
    assert_eq!(ids(&split), ids(&alone), "split {split} vs alone {alone}");
    let lent = lender_hub.join("models--mlx-community--Demo-Lent-4bit/snapshots").join(&commit);
    assert!(lent.join("config.json").is_file(), "the lender pulled the host's commit into its own cache");
    let pulled_files = downloads();
    assert!(pulled_files > before, "the weights came from the hub");

    // The next placement finds the pulled copy: nothing is downloaded again.
    drop(lender);
    let lender = Lender::start_with(&tmp.join("lender"), &["--allow-pulls"], &env);
    let again = generate(Some(model), Some(&lender.addr));
    assert_eq!(ids(&again), ids(&alone));
    assert_eq!(downloads(), pulled_files, "the second placement used the lender's copy");
}

#[test]
fn a_lender_runs_only_a_copy_with_the_hosts_weights_from_its_own_shelves() {
    let tmp = headroom_test_support::scratch("two-macs-other-weights");
    let (mine, theirs) = (tmp.join("host").join("demo"), tmp.join("lender-models").join("demo"));
    for (dir, seed) in [(&mine, "1"), (&theirs, "2")] {
        let made = headroom(&["demo-model", dir.to_str().unwrap(), "--seed", seed]);
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    }
    let model = mine.to_str().unwrap();
    // Not on its shelves: the host's folder is not read.
    let lender = Lender::start(&tmp.join("lender"), &[]);
    let out = headroom(&["generate", model, "--prompt", "hi", "--max-tokens", "2", "--peer", &lender.addr]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("has no copy of demo"), "{stderr}");
    drop(lender);
    // A folder of the same name with other weights (seed 2): refused, not run.
    let lender = Lender::start(&tmp.join("lender"), &["--models", tmp.join("lender-models").to_str().unwrap()]);
    let out = headroom(&["generate", model, "--prompt", "hi", "--max-tokens", "2", "--peer", &lender.addr]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("holds other weights than the host's"), "{stderr}");
}

/// A lender that answers a budget question and a placement (over the
/// sealed link, as a lender does) and never joins the ring.
fn never_joining_lender() -> String {
    use headroom_engine::peer::protocol::VERSION;
    use headroom_engine::peer::secure::{self, Hello, Identity};
    use headroom_engine::peer::{Reply, Request};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let budget = headroom::fit::budget_inputs(headroom::fit::BudgetSource {
        available_bytes: Some(16 << 30),
        ..headroom::fit::BudgetSource::default()
    })
    .unwrap();
    let identity = Identity::generate().unwrap();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for stream in listener.incoming() {
            let deadline = Instant::now() + Duration::from_secs(30);
            let Ok((framed, Hello::Session(first))) = secure::hello(stream.unwrap(), deadline) else { continue };
            let Ok(mut conn) = secure::accept(framed, &first, &identity, deadline) else { continue };
            let reply = match conn.receive::<Request>(Duration::from_secs(30)) {
                Ok(Request::Budget { .. }) => Reply::Budget { version: VERSION, machine: "Never.local".into(), budget },
                Ok(Request::Place { .. }) => Reply::Placed,
                _ => continue,
            };
            let _ = conn.send(&reply);
            kept.push(conn);
        }
    });
    addr
}

#[test]
fn a_lender_that_never_joins_the_ring_is_an_error_within_the_deadline_not_a_hang() {
    let tmp = headroom_test_support::scratch("two-macs-never-joins");
    let lender = never_joining_lender();
    let started = Instant::now();
    let out = crate::common::headroom_with(
        &["generate", "--prompt", "hi", "--max-tokens", "2", "--peer", &lender],
        &[("HEADROOM_DATA_DIR", tmp.as_os_str()), ("HEADROOM_PEER_JOIN_SECS", std::ffi::OsStr::new("3"))],
    );
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("ring"), "{stderr}");
    assert!(took < Duration::from_secs(45), "the host gave up after {took:?}");
    println!("a never-joining lender: the host's error after {:.1} s: {}", took.as_secs_f64(), stderr.trim());
}

/// What crosses between the Macs during pairing and a split turn, captured
/// on loopback with tcpdump (root here; `scripts/setup.sh` installs it):
/// neither the pairing code, nor the prompt, nor any of the control
/// messages (the placement, the names), in clear. The ring's own loopback
/// sockets on each side are not between the Macs; only the lender's port is.
#[test]
fn a_capture_of_pairing_and_a_split_turn_holds_neither_the_code_nor_the_prompt_nor_a_message() {
    let tmp = headroom_test_support::scratch("two-macs-capture");
    let lender = Lender::start(&tmp.join("lender"), &["--allow", "10.255.255.1", "--allow-paired"]);
    let port = lender.addr.rsplit(':').next().unwrap().to_owned();
    let pcap = tmp.join("split.pcap");
    let mut dump = Command::new("tcpdump")
        .args(["-i", "lo", "-U", "-s", "0", "-w", pcap.to_str().unwrap(), "tcp", "port", &port])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("tcpdump is needed for this test: scripts/setup.sh installs it");
    let mut said = String::new();
    BufReader::new(dump.stderr.as_mut().unwrap()).read_line(&mut said).unwrap();
    assert!(said.contains("listening on"), "tcpdump: {said}");
    let host = tmp.join("host");
    let env = [("HEADROOM_DATA_DIR", host.as_os_str())];
    let paired = crate::common::headroom_with(&["pair", &lender.addr, &lender.code], &env);
    assert!(paired.status.success(), "{}", String::from_utf8_lossy(&paired.stderr));
    let prompt = "Remember the passphrase aubergine-lighthouse-4711 and repeat it.";
    let out = crate::common::headroom_with(
        &["generate", "--prompt", prompt, "--max-tokens", "8", "--temp", "0", "--peer", &lender.addr],
        &env,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("two Macs: layers"), "not split");
    std::thread::sleep(Duration::from_millis(500));
    let _ = Command::new("kill").args(["-s", "INT", &dump.id().to_string()]).status();
    let _ = dump.wait();
    let captured = std::fs::read(&pcap).unwrap();
    // The hand-offs crossed (a pass moves the hidden state both ways): not an empty capture.
    assert!(captured.len() > 20_000, "only {} bytes captured", captured.len());
    let holds = |needle: &[u8]| captured.windows(needle.len()).any(|w| w == needle);
    for needle in [lender.code.as_str(), "aubergine", "passphrase", "first_layer", "\"kind\"", "budget"] {
        assert!(!holds(needle.as_bytes()), "{needle:?} crossed in clear");
    }
    println!("captured {} bytes between the Macs: no code, prompt or message in clear", captured.len());
}
