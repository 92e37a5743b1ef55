//! The cloud side of a turn: the endpoint and key from the settings, and the
//! run itself, reported as a local run's events (the same `RunEvent`s and
//! engine `TurnStats`), so the UI, the recorder and the charts need no
//! second path for `route = cloud`. It takes only [`GatedMessages`]: what it
//! sends has passed the privacy gate.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use headroom_cloud::{
    normalize_base_url, run_turn, ApiKey, CancellationToken, ChatParams, CloudClient, CloudConfig, CloudEvent,
    CloudStats, KeyError, KeyStore,
};
use headroom_core::chat::FinishReason;
use headroom_core::gate::GatedMessages;
use headroom_core::router::Reason;
use headroom_core::settings::Settings;
use headroom_engine::worker::TurnStats;
use headroom_store::Route;

use super::events::{RouteInfo, RouteTarget, RunEvent, Sink};
use super::record::TurnRecorder;
use super::{cache, gate, summary, Plan, Running, TurnError};
use crate::codes::Coded;
use crate::runs::{RunKind, Stopper};
use crate::state::{AppState, ModelLabels};

/// Overrides the stored key (CI, scripts) for one URL, the one
/// [`API_KEY_URL_ENV`] names; otherwise the key stored for the endpoint's
/// base URL is used.
pub const API_KEY_ENV: &str = "HEADROOM_CLOUD_API_KEY";

/// The base URL [`API_KEY_ENV`]'s key may be sent to, and the only one: a
/// key in the environment would otherwise go to whatever endpoint a setting
/// or a flag names.
pub const API_KEY_URL_ENV: &str = "HEADROOM_CLOUD_API_KEY_URL";

/// The key for `base_url`: `$HEADROOM_CLOUD_API_KEY` if set and
/// `$HEADROOM_CLOUD_API_KEY_URL` is this URL, else the one stored for it in
/// `data_dir`'s key store.
pub fn api_key(base_url: &str, data_dir: &Path) -> Result<Option<ApiKey>, KeyError> {
    api_key_from(base_url, data_dir, |name| std::env::var(name).ok())
}

fn api_key_from(
    base_url: &str,
    data_dir: &Path,
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<ApiKey>, KeyError> {
    let url = normalize_base_url(base_url).map_err(|e| KeyError::InvalidUrl(e.to_string()))?;
    if let Some(key) = var(API_KEY_ENV).filter(|k| !k.trim().is_empty()) {
        let bound = var(API_KEY_URL_ENV)
            .filter(|u| !u.trim().is_empty())
            .ok_or(KeyError::EnvKeyWithoutUrl { key_var: API_KEY_ENV, url_var: API_KEY_URL_ENV })?;
        let bound = normalize_base_url(&bound).map_err(|e| KeyError::InvalidUrl(format!("{API_KEY_URL_ENV}: {e}")))?;
        if bound == url {
            return Ok(Some(ApiKey::new(key.trim())));
        }
        let (url, bound) = (headroom_cloud::redact_url(&url), headroom_cloud::redact_url(&bound));
        tracing::info!(%url, %bound, "{API_KEY_ENV} is for another URL: not sent; the key store decides");
    }
    Ok(KeyStore::new(data_dir).get(&url)?.map(|(key, _)| key))
}

/// The endpoint and model from the settings, the key from
/// `$HEADROOM_CLOUD_API_KEY`, else the key store of `data_dir`. An endpoint
/// without a stored key is used without one (a local OpenAI-compatible
/// server needs none; a real provider answers 401, which is reported).
pub fn config(settings: &Settings, data_dir: &Path) -> Result<CloudConfig, TurnError> {
    let url = settings.cloud_base_url.clone().ok_or(TurnError::NoCloudProvider)?;
    let model = settings.cloud_model.clone().ok_or(TurnError::NoCloudModel)?;
    let api_key = api_key(&url, data_dir)?;
    Ok(CloudConfig { api_key, ..CloudConfig::new(url, model) })
}

/// A cloud turn's figures as a local turn's. Token counts are the server's
/// (`usage`); without them they stay 0 and the rates `None`. The context is
/// the prompt the server counted; no local memory was used.
pub fn turn_stats(stats: &CloudStats) -> TurnStats {
    let prompt = stats.usage.map_or(0, |u| u.prompt_tokens as usize);
    TurnStats {
        prompt_tokens: prompt,
        reused_tokens: 0,
        reused_from: headroom_engine::prompt_cache::Reuse::None,
        generated_tokens: stats.usage.map_or(0, |u| u.completion_tokens as usize),
        context_tokens: prompt,
        batch: 1,
        timings: stats.timings,
        rates: stats.rates,
        peak_memory_bytes: 0,
        kv_label: "n/a (cloud)".to_owned(),
        speculation: Default::default(),
        peer: None,
    }
}

/// A cloud turn: answered from the cache when the same cacheable request
/// was answered before; else the conversation (older turns summarised if
/// the setting says so) passes the privacy gate, and what comes out is sent,
/// streamed, stored, and cached if allowed.
pub(crate) fn start(state: &AppState, settings: &Settings, plan: Plan, sink: Sink) -> Result<Running, TurnError> {
    let config = config(settings, &state.locations.data_dir)?;
    let model = config.model.clone();
    let params = ChatParams {
        max_tokens: Some(u32::try_from(plan.max_tokens).unwrap_or(u32::MAX)),
        temperature: Some(plan.options.temperature.unwrap_or(settings.temperature)),
        top_p: Some(plan.options.top_p.unwrap_or(settings.top_p)),
        seed: plan.options.seed,
    };
    let client = CloudClient::new(config.clone())?;
    let mut key = cache::key(&plan.decision, settings, &config, &params, &plan.text, &plan.history);
    // A chat that called tools is never answered from, or kept in, the
    // cache: its answers rest on results the request does not show.
    if !state.tools.results_in(&plan.session).is_empty() {
        key.cacheable = false;
    }
    if let Some(hit) = cache::get(&state.store, &key)? {
        let route = RouteInfo::of(&plan.decision, RouteTarget::Cached, &model);
        let labels = ModelLabels::cloud(&format!("cache:{model}"));
        let recorder = TurnRecorder::new(&state.store, &plan.session, &plan.text, labels, Route::Cloud, plan.replaces)?;
        let stopped = Arc::new(AtomicBool::new(false));
        let registered = state.runs.register(RunKind::Chat, Stopper::Flag(Arc::clone(&stopped)));
        // A replay is instant; Stop between words ends it like a live answer.
        let events = super::events::replay(&hit.answer).into_iter().map(move |e| match e {
            RunEvent::Text(_) | RunEvent::Stats(..) if stopped.load(Ordering::Relaxed) => {
                RunEvent::Finished(FinishReason::Cancelled)
            }
            e => e,
        });
        let store = state.store.clone();
        let counted = move |end: &super::TurnEnd| {
            if end.started {
                cache::count(&store, &key, true);
            }
        };
        return super::spawn(registered, route, events, sink, recorder, || {}, counted);
    }
    let allow = plan.options.allow_sensitive;
    let (outbound, summarised) = if settings.summarise_for_cloud {
        summary::outbound(state, &plan.history, &plan.text, allow)
    } else {
        (gate::conversation(&plan.history, &plan.text), None)
    };
    // The door: nothing below is built from anything but what passes it.
    let passed = gate::door(state, outbound, allow)?;
    let mut route = RouteInfo::of(&plan.decision, RouteTarget::Cloud, &model);
    route.reasons.extend(plan.notes.iter().cloned());
    // The gate's account of what it left out replaces the router's forecast.
    let forecast = Reason::HistoryWithheld { messages: Vec::new() }.code();
    route.reasons.retain(|r| r.code != forecast);
    route.reasons.extend(summarised.into_iter().chain(passed.notes));
    let recorder = TurnRecorder::new(
        &state.store,
        &plan.session,
        &plan.text,
        ModelLabels::cloud(&model),
        Route::Cloud,
        plan.replaces,
    )?;
    let cancel = CancellationToken::new();
    let registered = state.runs.register(RunKind::Chat, Stopper::Token(cancel.clone()));
    let events = run(client, passed.messages, params, cancel.clone());
    let (store, settings, decision) = (state.store.clone(), settings.clone(), plan.decision);
    let keep = move |end: &super::TurnEnd| {
        // A request that never started asked nothing: nothing to count.
        if end.started {
            cache::count(&store, &key, false);
        }
        // Cached before the end is committed: whoever sees the turn stored
        // can count on the cache (a cut or cancelled answer is not kept).
        if matches!(end.reason, Some(FinishReason::Stop | FinishReason::Length)) {
            cache::put(&store, &decision, &key, &model, &end.text, &settings);
        }
    };
    super::spawn(registered, route, events, sink, recorder, move || cancel.cancel(), keep)
}

/// Starts the request on the async runtime and returns its events, in a
/// local run's order, to read on this thread (whose recorder may block).
/// The stream ends after `Finished` or an `Error`; `cancel` ends it early
/// (as `Finished { Cancelled }`, keeping the text so far).
pub(crate) fn run(
    client: CloudClient,
    messages: GatedMessages,
    params: ChatParams,
    cancel: CancellationToken,
) -> Receiver<RunEvent> {
    let (tx, rx) = std::sync::mpsc::channel();
    crate::runtime::spawn(async move {
        let model = client.config().model.clone();
        let events = tx.clone();
        let result = run_turn(&client, &messages, &params, cancel, move |event| {
            let event = match event {
                // The server counts the prompt; it says how many at the end.
                CloudEvent::Started { .. } => RunEvent::Started { prompt_tokens: 0, reused_tokens: 0 },
                CloudEvent::Token { text } => RunEvent::Text(text.clone()),
                CloudEvent::Usage(_) => return true,
                CloudEvent::Finished { stats, .. } => RunEvent::Stats(turn_stats(stats), None),
            };
            events.send(event).is_ok()
        })
        .await;
        let last = match result.end {
            Ok(finished) => {
                if let Some(note) = finished.stats.note() {
                    tracing::info!(model, "cloud turn: {note}");
                }
                RunEvent::Finished(finished.reason)
            }
            Err(e) => RunEvent::Error { code: Coded::code(&e), message: e.to_string() },
        };
        let _ = tx.send(last);
    });
    rx
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::codes::{Coded, ErrorCode};

    use headroom_cloud::Usage;

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
    fn the_environment_key_goes_to_its_own_url_only() {
        let dir = std::env::temp_dir().join(format!("headroom-env-key-{}", std::process::id()));
        let env = |url: Option<&'static str>| {
            move |name: &str| match name {
                API_KEY_ENV => Some("sk-env".to_owned()),
                API_KEY_URL_ENV => url.map(str::to_owned),
                _ => None,
            }
        };
        let key = |base: &str, url| api_key_from(base, &dir, env(url)).map(|k| k.map(|k| k.expose().to_owned()));
        // Bound to this URL (spelled with a trailing slash): sent.
        assert_eq!(key("http://127.0.0.1:8080/v1", Some("http://127.0.0.1:8080/v1/")).unwrap(), Some("sk-env".into()));
        // Another URL: not sent; the (empty) key store decides.
        assert_eq!(key("https://elsewhere.example/v1", Some("http://127.0.0.1:8080/v1")).unwrap(), None);
        // Bound to nothing: an error that says what to set, never a guess.
        let err = key("http://127.0.0.1:8080/v1", None).unwrap_err();
        assert!(matches!(err, KeyError::EnvKeyWithoutUrl { .. }), "{err}");
        assert!(err.to_string().contains(API_KEY_URL_ENV), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_cloud_config_needs_a_url_and_a_model_from_the_settings() {
        let dir = std::path::Path::new("/nonexistent-headroom-dir");
        let code = |s: &Settings| config(s, dir).err().map(|e| e.code());
        assert_eq!(code(&Settings::default()), Some(ErrorCode::RouteNoCloud));
        let url_only = Settings { cloud_base_url: Some("http://127.0.0.1:9/v1".into()), ..Settings::default() };
        assert_eq!(code(&url_only), Some(ErrorCode::CloudNoModel));
        let both = Settings { cloud_model: Some("m".into()), ..url_only };
        let c = config(&both, dir).unwrap();
        assert_eq!((c.base_url.as_str(), c.model.as_str()), ("http://127.0.0.1:9/v1", "m"));
    }
}
