//! What the store can fail with; each variant says which file, row or value.

use std::path::PathBuf;

use headroom_core::settings::SettingsError;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the data folder {path}: {source}")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot open the database {path}: {source}")]
    Open { path: PathBuf, source: sqlx::Error },
    #[error("cannot lock {path} to open the database: {source}")]
    Lock { path: PathBuf, source: std::io::Error },
    #[error("cannot bring the database {path} up to date: {source}")]
    Migrate { path: PathBuf, source: sqlx::migrate::MigrateError },
    /// A statement failed; `what` says which (e.g. "insert message").
    #[error("database error while trying to {what}: {source}")]
    Query { what: &'static str, source: sqlx::Error },
    #[error("no session `{0}`")]
    SessionNotFound(String),
    #[error("no message with id {0}")]
    MessageNotFound(i64),
    /// A regenerate found the session changed since it began (another turn
    /// was added or the last one deleted); nothing was changed.
    #[error("the chat `{session}` changed while its last answer was being regenerated; nothing was replaced")]
    TurnChanged { session: String },
    #[error("a session id must be 1 to 200 characters, got {0:?}")]
    InvalidSessionId(String),
    #[error("a session title cannot be empty")]
    EmptyTitle,
    /// A row holds a value this version cannot read (edited by hand, or a newer app).
    #[error("the database holds `{value}` in {column}, which this version cannot read")]
    Corrupt { column: &'static str, value: String },
    #[error("invalid settings: {0}")]
    Settings(#[from] SettingsError),
    #[error("the stored settings cannot be read ({0}); set them again to replace them")]
    StoredSettings(serde_json::Error),
    #[error("not a Headroom session export: {0}")]
    ImportFormat(String),
    #[error("cannot encode or decode JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Names the statement a sqlx error came from.
pub(crate) trait Context<T> {
    fn ctx(self, what: &'static str) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, sqlx::Error> {
    fn ctx(self, what: &'static str) -> Result<T> {
        self.map_err(|source| StoreError::Query { what, source })
    }
}
