//! The stable codes the UI switches on, and which error says which: every
//! error a front end can show implements [`Coded`]. The app's
//! `CommandError` and a chat's error event are both built from it, so a
//! refusal has one code and one sentence on every path.

use headroom_engine::EngineError;
use serde::Serialize;

/// An error as the user is told it: a stable code, a sentence, and for
/// some codes structured details (a refusal's numbers).
pub trait Coded: std::fmt::Display {
    fn code(&self) -> ErrorCode;
    /// The sentence the user reads: the error's own text unless it says otherwise.
    fn message(&self) -> String {
        self.to_string()
    }
    /// What it is depends on the code; `None` for most.
    fn details(&self) -> Option<serde_json::Value> {
        None
    }
}

/// Serde `with` for an error's sentence on its way to the UI: paths under
/// the user's home folder written from `~` (`headroom_core::terminal::tilde_text`).
/// Every error type the UI receives (`CommandError`, a chat's error event,
/// a model's problem) sends its message through it, so no refusal shown in
/// a screenshot or a bug report names the user.
pub mod ui_text {
    pub fn serialize<S: serde::Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&headroom_core::terminal::without_home(text))
    }
}

/// Declares [`ErrorCode`]: each variant with the string it is sent as.
macro_rules! error_codes {
    ($($variant:ident = $code:literal,)*) => {
        /// The stable code of an error the UI shows, which it switches on:
        /// sent as the SCREAMING_SNAKE string beside each variant, and a
        /// string union in the generated TypeScript (`ErrorCode.ts`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ts_rs::TS)]
        pub enum ErrorCode {
            $(#[serde(rename = $code)] $variant,)*
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            #[cfg(any(test, feature = "testing"))]
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
    ModelChanged = "MODEL_CHANGED",
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
    // Tools (MCP servers).
    ToolNotFound = "TOOL_NOT_FOUND",
    ToolServerDown = "TOOL_SERVER_DOWN",
    ToolTimeout = "TOOL_TIMEOUT",
    ToolFailed = "TOOL_FAILED",
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

impl Coded for EngineError {
    fn code(&self) -> ErrorCode {
        use EngineError as E;
        match self {
            E::Mlx { .. } => ErrorCode::EngineMlx,
            E::UnsupportedQuantization { .. } => ErrorCode::UnsupportedQuantization,
            E::Shape { .. } => ErrorCode::EngineShape,
            E::MissingConfig { .. } | E::MissingWeights { .. } | E::MissingTokenizer { .. } => {
                ErrorCode::ModelIncomplete
            }
            E::Io { .. } => ErrorCode::Io,
            E::InvalidConfig { .. } => ErrorCode::ModelConfig,
            E::Format { source, .. } | E::Weights { source, .. } => source.code(),
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
            // The local server loaded another model before the turn ran.
            E::ModelChanged => ErrorCode::ModelChanged,
            E::Panicked { .. } | E::EngineStopped => ErrorCode::EngineInternal,
            E::MemoryNotReturned { .. } => ErrorCode::MemoryNotReturned,
            E::BenchCancelled => ErrorCode::BenchCancelled,
            E::BenchContext { .. } => ErrorCode::ContextOverflow,
            E::Peer { .. } => ErrorCode::PeerUnreachable,
            E::PeerRefused { .. } | E::BadPlacement { .. } | E::PairingCode | E::PeerNotTrusted { .. } => {
                ErrorCode::PeerRefused
            }
            E::PeerRingTimeout { .. } => ErrorCode::PeerUnreachable,
            E::PeerLost { .. } => ErrorCode::PeerLost,
            E::PeerUnsupported { .. } => ErrorCode::PeerUnsupported,
            E::DraftModel { .. } => ErrorCode::DraftModel,
            // A grammar that failed mid-run is the engine's fault; one refused up front, the request's.
            E::Grammar(headroom_engine::grammar::GrammarError::Runtime { .. }) => ErrorCode::EngineInternal,
            E::Grammar(_) => ErrorCode::InvalidSetting,
        }
    }
}

/// A model file that cannot be used, by what is wrong with it (shared by
/// loads from disk and pull checks over the network).
impl Coded for headroom_core::format::FormatError {
    fn code(&self) -> ErrorCode {
        use headroom_core::format::FormatError as F;
        match self {
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
}

impl Coded for headroom_store::StoreError {
    fn code(&self) -> ErrorCode {
        use headroom_store::StoreError as E;
        match self {
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
        }
    }
}

impl Coded for headroom_core::router::RouteError {
    fn code(&self) -> ErrorCode {
        use headroom_core::router::RouteError as E;
        match self {
            E::NoLocalModel { .. } => ErrorCode::RouteNoLocalModel,
            E::NoCloudProvider => ErrorCode::RouteNoCloud,
        }
    }
}

/// The same strings as `CloudError::code` (which the CLI prints), as [`ErrorCode`]s.
impl Coded for headroom_cloud::CloudError {
    fn code(&self) -> ErrorCode {
        use headroom_cloud::CloudError as E;
        match self {
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
}

impl Coded for headroom_cloud::KeyError {
    fn code(&self) -> ErrorCode {
        use headroom_cloud::KeyError as E;
        match self {
            E::EmptyKey => ErrorCode::CloudKeyEmpty,
            E::InvalidUrl(_) => ErrorCode::CloudBadUrl,
            E::EnvKeyWithoutUrl { .. } => ErrorCode::CloudKeyEnv,
            E::File { .. } | E::CorruptFile { .. } | E::Keychain(_) => ErrorCode::CloudKeyStore,
        }
    }

    fn message(&self) -> String {
        format!("The API key could not be used: {self}")
    }
}

/// A sentence for the user from an error's lower-case description.
pub fn capitalized(s: &str) -> String {
    let mut out = upper_first(s);
    if !out.ends_with('.') {
        out.push('.');
    }
    out
}

/// `s` with its first letter upper-cased: an error's lower-case
/// description as the start of a sentence.
pub fn upper_first(s: &str) -> String {
    let mut chars = s.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

impl Coded for headroom_engine::demo::DemoError {
    fn code(&self) -> ErrorCode {
        ErrorCode::DemoModel
    }

    fn message(&self) -> String {
        format!("The demo model could not be written: {self}")
    }
}

impl Coded for headroom_hub::HubError {
    fn code(&self) -> ErrorCode {
        use headroom_hub::HubError as E;
        match self {
            E::InvalidRepoId { .. }
            | E::InvalidRevision { .. }
            | E::InvalidEndpoint { .. }
            | E::PlainHttpEndpoint { .. } => ErrorCode::InvalidSetting,
            E::RepoNotFound { .. } | E::RevisionNotFound { .. } | E::FileNotFound { .. } => ErrorCode::RepoNotFound,
            E::Http { .. } | E::Status { .. } | E::TransferFailed { .. } => ErrorCode::HubUnreachable,
            E::Protocol { .. } => ErrorCode::HubProtocol,
            E::NoWeights { .. } | E::NoConfig { .. } => ErrorCode::UnsupportedModel,
            E::Format { source, .. } => source.code(),
            E::MissingShard { .. } => ErrorCode::ModelIncomplete,
            E::CacheName { .. } => ErrorCode::HubProtocol,
            E::HashMismatch { .. } | E::BlobIdMismatch { .. } | E::SizeMismatch { .. } => ErrorCode::DownloadCorrupt,
            E::Io { .. } => ErrorCode::Io,
            E::Cancelled { .. } => ErrorCode::PullCancelled,
            E::Gated { .. } | E::TokenRefused { .. } | E::TokenFile { .. } | E::InvalidToken { .. } => {
                ErrorCode::HubAuth
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let (code, message) = (Coded::code(&e), e.to_string());
            assert_eq!(code.as_str(), e.code(), "{message}");
            assert_eq!(e.message(), message);
        }
    }
}
