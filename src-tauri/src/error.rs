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
            E::UnknownModelType { .. } => "UNSUPPORTED_ARCHITECTURE",
            E::UnsupportedRopeScaling { .. } | E::UnsupportedQuantMode { .. } => "UNSUPPORTED_MODEL_FEATURE",
            E::CorruptWeights { .. }
            | E::MissingTensor { .. }
            | E::UnexpectedTensor { .. }
            | E::DuplicateTensor { .. }
            | E::WrongShape { .. }
            | E::WrongDtype { .. } => "MODEL_WEIGHTS",
            E::InvalidSetting { .. } => "INVALID_SETTING",
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
