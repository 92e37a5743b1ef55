//! The local server's toggle: start it on the app's engine handle (the
//! popover's chats and the server's requests share one model and one
//! queue), stop it, ask how it is doing; its key, shown and replaced.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, PoisonError};

use headroom_server::{ServeConfig, Server, ServerError, DEFAULT_PORT};
use serde::Serialize;
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::serve::AppModels;
use crate::server_key;
use crate::state::AppState;

/// What the UI shows about a running server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo {
    /// The base URL clients use (`OPENAI_BASE_URL`).
    pub url: String,
    pub port: u16,
    pub requests: u64,
    pub completed: u64,
    pub cancelled: u64,
    pub active: usize,
    /// Requests must send the server's key (`server_require_key` when it started).
    pub key_required: bool,
}

impl ServerInfo {
    fn of(server: &Server) -> Self {
        let s = server.stats();
        Self {
            key_required: server.requires_key(),
            url: server.base_url(),
            port: server.addr().port(),
            requests: s.requests,
            completed: s.completed,
            cancelled: s.cancelled,
            active: s.active,
        }
    }
}

fn server_error(e: &ServerError) -> CommandError {
    let code = match e {
        ServerError::Bind { .. } => ErrorCode::PortUnavailable,
        ServerError::NonLoopback { .. } | ServerError::RemoteWithoutKey { .. } | ServerError::EmptyApiKey => {
            ErrorCode::ServerNotAllowed
        }
        ServerError::InvalidSetting { .. } => ErrorCode::InvalidSetting,
        ServerError::Start { .. } | ServerError::Signal(_) | ServerError::Panicked => ErrorCode::ServerFailed,
    };
    CommandError::new(code, format!("The local server: {e}"))
}

/// Starts the server on 127.0.0.1:`port` (default 8080); if it is running
/// already, says where. Loopback only: the app has no remote setting yet.
/// Every request must send the server's key unless `server_require_key`
/// is off; it keeps the popover's model unless `server_allow_model_switch`
/// is on (both read at each request or start: `AppModels::beside_popover`).
#[tauri::command]
pub async fn server_start(port: Option<u16>, state: State<'_, AppState>) -> Result<ServerInfo, CommandError> {
    let state = AppState::clone(&state);
    tauri::async_runtime::spawn_blocking(move || {
        let mut slot = state.server.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(server) = slot.as_ref() {
            return Ok(ServerInfo::of(server));
        }
        start(&state, &mut slot, port.unwrap_or(DEFAULT_PORT))
    })
    .await
    .map_err(|e| CommandError::new(ErrorCode::ServerFailed, format!("Starting the server stopped unexpectedly: {e}")))?
}

/// Binds a server into the empty `slot`.
fn start(state: &AppState, slot: &mut Option<Server>, port: u16) -> Result<ServerInfo, CommandError> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let api_keys = if state.settings().server_require_key {
        vec![server_key::key(&state.locations.data_dir)?]
    } else {
        Vec::new()
    };
    let config = ServeConfig { api_keys, ..ServeConfig::default() };
    let provider = Arc::new(AppModels::new(state.clone()).beside_popover());
    let server = Server::bind(addr, config, state.engine.clone(), provider).map_err(|e| server_error(&e))?;
    let info = ServerInfo::of(&server);
    // So `headroom serve` on this port says the app serves here.
    if let Err(e) = crate::serve_marker::record(&state.locations.data_dir, info.port) {
        tracing::warn!("could not note the server's port in the data folder: {e}");
    }
    *slot = Some(server);
    Ok(info)
}

/// The key clients of the app's server send (`Authorization: Bearer <key>`),
/// made on first use.
#[tauri::command]
pub async fn server_key(state: State<'_, AppState>) -> Result<String, CommandError> {
    let data_dir = state.locations.data_dir.clone();
    tauri::async_runtime::spawn_blocking(move || server_key::key(&data_dir))
        .await
        .map_err(|e| CommandError::new(ErrorCode::Io, format!("Reading the server's key stopped unexpectedly: {e}")))?
        .map_err(CommandError::from)
}

/// Replaces the key; a running server is restarted on its port with the
/// new one, so the old key is refused from now on. Returns the new key.
#[tauri::command]
pub async fn server_key_regenerate(state: State<'_, AppState>) -> Result<String, CommandError> {
    let state = AppState::clone(&state);
    tauri::async_runtime::spawn_blocking(move || {
        let mut slot = state.server.lock().unwrap_or_else(PoisonError::into_inner);
        let key = server_key::regenerate(&state.locations.data_dir)?;
        if let Some(server) = slot.take() {
            let port = server.addr().port();
            server.stop().map_err(|e| server_error(&e))?;
            start(&state, &mut slot, port)?;
        }
        Ok(key)
    })
    .await
    .map_err(|e| {
        CommandError::new(ErrorCode::ServerFailed, format!("Replacing the server's key stopped unexpectedly: {e}"))
    })?
}

/// Stops the server (its runs in flight are cancelled); false if it was not running.
#[tauri::command]
pub async fn server_stop(state: State<'_, AppState>) -> Result<bool, CommandError> {
    let server = state.server.lock().unwrap_or_else(PoisonError::into_inner).take();
    let Some(server) = server else { return Ok(false) };
    crate::serve_marker::clear(&state.locations.data_dir);
    // Joining the server's thread blocks: not on the async runtime.
    tauri::async_runtime::spawn_blocking(move || server.stop())
        .await
        .map_err(|e| {
            CommandError::new(ErrorCode::ServerFailed, format!("Stopping the server stopped unexpectedly: {e}"))
        })?
        .map_err(|e| server_error(&e))?;
    Ok(true)
}

/// The running server, or null.
#[tauri::command]
pub fn server_status(state: State<'_, AppState>) -> Option<ServerInfo> {
    state.server.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(ServerInfo::of)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use serde_json::{json, Value};
    use tauri::ipc::{CallbackFn, InvokeBody};
    use tauri::test::{get_ipc_response, mock_builder, mock_context, noop_assets, MockRuntime, INVOKE_KEY};
    use tauri::webview::InvokeRequest;
    use tauri::{Manager, WebviewUrl, WebviewWindow, WebviewWindowBuilder};

    use crate::models::{self, DEMO_MODEL_ID};
    use crate::state::{AppState, Locations};

    fn invoke(window: &WebviewWindow<MockRuntime>, cmd: &str, args: Value) -> Result<Value, Value> {
        let request = InvokeRequest {
            cmd: cmd.into(),
            callback: CallbackFn(0),
            error: CallbackFn(1),
            url: "tauri://localhost".parse().unwrap(),
            body: InvokeBody::Json(args),
            headers: Default::default(),
            invoke_key: INVOKE_KEY.to_string(),
        };
        get_ipc_response(window, request).map(|body| body.deserialize::<Value>().unwrap())
    }

    /// One HTTP/1.1 exchange, with the key if one is given; the status and the body of the answer.
    fn exchange(url: &str, key: Option<&str>, method: &str, path: &str, body: &str) -> (u16, String) {
        let authority = url.trim_start_matches("http://").trim_end_matches("/v1");
        let mut s = TcpStream::connect(authority).unwrap();
        let auth = key.map(|k| format!("Authorization: Bearer {k}\r\n")).unwrap_or_default();
        let head = format!(
            "{method} /v1{path} HTTP/1.1\r\nHost: {authority}\r\n{auth}Connection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(format!("{head}{body}").as_bytes()).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        let status = reply.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, reply.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
    }

    #[test]
    fn the_toggle_serves_the_apps_loaded_model_and_stops() {
        let tmp = headroom_test_support::scratch("app-server");
        let data_dir = tmp.join("data");
        let locations = Locations { data_dir: data_dir.clone(), hub: models::HubEnv::default(), default_model: None };
        let app = crate::run_app(mock_builder(), mock_context(noop_assets()), Some(locations)).expect("app");
        let window =
            WebviewWindowBuilder::new(&app, crate::MAIN_WINDOW, WebviewUrl::default()).build().expect("window");
        let state = AppState::clone(&app.state::<AppState>());
        assert_eq!(models::ensure_default_model(&state).ok(), Some(true));

        assert_eq!(invoke(&window, "server_status", json!({})).ok(), Some(Value::Null));
        let info = invoke(&window, "server_start", json!({ "port": 0 })).unwrap();
        let url = info["url"].as_str().unwrap_or_default().to_owned();
        assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/v1"), "{info}");
        assert!(info["port"].as_u64().is_some_and(|p| p > 0), "{info}");
        assert_eq!(info["keyRequired"], true, "the key is required by default: {info}");

        // Without the key, or with another, OpenAI's 401.
        let key = invoke(&window, "server_key", json!({})).unwrap().as_str().unwrap_or_default().to_owned();
        assert!(key.starts_with("hr-") && key.len() > 60, "{key}");
        for (sent, code) in [(None, "missing_api_key"), (Some("hr-not-the-key"), "invalid_api_key")] {
            let (status, body) = exchange(&url, sent, "GET", "/models", "");
            let body: Value = serde_json::from_str(&body).unwrap();
            assert_eq!((status, body["error"]["code"].as_str()), (401, Some(code)), "{body}");
        }
        let http = |method: &str, path: &str, body: &str| {
            let (status, body) = exchange(&url, Some(&key), method, path, body);
            assert_eq!(status, 200, "{body}");
            body
        };

        let list: Value = serde_json::from_str(&http("GET", "/models", "")).unwrap();
        assert!(list["data"].as_array().is_some_and(|d| d.iter().any(|m| m["id"] == DEMO_MODEL_ID)), "{list}");
        let body = json!({ "model": DEMO_MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3 });
        let reply: Value = serde_json::from_str(&http("POST", "/chat/completions", &body.to_string())).unwrap();
        assert_eq!(reply["object"], "chat.completion", "{reply}");
        // The popover's model answered: nothing was loaded beside it.
        assert_eq!(state.loaded_model().map(|m| m.id), Some(DEMO_MODEL_ID.to_owned()));
        // While the popover holds it, another model is refused with 409 and
        // the list offers the held model alone.
        let other = json!({ "model": "some-other-model", "messages": [{"role": "user", "content": "hi"}] });
        let (status, refused) = exchange(&url, Some(&key), "POST", "/chat/completions", &other.to_string());
        let refused: Value = serde_json::from_str(&refused).unwrap();
        assert_eq!((status, refused["error"]["code"].as_str()), (409, Some("model_in_use")), "{refused}");
        let list: Value = serde_json::from_str(&http("GET", "/models", "")).unwrap();
        assert_eq!(list["data"].as_array().map(Vec::len), Some(1), "{list}");

        let again = invoke(&window, "server_start", json!({})).unwrap();
        assert_eq!(again["url"], url.as_str(), "a second start reports the running server");
        let status = invoke(&window, "server_status", json!({})).unwrap();
        assert_eq!(
            (status["requests"].as_u64(), status["completed"].as_u64(), status["active"].as_u64()),
            (Some(2), Some(1), Some(0)),
            "the refused request counts as one received"
        );

        // A new key: the server restarts on its port with it; the old one is refused.
        let new_key =
            invoke(&window, "server_key_regenerate", json!({})).unwrap().as_str().unwrap_or_default().to_owned();
        assert_ne!(new_key, key);
        assert_eq!(invoke(&window, "server_status", json!({})).unwrap()["url"], url.as_str());
        assert_eq!(exchange(&url, Some(&key), "GET", "/models", "").0, 401, "the old key still works");
        assert_eq!(exchange(&url, Some(&new_key), "GET", "/models", "").0, 200);

        assert_eq!(invoke(&window, "server_stop", json!({})).ok(), Some(json!(true)));
        assert_eq!(invoke(&window, "server_status", json!({})).ok(), Some(Value::Null));
        assert_eq!(invoke(&window, "server_stop", json!({})).ok(), Some(json!(false)));
        assert!(
            TcpStream::connect(url.trim_start_matches("http://").trim_end_matches("/v1")).is_err(),
            "still listening"
        );
    }
}
