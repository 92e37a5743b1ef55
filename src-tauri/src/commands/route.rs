//! The route preview (where the message being typed would run, local or
//! cloud, and why, before it is sent) and the cloud cache's counters.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use headroom_core::chat::Message;
use headroom_core::fit::{check, Verdict};
use headroom_core::router::{
    route, ApproxTokens, Decision, Force, LocalModel, RouteContext, RouteError, RouteRequest, TokenCounter,
};
use headroom_core::settings::Settings;
use headroom_engine::tokenizer::Tokenizer;
use headroom_store::cloud_cache::CacheStats;
use tauri::State;

use crate::error::CommandError;
use crate::state::AppState;

impl From<RouteError> for CommandError {
    fn from(e: RouteError) -> Self {
        let code = match &e {
            RouteError::NoLocalModel { .. } => "ROUTE_NO_LOCAL_MODEL",
            RouteError::NoCloudProvider => "ROUTE_NO_CLOUD",
        };
        Self::new(code, e.to_string())
    }
}

/// The decision for `text` with the loaded model (its tokenizer counts the
/// tokens; its fit is checked at the needed context) and the cloud the
/// settings name. Without a loaded model, tokens are estimated
/// (`tokensExact: false`). With `session_id`, the stored conversation counts
/// too, as it will when the message is sent.
#[tauri::command]
pub async fn route_preview(
    text: String,
    session_id: Option<String>,
    needs_tools: Option<bool>,
    needs_web: Option<bool>,
    force: Option<Force>,
    allow_sensitive: Option<bool>,
    state: State<'_, AppState>,
) -> Result<Decision, CommandError> {
    let settings = state.store.settings().await?;
    let history = match &session_id {
        Some(id) => state.store.history(id).await?,
        None => Vec::new(),
    };
    let state = AppState::clone(&state);
    let flags = (needs_tools.unwrap_or(false), needs_web.unwrap_or(false), force, allow_sensitive.unwrap_or(false));
    // Tokenizing and reading headers and memory figures: off the UI thread.
    tauri::async_runtime::spawn_blocking(move || preview(&state, &settings, &text, flags, &history))
        .await
        .map_err(|e| CommandError::new("ENGINE_INTERNAL", format!("The route preview stopped unexpectedly: {e}")))?
}

/// Lifetime hits and misses of the cloud-answer cache, and what it holds now.
#[tauri::command]
pub async fn cloud_cache_stats(state: State<'_, AppState>) -> Result<CacheStats, CommandError> {
    Ok(state.store.cache_stats().await?)
}

type Flags = (bool, bool, Option<Force>, bool);

/// The one routing decision of the app: the preview and `chat_send` both
/// come here. `history` is the conversation before `text` (its sensitive
/// content keeps the turn local too, and its tokens travel with it).
pub(crate) fn preview(
    state: &AppState,
    settings: &Settings,
    text: &str,
    flags: Flags,
    history: &[Message],
) -> Result<Decision, CommandError> {
    let (needs_tools, needs_web, force, allow_sensitive) = flags;
    let request = RouteRequest { history, needs_tools, needs_web, force, allow_sensitive, ..RouteRequest::new(text) };
    let cloud = settings.cloud_base_url.as_ref().map(|url| settings.cloud_model.clone().unwrap_or_else(|| url.clone()));
    let reply_reserve_tokens = settings.max_tokens;
    let local_threshold_tokens = settings.local_threshold_tokens;

    let Some(loaded) = state.loaded_model() else {
        let ctx =
            RouteContext { cloud, local_threshold_tokens, reply_reserve_tokens, ..RouteContext::new(&ApproxTokens) };
        return Ok(route(&request, &ctx)?);
    };
    let tokenizer = tokenizer_for(&loaded.path)?;
    let count = |t: &str| tokenizer.encode(t, false).map(|ids| ids.len());
    // Encoding errors are reported, never counted as 0 tokens.
    count(text)?;
    let counter = |t: &str| count(t).unwrap_or(usize::MAX / 2);
    let footprint = headroom_engine::inspect_model(&loaded.path)?;
    let inputs = crate::fit::budget_inputs(crate::models::budget_source(state)?)
        .map_err(|e| CommandError::new("MEMORY", format!("This Mac's memory could not be read: {e}")))?;
    let fit_at = |context: u64| -> Verdict { check(&footprint, context, inputs).verdict };
    let ctx = RouteContext {
        local: Some(LocalModel { id: loaded.id, fit_at: &fit_at }),
        cloud,
        local_threshold_tokens,
        reply_reserve_tokens,
        ..RouteContext::new(&counter as &dyn TokenCounter)
    };
    Ok(route(&request, &ctx)?)
}

/// The loaded model's tokenizer, read once per model: previews come with
/// every send, and a real `tokenizer.json` takes a noticeable moment to parse.
fn tokenizer_for(dir: &Path) -> Result<Arc<Tokenizer>, CommandError> {
    static LAST: Mutex<Option<(PathBuf, Arc<Tokenizer>)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((path, tok)) = last.as_ref() {
        if path == dir {
            return Ok(Arc::clone(tok));
        }
    }
    let tok = Arc::new(Tokenizer::from_dir(dir)?);
    *last = Some((dir.to_owned(), Arc::clone(&tok)));
    Ok(tok)
}

#[cfg(test)]
mod tests {
    use headroom_core::router::Target;

    use super::*;

    #[test]
    fn without_a_model_the_preview_estimates_and_keeps_sensitive_text_local() {
        let state = crate::test_state("route-preview");
        let settings = Settings {
            cloud_base_url: Some("https://api.example.com/v1".into()),
            cloud_model: Some("gpt-x".into()),
            ..Settings::default()
        };
        let d = preview(&state, &settings, "latest news?", (false, true, None, false), &[])
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(d.target, Target::Cloud { provider: "gpt-x".into() });
        assert!(!d.tokens_exact);

        let err = preview(&state, &settings, "my id is 11010519491231002X", (false, true, None, false), &[]).err();
        assert_eq!(err.map(|e| e.code), Some("ROUTE_NO_LOCAL_MODEL"), "sensitive, and nothing local to run it");
        let history = [Message::new(headroom_core::chat::Role::User, "my id is 11010519491231002X")];
        let err = preview(&state, &settings, "latest news?", (false, true, None, false), &history).err();
        assert_eq!(
            err.map(|e| e.code),
            Some("ROUTE_NO_LOCAL_MODEL"),
            "an earlier sensitive message keeps the chat local"
        );

        let no_cloud = Settings::default();
        let err = preview(&state, &no_cloud, "hi", (false, false, Some(Force::Cloud), false), &[]).err();
        assert_eq!(err.map(|e| e.code), Some("ROUTE_NO_CLOUD"));
    }
}
