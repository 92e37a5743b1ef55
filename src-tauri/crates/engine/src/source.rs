//! Where a model's files are: a folder in the mlx-community layout
//! (config.json + safetensors + tokenizer.json), or one GGUF file (given
//! itself, or as the only `.gguf` of a folder without a config.json). Every
//! reader in the engine (config, headers, weights, tokenizer, fingerprint)
//! asks this module first, so the two formats can never be told apart
//! differently in two places.
//!
//! A GGUF file is checked from its header alone by
//! `headroom_core::format::gguf` (the one model-format reader) before MLX
//! opens it: MLX's GGUF reader copies every tensor into memory when it
//! opens the file (it is not lazy like its safetensors reader), and trusts
//! the offsets it is given.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use headroom_core::format::gguf::{read_gguf, GgufFile, GgufModel};
use headroom_core::format::CONFIG_FILE;

use crate::error::{EngineError, Result};

/// The file name ending that marks a GGUF model.
pub const GGUF_EXTENSION: &str = "gguf";

/// A model's files, by format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFiles {
    /// A folder with config.json and safetensors weights.
    Folder(PathBuf),
    /// One GGUF file holding weights, config and tokenizer.
    Gguf(PathBuf),
}

impl ModelFiles {
    /// What `path` names: a `.gguf` file, a folder with config.json, or a
    /// folder whose only model file is one `.gguf`. Anything else is a
    /// folder (so a folder missing its config.json is reported as such).
    pub fn locate(path: &Path) -> Self {
        if path.is_file() && is_gguf(path) {
            return Self::Gguf(path.to_owned());
        }
        if path.is_dir() && !path.join(CONFIG_FILE).exists() {
            if let Some(file) = only_gguf_in(path) {
                return Self::Gguf(file);
            }
        }
        Self::Folder(path.to_owned())
    }

    /// The GGUF file, if this is one.
    pub fn gguf(&self) -> Option<&Path> {
        match self {
            Self::Gguf(f) => Some(f),
            Self::Folder(_) => None,
        }
    }
}

/// Whether `path` ends in `.gguf` (any case).
pub fn is_gguf(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case(GGUF_EXTENSION))
}

/// The one `.gguf` file in `dir`, if there is exactly one.
fn only_gguf_in(dir: &Path) -> Option<PathBuf> {
    let mut found =
        std::fs::read_dir(dir).ok()?.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| is_gguf(p) && p.is_file());
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// The checked header of a GGUF file: metadata and tensor table, no tensor data.
pub(crate) fn read_gguf_header(file: &Path) -> Result<GgufFile> {
    let io = |source| EngineError::Io { path: file.to_owned(), source };
    let f = File::open(file).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    read_gguf(&mut BufReader::new(f), len).map_err(|source| EngineError::Weights { file: file.to_owned(), source })
}

/// The model a GGUF file describes (config, tensors under Hugging Face
/// names as MLX holds them), with every tensor type checked loadable.
pub(crate) fn read_gguf_model(file: &Path) -> Result<(GgufFile, GgufModel)> {
    let header = read_gguf_header(file)?;
    let model = header.model().map_err(|source| EngineError::Weights { file: file.to_owned(), source })?;
    Ok((header, model))
}
