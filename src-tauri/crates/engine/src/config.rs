//! A model's config, read from disk: a folder's `config.json` or a GGUF file's metadata. What it means is
//! `headroom_core::format` (one reader for the engine, the hub and the app);
//! this only turns a missing or unreadable file into the engine's errors.

use std::path::Path;

use headroom_core::format::{ModelConfig, CONFIG_FILE};

use crate::error::{EngineError, Result};
use crate::source::{read_gguf_model, ModelFiles};

/// Reads and checks `<dir>/config.json`, or the config a GGUF model's
/// metadata gives (`dir` may be the `.gguf` file itself).
pub(crate) fn read_config(dir: &Path) -> Result<ModelConfig> {
    if let ModelFiles::Gguf(file) = ModelFiles::locate(dir) {
        return read_gguf_model(&file).map(|(_, model)| model.config);
    }
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
