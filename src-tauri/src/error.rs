//! The one shape errors take on their way to the UI: every service error
//! is [`Coded`](headroom_app::codes::Coded), and becomes a `CommandError`
//! here, with its code, its sentence and its details.

use headroom_app::codes::Coded;
pub use headroom_app::codes::ErrorCode;
use serde::Serialize;

/// What a command returns on failure: a stable `code` the UI can switch on,
/// a sentence for the user, and optional structured details (numbers, paths).
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct CommandError {
    pub code: ErrorCode,
    /// Paths under the home folder go out as `~/…` (`codes::ui_text`).
    #[serde(with = "headroom_app::codes::ui_text")]
    #[ts(type = "string")]
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

    /// A service error as the UI is told it.
    pub fn coded(e: &impl Coded) -> Self {
        Self { code: e.code(), message: e.message(), details: e.details() }
    }
}

/// `From` for each service error (a blanket impl over `Coded` would
/// collide with the Tauri and desktop errors' own).
macro_rules! from_coded {
    ($($t:ty,)*) => {$(
        impl From<$t> for CommandError {
            fn from(e: $t) -> Self {
                Self::coded(&e)
            }
        }
    )*};
}

from_coded! {
    headroom_engine::EngineError,
    headroom_app::peers::FindError,
    headroom_app::peers::PairError,
    headroom_store::StoreError,
    headroom_core::router::RouteError,
    headroom_cloud::CloudError,
    headroom_cloud::KeyError,
    headroom_app::turn::TurnError,
    headroom_app::models::ModelsError,
    headroom_app::models::LoadError,
    headroom_engine::demo::DemoError,
    headroom_app::shelf::ShelfServiceError,
    headroom_hub::HubError,
    headroom_app::pull::PullError,
    headroom_app::server_key::ServerKeyError,
    headroom_app::tools::ToolsError,
}

impl From<tauri::Error> for CommandError {
    fn from(e: tauri::Error) -> Self {
        Self::new(ErrorCode::Window, format!("The window could not be changed: {e}"))
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
        // A sentence for the UI: capitalised like the other errors.
        Self::new(code, headroom_app::codes::upper_first(&e.to_string()))
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

    #[test]
    fn a_refusal_reaches_the_ui_naming_paths_under_home_from_a_tilde() {
        let home = headroom_core::terminal::home_folder().expect("HOME is set where the tests run");
        let folder = home.join("Library/Application Support/Headroom/models/qwen");
        let e = CommandError::from(headroom_engine::EngineError::MissingConfig { dir: folder.clone() });
        assert!(e.message.contains(&folder.display().to_string()), "the error itself keeps the path: {}", e.message);
        let sent = serde_json::to_value(&e).unwrap_or_default();
        let message = sent["message"].as_str().unwrap_or_default();
        assert!(message.contains("~/Library/Application Support/Headroom/models/qwen"), "{message}");
        assert!(!message.contains(&home.display().to_string()), "{message}");
    }
}
