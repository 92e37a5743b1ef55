//! The app and `headroom chat` are two doors to one turn service: for the
//! same message, history, settings and model, one table run through both
//! front ends must give the same route, the same reasons and the same cache
//! behaviour (a repeated cloud request answered from the cache, by each).

use clap::Parser;
use headroom_cloud::testserver::{answer, Stub};
use headroom_core::router::Force;
use serde_json::Value;

use super::*;
use crate::cli::{Cli, Command};
use crate::state::Locations;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum History {
    None,
    Secrets,
}

struct Case {
    name: &'static str,
    text: String,
    history: History,
    force: Option<Force>,
    allow: bool,
    /// Sent twice, in two new chats: the second is the cache's to answer.
    twice: bool,
    /// Where it must run: "local", "cloud" or "cached" (each time).
    expect: &'static [&'static str],
}

fn case(name: &'static str, text: &str, force: Option<Force>, expect: &'static [&'static str]) -> Case {
    Case { name, text: text.into(), history: History::None, force, allow: false, twice: false, expect }
}

fn cases() -> Vec<Case> {
    let cloud = Some(Force::Cloud);
    vec![
        case("short stays local", "what is a monad?", None, &["local"]),
        case("forced local", "what is a monad?", Some(Force::Local), &["local"]),
        Case { twice: true, ..case("forced cloud, then the cache", "what is a functor?", cloud, &["cloud", "cached"]) },
        Case {
            twice: true,
            ..case("long goes to the cloud, then the cache", &"lorem ipsum ".repeat(5000), None, &["cloud", "cached"])
        },
        case("a secret stays local, forced or not", "my id is 11010519491231002X", cloud, &["local"]),
        Case {
            allow: true,
            ..case("the override sends a secret, never cached", "mail j.doe@example.com", cloud, &["cloud"])
        },
        Case {
            history: History::Secrets,
            ..case("earlier secrets keep the chat local", "and then?", None, &["local"])
        },
        Case {
            history: History::Secrets,
            twice: true,
            ..case("earlier secrets stay behind a forced cloud, never cached", "and then?", cloud, &["cloud", "cloud"])
        },
    ]
}

/// What a front end reported for one turn: where, why (the local model's
/// name made neutral: the app names it by id, the CLI by its folder), and
/// how many requests reached the cloud.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    target: String,
    reasons: Vec<(String, String)>,
    requests: usize,
}

fn seen(route: &Value, local: &str, requests: usize) -> Seen {
    let neutral = |s: &str| s.replace(local, "<local model>");
    Seen {
        target: route["target"].as_str().unwrap_or("?").to_owned(),
        reasons: route["reasons"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| (r["code"].as_str().unwrap_or("?").to_owned(), neutral(r["message"].as_str().unwrap_or(""))))
            .collect(),
        requests,
    }
}

#[test]
fn the_app_and_the_cli_route_explain_and_cache_alike() {
    // The app, with the demo model loaded and its cloud.
    let (app, _window) = app_with_window_in("parity-app");
    let state = state_of(&app);
    crate::models::ensure_default_model(&state).unwrap();
    let app_cloud = Stub::start(vec![answer(&["fine"])]).unwrap();
    let settings = use_cloud(&state, &app_cloud);
    let model_dir = state.loaded_model().map(|m| m.path).expect("no model");
    let app_model = crate::models::DEMO_MODEL_ID;

    // The CLI, on a data folder of its own with the same settings and model.
    let cli_state = crate::test_state("parity-cli");
    let cli_cloud = Stub::start(vec![answer(&["fine"])]).unwrap();
    block_on(
        cli_state
            .store
            .set_settings(&Settings { cloud_base_url: Some(cli_cloud.base_url.clone()), ..settings.clone() }),
    )
    .unwrap();
    let cli_model = model_dir.to_string_lossy().into_owned();

    let mut failures = Vec::new();
    for (i, c) in cases().iter().enumerate() {
        let rounds = if c.twice { 2 } else { 1 };
        for round in 0..rounds {
            let session = format!("case-{i}-{round}");
            if c.history == History::Secrets {
                stored_turns(&state.store, &session, &secret_turns());
                stored_turns(&cli_state.store, &session, &secret_turns());
            }
            let app_seen = app_turn(&app, &app_cloud, &session, c, app_model);
            let cli_seen = cli_turn(&cli_state.locations, &cli_state.store, &cli_cloud, &cli_model, &session, c);
            if app_seen != cli_seen {
                failures.push(format!("{} (round {round}):\n  app {app_seen:?}\n  cli {cli_seen:?}", c.name));
            }
            if app_seen.target != c.expect[round] {
                failures.push(format!(
                    "{} (round {round}): ran at {}, expected {}",
                    c.name, app_seen.target, c.expect[round]
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(leaked(&app_cloud), ["j.doe@example.com"], "only the allowed message's secret left");
    assert_eq!(leaked(&cli_cloud), ["j.doe@example.com"]);
}

fn app_turn(app: &tauri::App<MockRuntime>, cloud: &Stub, session: &str, c: &Case, local: &str) -> Seen {
    let before = cloud.requests().len();
    let (channel, events) = collecting();
    let sent = block_on(crate::commands::chat::chat_send(
        session.into(),
        c.text.clone(),
        Some(4),
        c.force,
        Some(c.allow),
        None,
        None,
        channel,
        app.state(),
    ));
    assert!(sent.is_ok(), "{}: {sent:?}", c.name);
    let events = until_end(&events);
    let route = events.iter().find(|e| e["event"] == "started").map(|e| e["data"]["route"].clone());
    let route = route.unwrap_or_else(|| panic!("{}: never started: {events:?}", c.name));
    // The turn's thread records the end right after the last event.
    let state = state_of(app);
    settled(&state.store, session, block_on(state.store.messages(session)).map(|m| m.len()).unwrap_or(0));
    seen(&route, local, cloud.requests().len() - before)
}

fn cli_turn(locations: &Locations, store: &Store, cloud: &Stub, model: &str, session: &str, c: &Case) -> Seen {
    let before = cloud.requests().len();
    let route = match c.force {
        None => "auto",
        Some(Force::Local) => "local",
        Some(Force::Cloud) => "cloud",
    };
    let mut argv = vec!["headroom", "chat", model, "--session", session, "--message", &c.text, "--route", route];
    argv.extend(["--max-tokens", "4", "--json"]);
    if c.allow {
        argv.push("--allow-sensitive");
    }
    let Some(Command::Chat(args)) = Cli::try_parse_from(argv).unwrap().command else { panic!("not a chat command") };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let result = crate::cli::chat::chat(&args, locations.clone(), store.clone(), &mut out, &mut err);
    assert!(result.is_ok(), "{}: {result:?}: {}", c.name, String::from_utf8_lossy(&err));
    let v: Value = serde_json::from_slice(&out).map_err(|e| format!("{}: {e}", c.name)).unwrap();
    seen(&v["route"], model, cloud.requests().len() - before)
}
