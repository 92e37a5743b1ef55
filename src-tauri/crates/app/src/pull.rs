//! Pulling a model from the Hugging Face hub, for the app and the CLI
//! alike: the verdict from the repo's config.json and safetensors headers
//! (nothing else downloaded), a refusal before any weight byte if the model
//! would swap, then the resumable, verified download into the HF cache.

use std::path::PathBuf;

use headroom_core::fit::{check, FitReport, GIB};
use headroom_core::format::hf_cache::HubEnv;
use headroom_core::kv::KvFormat;
use headroom_engine::{ComputeDtype, QuantKernel};
use headroom_hub::{
    download, inspect, CancellationToken, Endpoint, HubClient, HubError, PullEvent, PullOutcome, RemoteModel, RepoId,
};
use serde::Serialize;

use crate::codes::{Coded, ErrorCode};
use crate::fit::BudgetSource;

/// The repo's files and the verdict at the context it would be loaded with.
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct PullCheck {
    pub model: RemoteModel,
    pub endpoint: String,
    pub fit: FitReport,
}

/// Why a pull stopped. A refusal comes before any weight byte is downloaded.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Hub(#[from] HubError),
    #[error("This Mac's memory could not be read: {0}")]
    Memory(#[from] headroom_memory::MemoryError),
    #[error("No Hugging Face cache folder is known: set HF_HUB_CACHE, HF_HOME or HOME.")]
    NoCache,
    #[error(
        "{repo} would push this Mac into swap by {:.1} GB at {} tokens of context; nothing was downloaded.",
        crate::fit::over_by(report) as f64 / GIB as f64,
        report.estimate.context_tokens
    )]
    WouldNotFit { repo: String, report: Box<FitReport> },
}

impl Coded for PullError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Hub(e) => e.code(),
            Self::Memory(_) => ErrorCode::Memory,
            Self::NoCache => ErrorCode::NoHfCache,
            Self::WouldNotFit { .. } => ErrorCode::ModelTooLarge,
        }
    }

    fn details(&self) -> Option<serde_json::Value> {
        let Self::WouldNotFit { report, .. } = self else { return None };
        // Before a byte is downloaded, only this model's own remedies apply.
        let remedies = headroom_core::remedies::remedies(report, report.estimate.kv_format, 0, &[]);
        crate::fit::refusal_details(report, &remedies).into_details()
    }
}

/// The cache pulls go to: the first in huggingface_hub's precedence, where
/// the model list looks first.
pub fn cache_root(hub: &HubEnv) -> Result<PathBuf, PullError> {
    hub.hub_dirs().into_iter().next().ok_or(PullError::NoCache)
}

/// What is pulled from where, and how it would be loaded here.
#[derive(Debug, Clone)]
pub struct PullPlan<'a> {
    pub repo: &'a str,
    /// Branch, tag or commit.
    pub revision: &'a str,
    pub endpoint: Endpoint,
    pub hub: &'a HubEnv,
    pub context: usize,
    pub kv: KvFormat,
    pub kernel: QuantKernel,
    /// The budget the verdict is against.
    pub source: BudgetSource,
}

/// A checked pull: the verdict, and what the download needs.
#[derive(Debug)]
pub struct Checked {
    pub check: PullCheck,
    /// Where it goes.
    pub cache: PathBuf,
    client: HubClient,
}

/// The verdict for `plan` from the repo's config.json and headers: nothing
/// else is downloaded.
pub async fn check_pull(plan: PullPlan<'_>) -> Result<Checked, PullError> {
    let repo = RepoId::parse(plan.repo)?;
    let cache = cache_root(plan.hub)?;
    let client = HubClient::from_env(plan.endpoint)?;
    let shape = headroom_engine::load_shape(ComputeDtype::Native, plan.kernel);
    let model = inspect(&client, &repo, plan.revision, &cache, shape).await?;
    let inputs = crate::fit::budget_inputs(plan.source)?;
    let fit = check(&model.footprint, u64::try_from(plan.context).unwrap_or(u64::MAX), plan.kv, inputs);
    let endpoint = client.endpoint().to_string();
    Ok(Checked { check: PullCheck { model, endpoint, fit }, cache, client })
}

impl Checked {
    /// Downloads the model, with each event to `on_event`; a model the
    /// verdict refuses is refused here, before a byte, unless `override_fit`.
    pub async fn download(
        &self,
        override_fit: bool,
        cancel: &CancellationToken,
        on_event: impl FnMut(PullEvent),
    ) -> Result<PullOutcome, PullError> {
        let PullCheck { model, fit, .. } = &self.check;
        if fit.verdict.refuses() && !override_fit {
            return Err(PullError::WouldNotFit { repo: model.repo.clone(), report: Box::new(fit.clone()) });
        }
        Ok(download(&self.client, &self.cache, model, cancel, on_event).await?)
    }
}
