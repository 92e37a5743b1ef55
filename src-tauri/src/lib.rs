//! The `headroom` app crate: the Tauri shell (commands, tray, popover,
//! desktop, the event feeds) and the CLI, two front ends over the service
//! crate `headroom-app`; the only crate that depends on tauri. `run()` is the real app;
//! `run_app()` is its wiring, generic over the runtime so that
//! `tauri::test::mock_builder()` tests exercise it without a display.

pub mod cli;
mod commands;
mod desktop;
mod error;
mod feeds;
#[cfg(test)]
mod ipc_contract;
pub mod logging;
mod platform;
mod popover;
mod tray;

// The service layer, under the names the front ends have always used.
pub use headroom_app::{
    about, away, bench, codes, default_model, discovery, fit, give_back, lend, live, locations, memory, models, peers,
    pull, runs, runtime, serve, serve_marker, server_key, shelf, state, turn, DATA_DIR_ENV,
};

use std::process::ExitCode;

use headroom_app::codes::Coded;
use tauri::{App, Builder, Context, Emitter, Manager, RunEvent, Runtime};

pub use desktop::missing_desktop_session;
pub use error::CommandError;
pub use state::{platform_app_data_dir, AppState, Locations};

/// Label of the popover window (tauri.conf.json).
pub const MAIN_WINDOW: &str = "main";

/// When set to 1 the popover is shown at start: WebDriver can only drive a
/// visible window, so the end-to-end tests set it. Users never need it.
pub const SHOW_WINDOW_ENV: &str = "HEADROOM_SHOW_WINDOW";

/// Emitted (no payload) when the model list or the loaded model changed
/// behind the UI's back, e.g. once the bundled demo model is ready.
pub const MODELS_CHANGED_EVENT: &str = "models-changed";

/// Opens the menu-bar app and blocks until the user quits. `logs`: where
/// main.rs's tracing setup writes, for the Settings view.
pub fn run(logs: logging::Logs) -> ExitCode {
    let builder = desktop::with_plugins(Builder::default()).setup(|app| {
        platform::configure(app);
        tray::install(app.handle())?;
        if std::env::var(SHOW_WINDOW_ENV).as_deref() == Ok("1") {
            popover::show(app.handle(), None)?;
        }
        Ok(())
    });
    let app = match run_app(builder, tauri::generate_context!(), None) {
        Ok(app) => app,
        Err(e) => {
            desktop::start_over_if_the_first_quit(&e);
            tracing::error!("the app could not start: {e}");
            eprintln!("headroom: the app could not start: {e}");
            return ExitCode::FAILURE;
        }
    };
    app.manage(logs);
    let state = AppState::clone(&app.state::<AppState>());
    // A server marker left by a run that crashed is not a server.
    serve_marker::clear(&state.locations.data_dir);
    start_desktop(&app, &state);
    // After run_app (which manages the state the sampler lives in). Live
    // memory is a nicety: without it the app still runs.
    if let Err(e) = feeds::start_memory(app.handle()) {
        tracing::warn!("memory readings are unavailable: {e}");
    }
    feeds::start_away(app.handle());
    start_default_model(&app);
    app.run(|app, event| match event {
        // Hiding the last window must not end a menu-bar app; only Quit
        // (an explicit exit code) does.
        RunEvent::ExitRequested { code: None, api, .. } => api.prevent_exit(),
        // Free the model on its own thread before exit handlers tear MLX down.
        RunEvent::Exit => {
            let state = app.state::<AppState>();
            serve_marker::clear(&state.locations.data_dir);
            // The lender stops with the app (a session worker it started is killed).
            drop(state.lending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take());
            // Every chat's KV state to disk, so it continues without a
            // prefill after the restart; an answer still streaming stops
            // first (its state so far is saved with the rest).
            state.engine.cancel_all();
            state.save_chat_states(std::time::Duration::ZERO, "at quit");
            state.engine.shutdown();
        }
        _ => {}
    });
    ExitCode::SUCCESS
}

/// The global shortcut and the login item from the stored settings; the
/// login item as the OS has it is written back (the user may have removed
/// it in System Settings since).
fn start_desktop<R: Runtime>(app: &App<R>, state: &AppState) {
    // What run_app applied from the store (the defaults where it was unreadable).
    let stored = state.settings();
    let actual = desktop::start(app.handle(), &stored);
    if actual != stored {
        if let Err(e) = runtime::block_on(state.save_settings(&actual)) {
            tracing::warn!("could not record the login item's state in the settings: {e}");
        }
    }
}

/// Off the UI thread: sets up and loads the default model when there is
/// no model of the app's own, then tells the UI to refresh its list.
fn start_default_model<R: Runtime>(app: &App<R>) {
    let state = AppState::clone(&app.state::<AppState>());
    let handle = app.handle().clone();
    let spawned = std::thread::Builder::new().name("headroom-default-model".into()).spawn(move || {
        match models::ensure_default_model(&state) {
            Ok(true) => tracing::info!("loaded the default model"),
            Ok(false) => {}
            Err(e) => tracing::warn!(code = e.code().as_str(), "default model: {e}"),
        }
        if let Err(e) = handle.emit(MODELS_CHANGED_EVENT, ()) {
            tracing::warn!("could not tell the UI about the models: {e}");
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("could not start the demo-model thread: {e}");
    }
}

/// Everything the app is, except the parts that need a real desktop (tray,
/// activation policy): state, commands, window behaviour. `locations`
/// defaults to `$HEADROOM_DATA_DIR` (else Tauri's app data folder) and the
/// process's HF cache variables.
pub fn run_app<R: Runtime>(
    builder: Builder<R>,
    context: Context<R>,
    locations: Option<Locations>,
) -> tauri::Result<App<R>> {
    // One runtime: the service's store calls, sampler and cloud streams run
    // on Tauri's, beside the commands. (Tests that reached the service
    // first keep the one it made; that is only a second thread pool.)
    if !runtime::share(tauri::async_runtime::handle().inner().clone()) {
        tracing::debug!("the service runtime was already running; Tauri's runs beside it");
    }
    let app = builder
        .plugin(tauri_plugin_notification::init())
        .invoke_handler(tauri::generate_handler![
            commands::app::app_info,
            commands::bench::bench_run,
            commands::bench::bench_cancel,
            commands::chat::chat_send,
            commands::chat::chat_cancel,
            commands::chat::chat_regenerate,
            commands::cloud::cloud_key_set,
            commands::cloud::cloud_key_status,
            commands::cloud::cloud_key_delete,
            commands::memory::memory_history,
            commands::memory::away_notice,
            commands::live::live_chart,
            commands::live::live_visibility,
            commands::models::models_list,
            commands::models::model_load,
            commands::pull::model_pull_check,
            commands::pull::model_pull,
            commands::pull::model_pull_cancel,
            commands::shelf::shelf_list,
            commands::shelf::shelf_refresh,
            commands::sessions::sessions_list,
            commands::sessions::session_create,
            commands::sessions::session_rename,
            commands::sessions::session_delete,
            commands::sessions::session_search,
            commands::sessions::session_messages,
            commands::sessions::session_export,
            commands::charts::session_chart,
            commands::export::session_export_file,
            commands::sessions::session_import,
            commands::sessions::settings_get,
            commands::sessions::settings_set,
            commands::route::route_preview,
            commands::route::cloud_cache_stats,
            commands::prompt_cache::prompt_cache_stats,
            commands::window::hide_window,
            commands::desktop::desktop_status,
            commands::server::server_start,
            commands::server::server_stop,
            commands::server::server_status,
            commands::server::server_key,
            commands::server::server_key_regenerate,
            commands::lend::lend_start,
            commands::lend::lend_stop,
            commands::lend::lend_status,
            commands::lend::lend_hosts,
            commands::peers::peers_find,
            commands::peers::peer_pair,
            commands::tools::tools_list,
            commands::tools::tools_restart,
            commands::tools::tool_set_flags,
            commands::tools::tool_answer,
            commands::peers::peers_paired,
            commands::peers::peer_forget,
            commands::lend::lend_answer,
        ])
        .on_window_event(popover::on_window_event)
        .build(context)?;
    app.manage(popover::PopoverState::default());
    let locations = match locations {
        Some(l) => l,
        None => Locations::from_env(|| app.path().app_data_dir())?,
    };
    let engine =
        headroom_engine::worker::EngineHandle::spawn().map_err(|e| tauri::Error::Io(std::io::Error::other(e)))?;
    // Opened (and migrated) before any command can run.
    let store = runtime::block_on(headroom_store::Store::open(&locations.data_dir))
        .map_err(|e| tauri::Error::Io(std::io::Error::other(e)))?;
    let state = AppState::new(engine, locations, store);
    match runtime::block_on(state.store.settings()) {
        Ok(s) => state.apply_settings(&s),
        Err(e) => tracing::warn!("the stored settings are unreadable, using the defaults: {e}"),
    }
    // The MCP servers of mcp.json start beside the app (each within its
    // deadline); Settings → Tools shows them starting, then their state.
    let tools = state.tools.clone();
    runtime::spawn(async move {
        tools.restart().await;
    });
    app.manage(state);
    Ok(app)
}

#[cfg(test)]
pub(crate) use headroom_app::test_state;

#[cfg(test)]
mod app_tests;

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};
    use tauri::test::{mock_builder, mock_context, noop_assets};
    use tauri::Manager;

    use crate::app_tests::{app_with_window, app_with_window_in, invoke, invoke_from};

    #[test]
    fn models_list_is_empty_then_shows_the_loaded_demo_model() {
        let (app, window) = app_with_window_in("models");
        assert_eq!(invoke(&window, "models_list", json!({})).ok(), Some(json!([])));
        let state = app.state::<crate::AppState>();
        assert_eq!(crate::models::ensure_default_model(&state).ok(), Some(true));
        let list = invoke(&window, "models_list", json!({})).unwrap();
        assert_eq!(list[0]["id"], crate::models::DEMO_MODEL_ID);
        assert_eq!(list[0]["loaded"], true);
        assert_eq!(list[0]["arch"], "qwen2");
        assert_eq!(list[0]["bits"], 4);
    }

    #[test]
    fn model_load_of_an_unknown_id_is_a_typed_error() {
        let (_app, window) = app_with_window_in("load");
        let err = invoke(&window, "model_load", json!({ "id": "nobody/nothing" })).err();
        let err = err.expect("an unknown model loaded");
        assert_eq!(err["code"], "MODEL_NOT_FOUND");
        assert!(err["message"].as_str().is_some_and(|m| m.contains("nobody/nothing")), "{err}");
    }

    #[test]
    fn a_new_session_is_titled_after_its_first_message_by_the_stores_rule() {
        let (_app, window) = app_with_window_in("session-title");
        let first = format!("\n  {}  \nsecond line", "x".repeat(70));
        let s = invoke(&window, "session_create", json!({ "firstMessage": first })).unwrap();
        assert_eq!(s["title"], json!(headroom_store::title_from(&first)));
        assert_eq!(s["title"], json!(format!("{}…", "x".repeat(60))));
        let named = invoke(&window, "session_create", json!({ "title": "Mine", "firstMessage": "hi" }));
        assert_eq!(named.map(|s| s["title"].clone()).ok(), Some(json!("Mine")));
        let bare = invoke(&window, "session_create", json!({})).unwrap();
        assert_eq!(bare["title"], "New chat");
    }

    #[test]
    fn chat_send_without_a_model_is_a_typed_error_and_needs_a_channel() {
        let (_app, window) = app_with_window_in("send");
        // A channel id as the JS side's `new Channel()` serializes it.
        let channel = "__CHANNEL__:0";
        let err = invoke(&window, "chat_send", json!({ "sessionId": "s", "text": "hello", "onEvent": channel })).err();
        let err = err.expect("sent without a model");
        assert_eq!(err["code"], "NO_MODEL_LOADED", "{err}");
        let err = invoke(&window, "chat_send", json!({ "sessionId": "s", "text": "  ", "onEvent": channel })).err();
        assert_eq!(err.map(|e| e["code"].clone()), Some(json!("EMPTY_MESSAGE")));
        // A chat with no answer has nothing to regenerate (and nothing is deleted).
        let err = invoke(&window, "chat_regenerate", json!({ "sessionId": "s", "onEvent": channel })).err();
        assert_eq!(err.map(|e| e["code"].clone()), Some(json!("NOTHING_TO_REGENERATE")));
        // Cancelling a run that does not exist is not an error, just false.
        assert_eq!(invoke(&window, "chat_cancel", json!({ "runId": 999 })).ok(), Some(json!(false)));
    }

    #[test]
    fn a_model_that_would_not_fit_is_refused_with_the_numbers_and_nothing_is_loaded() {
        let (app, window) = app_with_window_in("huge");
        let state = app.state::<crate::AppState>();
        let dir = state.locations.data_dir.join(crate::locations::MODELS_DIR).join("huge-demo");
        crate::fit::write_sparse_model(&dir, 200_000_000_000);

        let list = invoke(&window, "models_list", json!({})).unwrap();
        assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
        assert_eq!(list[0]["id"], "huge-demo");
        assert_eq!(list[0]["fit"]["verdict"]["kind"], "cannot_fit", "{list}");
        assert_eq!(list[0]["fit"]["estimate"]["context_tokens"], 8192);

        let before = headroom_memory::process_rss().unwrap_or(0);
        let err = invoke(&window, "model_load", json!({ "id": "huge-demo" })).err();
        let after = headroom_memory::process_rss().unwrap_or(0);
        let err = err.expect("a 200 GB model loaded");
        assert_eq!(err["code"], "MODEL_TOO_LARGE", "{err}");
        assert!(err["message"].as_str().is_some_and(|m| m.contains("huge-demo")), "{err}");
        let d = &err["details"];
        assert_eq!(d["weightBytes"], 200_000_000_000u64);
        assert_eq!(d["contextTokens"], 8192);
        for key in ["kvCacheBytes", "overheadBytes", "budgetBytes", "overByBytes", "predictedPeakBytes"] {
            assert!(d[key].as_u64().is_some(), "{key} in {d}");
        }
        assert!(d["largestContextThatFits"].is_null());
        assert_eq!(d["verdict"]["kind"], "cannot_fit");
        assert!(state.loaded_model().is_none(), "nothing is loaded");
        assert!(after.saturating_sub(before) < 64 << 20, "RSS grew {before} -> {after}");

        // A smaller context does not help a model whose weights alone are too big.
        let err = invoke(&window, "model_load", json!({ "id": "huge-demo", "contextLimit": 512 })).err();
        assert_eq!(err.map(|e| e["code"].clone()), Some(json!("MODEL_TOO_LARGE")));

        // Only a model too big to load: the demo model is still written and loaded beside it.
        assert_eq!(crate::models::ensure_default_model(&state).ok(), Some(true));
        assert_eq!(state.loaded_model().map(|m| m.id), Some(crate::models::DEMO_MODEL_ID.to_owned()));
        let list = invoke(&window, "models_list", json!({})).unwrap();
        assert_eq!(
            (list[0]["id"].as_str(), list[0]["loaded"].as_bool()),
            (Some(crate::models::DEMO_MODEL_ID), Some(true))
        );
        assert_eq!((list[1]["id"].as_str(), list[1]["loaded"].as_bool()), (Some("huge-demo"), Some(false)));
    }

    #[test]
    fn model_load_reports_its_context_and_timings_and_memory_history_starts_empty() {
        let (app, window) = app_with_window_in("loadctx");
        let state = app.state::<crate::AppState>();
        assert_eq!(crate::models::ensure_default_model(&state).ok(), Some(true));
        let id = crate::models::DEMO_MODEL_ID;
        let r = invoke(&window, "model_load", json!({ "id": id, "contextLimit": 1024 })).unwrap();
        assert_eq!(
            (r["id"].as_str(), r["loaded"].as_bool(), r["context_limit"].as_u64()),
            (Some(id), Some(true), Some(1024))
        );
        assert!(r["unload_ms"].as_u64().is_some() && r["load_ms"].as_u64().is_some(), "{r}");
        // It replaced the demo model loaded above, and caps MLX's cache from the budget.
        assert!(r["freed_bytes"].as_u64().is_some(), "{r}");
        let least = if cfg!(target_os = "macos") {
            headroom_core::fit::MIN_BUFFER_CACHE_BYTES
        } else {
            headroom_core::fit::CPU_BUFFER_CACHE_BYTES
        };
        assert!(r["cache_limit_bytes"].as_u64().is_some_and(|b| b >= least), "{r}");
        assert_eq!(r["fit"]["estimate"]["context_tokens"], 1024);
        assert!(matches!(r["fit"]["verdict"]["kind"].as_str(), Some("fits" | "tight")), "{r}");
        // No sampler in tests: the history is empty, not an error.
        assert_eq!(invoke(&window, "memory_history", json!({})).ok(), Some(json!([])));
    }

    /// The hostile corpus (`headroom_engine::demo::write_hostile_corpus`)
    /// through the app: the list shows every folder (those whose config or
    /// headers are bad with their problem, hiding none), and loading each
    /// one fails with a typed error naming what is wrong, while the demo
    /// model stays loaded and keeps answering.
    #[test]
    fn hostile_model_folders_are_refused_and_the_loaded_model_keeps_answering() {
        use headroom_engine::demo::{write_hostile_corpus, Caught};
        use headroom_engine::worker::GenerateRequest;

        let (app, window) = app_with_window_in("hostile");
        let state = app.state::<crate::AppState>();
        assert_eq!(crate::models::ensure_default_model(&state).ok(), Some(true));
        let demo = crate::models::DEMO_MODEL_ID;
        let corpus = write_hostile_corpus(&state.locations.data_dir.join(crate::locations::MODELS_DIR)).unwrap();
        assert!(corpus.len() >= 40, "{} cases", corpus.len());
        let answers = || {
            let request = GenerateRequest { max_tokens: 2, ignore_eos: true, ..GenerateRequest::new(vec![]) };
            let request = GenerateRequest {
                messages: vec![headroom_core::chat::Message::new(headroom_core::chat::Role::User, "hi")],
                ..request
            };
            state.engine.generate(request).and_then(|r| r.collect()).map(|o| o.token_ids.len())
        };

        let list = invoke(&window, "models_list", json!({})).unwrap();
        let listed = list.as_array().cloned().unwrap_or_default();
        assert_eq!(listed.len(), corpus.len() + 1, "every folder is listed: {list}");
        for case in &corpus {
            let entry =
                listed.iter().find(|m| m["id"] == case.name).unwrap_or_else(|| panic!("{} not listed", case.name));
            match case.caught {
                Caught::Headers => {
                    let message = entry["problem"]["message"].as_str().unwrap_or_default();
                    assert!(message.contains(case.needle), "{}: {entry}", case.name);
                    assert!(entry["fit"].is_null(), "{}: {entry}", case.name);
                }
                Caught::Load => assert!(
                    entry["problem"].is_null() && entry["fit"]["verdict"]["kind"].is_string(),
                    "{}: {entry}",
                    case.name
                ),
            }
        }

        for case in &corpus {
            let err = invoke(&window, "model_load", json!({ "id": case.name, "contextLimit": 512 }))
                .err()
                .unwrap_or_else(|| panic!("{} loaded", case.name));
            let message = err["message"].as_str().unwrap_or_default();
            assert!(message.contains(case.needle), "{}: {err}", case.name);
            assert!(!message.contains("panicked") && err["code"] != "ENGINE_INTERNAL", "{}: {err}", case.name);
            assert_eq!(
                state.loaded_model().map(|m| m.id).as_deref(),
                Some(demo),
                "{} unloaded the demo model",
                case.name
            );
            assert_eq!(answers().ok(), Some(2), "{}: the demo model stopped answering", case.name);
        }
        let list = invoke(&window, "models_list", json!({})).unwrap();
        let loaded: Vec<&Value> = list.as_array().into_iter().flatten().filter(|m| m["loaded"] == true).collect();
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0]["id"], demo);
    }

    #[test]
    fn the_live_graph_is_drawn_for_the_windows_it_offers_and_visibility_is_heard() {
        let (app, window) = app_with_window_in("live");
        for minutes in crate::commands::live::WINDOWS_MIN {
            let view = invoke(&window, "live_chart", json!({ "minutes": minutes, "theme": "dark" }))
                .map_err(|e| format!("{minutes} min: {e}"))
                .unwrap();
            // No sampler in tests: no memory (the rates are whatever answers
            // other tests of this process streamed).
            assert!(view["svg"].as_str().is_some_and(|s| s.starts_with("<svg")), "{view}");
            assert_eq!(view["memory"], json!([]));
            let span = view["plot"]["endMs"].as_u64().zip(view["plot"]["startMs"].as_u64()).map(|(e, s)| e - s);
            assert_eq!(span, Some(u64::from(minutes) * 60_000));
        }
        let err = invoke(&window, "live_chart", json!({ "minutes": 7, "theme": "dark" })).err();
        assert_eq!(err.as_ref().map(|e| e["code"].clone()), Some(json!("INVALID_INPUT")), "{err:?}");
        let err = invoke(&window, "live_chart", json!({ "minutes": 5, "theme": "sepia" })).err();
        assert_eq!(err.map(|e| e["code"].clone()), Some(json!("INVALID_INPUT")));
        let live = &app.state::<crate::AppState>().live;
        let before = live.activity().visible;
        assert_eq!(invoke(&window, "live_visibility", json!({ "visible": !before })).ok(), Some(Value::Null));
        assert_eq!(live.activity().visible, !before);
        let _ = invoke(&window, "live_visibility", json!({ "visible": before }));
    }

    #[test]
    fn the_cli_finds_the_same_app_data_folder_as_tauri() {
        let mut context = mock_context(noop_assets());
        context.config_mut().identifier = crate::state::app_identifier();
        let app = mock_builder().build(context).expect("app");
        assert_eq!(crate::platform_app_data_dir(), app.path().app_data_dir().ok());
        assert!(!crate::state::app_identifier().is_empty());
    }

    #[test]
    fn app_info_names_the_backend() {
        let (_app, window) = app_with_window();
        let info = invoke(&window, "app_info", json!({})).unwrap();
        assert_eq!(info["platform"], std::env::consts::OS);
        let device = info["device"].as_str().unwrap_or_default();
        assert!(device == "cpu" || device == "gpu", "device {device}");
    }

    #[test]
    fn unknown_commands_are_rejected() {
        let (_app, window) = app_with_window();
        let err = invoke(&window, "format_disk", json!({})).err();
        assert!(err.is_some_and(|e| e.to_string().contains("format_disk")));
    }

    #[test]
    fn remote_pages_cannot_reach_the_commands() {
        // Model output is rendered as HTML later; a link that navigated the
        // webview elsewhere must not gain access to Headroom's commands.
        let (_app, window) = app_with_window();
        let from_remote = invoke_from("https://example.com", &window, "models_list", json!({}));
        assert!(from_remote.is_err(), "a remote origin reached models_list: {from_remote:?}");
        assert!(invoke(&window, "models_list", json!({})).is_ok());
    }
}
