//! A model folder's `config.json`, read from disk. What it means is
//! `headroom_core::format` (one reader for the engine, the hub and the app);
//! this only turns a missing or unreadable file into the engine's errors.

use std::path::Path;

use headroom_core::format::{ModelConfig, CONFIG_FILE};

use crate::error::{EngineError, Result};

/// Reads and checks `<dir>/config.json`.
pub(crate) fn read_config(dir: &Path) -> Result<ModelConfig> {
    let path = dir.join(CONFIG_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(EngineError::MissingConfig { dir: dir.to_owned() })
        }
        Err(source) => return Err(EngineError::Io { path, source }),
    };
    ModelConfig::parse(&bytes).map_err(|source| EngineError::Format { path, source })
}
