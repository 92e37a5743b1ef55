//! One cloud turn from the app's side: runs the cloud client and reports it
//! in the shape of a local turn (the same `ChatEvent`s, `TurnEnd` and engine
//! `TurnStats`), so the UI, the turn recorder and the charts need no second
//! path for `route = cloud`.

use std::path::Path;

use headroom_cloud::{
    run_turn, ApiKey, CancellationToken, ChatParams, CloudClient, CloudConfig, CloudError, CloudEvent, CloudStats,
    KeyError, KeyStore,
};
use headroom_core::chat::Message;
use headroom_core::settings::Settings;
use headroom_engine::worker::TurnStats;

use crate::chat::{ChatEvent, ModelLabels, RouteInfo, RouteTarget, TurnEnd};
use crate::error::CommandError;

/// Overrides the stored key (CI, scripts); otherwise the key stored for the
/// endpoint's base URL is used. The CLI reads the same variable.
pub const API_KEY_ENV: &str = "HEADROOM_CLOUD_API_KEY";

impl From<CloudError> for CommandError {
    fn from(e: CloudError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<KeyError> for CommandError {
    fn from(e: KeyError) -> Self {
        let code = match &e {
            KeyError::EmptyKey => "CLOUD_KEY_EMPTY",
            KeyError::InvalidUrl(_) => "CLOUD_BAD_URL",
            KeyError::File { .. } | KeyError::CorruptFile { .. } | KeyError::Keychain(_) => "CLOUD_KEY_STORE",
        };
        Self::new(code, format!("The API key could not be used: {e}"))
    }
}

/// The key for `base_url`: `$HEADROOM_CLOUD_API_KEY` if set, else the one
/// stored for it in `data_dir`'s key store (the CLI resolves it the same way).
pub fn api_key(base_url: &str, data_dir: &Path) -> Result<Option<ApiKey>, KeyError> {
    match std::env::var(API_KEY_ENV).ok().filter(|k| !k.trim().is_empty()) {
        Some(key) => Ok(Some(ApiKey::new(key.trim()))),
        None => Ok(KeyStore::new(data_dir).get(base_url)?.map(|(key, _)| key)),
    }
}

/// The endpoint and model from the settings, the key from
/// `$HEADROOM_CLOUD_API_KEY`, else the key store of `data_dir`. An endpoint
/// without a stored key is used without one (a local OpenAI-compatible
/// server needs none; a real provider answers 401, which is reported).
pub fn config(settings: &Settings, data_dir: &Path) -> Result<CloudConfig, CommandError> {
    let url = settings
        .cloud_base_url
        .clone()
        .ok_or_else(|| CommandError::new("ROUTE_NO_CLOUD", "No cloud provider is set up: add one in Settings."))?;
    let model = settings.cloud_model.clone().ok_or_else(|| {
        CommandError::new("CLOUD_NO_MODEL", "No cloud model is set: choose one in Settings, next to the cloud URL.")
    })?;
    let api_key = api_key(&url, data_dir)?;
    Ok(CloudConfig { api_key, ..CloudConfig::new(url, model) })
}

/// The labels a cloud answer is stored with: no local quantization or KV
/// cache is involved, and the id says where it ran.
pub fn labels(model: &str) -> ModelLabels {
    ModelLabels { model_id: model.to_owned(), quantization: None, kv_dtype: "n/a (cloud)".to_owned() }
}

/// A cloud turn's figures as a local turn's. Token counts are the server's
/// (`usage`); without them they stay 0 and the rates `None`. The context is
/// the prompt the server counted; no local memory was used.
pub fn turn_stats(stats: &CloudStats) -> TurnStats {
    let prompt = stats.usage.map_or(0, |u| u.prompt_tokens as usize);
    TurnStats {
        prompt_tokens: prompt,
        reused_tokens: 0,
        generated_tokens: stats.usage.map_or(0, |u| u.completion_tokens as usize),
        context_tokens: prompt,
        batch: 1,
        timings: stats.timings,
        rates: stats.rates,
        peak_memory_bytes: 0,
    }
}

/// Runs one turn against `client`, sending `ChatEvent`s in the local order
/// (`Started`, `Token`s, `Stats`, `Finished`, or `Error`). `send` returns
/// false once nobody listens (the turn is then cancelled); `on_text` sees the
/// whole answer so far after each piece (the recorder saves it). The text
/// that arrived is in the result whatever happened, so nothing is lost.
pub async fn run(
    client: &CloudClient,
    run_id: u64,
    messages: &[Message],
    params: &ChatParams,
    cancel: CancellationToken,
    mut send: impl FnMut(ChatEvent) -> bool,
    mut on_text: impl FnMut(&str),
) -> TurnEnd {
    let model = client.config().model.clone();
    let mut so_far = String::new();
    let result = run_turn(client, messages, params, cancel, |event| match event {
        CloudEvent::Started { .. } => {
            // The server counts the prompt; it says how many at the end.
            // Routed turns (the app's) replace this with the router's reasons.
            send(ChatEvent::Started {
                run_id,
                prompt_tokens: 0,
                reused_tokens: 0,
                route: RouteInfo::unexplained(RouteTarget::Cloud, &model),
            })
        }
        CloudEvent::Token { text } => {
            so_far.push_str(text);
            on_text(&so_far);
            send(ChatEvent::Token { text: text.clone() })
        }
        CloudEvent::Usage(_) => true,
        CloudEvent::Finished { reason, stats, .. } => {
            let s = turn_stats(stats);
            send(ChatEvent::stats(&s, &model)) && send(ChatEvent::Finished { reason: *reason })
        }
    })
    .await;
    match result.end {
        Ok(finished) => {
            if let Some(note) = finished.stats.note() {
                tracing::info!(model, "cloud turn: {note}");
            }
            TurnEnd {
                text: result.text,
                reason: Some(finished.reason),
                stats: Some(turn_stats(&finished.stats)),
                error: None,
            }
        }
        Err(e) => {
            let message = e.to_string();
            send(ChatEvent::Error { code: e.code(), message: message.clone() });
            TurnEnd { text: result.text, reason: None, stats: None, error: Some(message) }
        }
    }
}

/// [`run`] on the async runtime, with the events handed to `on_event` on
/// this thread, so the callbacks may block (the recorder's saves do, and a
/// `block_on` inside the runtime would panic). `on_event` returning false
/// cancels the turn; the rest is drained without calling it again.
pub fn run_blocking(
    client: CloudClient,
    run_id: u64,
    messages: Vec<Message>,
    params: ChatParams,
    cancel: CancellationToken,
    mut on_event: impl FnMut(&ChatEvent) -> bool,
    mut on_text: impl FnMut(&str),
) -> TurnEnd {
    let (tx, rx) = std::sync::mpsc::channel();
    let canceller = cancel.clone();
    let task = tauri::async_runtime::spawn(async move {
        run(&client, run_id, &messages, &params, cancel, move |e| tx.send(e).is_ok(), |_| {}).await
    });
    let mut so_far = String::new();
    let mut listening = true;
    // Ends when the task is done with its sender.
    for event in rx {
        if let ChatEvent::Token { text } = &event {
            so_far.push_str(text);
            on_text(&so_far);
        }
        if listening && !on_event(&event) {
            listening = false;
            canceller.cancel();
        }
    }
    match tauri::async_runtime::block_on(task) {
        Ok(end) => end,
        Err(e) => TurnEnd {
            text: so_far,
            reason: None,
            stats: None,
            error: Some(format!("the cloud turn stopped unexpectedly: {e}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use headroom_cloud::Usage;
    use headroom_core::chat::FinishReason;

    use super::*;

    #[test]
    fn cloud_stats_take_the_local_shape_with_the_servers_counts() {
        let usage = Usage { prompt_tokens: 30, completion_tokens: 8, total_tokens: Some(38) };
        let cloud =
            CloudStats::new(Some(usage), Some(Duration::from_millis(100)), Some(Duration::from_millis(800)), 2, 1);
        let s = turn_stats(&cloud);
        assert_eq!((s.prompt_tokens, s.context_tokens, s.generated_tokens, s.batch), (30, 30, 8, 1));
        assert_eq!(s.rates, cloud.rates);
        assert_eq!(s.rates.decode_tps, Some(10.0));
        assert_eq!(s.peak_memory_bytes, 0);

        let none = turn_stats(&CloudStats::new(None, Some(Duration::from_millis(100)), None, 5, 1));
        assert_eq!((none.generated_tokens, none.rates.decode_tps), (0, None));
    }

    #[test]
    fn the_cloud_config_needs_a_url_and_a_model_from_the_settings() {
        let dir = std::path::Path::new("/nonexistent-headroom-dir");
        let code = |s: &Settings| config(s, dir).err().map(|e| e.code);
        assert_eq!(code(&Settings::default()), Some("ROUTE_NO_CLOUD"));
        let url_only = Settings { cloud_base_url: Some("http://127.0.0.1:9/v1".into()), ..Settings::default() };
        assert_eq!(code(&url_only), Some("CLOUD_NO_MODEL"));
        let both = Settings { cloud_model: Some("m".into()), ..url_only };
        let c = config(&both, dir).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!((c.base_url.as_str(), c.model.as_str()), ("http://127.0.0.1:9/v1", "m"));
    }

    #[test]
    fn a_refused_connection_is_one_error_event_and_an_error_end() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("{e}"));
        let client = CloudClient::new(headroom_cloud::CloudConfig::new(format!("http://127.0.0.1:{port}/v1"), "m"))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut events = Vec::new();
        let messages = [Message::new(headroom_core::chat::Role::User, "hi")];
        let end = crate::chat::block_on(run(
            &client,
            7,
            &messages,
            &ChatParams::default(),
            CancellationToken::new(),
            |e| {
                events.push(e);
                true
            },
            |_| {},
        ));
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(matches!(&events[0], ChatEvent::Error { code: "CLOUD_CONNECTION_REFUSED", .. }), "{events:?}");
        assert_eq!((end.reason, end.text.as_str()), (None::<FinishReason>, ""));
        assert!(end.error.is_some_and(|m| m.contains("connection refused")));
    }
}
