//! `headroom route` end to end: on a demo model the tokens are counted with
//! its tokenizer and its fit checked at the needed context; without one the
//! count is an estimate that says so; sensitive text stays local; errors are
//! one line on stderr with exit code 1.

use headroom_engine::tokenizer::Tokenizer;
use serde_json::Value;

use crate::common::headroom;

fn json_of(args: &[&str]) -> Value {
    let out = headroom(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).map_err(|e| format!("{args:?}: {e}")).unwrap()
}

fn codes(v: &Value) -> Vec<String> {
    v["reasons"]
        .as_array()
        .map_or_else(Vec::new, |rs| rs.iter().filter_map(|r| r["code"].as_str().map(str::to_owned)).collect())
}

#[test]
fn route_counts_with_the_model_tokenizer_and_checks_its_fit() {
    let tmp = headroom_test_support::scratch("route-bin");
    let dir = tmp.join("data");
    let d = dir.to_string_lossy().into_owned();
    let out = headroom(&["demo-model", &d]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = "Summarise the attached quarterly figures in three bullet points.";
    let expected = Tokenizer::from_dir(&dir).and_then(|t| t.encode(text, false)).unwrap().len();

    // Roomy memory: short input stays on the local model, counted exactly.
    let v = json_of(&["route", text, "--model", &d, "--available-gb", "64", "--json"]);
    assert_eq!(v["target"], serde_json::json!({ "kind": "local", "model": d }));
    assert_eq!(v["tokensExact"], true);
    assert_eq!(v["inputTokens"], expected);
    assert_eq!(v["neededContext"], expected + 1024);
    assert_eq!(codes(&v), ["SHORT_INPUT"]);

    // No memory to speak of: the model would swap at the needed context, so the cloud.
    let v = json_of(&[
        "route",
        text,
        "--model",
        &d,
        "--available-gb",
        "0",
        "--headroom-gb",
        "0",
        "--cloud",
        "openai",
        "--json",
    ]);
    assert_eq!(v["target"], serde_json::json!({ "kind": "cloud", "provider": "openai" }));
    assert!(codes(&v).contains(&"LOCAL_WOULD_SWAP".to_owned()), "{v}");

    // A threshold below the input: long, so the cloud; tools too.
    let v =
        json_of(&["route", text, "--model", &d, "--available-gb", "64", "--threshold", "3", "--needs-tools", "--json"]);
    assert_eq!(v["target"]["kind"], "cloud");
    assert_eq!(codes(&v), ["NEEDS_TOOLS", "LONG_INPUT"]);

    // Sensitive content stays local even when the cloud is asked for, until the user overrides it.
    let secret = "deploy with ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ";
    let v =
        json_of(&["route", secret, "--model", &d, "--available-gb", "64", "--needs-web", "--force", "cloud", "--json"]);
    assert_eq!(v["target"]["kind"], "local");
    assert_eq!(
        codes(&v),
        ["SENSITIVE_SECRET", "CLOUD_REFUSED_SENSITIVE", "NEEDS_WEB", "SHORT_INPUT", "STAYS_LOCAL_SENSITIVE"]
    );
    assert!(!v.to_string().contains("ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ"), "the secret is masked: {v}");
    let v = json_of(&["route", secret, "--model", &d, "--force", "cloud", "--allow-sensitive", "--json"]);
    assert_eq!(v["target"]["kind"], "cloud");
    assert!(codes(&v).contains(&"PRIVACY_OVERRIDDEN".to_owned()), "{v}");
}

#[test]
fn route_without_a_model_estimates_and_says_so_and_errors_are_one_line() {
    let out = headroom(&["route", "my number is 138 1234 5678", "--needs-web"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("local (the local model)"));
    assert!(stdout.contains("SENSITIVE_CN_MOBILE") && stdout.contains("138****5678"), "{stdout}");
    assert!(!stdout.contains("1234 5678"), "{stdout}");
    assert!(stdout.contains("note: tokens estimated"), "{stdout}");

    let out = headroom(&["route", "hi", "--force", "cloud", "--no-cloud"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "headroom: you asked for the cloud, but no cloud provider is set up\n"
    );

    let out = headroom(&["route", "hi", "--model", "mlx-community/absent-model"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("headroom: model `mlx-community/absent-model` not found"), "{stderr}");
    assert!(out.stdout.is_empty());

    let out = headroom(&["route", "hi", "--force", "sideways"]);
    assert_eq!(out.status.code(), Some(2), "clap refuses an unknown --force value");
}
