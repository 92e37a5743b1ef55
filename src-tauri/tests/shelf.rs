//! `headroom shelf` end to end: the recorded starter shelf with a verdict for
//! each real model, what fits first and what does not saying why; a refresh
//! from a hub-like server on loopback (never the real hub) replaces one
//! repo's record and keeps the others; a pulled shelf model is marked installed.

use std::path::Path;
use std::process::{Command, Output};

use headroom_core::shelf::{parse_shelf, RECORDED};
use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
use headroom_hub::testserver::TestHub;
use serde_json::Value;

/// The binary with a private HF cache and data folder, and `endpoint` as the hub.
fn run(root: &Path, endpoint: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_headroom"));
    cmd.args(args).env("HF_HUB_CACHE", root.join("hub")).env("HEADROOM_DATA_DIR", root.join("data"));
    match endpoint {
        Some(e) => cmd.env("HF_ENDPOINT", e),
        // Nothing in these tests may reach the real hub.
        None => cmd.env("HF_ENDPOINT", "http://127.0.0.1:9"),
    };
    cmd.env_remove("HF_TOKEN").env("HF_TOKEN_PATH", root.join("no-token"));
    cmd.output().expect("headroom runs")
}

fn shelf_json(root: &Path, endpoint: Option<&str>, args: &[&str]) -> Vec<Value> {
    let out = run(root, endpoint, &[&["shelf", "--json"], args].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("shelf --json prints JSON");
    v.as_array().expect("a list").clone()
}

fn rank(kind: &str) -> u8 {
    match kind {
        "fits" => 0,
        "tight" => 1,
        "would_swap" => 2,
        "cannot_fit" => 3,
        other => panic!("verdict {other}"),
    }
}

#[test]
fn the_recorded_shelf_puts_what_fits_first_and_says_why_the_rest_does_not() {
    let root = headroom_test_support::scratch("shelf-recorded");
    let recorded = parse_shelf(RECORDED).unwrap();
    // 14 GB available, 4 GB left to the OS: a 10 GB budget, as on a 16 GB Mac.
    let list = shelf_json(&root, None, &["--available-gb", "14"]);
    assert_eq!(list.len(), recorded.models.len());
    let kinds: Vec<&str> = list.iter().map(|e| e["fit"]["verdict"]["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"fits") && kinds.iter().any(|k| rank(k) >= 2), "{kinds:?}");
    let order: Vec<(u8, u64)> = list
        .iter()
        .map(|e| (rank(e["fit"]["verdict"]["kind"].as_str().unwrap()), e["weight_bytes"].as_u64().unwrap()))
        .collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "fits first, smaller first within a verdict: {order:?}");
    for e in &list {
        let fit = &e["fit"];
        assert_eq!(fit["budget"]["budget_bytes"].as_u64(), Some(10 << 30), "{e}");
        assert_eq!(fit["footprint"]["weight_bytes"], e["weight_bytes"], "{e}");
        assert_eq!(e["source"]["kind"], "recorded");
        assert_eq!(e["installed"], false);
        let refuses = rank(fit["verdict"]["kind"].as_str().unwrap()) >= 2;
        let peak = fit["estimate"]["predicted_peak_bytes"].as_u64().unwrap();
        assert_eq!(refuses, peak > 10 << 30, "{}: peak {peak}", e["repo"]);
        match e["why"].as_str() {
            Some(why) => assert!(refuses && why.contains(" GB") && why.contains("budget"), "{why}"),
            None => assert!(!refuses, "{}: a refusal with no reason", e["repo"]),
        }
    }

    // The same shelf as a table, with a 64 GB machine's budget: all fit.
    let out = run(&root, None, &["shelf", "--available-gb", "64"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.starts_with("the starter shelf at 8192 tokens of context, against this Mac's budget of 60.00 GB"),
        "{text}"
    );
    let rows: Vec<&str> =
        text.lines().filter(|l| recorded.models.iter().any(|m| l.starts_with(&format!("{} ", m.repo)))).collect();
    assert_eq!(rows.len(), recorded.models.len(), "{text}");
    assert!(rows.iter().all(|r| r.contains("fits,")), "{text}");
}

#[test]
fn a_refresh_replaces_one_repos_record_from_the_hub_and_keeps_the_others() {
    let root = headroom_test_support::scratch("shelf-refresh");
    let recorded = parse_shelf(RECORDED).unwrap();
    let repo = recorded.models[0].repo.clone();
    // The hub now serves a tiny model under that repo's name.
    write_demo_model(&root.join("source"), &DemoSpec::new(Arch::Qwen3, Preset::Tiny, Bits::Four)).unwrap();
    let hub = TestHub::start().unwrap();
    let commit = hub.add_repo(&repo, &root.join("source")).unwrap();

    let out = run(&root, Some(&hub.endpoint()), &["shelf", "--refresh", "--json", "--available-gb", "14"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("refreshed {repo} from the hub (commit {})", &commit[..12])), "{stderr}");
    let kept = stderr.lines().filter(|l| l.starts_with("kept the older record of ")).count();
    assert_eq!(kept, recorded.models.len() - 1, "{stderr}");

    // Later listings read the kept record, offline.
    let list = shelf_json(&root, None, &["--available-gb", "14"]);
    let e = list.iter().find(|e| e["repo"] == repo.as_str()).unwrap();
    assert_eq!(e["source"], serde_json::json!({ "kind": "hub", "commit": commit }));
    assert_eq!(e["arch"], "qwen3");
    assert!(e["weight_bytes"].as_u64().unwrap() < 10_000_000, "the tiny model's weights: {e}");
    assert_eq!(list[0]["repo"], repo.as_str(), "the smallest model that fits comes first");
    assert_eq!(list.iter().filter(|e| e["source"]["kind"] == "recorded").count(), recorded.models.len() - 1);

    // Pulled, it is marked installed.
    let out = run(&root, Some(&hub.endpoint()), &["pull", &repo, "--available-gb", "14"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list = shelf_json(&root, None, &["--available-gb", "14"]);
    let installed: Vec<&str> =
        list.iter().filter(|e| e["installed"] == true).map(|e| e["repo"].as_str().unwrap()).collect();
    assert_eq!(installed, [repo.as_str()]);
}

#[test]
fn a_damaged_kept_record_falls_back_to_the_recorded_one() {
    let root = headroom_test_support::scratch("shelf-damaged");
    let recorded = parse_shelf(RECORDED).unwrap();
    let repo = &recorded.models[0].repo;
    let kept = root.join("data/shelf").join(format!("{}.json", repo.replace('/', "__")));
    std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
    for garbage in ["{", "{\"repo\": 3}", "[]"] {
        std::fs::write(&kept, garbage).unwrap();
        let list = shelf_json(&root, None, &["--available-gb", "14"]);
        assert_eq!(list.len(), recorded.models.len(), "{garbage}");
        assert!(list.iter().all(|e| e["source"]["kind"] == "recorded"), "{garbage}");
    }
}
