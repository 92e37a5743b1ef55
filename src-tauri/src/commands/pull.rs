//! Pulling a model from the Hugging Face hub: the fit verdict from its
//! headers first (`model_pull_check`), then the download with progress over
//! a Channel (`model_pull`), one pull at a time, cancellable (`model_pull_cancel`).

use std::path::PathBuf;

use headroom_hub::{CancellationToken, Endpoint, PullEvent};
use serde::Serialize;
use tauri::ipc::Channel;
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::models::{self, ModelEntry};
pub use crate::pull::PullCheck;
use crate::pull::{check_pull, Checked, PullError, PullPlan};
use crate::runs::{RunKind, Stopper};
use crate::state::AppState;

/// What `model_pull` resolves to: the snapshot, and the picker's entry for it (with its badge).
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct PullResult {
    pub snapshot: PathBuf,
    pub downloaded_bytes: u64,
    pub entry: Option<ModelEntry>,
}

/// The verdict for `repo` as the app would load it: its context limit,
/// KV format and kernel, against a fresh reading of this Mac's memory.
async fn check_repo(state: &AppState, endpoint: Endpoint, repo: &str, revision: &str) -> Result<Checked, PullError> {
    let source = models::budget_source(state)?;
    let plan = PullPlan {
        repo,
        revision,
        endpoint,
        hub: &state.locations.hub,
        context: state.context_limit(),
        kv: state.kv_format(),
        kernel: state.quant_kernel(),
        source,
    };
    check_pull(plan).await
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
    let checked = check_repo(state, endpoint, repo, revision).await?;
    let outcome = checked.download(override_fit, cancel, on_event).await?;
    let id = checked.check.model.repo.clone();
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
    Ok(check_repo(&state, Endpoint::from_env()?, &repo, revision.as_deref().unwrap_or("main")).await?.check)
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
        let result = crate::runtime::block_on(pull(
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

        let err = crate::runtime::block_on(check_repo(&state, endpoint, "mlx-community/nope", "main")).err();
        assert_eq!(err.map(|e| CommandError::from(e).code), Some(ErrorCode::RepoNotFound));
    }
}
