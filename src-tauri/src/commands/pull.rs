//! Pulling a model from the Hugging Face hub: the fit verdict from its
//! headers first (`model_pull_check`), then the download with progress over
//! a Channel (`model_pull`), one pull at a time, cancellable (`model_pull_cancel`).

use std::path::PathBuf;

use headroom_core::fit::{check, FitReport, GIB};
use headroom_hub::{
    download, inspect, CancellationToken, Endpoint, HubClient, HubError, PullEvent, RemoteModel, RepoId,
};
use serde::Serialize;
use tauri::ipc::Channel;
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::models::{self, ModelEntry};
use crate::runs::{RunKind, Stopper};
use crate::state::AppState;

/// What `model_pull_check` resolves to: the repo's files and the verdict at the app's context limit.
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct PullCheck {
    pub model: RemoteModel,
    pub endpoint: String,
    pub fit: FitReport,
}

/// What `model_pull` resolves to: the snapshot, and the picker's entry for it (with its badge).
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct PullResult {
    pub snapshot: PathBuf,
    pub downloaded_bytes: u64,
    pub entry: Option<ModelEntry>,
}

impl From<HubError> for CommandError {
    fn from(e: HubError) -> Self {
        use HubError as E;
        let code = match &e {
            E::InvalidRepoId { .. } | E::InvalidRevision { .. } | E::InvalidEndpoint { .. } => {
                ErrorCode::InvalidSetting
            }
            E::RepoNotFound { .. } | E::RevisionNotFound { .. } | E::FileNotFound { .. } => ErrorCode::RepoNotFound,
            E::Http { .. } | E::Status { .. } | E::TransferFailed { .. } => ErrorCode::HubUnreachable,
            E::Protocol { .. } => ErrorCode::HubProtocol,
            E::NoWeights { .. } | E::NoConfig { .. } => ErrorCode::UnsupportedModel,
            E::Format { source, .. } => crate::error::format_code(source),
            E::MissingShard { .. } => ErrorCode::ModelIncomplete,
            E::CacheName { .. } => ErrorCode::HubProtocol,
            E::HashMismatch { .. } | E::SizeMismatch { .. } => ErrorCode::DownloadCorrupt,
            E::Io { .. } => ErrorCode::Io,
            E::Cancelled { .. } => ErrorCode::PullCancelled,
            E::Gated { .. } | E::TokenRefused { .. } | E::TokenFile { .. } | E::InvalidToken { .. } => {
                ErrorCode::HubAuth
            }
        };
        Self::new(code, e.to_string())
    }
}

pub(crate) fn cache_root(state: &AppState) -> Result<PathBuf, CommandError> {
    state.locations.hub.hub_dirs().into_iter().next().ok_or_else(|| {
        CommandError::new(
            ErrorCode::NoHfCache,
            "No Hugging Face cache folder is known: set HF_HUB_CACHE, HF_HOME or HOME.",
        )
    })
}

/// The repo's facts and the verdict, from config.json and the safetensors headers only.
async fn check_repo(
    state: &AppState,
    endpoint: Endpoint,
    repo: &str,
    revision: &str,
) -> Result<(HubClient, PullCheck), CommandError> {
    let repo = RepoId::parse(repo)?;
    let client = HubClient::from_env(endpoint)?;
    let shape = headroom_engine::load_shape(headroom_engine::ComputeDtype::Native, state.quant_kernel());
    let model = inspect(&client, &repo, revision, &cache_root(state)?, shape).await?;
    let source = models::budget_source(state)?;
    let inputs = crate::fit::budget_inputs(source)
        .map_err(|e| CommandError::new(ErrorCode::Memory, format!("This Mac's memory could not be read: {e}")))?;
    let fit =
        check(&model.footprint, u64::try_from(state.context_limit()).unwrap_or(u64::MAX), state.kv_format(), inputs);
    let endpoint = client.endpoint().to_string();
    Ok((client, PullCheck { model, endpoint, fit }))
}

/// The whole pull: check, refuse a model that would swap (`MODEL_TOO_LARGE`,
/// nothing downloaded) unless `override_fit`, download, then the picker's
/// entry for it, with its verdict.
pub(crate) async fn pull(
    state: &AppState,
    endpoint: Endpoint,
    repo: &str,
    revision: &str,
    override_fit: bool,
    cancel: &CancellationToken,
    on_event: impl FnMut(PullEvent),
) -> Result<PullResult, CommandError> {
    let (client, checked) = check_repo(state, endpoint, repo, revision).await?;
    if checked.fit.verdict.refuses() && !override_fit {
        let over = crate::fit::over_by(&checked.fit) as f64 / GIB as f64;
        let message = format!(
            "{repo} would push this Mac into swap by {over:.1} GB at the app's context limit; nothing was downloaded."
        );
        return Err(CommandError {
            code: ErrorCode::ModelTooLarge,
            message,
            // Before a byte is downloaded, only this model's own remedies apply.
            details: crate::fit::refusal_details(
                &checked.fit,
                &headroom_core::remedies::remedies(&checked.fit, checked.fit.estimate.kv_format, 0, &[]),
            )
            .into_details(),
        });
    }
    let outcome = download(&client, &cache_root(state)?, &checked.model, cancel, on_event).await?;
    let id = checked.model.repo.clone();
    let state = AppState::clone(state);
    let entry = tauri::async_runtime::spawn_blocking(move || models::entries(&state).into_iter().find(|m| m.id == id))
        .await
        .map_err(|e| {
            CommandError::new(ErrorCode::EngineInternal, format!("Listing the models stopped unexpectedly: {e}"))
        })?;
    Ok(PullResult { snapshot: outcome.snapshot, downloaded_bytes: outcome.downloaded_bytes, entry })
}

/// The verdict for `repo` (at `revision`, default main) before anything is
/// downloaded, from the hub at `$HF_ENDPOINT` (default: the public hub).
#[tauri::command]
pub async fn model_pull_check(
    repo: String,
    revision: Option<String>,
    state: State<'_, AppState>,
) -> Result<PullCheck, CommandError> {
    Ok(check_repo(&state, Endpoint::from_env()?, &repo, revision.as_deref().unwrap_or("main")).await?.1)
}

/// Downloads `repo` into the HF cache, streaming `PullEvent`s; see [`pull`].
/// One pull at a time (`PULL_IN_PROGRESS`); `model_pull_cancel` stops it (`PULL_CANCELLED`).
#[tauri::command]
pub async fn model_pull(
    repo: String,
    revision: Option<String>,
    r#override: Option<bool>,
    on_progress: Channel<PullEvent>,
    state: State<'_, AppState>,
) -> Result<PullResult, CommandError> {
    let cancel = CancellationToken::new();
    let _running = state.runs.register_only(RunKind::Pull, Stopper::Token(cancel.clone())).map_err(|_| {
        CommandError::new(ErrorCode::PullInProgress, "A model is already being downloaded; cancel it or wait.")
    })?;
    let revision = revision.as_deref().unwrap_or("main");
    // A closed window drops the channel; the pull goes on and is listed later.
    pull(&state, Endpoint::from_env()?, &repo, revision, r#override.unwrap_or(false), &cancel, |e| {
        let _ = on_progress.send(e);
    })
    .await
}

/// Cancels the pull in progress; resolves to false if none was running.
#[tauri::command]
pub fn model_pull_cancel(state: State<'_, AppState>) -> bool {
    state.runs.cancel_kind(RunKind::Pull)
}

#[cfg(test)]
mod tests {
    use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
    use headroom_hub::testserver::TestHub;

    use super::*;
    use crate::models::HubEnv;

    /// The app's side of a pull: from the loopback test hub into a temporary
    /// HF cache, after which the picker's list has the model with its badge.
    #[test]
    fn a_pulled_model_appears_in_the_picker_with_its_verdict() {
        let tmp = headroom_test_support::scratch("app-pull");
        let root = tmp.join("data");
        write_demo_model(&root.join("source"), &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).unwrap();
        let hub = TestHub::start().unwrap();
        hub.add_repo("mlx-community/Demo-4bit", &root.join("source")).unwrap();
        let mut state = crate::test_state("pull");
        state.locations.hub = HubEnv { hf_hub_cache: Some(root.join("hub").into()), ..HubEnv::default() };
        let endpoint = Endpoint::parse(&hub.endpoint()).unwrap();
        assert!(models::entries(&state).is_empty());

        let mut events = Vec::new();
        let result = tauri::async_runtime::block_on(pull(
            &state,
            endpoint.clone(),
            "mlx-community/Demo-4bit",
            "main",
            false,
            &CancellationToken::new(),
            |e| events.push(e),
        ))
        .unwrap();
        let entry = result.entry.expect("not listed after the pull");
        assert_eq!(
            (entry.id.as_str(), entry.arch.as_deref(), entry.bits),
            ("mlx-community/Demo-4bit", Some("qwen2"), Some(4))
        );
        assert!(entry.fit.is_some(), "the badge needs the verdict");
        assert!(matches!(events.last(), Some(PullEvent::Finished { .. })));
        assert_eq!(models::entries(&state).len(), 1);

        let err = tauri::async_runtime::block_on(check_repo(&state, endpoint, "mlx-community/nope", "main")).err();
        assert_eq!(err.map(|e| e.code), Some(ErrorCode::RepoNotFound));
    }
}
