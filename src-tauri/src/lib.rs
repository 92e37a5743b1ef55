//! The `headroom` app crate: the Tauri shell around the library crates, and
//! the only crate that depends on tauri. `run()` is the real app;
//! `run_app()` is its wiring, generic over the runtime so that
//! `tauri::test::mock_builder()` tests exercise it without a display.

pub mod cli;
mod commands;
mod error;
mod platform;
mod popover;
mod state;
mod tray;

use tauri::{App, Builder, Context, RunEvent, Runtime};

pub use error::CommandError;
pub use state::AppState;

/// Label of the popover window (tauri.conf.json).
pub const MAIN_WINDOW: &str = "main";

/// When set to 1 the popover is shown at start: WebDriver can only drive a
/// visible window, so the end-to-end tests set it. Users never need it.
pub const SHOW_WINDOW_ENV: &str = "HEADROOM_SHOW_WINDOW";

/// Opens the menu-bar app and blocks until the user quits.
pub fn run() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let builder = Builder::default().setup(|app| {
        platform::configure(app);
        tray::install(app.handle())?;
        if std::env::var(SHOW_WINDOW_ENV).as_deref() == Ok("1") {
            popover::show(app.handle(), None)?;
        }
        Ok(())
    });
    let app = match run_app(builder, tauri::generate_context!()) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("headroom: the app could not start: {e}");
            std::process::exit(1);
        }
    };
    app.run(|_, event| {
        // Hiding the last window must not end a menu-bar app; only Quit
        // (an explicit exit code) does.
        if let RunEvent::ExitRequested { code: None, api, .. } = event {
            api.prevent_exit();
        }
    });
}

/// Everything the app is, except the parts that need a real desktop (tray,
/// activation policy): state, commands, window behaviour.
pub fn run_app<R: Runtime>(builder: Builder<R>, context: Context<R>) -> tauri::Result<App<R>> {
    builder
        .manage(AppState::new())
        .invoke_handler(tauri::generate_handler![
            commands::app::app_info,
            commands::app::ping,
            commands::window::hide_window,
        ])
        .on_window_event(popover::on_window_event)
        .build(context)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};
    use tauri::ipc::{CallbackFn, InvokeBody};
    use tauri::test::{get_ipc_response, mock_builder, mock_context, noop_assets, MockRuntime, INVOKE_KEY};
    use tauri::webview::InvokeRequest;
    use tauri::{WebviewUrl, WebviewWindow, WebviewWindowBuilder};

    fn app_with_window() -> (tauri::App<MockRuntime>, WebviewWindow<MockRuntime>) {
        let app = super::run_app(mock_builder(), mock_context(noop_assets()))
            .unwrap_or_else(|e| panic!("app: {e}"));
        let window = WebviewWindowBuilder::new(&app, super::MAIN_WINDOW, WebviewUrl::default())
            .build()
            .unwrap_or_else(|e| panic!("window: {e}"));
        (app, window)
    }

    /// The app's own pages are served from the `tauri://localhost` protocol.
    const APP_ORIGIN: &str = "tauri://localhost";

    fn invoke(window: &WebviewWindow<MockRuntime>, cmd: &str, args: Value) -> Result<Value, Value> {
        invoke_from(APP_ORIGIN, window, cmd, args)
    }

    fn invoke_from(
        origin: &str,
        window: &WebviewWindow<MockRuntime>,
        cmd: &str,
        args: Value,
    ) -> Result<Value, Value> {
        let request = InvokeRequest {
            cmd: cmd.into(),
            callback: CallbackFn(0),
            error: CallbackFn(1),
            url: origin.parse().unwrap_or_else(|e| panic!("{e}")),
            body: InvokeBody::Json(args),
            headers: Default::default(),
            invoke_key: INVOKE_KEY.to_string(),
        };
        get_ipc_response(window, request)
            .map(|body| body.deserialize::<Value>().unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn ping_carries_the_text_to_rust_and_back() {
        let (_app, window) = app_with_window();
        let reply = invoke(&window, "ping", json!({ "text": "héllo, Headroom" }))
            .unwrap_or_else(|e| panic!("ping failed: {e}"));
        assert_eq!(reply["echo"], "héllo, Headroom");
        assert_eq!(reply["chars"], 15); // characters, not UTF-8 bytes
        assert_eq!(reply["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(reply["mlx_version"], "0.32.2");
    }

    #[test]
    fn an_empty_message_is_a_typed_error() {
        let (_app, window) = app_with_window();
        let err = invoke(&window, "ping", json!({ "text": "  \n" })).err();
        let err = err.unwrap_or_else(|| panic!("blank text was accepted"));
        assert_eq!(err["code"], "EMPTY_MESSAGE");
        assert_eq!(err["message"], "Type a message first.");
    }

    #[test]
    fn app_info_names_the_backend() {
        let (_app, window) = app_with_window();
        let info = invoke(&window, "app_info", json!({})).unwrap_or_else(|e| panic!("{e}"));
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
        let from_remote = invoke_from("https://example.com", &window, "ping", json!({ "text": "hi" }));
        assert!(from_remote.is_err(), "a remote origin reached ping: {from_remote:?}");
        assert!(invoke(&window, "ping", json!({ "text": "hi" })).is_ok());
    }
}
