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
        };
        Self::new(code, e.to_string())
    }
}

impl From<tauri::Error> for CommandError {
    fn from(e: tauri::Error) -> Self {
        Self::new("WINDOW", format!("The window could not be changed: {e}"))
    }
}
