//! `headroom pull` end to end against a hub-like server on loopback (never
//! the real hub): the verdict from the headers comes first and equals the
//! engine's own; a pulled model is listed by `headroom models` with its
//! verdict; a refused or cancelled pull is not; the next pull resumes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
use headroom_hub::testserver::{Fault, TestHub};

const REPO: &str = "mlx-community/Demo-Tiny-4bit";

fn demo(dir: &Path, spec: &DemoSpec) {
    write_demo_model(dir, spec).unwrap();
}

/// The binary with a private HF cache and data folder.
fn headroom(root: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_headroom"));
    cmd.args(args)
        .env("HF_HUB_CACHE", root.join("hub"))
        .env("HEADROOM_DATA_DIR", root.join("data"))
        .env_remove("HF_ENDPOINT");
    cmd
}

fn run(root: &Path, args: &[&str]) -> Output {
    headroom(root, args).output().expect("cannot run headroom")
}

/// `headroom models --json` at a fixed budget: (id, verdict kind) of each model.
fn listed(root: &Path) -> Vec<(String, String)> {
    let out = run(root, &["models", "--json", "--available-gb", "16"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["id"].as_str().unwrap_or_default().to_owned(),
                m["fit"]["verdict"]["kind"].as_str().unwrap_or("none").to_owned(),
            )
        })
        .collect()
}

fn json_lines(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

#[test]
fn a_pulled_model_is_listed_with_its_verdict_and_a_refused_one_is_not_downloaded() {
    let root = headroom_test_support::scratch("pull-full");
    demo(&root.join("source"), &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four));
    let hub = TestHub::start().unwrap();
    hub.add_repo(REPO, &root.join("source")).unwrap();
    let endpoint = hub.endpoint();

    // No room: refused after the header check, before any weight byte.
    let out = run(&root, &["pull", REPO, "--endpoint", &endpoint, "--available-gb", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with(&format!("headroom: refusing to download `{REPO}`: it cannot fit")), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("verdict: cannot fit") && stdout.contains("nothing downloaded yet"), "{stdout}");
    let cdn: Vec<_> = hub.log().into_iter().filter(|r| r.path.starts_with("/cdn/")).collect();
    assert!(!cdn.is_empty(), "the headers were read from the CDN: {:?}", hub.log());
    assert!(cdn.iter().all(|r| r.range.is_some()), "only header ranges were fetched: {cdn:?}");
    assert!(listed(&root).is_empty());

    let out = run(&root, &["pull", REPO, "--endpoint", &endpoint, "--available-gb", "16", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out.stdout);
    assert_eq!(lines[0]["event"], "fit", "the verdict comes first");
    assert_eq!(lines[0]["report"]["verdict"]["kind"], "fits");
    assert_eq!(lines[0]["model"]["repo"], REPO);
    assert_eq!(lines[1]["event"], "started");
    assert!(lines.iter().any(|l| l["event"] == "progress" && l["bytes_per_sec"].as_f64().is_some()));
    let last = lines.last().expect("no output");
    assert_eq!(last["event"], "finished");
    assert_eq!(listed(&root), [(REPO.to_owned(), "fits".to_owned())]);

    // The snapshot is the source, byte for byte, through the cache's links.
    let snapshot = PathBuf::from(last["snapshot"].as_str().unwrap_or_default());
    for entry in std::fs::read_dir(root.join("source")).into_iter().flatten().flatten() {
        let name = entry.file_name();
        assert_eq!(std::fs::read(snapshot.join(&name)).ok(), std::fs::read(entry.path()).ok(), "{name:?}");
    }

    // An unknown repo: one clear line.
    let out = run(&root, &["pull", "mlx-community/absent", "--endpoint", &endpoint]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.starts_with("headroom: repository mlx-community/absent was not found at http://127.0.0.1:"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_pull_cancelled_with_ctrl_c_is_not_listed_and_the_next_one_resumes() {
    let root = headroom_test_support::scratch("pull-cancel");
    demo(&root.join("source"), &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four));
    let weights = std::fs::metadata(root.join("source/model.safetensors")).map(|m| m.len()).unwrap_or(0);
    let stall_at = weights / 3;
    let hub = TestHub::start().unwrap();
    hub.add_repo(REPO, &root.join("source")).unwrap();
    let endpoint = hub.endpoint();
    hub.add_fault(Fault::Stall { file: "model.safetensors".into(), after: stall_at });

    let child = headroom(&root, &["pull", REPO, "--endpoint", &endpoint, "--available-gb", "16"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the transfer has stalled with part of the weights on disk.
    let blobs = root.join("hub/models--mlx-community--Demo-Tiny-4bit/blobs");
    let partial_len = || -> u64 {
        std::fs::read_dir(&blobs)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "incomplete"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .max()
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while partial_len() < stall_at {
        assert!(Instant::now() < deadline, "the pull never reached the stall: {:?}", hub.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id().to_string();
    let status = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("was cancelled; nothing was added to the model list"), "{stderr}");
    assert!(listed(&root).is_empty(), "a cancelled pull is not listed");
    assert_eq!(partial_len(), stall_at, "the partial blob is kept for the next pull");

    let out = run(&root, &["pull", REPO, "--endpoint", &endpoint, "--available-gb", "16"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let resumed = format!("bytes={stall_at}-");
    assert!(hub.log().iter().any(|r| r.range.as_deref() == Some(resumed.as_str())), "{:?}", hub.log());
    assert_eq!(listed(&root), [(REPO.to_owned(), "fits".to_owned())]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("config.json: already in the cache") && text.contains("MB/s") && text.contains("ETA"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&root);
}
