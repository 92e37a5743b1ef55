//! The one shape errors take on their way to the UI.

use serde::Serialize;

/// What a command returns on failure: a stable `code` the UI can switch on,
/// a sentence for the user, and optional structured details (numbers, paths).
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct CommandError {
    pub code: ErrorCode,
    pub message: String,
    /// What it is depends on the code (a refusal's numbers, …): `unknown`
    /// to TypeScript, which narrows it where it reads it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(type = "unknown", optional)]
    pub details: Option<serde_json::Value>,
}

impl CommandError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), details: None }
    }
}

/// Declares [`ErrorCode`]: each variant with the string it is sent as.
macro_rules! error_codes {
    ($($variant:ident = $code:literal,)*) => {
        /// The stable code of a [`CommandError`], which the UI switches on:
        /// sent as the SCREAMING_SNAKE string beside each variant, and a
        /// string union in the generated TypeScript (`ErrorCode.ts`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ts_rs::TS)]
        pub enum ErrorCode {
            $(#[serde(rename = $code)] $variant,)*
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            #[cfg(test)]
            pub const ALL: &[ErrorCode] = &[$(Self::$variant,)*];

            /// The code as it is sent (and logged).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $code,)*
                }
            }
        }
    };
}

error_codes! {
    // The engine and the model files.
    EngineInternal = "ENGINE_INTERNAL",
    EngineMlx = "ENGINE_MLX",
    EngineShape = "ENGINE_SHAPE",
    MemoryNotReturned = "MEMORY_NOT_RETURNED",
    NoModelLoaded = "NO_MODEL_LOADED",
    NothingLoaded = "NOTHING_LOADED",
    EmptyPrompt = "EMPTY_PROMPT",
    ContextOverflow = "CONTEXT_OVERFLOW",
    Tokenizer = "TOKENIZER",
    NoChatTemplate = "NO_CHAT_TEMPLATE",
    ChatTemplate = "CHAT_TEMPLATE",
    ModelConfig = "MODEL_CONFIG",
    ModelIncomplete = "MODEL_INCOMPLETE",
    ModelNotFound = "MODEL_NOT_FOUND",
    ModelTokenizer = "MODEL_TOKENIZER",
    ModelTooLarge = "MODEL_TOO_LARGE",
    ModelWeights = "MODEL_WEIGHTS",
    UnsupportedArchitecture = "UNSUPPORTED_ARCHITECTURE",
    UnsupportedModel = "UNSUPPORTED_MODEL",
    UnsupportedModelFeature = "UNSUPPORTED_MODEL_FEATURE",
    UnsupportedQuantization = "UNSUPPORTED_QUANTIZATION",
    DemoModel = "DEMO_MODEL",
    Memory = "MEMORY",
    Io = "IO",
    // Two Macs (a model's later layers on a lent Mac).
    PeerUnreachable = "PEER_UNREACHABLE",
    PeerRefused = "PEER_REFUSED",
    PeerLost = "PEER_LOST",
    PeerUnsupported = "PEER_UNSUPPORTED",
    DraftModel = "DRAFT_MODEL",
    LendFailed = "LEND_FAILED",
    PeerFindFailed = "PEER_FIND_FAILED",
    PeerPairFailed = "PEER_PAIR_FAILED",
    // Turns, routing and the privacy gate.
    EmptyMessage = "EMPTY_MESSAGE",
    NothingToRegenerate = "NOTHING_TO_REGENERATE",
    ChatChanged = "CHAT_CHANGED",
    TurnWouldSwap = "TURN_WOULD_SWAP",
    PrivacyBlocked = "PRIVACY_BLOCKED",
    RouteNoCloud = "ROUTE_NO_CLOUD",
    RouteNoLocalModel = "ROUTE_NO_LOCAL_MODEL",
    // The cloud endpoint and its key.
    CloudNoModel = "CLOUD_NO_MODEL",
    CloudBadUrl = "CLOUD_BAD_URL",
    CloudKeyEmpty = "CLOUD_KEY_EMPTY",
    CloudKeyEnv = "CLOUD_KEY_ENV",
    CloudKeyStore = "CLOUD_KEY_STORE",
    CloudInvalidConfig = "CLOUD_INVALID_CONFIG",
    CloudUnauthorized = "CLOUD_UNAUTHORIZED",
    CloudNotFound = "CLOUD_NOT_FOUND",
    CloudConnectionRefused = "CLOUD_CONNECTION_REFUSED",
    CloudUnreachable = "CLOUD_UNREACHABLE",
    CloudTimeout = "CLOUD_TIMEOUT",
    CloudRateLimited = "CLOUD_RATE_LIMITED",
    CloudServerError = "CLOUD_SERVER_ERROR",
    CloudRejected = "CLOUD_REJECTED",
    CloudMalformedStream = "CLOUD_MALFORMED_STREAM",
    CloudStreamCut = "CLOUD_STREAM_CUT",
    CloudBadResponse = "CLOUD_BAD_RESPONSE",
    CloudRedirected = "CLOUD_REDIRECTED",
    CloudClient = "CLOUD_CLIENT",
    // The store: sessions, settings, imports.
    SessionNotFound = "SESSION_NOT_FOUND",
    MessageNotFound = "MESSAGE_NOT_FOUND",
    InvalidInput = "INVALID_INPUT",
    InvalidSetting = "INVALID_SETTING",
    ImportFormat = "IMPORT_FORMAT",
    Database = "DATABASE",
    DatabaseCorrupt = "DATABASE_CORRUPT",
    Store = "STORE",
    // Pulls from the hub and the starter shelf.
    RepoNotFound = "REPO_NOT_FOUND",
    HubUnreachable = "HUB_UNREACHABLE",
    HubProtocol = "HUB_PROTOCOL",
    HubAuth = "HUB_AUTH",
    DownloadCorrupt = "DOWNLOAD_CORRUPT",
    PullCancelled = "PULL_CANCELLED",
    PullInProgress = "PULL_IN_PROGRESS",
    NoHfCache = "NO_HF_CACHE",
    ShelfRecord = "SHELF_RECORD",
    // The benchmark and the charts.
    BenchRunning = "BENCH_RUNNING",
    BenchCancelled = "BENCH_CANCELLED",
    Chart = "CHART",
    // The local server.
    PortUnavailable = "PORT_UNAVAILABLE",
    ServerNotAllowed = "SERVER_NOT_ALLOWED",
    ServerFailed = "SERVER_FAILED",
    // The desktop: window, shortcut, login item.
    Window = "WINDOW",
    ShortcutTaken = "SHORTCUT_TAKEN",
    ShortcutFailed = "SHORTCUT_FAILED",
    LaunchAtLogin = "LAUNCH_AT_LOGIN",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<headroom_engine::EngineError> for CommandError {
    fn from(e: headroom_engine::EngineError) -> Self {
        use headroom_engine::EngineError as E;
        let code = match &e {
            E::Mlx { .. } => ErrorCode::EngineMlx,
            E::UnsupportedQuantization { .. } => ErrorCode::UnsupportedQuantization,
            E::Shape { .. } => ErrorCode::EngineShape,
            E::MissingConfig { .. } | E::MissingWeights { .. } | E::MissingTokenizer { .. } => {
                ErrorCode::ModelIncomplete
            }
            E::Io { .. } => ErrorCode::Io,
            E::InvalidConfig { .. } => ErrorCode::ModelConfig,
            E::Format { source, .. } | E::Weights { source, .. } => format_code(source),
            E::MissingShard { .. } => ErrorCode::ModelIncomplete,
            // Both say the ids and the embedding do not belong together (the
            // second is refused per prompt, the first at load).
            E::VocabMismatch { .. } | E::TokenOutOfVocab { .. } => ErrorCode::ModelTokenizer,
            E::NothingLoaded { .. } => ErrorCode::NothingLoaded,
            E::CorruptWeights { .. }
            | E::MissingTensor { .. }
            | E::UnexpectedTensor { .. }
            | E::DuplicateTensor { .. }
            | E::WrongShape { .. }
            | E::WrongDtype { .. } => ErrorCode::ModelWeights,
            E::InvalidSetting { .. } | E::KvFormat { .. } => ErrorCode::InvalidSetting,
            E::EmptyPrompt => ErrorCode::EmptyPrompt,
            E::Tokenizer { .. } => ErrorCode::Tokenizer,
            E::NoChatTemplate { .. } => ErrorCode::NoChatTemplate,
            E::TemplateRender { .. } => ErrorCode::ChatTemplate,
            E::ContextOverflow { .. } => ErrorCode::ContextOverflow,
            E::NoModelLoaded => ErrorCode::NoModelLoaded,
            E::Panicked { .. } | E::EngineStopped => ErrorCode::EngineInternal,
            E::MemoryNotReturned { .. } => ErrorCode::MemoryNotReturned,
            E::BenchCancelled => ErrorCode::BenchCancelled,
            E::BenchContext { .. } => ErrorCode::ContextOverflow,
            E::Peer { .. } => ErrorCode::PeerUnreachable,
            E::PeerRefused { .. } => ErrorCode::PeerRefused,
            E::PeerLost { .. } => ErrorCode::PeerLost,
            E::PeerUnsupported { .. } => ErrorCode::PeerUnsupported,
            E::DraftModel { .. } => ErrorCode::DraftModel,
        };
        Self::new(code, e.to_string())
    }
}

/// The code of a model file that cannot be used, by what is wrong with it
/// (shared by loads from disk and pull checks over the network).
pub(crate) fn format_code(e: &headroom_core::format::FormatError) -> ErrorCode {
    use headroom_core::format::FormatError as F;
    match e {
        F::UnknownModelType { .. } | F::UnsupportedGgufArchitecture { .. } => ErrorCode::UnsupportedArchitecture,
        F::UnsupportedGgufType { .. } => ErrorCode::UnsupportedModelFeature,
        F::Gguf { .. } | F::GgufTensor { .. } | F::GgufTokenizer { .. } => ErrorCode::ModelWeights,
        F::UnsupportedQuantMode { .. } | F::UnsupportedRopeScaling { .. } | F::UnsupportedLayerType { .. } => {
            ErrorCode::UnsupportedModelFeature
        }
        F::Header { .. } | F::Tensor { .. } | F::Index { .. } => ErrorCode::ModelWeights,
        F::Cache { .. } => ErrorCode::ModelIncomplete,
        F::Json { .. } | F::MissingField { .. } | F::BadField { .. } => ErrorCode::ModelConfig,
    }
}

impl From<crate::peers::FindError> for CommandError {
    fn from(e: crate::peers::FindError) -> Self {
        Self::new(ErrorCode::PeerFindFailed, e.to_string())
    }
}

impl From<crate::peers::PairError> for CommandError {
    fn from(e: crate::peers::PairError) -> Self {
        use crate::peers::PairError as E;
        let code = match &e {
            E::NoCode { .. } => ErrorCode::InvalidInput,
            E::Refused { .. } => ErrorCode::PeerRefused,
            E::Unreachable { .. } => ErrorCode::PeerUnreachable,
            E::Keep { .. } => ErrorCode::PeerPairFailed,
        };
        Self::new(code, e.to_string())
    }
}

impl From<headroom_store::StoreError> for CommandError {
    fn from(e: headroom_store::StoreError) -> Self {
        use headroom_store::StoreError as E;
        let code = match &e {
            E::SessionNotFound(_) => ErrorCode::SessionNotFound,
            E::MessageNotFound(_) => ErrorCode::MessageNotFound,
            E::TurnChanged { .. } => ErrorCode::ChatChanged,
            E::InvalidSessionId(_) | E::EmptyTitle => ErrorCode::InvalidInput,
            E::Settings(_) => ErrorCode::InvalidSetting,
            E::ImportFormat(_) => ErrorCode::ImportFormat,
            E::StoredSettings(_) | E::Corrupt { .. } => ErrorCode::DatabaseCorrupt,
            E::CreateDir { .. }
            | E::Lock { .. }
            | E::Open { .. }
            | E::Migrate { .. }
            | E::Query { .. }
            | E::Json(_) => ErrorCode::Database,
        };
        Self::new(code, e.to_string())
    }
}

impl From<headroom_core::router::RouteError> for CommandError {
    fn from(e: headroom_core::router::RouteError) -> Self {
        use headroom_core::router::RouteError as E;
        let code = match &e {
            E::NoLocalModel { .. } => ErrorCode::RouteNoLocalModel,
            E::NoCloudProvider => ErrorCode::RouteNoCloud,
        };
        Self::new(code, e.to_string())
    }
}

impl From<headroom_cloud::CloudError> for CommandError {
    fn from(e: headroom_cloud::CloudError) -> Self {
        Self::new(cloud_code(&e), e.to_string())
    }
}

/// The cloud client's errors by code: the same strings as
/// `CloudError::code` (which the CLI prints), as [`ErrorCode`]s.
pub(crate) fn cloud_code(e: &headroom_cloud::CloudError) -> ErrorCode {
    use headroom_cloud::CloudError as E;
    match e {
        E::InvalidConfig { .. } => ErrorCode::CloudInvalidConfig,
        E::Unauthorized { .. } => ErrorCode::CloudUnauthorized,
        E::NotFound { .. } => ErrorCode::CloudNotFound,
        E::ConnectionRefused { .. } => ErrorCode::CloudConnectionRefused,
        E::Connect { .. } => ErrorCode::CloudUnreachable,
        E::Timeout { .. } => ErrorCode::CloudTimeout,
        E::RateLimited { .. } => ErrorCode::CloudRateLimited,
        E::Server { .. } => ErrorCode::CloudServerError,
        E::Rejected { .. } => ErrorCode::CloudRejected,
        E::MalformedStream { .. } => ErrorCode::CloudMalformedStream,
        E::StreamCut { .. } => ErrorCode::CloudStreamCut,
        E::BadResponse { .. } => ErrorCode::CloudBadResponse,
        E::Redirected { .. } => ErrorCode::CloudRedirected,
        E::Client(_) => ErrorCode::CloudClient,
    }
}

impl From<headroom_cloud::KeyError> for CommandError {
    fn from(e: headroom_cloud::KeyError) -> Self {
        use headroom_cloud::KeyError as E;
        let code = match &e {
            E::EmptyKey => ErrorCode::CloudKeyEmpty,
            E::InvalidUrl(_) => ErrorCode::CloudBadUrl,
            E::EnvKeyWithoutUrl { .. } => ErrorCode::CloudKeyEnv,
            E::File { .. } | E::CorruptFile { .. } | E::Keychain(_) => ErrorCode::CloudKeyStore,
        };
        Self::new(code, format!("The API key could not be used: {e}"))
    }
}

impl From<crate::turn::TurnError> for CommandError {
    fn from(e: crate::turn::TurnError) -> Self {
        use crate::turn::TurnError as E;
        let message = e.to_string();
        let code = match e {
            E::Route(e) => return e.into(),
            E::Key(e) => return e.into(),
            E::Cloud(e) => return e.into(),
            E::Engine(e) => return e.into(),
            E::Store(e) => return e.into(),
            E::App(e) => return e,
            E::EmptyMessage => return Self::new(ErrorCode::EmptyMessage, "Type a message first."),
            E::NoModelLoaded => {
                return Self::new(
                    ErrorCode::NoModelLoaded,
                    "No model is loaded yet. Pick one from the list at the top.",
                )
            }
            E::NothingToRegenerate => ErrorCode::NothingToRegenerate,
            E::MaxTokens(_) => ErrorCode::InvalidSetting,
            E::NoCloudProvider => {
                return Self::new(ErrorCode::RouteNoCloud, "No cloud provider is set up: add one in Settings.")
            }
            E::NoCloudModel => {
                return Self::new(
                    ErrorCode::CloudNoModel,
                    "No cloud model is set: choose one in Settings, next to the cloud URL.",
                )
            }
            E::Blocked(_) => ErrorCode::PrivacyBlocked,
            E::WouldSwap { .. } => ErrorCode::TurnWouldSwap,
            E::Memory(_) => ErrorCode::Memory,
            E::Thread(_) => ErrorCode::EngineInternal,
        };
        Self::new(code, capitalized(&message))
    }
}

/// A sentence for the user from an error's lower-case description.
fn capitalized(s: &str) -> String {
    let mut chars = s.chars();
    let mut out: String = chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default();
    if !out.ends_with('.') {
        out.push('.');
    }
    out
}

impl From<tauri::Error> for CommandError {
    fn from(e: tauri::Error) -> Self {
        Self::new(ErrorCode::Window, format!("The window could not be changed: {e}"))
    }
}

impl From<crate::models::ModelsError> for CommandError {
    fn from(e: crate::models::ModelsError) -> Self {
        use crate::models::ModelsError as E;
        let code = match &e {
            E::NotFound { .. } => ErrorCode::ModelNotFound,
            E::BrokenCacheEntry { .. } => ErrorCode::ModelIncomplete,
        };
        Self::new(code, e.to_string())
    }
}

impl From<headroom_engine::demo::DemoError> for CommandError {
    fn from(e: headroom_engine::demo::DemoError) -> Self {
        Self::new(ErrorCode::DemoModel, format!("The demo model could not be written: {e}"))
    }
}

impl From<crate::desktop::DesktopError> for CommandError {
    fn from(e: crate::desktop::DesktopError) -> Self {
        use crate::desktop::DesktopError as E;
        let code = match &e {
            E::InvalidShortcut { .. } => ErrorCode::InvalidSetting,
            E::ShortcutTaken { .. } => ErrorCode::ShortcutTaken,
            E::ShortcutFailed { .. } => ErrorCode::ShortcutFailed,
            E::LaunchAtLogin { .. } => ErrorCode::LaunchAtLogin,
        };
        let mut message = e.to_string();
        // A sentence for the UI: capitalised like the other errors.
        if let Some(first) = message.get(..1) {
            message = first.to_uppercase() + &message[1..];
        }
        Self::new(code, message)
    }
}

impl From<crate::shelf::ShelfServiceError> for CommandError {
    fn from(e: crate::shelf::ShelfServiceError) -> Self {
        use crate::shelf::ShelfServiceError as E;
        match e {
            // The hub's own errors keep their codes (offline, gated, not found).
            E::Hub { source, repo } => {
                let mapped = CommandError::from(*source);
                Self::new(mapped.code, format!("{repo}: {}", mapped.message))
            }
            E::Record(_) => Self::new(ErrorCode::ShelfRecord, e.to_string()),
            E::Write { .. } => Self::new(ErrorCode::Io, e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_keep_their_sentence_under_a_stable_code() {
        let e = CommandError::from(headroom_engine::EngineError::NoModelLoaded);
        assert_eq!(e.code, ErrorCode::NoModelLoaded);
        assert!(!e.message.is_empty());
        let v = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(v["code"], "NO_MODEL_LOADED");
        assert!(v.get("details").is_none(), "no null details: {v}");
        let e = CommandError::from(crate::models::ModelsError::NotFound { model: "a/b".into(), searched: vec![] });
        assert_eq!(e.code, ErrorCode::ModelNotFound);
        assert!(e.message.contains("a/b"));
    }

    /// The enum is the wire: each code is sent as its string, and the
    /// strings are unique (the TypeScript union has one member per code).
    #[test]
    fn every_code_is_sent_as_its_string() {
        let mut seen = std::collections::BTreeSet::new();
        for code in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
            assert!(seen.insert(code.as_str()), "{code} twice");
        }
        assert_eq!(seen.len(), ErrorCode::ALL.len());
    }

    /// The app's codes for cloud errors are the cloud client's own (what the CLI prints).
    #[test]
    fn cloud_errors_keep_the_cloud_clients_code() {
        use headroom_cloud::CloudError as E;
        let url = || "https://example.invalid/v1".to_owned();
        let errors = [
            E::InvalidConfig { what: "x".into() },
            E::Unauthorized { url: url() },
            E::NotFound { url: url(), model: "m".into() },
            E::ConnectionRefused { url: url() },
            E::Connect { url: url(), detail: "d".into() },
            E::Timeout {
                url: url(),
                phase: headroom_cloud::error::TimeoutPhase::Idle,
                after: std::time::Duration::from_secs(1),
            },
            E::RateLimited { url: url(), attempts: 3, retry_after: None },
            E::Server { url: url(), status: 500, attempts: 3, body: String::new() },
            E::Rejected { url: url(), status: 400, body: String::new() },
            E::MalformedStream { event: 1, what: "w".into() },
            E::StreamCut { chunks: 2, detail: "d".into() },
            E::BadResponse { url: url(), what: "w".into() },
            E::Redirected { url: url(), status: 302, location: None },
        ];
        assert_eq!(errors.len(), 13, "every variant but Client (a reqwest error, not built by hand)");
        for e in errors {
            let (code, message) = (cloud_code(&e), e.to_string());
            assert_eq!(code.as_str(), e.code(), "{message}");
            assert_eq!(CommandError::from(e), CommandError::new(code, message));
        }
    }
}
