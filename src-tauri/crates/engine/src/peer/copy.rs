//! Which model a placement names, and how a lender tells that its own copy
//! holds the host's weights. Two Macs each read their layers from their own
//! files, so the host says where its copy came from (a hub repo and commit,
//! when its files are a Hugging Face cache snapshot) and what it is (an
//! identity over the layout and the weight bytes); the lender looks for a
//! copy with the same identity among its own, and pulls a missing one from
//! the hub through the fit-checked pull (`headroom lend`).
//!
//! The identity reads the layout in full (config, tokenizer, every tensor's
//! name, dtype, shape and offsets, each file's length: the layout half of
//! the saved states' fingerprint) and the weight bytes in samples: 16
//! windows of 64 KiB spread evenly over each weight file. A fine-tune or a
//! re-quantization changes every tensor, so any window differs; reading
//! 1 MiB a file keeps a placement's check under a second on an 18 GB model,
//! where hashing every byte would take a minute on each Mac.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use headroom_core::format::hf_cache::RepoFolder;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{EngineError, Result};
use crate::prompt_cache::disk::model_fingerprint;
use crate::quant::QuantKernel;
use crate::weights::{weight_files, ComputeDtype};

/// Windows read from each weight file, and their size.
const SAMPLES: u64 = 16;
const WINDOW: u64 = 64 << 10;

/// The model a placement names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCopy {
    /// The host's copy: a lender with a copy at the same path (one machine,
    /// or the same layout of folders) looks there first.
    pub path: PathBuf,
    /// The hub repo (`org/name`) the host's copy is a snapshot of, if it is one.
    #[serde(default)]
    pub repo: Option<String>,
    /// The hub commit of that snapshot.
    #[serde(default)]
    pub commit: Option<String>,
    /// [`identity`] of the host's copy: the lender runs only a copy with the same.
    pub identity: String,
}

impl ModelCopy {
    /// The copy at `path` (a model folder or a GGUF file), named for a lender.
    pub fn of(path: &Path) -> Result<Self> {
        let (repo, commit) = hub_origin(path).map_or((None, None), |(r, c)| (Some(r), Some(c)));
        Ok(Self { path: path.to_owned(), repo, commit, identity: identity(path)? })
    }

    /// The file's name inside a snapshot, for a GGUF copy (the model is one
    /// file of the repo); `None` for a folder.
    pub fn file_in_snapshot(&self) -> Option<&str> {
        let name = self.path.file_name()?.to_str()?;
        Path::new(name)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case(crate::source::GGUF_EXTENSION))
            .then_some(name)
    }

    /// Where the model sits in the hub cache `root` at this copy's commit
    /// (whether or not it is there).
    pub fn in_hub_cache(&self, root: &Path) -> Option<PathBuf> {
        let (repo, commit) = (self.repo.as_deref()?, self.commit.as_deref()?);
        let snapshot = RepoFolder::for_id(root, repo)?.snapshot(commit).ok()?;
        Some(match self.file_in_snapshot() {
            Some(file) => snapshot.join(file),
            None => snapshot,
        })
    }
}

/// A model's identity: its layout in full and its weight bytes in samples
/// (the module's docs say why samples).
pub fn identity(path: &Path) -> Result<String> {
    let mut hasher = Sha256::new();
    // Dtype and kernel are fixed: the identity is of the files, not of how they load.
    hasher.update(model_fingerprint(path, ComputeDtype::Native, QuantKernel::Fused)?.as_bytes());
    let mut window = vec![0u8; usize::try_from(WINDOW).unwrap_or(0)];
    for file in weight_files(path)? {
        let io = |source| EngineError::Io { path: file.clone(), source };
        let mut f = std::fs::File::open(&file).map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        hasher.update(len.to_le_bytes());
        let last = len.saturating_sub(WINDOW);
        for i in 0..SAMPLES {
            f.seek(SeekFrom::Start(last * i / (SAMPLES - 1))).map_err(io)?;
            let n = usize::try_from(WINDOW.min(len)).unwrap_or(0);
            f.read_exact(&mut window[..n]).map_err(io)?;
            hasher.update(&window[..n]);
        }
    }
    Ok(hasher.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect())
}

/// The repo and commit of a hub-cache snapshot path
/// (`…/models--org--name/snapshots/<commit>`, or a file in one).
fn hub_origin(path: &Path) -> Option<(String, String)> {
    let snapshot = if path.is_file() { path.parent()? } else { path };
    let commit = snapshot.file_name()?.to_str()?;
    let snapshots = snapshot.parent()?;
    if snapshots.file_name()? != "snapshots" || commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let repo = RepoFolder::repo_id(snapshots.parent()?.file_name()?.to_str()?)?;
    Some((repo, commit.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};

    #[test]
    fn the_identity_follows_the_weight_bytes_and_not_the_path() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four);
        let (a, b, c) = (tmp.path().join("a"), tmp.path().join("b"), tmp.path().join("c"));
        write_demo_model(&a, &spec).unwrap();
        write_demo_model(&b, &spec).unwrap();
        write_demo_model(&c, &DemoSpec { seed: spec.seed + 1, ..spec.clone() }).unwrap();
        let id = identity(&a).unwrap();
        assert_eq!(id.len(), 32);
        assert_eq!(identity(&b).unwrap(), id, "the same weights elsewhere");
        assert_ne!(identity(&c).unwrap(), id, "the same layout, other weights");
    }

    #[test]
    fn a_hub_snapshot_names_its_repo_and_commit_and_a_folder_names_none() {
        let tmp = tempfile::tempdir().unwrap();
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let snapshot = tmp.path().join("models--org--Tiny-4bit/snapshots").join(commit);
        write_demo_model(&snapshot, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).unwrap();
        let copy = ModelCopy::of(&snapshot).unwrap();
        assert_eq!((copy.repo.as_deref(), copy.commit.as_deref()), (Some("org/Tiny-4bit"), Some(commit)));
        assert_eq!(
            copy.in_hub_cache(Path::new("/other/hub")).unwrap(),
            Path::new("/other/hub/models--org--Tiny-4bit/snapshots").join(commit)
        );
        let elsewhere = tmp.path().join("mine");
        write_demo_model(&elsewhere, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).unwrap();
        let copy = ModelCopy::of(&elsewhere).unwrap();
        assert_eq!((copy.in_hub_cache(tmp.path()), copy.repo, copy.commit), (None, None, None));
    }
}
