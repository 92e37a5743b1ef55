//! MODEL on the command line: a model folder, or a Hugging Face repo id
//! found offline in the local HF cache (the lookup itself is the app's,
//! `crate::models`, so the CLI and the picker agree on what exists).

use std::path::{Path, PathBuf};

pub use crate::models::HubEnv;
use crate::models::{resolve_repo, ModelsError};

use super::CliError;

/// MODEL as a folder or GGUF file: itself if it is one, else its snapshot
/// in the HF cache. No MODEL: the default model (`crate::default_model`).
pub fn resolve_model(model: Option<&str>, env: &HubEnv) -> Result<PathBuf, CliError> {
    let Some(model) = model else {
        return crate::default_model::bundled()
            .ok_or_else(|| CliError::NoDefaultModel { expected: crate::default_model::checkout_copy() });
    };
    let as_path = Path::new(model);
    if as_path.is_dir() || (as_path.is_file() && headroom_engine::source::is_gguf(as_path)) {
        return Ok(as_path.to_owned());
    }
    resolve_repo(model, env).map_err(|e| match e {
        ModelsError::NotFound { model, searched } => CliError::ModelNotFound { model, searched },
        ModelsError::BrokenCacheEntry { model, repo_dir, reason } => {
            CliError::BrokenCacheEntry { model, repo_dir, reason }
        }
    })
}

/// What MODEL is called in messages and records: as typed, or the default model's id.
pub fn model_label(model: Option<&str>) -> String {
    model.map_or_else(|| crate::default_model::DEFAULT_MODEL_ID.to_owned(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_wins_and_cache_errors_keep_their_kind() {
        let tmp = headroom_test_support::scratch("hub-cli");
        let root = tmp.to_path_buf();
        let env = HubEnv { hf_hub_cache: Some(root.clone().into()), ..HubEnv::default() };
        assert_eq!(resolve_model(root.to_str(), &env).ok(), Some(root.clone()));

        let err = resolve_model(Some("org/absent"), &env).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("org/absent") && err.contains(&root.display().to_string()), "{err}");
        let err = resolve_model(Some("./no/such/dir"), &env).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("not found"), "{err}");

        let repo = root.join("models--org--broken");
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "aaa\n").unwrap();
        assert!(matches!(resolve_model(Some("org/broken"), &env), Err(CliError::BrokenCacheEntry { .. })));
    }
}
