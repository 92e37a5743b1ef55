//! The local server's toggle: start it on the app's engine handle (the
//! popover's chats and the server's requests share one model and one
//! queue), stop it, ask how it is doing.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, PoisonError};

use headroom_server::{ServeConfig, Server, ServerError, DEFAULT_PORT};
use serde::Serialize;
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::serve::AppModels;
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
}

impl ServerInfo {
    fn of(server: &Server) -> Self {
        let s = server.stats();
        Self {
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
#[tauri::command]
pub async fn server_start(port: Option<u16>, state: State<'_, AppState>) -> Result<ServerInfo, CommandError> {
    let state = AppState::clone(&state);
    tauri::async_runtime::spawn_blocking(move || {
        let mut slot = state.server.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(server) = slot.as_ref() {
            return Ok(ServerInfo::of(server));
        }
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port.unwrap_or(DEFAULT_PORT)));
        let provider = Arc::new(AppModels::new(state.clone()));
        let server =
            Server::bind(addr, ServeConfig::default(), state.engine.clone(), provider).map_err(|e| server_error(&e))?;
        let info = ServerInfo::of(&server);
        // So `headroom serve` on this port says the app serves here.
        if let Err(e) = crate::serve_marker::record(&state.locations.data_dir, info.port) {
            tracing::warn!("could not note the server's port in the data folder: {e}");
        }
        *slot = Some(server);
        Ok(info)
    })
    .await
    .map_err(|e| CommandError::new(ErrorCode::ServerFailed, format!("Starting the server stopped unexpectedly: {e}")))?
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

    /// One HTTP/1.1 exchange; the body of the answer.
    fn http(url: &str, method: &str, path: &str, body: &str) -> String {
        let authority = url.trim_start_matches("http://").trim_end_matches("/v1");
        let mut s = TcpStream::connect(authority).unwrap();
        let head = format!(
            "{method} /v1{path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(format!("{head}{body}").as_bytes()).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        reply.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default()
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

        let list: Value = serde_json::from_str(&http(&url, "GET", "/models", "")).unwrap();
        assert!(list["data"].as_array().is_some_and(|d| d.iter().any(|m| m["id"] == DEMO_MODEL_ID)), "{list}");
        let body = json!({ "model": DEMO_MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3 });
        let reply: Value = serde_json::from_str(&http(&url, "POST", "/chat/completions", &body.to_string())).unwrap();
        assert_eq!(reply["object"], "chat.completion", "{reply}");
        // The popover's model answered: nothing was loaded beside it.
        assert_eq!(state.loaded_model().map(|m| m.id), Some(DEMO_MODEL_ID.to_owned()));

        let again = invoke(&window, "server_start", json!({})).unwrap();
        assert_eq!(again["url"], url.as_str(), "a second start reports the running server");
        let status = invoke(&window, "server_status", json!({})).unwrap();
        assert_eq!(
            (status["requests"].as_u64(), status["completed"].as_u64(), status["active"].as_u64()),
            (Some(1), Some(1), Some(0))
        );

        assert_eq!(invoke(&window, "server_stop", json!({})).ok(), Some(json!(true)));
        assert_eq!(invoke(&window, "server_status", json!({})).ok(), Some(Value::Null));
        assert_eq!(invoke(&window, "server_stop", json!({})).ok(), Some(json!(false)));
        assert!(
            TcpStream::connect(url.trim_start_matches("http://").trim_end_matches("/v1")).is_err(),
            "still listening"
        );
    }
}
