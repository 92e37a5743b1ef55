//! The one shape errors take on their way to the UI.

use serde::Serialize;

/// What a command returns on failure: a stable `code` the UI can switch on,
/// a sentence for the user, and optional structured details (numbers, paths).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandError {
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl CommandError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), details: None }
    }
}

impl From<headroom_engine::EngineError> for CommandError {
    fn from(e: headroom_engine::EngineError) -> Self {
        use headroom_engine::EngineError as E;
        let code = match &e {
            E::Mlx { .. } => "ENGINE_MLX",
            E::UnsupportedQuantization { .. } => "UNSUPPORTED_QUANTIZATION",
            E::Shape { .. } => "ENGINE_SHAPE",
            E::MissingConfig { .. } | E::MissingWeights { .. } | E::MissingTokenizer { .. } => "MODEL_INCOMPLETE",
            E::Io { .. } => "IO",
            E::InvalidConfig { .. } => "MODEL_CONFIG",
            E::Format { source, .. } | E::Weights { source, .. } => format_code(source),
            E::MissingShard { .. } => "MODEL_INCOMPLETE",
            // Both say the ids and the embedding do not belong together (the
            // second is refused per prompt, the first at load).
            E::VocabMismatch { .. } | E::TokenOutOfVocab { .. } => "MODEL_TOKENIZER",
            E::NothingLoaded { .. } => "NOTHING_LOADED",
            E::CorruptWeights { .. }
            | E::MissingTensor { .. }
            | E::UnexpectedTensor { .. }
            | E::DuplicateTensor { .. }
            | E::WrongShape { .. }
            | E::WrongDtype { .. } => "MODEL_WEIGHTS",
            E::InvalidSetting { .. } | E::KvFormat { .. } => "INVALID_SETTING",
            E::EmptyPrompt => "EMPTY_PROMPT",
            E::Tokenizer { .. } => "TOKENIZER",
            E::NoChatTemplate { .. } => "NO_CHAT_TEMPLATE",
            E::TemplateRender { .. } => "CHAT_TEMPLATE",
            E::ContextOverflow { .. } => "CONTEXT_OVERFLOW",
            E::NoModelLoaded => "NO_MODEL_LOADED",
            E::Panicked { .. } | E::EngineStopped => "ENGINE_INTERNAL",
            E::MemoryNotReturned { .. } => "MEMORY_NOT_RETURNED",
            E::BenchCancelled => "BENCH_CANCELLED",
            E::BenchContext { .. } => "CONTEXT_OVERFLOW",
        };
        Self::new(code, e.to_string())
    }
}

/// The code of a model file that cannot be used, by what is wrong with it
/// (shared by loads from disk and pull checks over the network).
pub(crate) fn format_code(e: &headroom_core::format::FormatError) -> &'static str {
    use headroom_core::format::FormatError as F;
    match e {
        F::UnknownModelType { .. } | F::UnsupportedGgufArchitecture { .. } => "UNSUPPORTED_ARCHITECTURE",
        F::UnsupportedGgufType { .. } => "UNSUPPORTED_MODEL_FEATURE",
        F::Gguf { .. } | F::GgufTensor { .. } | F::GgufTokenizer { .. } => "MODEL_WEIGHTS",
        F::UnsupportedQuantMode { .. } | F::UnsupportedRopeScaling { .. } | F::UnsupportedLayerType { .. } => {
            "UNSUPPORTED_MODEL_FEATURE"
        }
        F::Header { .. } | F::Tensor { .. } | F::Index { .. } => "MODEL_WEIGHTS",
        F::Cache { .. } => "MODEL_INCOMPLETE",
        F::Json { .. } | F::MissingField { .. } | F::BadField { .. } => "MODEL_CONFIG",
    }
}

impl From<headroom_store::StoreError> for CommandError {
    fn from(e: headroom_store::StoreError) -> Self {
        use headroom_store::StoreError as E;
        let code = match &e {
            E::SessionNotFound(_) => "SESSION_NOT_FOUND",
            E::MessageNotFound(_) => "MESSAGE_NOT_FOUND",
            E::TurnChanged { .. } => "CHAT_CHANGED",
            E::InvalidSessionId(_) | E::EmptyTitle => "INVALID_INPUT",
            E::Settings(_) => "INVALID_SETTING",
            E::ImportFormat(_) => "IMPORT_FORMAT",
            E::StoredSettings(_) | E::Corrupt { .. } => "DATABASE_CORRUPT",
            E::CreateDir { .. }
            | E::Lock { .. }
            | E::Open { .. }
            | E::Migrate { .. }
            | E::Query { .. }
            | E::Json(_) => "DATABASE",
        };
        Self::new(code, e.to_string())
    }
}

impl From<headroom_core::router::RouteError> for CommandError {
    fn from(e: headroom_core::router::RouteError) -> Self {
        use headroom_core::router::RouteError as E;
        let code = match &e {
            E::NoLocalModel { .. } => "ROUTE_NO_LOCAL_MODEL",
            E::NoCloudProvider => "ROUTE_NO_CLOUD",
        };
        Self::new(code, e.to_string())
    }
}

impl From<headroom_cloud::CloudError> for CommandError {
    fn from(e: headroom_cloud::CloudError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<headroom_cloud::KeyError> for CommandError {
    fn from(e: headroom_cloud::KeyError) -> Self {
        use headroom_cloud::KeyError as E;
        let code = match &e {
            E::EmptyKey => "CLOUD_KEY_EMPTY",
            E::InvalidUrl(_) => "CLOUD_BAD_URL",
            E::EnvKeyWithoutUrl { .. } => "CLOUD_KEY_ENV",
            E::File { .. } | E::CorruptFile { .. } | E::Keychain(_) => "CLOUD_KEY_STORE",
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
            E::EmptyMessage => return Self::new("EMPTY_MESSAGE", "Type a message first."),
            E::NoModelLoaded => {
                return Self::new("NO_MODEL_LOADED", "No model is loaded yet. Pick one from the list at the top.")
            }
            E::NothingToRegenerate => "NOTHING_TO_REGENERATE",
            E::MaxTokens(_) => "INVALID_SETTING",
            E::NoCloudProvider => {
                return Self::new("ROUTE_NO_CLOUD", "No cloud provider is set up: add one in Settings.")
            }
            E::NoCloudModel => {
                return Self::new(
                    "CLOUD_NO_MODEL",
                    "No cloud model is set: choose one in Settings, next to the cloud URL.",
                )
            }
            E::Blocked(_) => "PRIVACY_BLOCKED",
            E::WouldSwap { .. } => "TURN_WOULD_SWAP",
            E::Memory(_) => "MEMORY",
            E::Thread(_) => "ENGINE_INTERNAL",
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
        Self::new("WINDOW", format!("The window could not be changed: {e}"))
    }
}

impl From<crate::models::ModelsError> for CommandError {
    fn from(e: crate::models::ModelsError) -> Self {
        use crate::models::ModelsError as E;
        let code = match &e {
            E::NotFound { .. } => "MODEL_NOT_FOUND",
            E::BrokenCacheEntry { .. } => "MODEL_INCOMPLETE",
        };
        Self::new(code, e.to_string())
    }
}

impl From<headroom_engine::demo::DemoError> for CommandError {
    fn from(e: headroom_engine::demo::DemoError) -> Self {
        Self::new("DEMO_MODEL", format!("The demo model could not be written: {e}"))
    }
}

impl From<crate::desktop::DesktopError> for CommandError {
    fn from(e: crate::desktop::DesktopError) -> Self {
        use crate::desktop::DesktopError as E;
        let code = match &e {
            E::InvalidShortcut { .. } => "INVALID_SETTING",
            E::ShortcutTaken { .. } => "SHORTCUT_TAKEN",
            E::ShortcutFailed { .. } => "SHORTCUT_FAILED",
            E::LaunchAtLogin { .. } => "LAUNCH_AT_LOGIN",
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
            E::Record(_) => Self::new("SHELF_RECORD", e.to_string()),
            E::Write { .. } => Self::new("IO", e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_keep_their_sentence_under_a_stable_code() {
        let e = CommandError::from(headroom_engine::EngineError::NoModelLoaded);
        assert_eq!(e.code, "NO_MODEL_LOADED");
        assert!(!e.message.is_empty());
        let v = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(v["code"], "NO_MODEL_LOADED");
        assert!(v.get("details").is_none(), "no null details: {v}");
        let e = CommandError::from(crate::models::ModelsError::NotFound { model: "a/b".into(), searched: vec![] });
        assert_eq!(e.code, "MODEL_NOT_FOUND");
        assert!(e.message.contains("a/b"));
    }
}
