//! What the headless subcommands can fail with.

use std::path::PathBuf;

use headroom_core::fit::FitReport;
use headroom_engine::demo::DemoError;
use headroom_engine::EngineError;

/// A subcommand's failure; printed as one line on stderr, exit code 1.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    // Boxed, as is `Turn`: both carry a model-format error with its path, and
    // every `Result<_, CliError>` would otherwise be that large.
    #[error(transparent)]
    Engine(Box<EngineError>),
    #[error(transparent)]
    Demo(#[from] DemoError),
    #[error(transparent)]
    Memory(#[from] headroom_memory::MemoryError),
    /// The fit verdict says the model would swap or cannot fit; nothing was
    /// loaded. `remedies`: what would fit, where the guard worked them out
    /// (the lines `headroom fit` prints, the picker's offers).
    #[error("{}{}", super::fit::refusal(model, report),
        remedies.as_ref().map(|r| format!("\n{}", super::fit::remedy_lines(report, r).trim_end())).unwrap_or_default())]
    WouldNotFit { model: String, report: Box<FitReport>, remedies: Option<Vec<headroom_core::remedies::Remedy>> },
    /// The model cannot be split across two Macs.
    #[error(transparent)]
    Split(headroom_core::split::SplitError),
    /// `--peer`: the split would swap one of the two Macs; nothing was loaded.
    #[error("{}", super::lend::split_refusal(model, split))]
    SplitWouldNotFit { model: String, split: Box<crate::fit::PeerSplit> },
    /// `peers` or `pair` could not reach what it asked.
    #[error("cannot lend this Mac: {0}")]
    Lend(String),
    /// `lend` could not listen or serve.
    #[error("cannot lend this Mac: {0}")]
    Lending(Box<crate::lend::LendError>),
    /// MODEL is neither a folder nor a repo id found in the local HF cache.
    #[error(
        "model `{model}` not found: not a folder, and not in the Hugging Face cache (looked in {})",
        display_paths(searched)
    )]
    ModelNotFound { model: String, searched: Vec<PathBuf> },
    /// No MODEL was given and the default model is not installed.
    #[error("no model given, and the default model is not installed (expected at {}): run `make setup`, or name a model folder, a .gguf file or a repo id", expected.display())]
    NoDefaultModel { expected: PathBuf },
    /// A repo in the HF cache whose `refs/main` points at no snapshot.
    #[error("model `{model}` is in the Hugging Face cache at {repo_dir} but has no usable snapshot ({reason})")]
    BrokenCacheEntry { model: String, repo_dir: PathBuf, reason: String },
    /// `generate --prompt-file` could not be read.
    #[error("cannot read the prompt from {}: {source}", path.display())]
    PromptFile { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Store(#[from] headroom_store::StoreError),
    /// `chat --message` is empty or blank.
    #[error("the message is empty: pass the text with --message")]
    EmptyMessage,
    /// The engine failed mid-answer; what arrived is stored with status `error`.
    #[error("the answer failed (what arrived is saved): {0}")]
    TurnFailed(String),
    /// `import FILE` could not be read.
    #[error("cannot read {}: {source}", path.display())]
    ImportFile { path: PathBuf, source: std::io::Error },
    /// `--tools FILE` could not be read.
    #[error("cannot read the tools file {}: {source}", path.display())]
    ToolsFile { path: PathBuf, source: std::io::Error },
    /// `--tools FILE` is not JSON.
    #[error("the tools file {} is not JSON: {source}", path.display())]
    ToolsJson { path: PathBuf, source: serde_json::Error },
    /// `--json-schema FILE` could not be read.
    #[error("cannot read the JSON schema {}: {source}", path.display())]
    SchemaFile { path: PathBuf, source: std::io::Error },
    /// `--json-schema FILE` is not JSON.
    #[error("the JSON schema {} is not JSON: {source}", path.display())]
    SchemaJson { path: PathBuf, source: serde_json::Error },
    /// `--json-schema FILE` is JSON the grammar engine cannot use.
    #[error("the JSON schema {}: {source}", path.display())]
    Schema { path: PathBuf, source: headroom_engine::grammar::GrammarError },
    /// A flag's value makes no sense (`bench --depth` empty, a negative bandwidth).
    #[error("invalid {name}: {reason}")]
    BadArgument { name: &'static str, reason: String },
    /// Neither `$HEADROOM_DATA_DIR` nor a platform data folder is known.
    #[error("cannot find the app's data folder: set HEADROOM_DATA_DIR")]
    NoDataDir,
    #[error(transparent)]
    Bench(#[from] crate::bench::BenchError),
    /// A chat turn was refused before it started; nothing was stored.
    #[error(transparent)]
    Turn(Box<crate::turn::TurnError>),
    #[error(transparent)]
    Cloud(#[from] headroom_cloud::CloudError),
    #[error(transparent)]
    CloudKey(#[from] headroom_cloud::KeyError),
    /// `cloud-key set` got nothing on stdin.
    #[error("no API key on stdin: pipe it in, e.g. `printf %s \"$KEY\" | headroom cloud-key set --url URL`")]
    NoKeyOnStdin,
    /// Writing to stdout failed (a closed pipe).
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
    #[error("cannot encode JSON: {0}")]
    Json(#[from] serde_json::Error),
    // Boxed, as `Engine` is: both carry a hub error with its repo and file.
    #[error(transparent)]
    Shelf(Box<crate::shelf::ShelfServiceError>),
    #[error(transparent)]
    Hub(Box<headroom_hub::HubError>),
    /// The async runtime a network command needs could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// `shelf --refresh` had nowhere to keep what it read.
    #[error("no Hugging Face cache folder is known: set HF_HUB_CACHE, HF_HOME or HOME")]
    NoHubCache,
}

impl From<crate::shelf::ShelfServiceError> for CliError {
    fn from(e: crate::shelf::ShelfServiceError) -> Self {
        Self::Shelf(Box::new(e))
    }
}

impl From<headroom_hub::HubError> for CliError {
    fn from(e: headroom_hub::HubError) -> Self {
        Self::Hub(Box::new(e))
    }
}

impl From<crate::fit::FitError> for CliError {
    fn from(e: crate::fit::FitError) -> Self {
        match e {
            crate::fit::FitError::Model(e) => Self::Engine(Box::new(e)),
            crate::fit::FitError::Memory(e) => Self::Memory(e),
            crate::fit::FitError::Split(e) => Self::Split(e),
        }
    }
}

// Boxed like `Engine`: a lender's error can carry an engine error.
impl From<crate::lend::LendError> for CliError {
    fn from(e: crate::lend::LendError) -> Self {
        Self::Lending(Box::new(e))
    }
}

impl From<EngineError> for CliError {
    fn from(e: EngineError) -> Self {
        Self::Engine(Box::new(e))
    }
}

impl From<crate::turn::TurnError> for CliError {
    fn from(e: crate::turn::TurnError) -> Self {
        Self::Turn(Box::new(e))
    }
}

fn display_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "nowhere: it is not an `org/name` repo id, or no cache folder is known".into();
    }
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}
