//! Writing the standard Hugging Face cache, whose layout (and the checks on
//! every name that goes into a path) is `headroom_core::format::hf_cache`,
//! the same module the model list reads it with.
//!
//! A blob is downloaded as `blobs/<etag>.incomplete` (resumed from its
//! length) and renamed only once verified; snapshot links and the ref are
//! written only after every file of the pull is verified, so a cancelled or
//! failed pull never makes a half model visible to the model list.

use std::path::{Path, PathBuf};

use headroom_core::format::hf_cache::RepoFolder;
use headroom_core::format::FormatError;

use crate::error::{io, HubError, Result};
use crate::repo::RepoId;

/// One repo's folder inside a hub cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoCache {
    repo: String,
    folder: RepoFolder,
}

impl RepoCache {
    /// The folder of `repo` under the hub cache `root` (e.g. `~/.cache/huggingface/hub`).
    pub fn new(root: &Path, repo: &RepoId) -> Self {
        Self { repo: repo.to_string(), folder: RepoFolder::new(root, repo.org(), repo.name()) }
    }

    pub fn dir(&self) -> &Path {
        self.folder.dir()
    }

    fn name(&self) -> impl FnOnce(FormatError) -> HubError + '_ {
        |source| HubError::CacheName { repo: self.repo.clone(), source: Box::new(source) }
    }

    pub fn blob(&self, etag: &str) -> Result<PathBuf> {
        self.folder.blob(etag).map_err(self.name())
    }

    pub fn incomplete(&self, etag: &str) -> Result<PathBuf> {
        self.folder.incomplete(etag).map_err(self.name())
    }

    pub fn snapshot(&self, commit: &str) -> Result<PathBuf> {
        self.folder.snapshot(commit).map_err(self.name())
    }

    /// Creates `blobs/` (and the repo folder).
    pub fn create_blobs_dir(&self) -> Result<()> {
        let blobs = self.folder.blobs_dir();
        std::fs::create_dir_all(&blobs).map_err(io(blobs))
    }

    /// `snapshots/<commit>/<file>` as a relative link to its blob (replacing
    /// an older one), like huggingface_hub; a copy where links are not possible.
    pub fn link(&self, commit: &str, file: &str, etag: &str) -> Result<PathBuf> {
        let relative = RepoFolder::link_target(file, etag).map_err(self.name())?;
        let target = self.snapshot(commit)?.join(file);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        match std::fs::symlink_metadata(&target) {
            Ok(_) => std::fs::remove_file(&target).map_err(io(&target))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&target)(e)),
        }
        #[cfg(unix)]
        std::os::unix::fs::symlink(&relative, &target).map_err(io(&target))?;
        #[cfg(not(unix))]
        std::fs::copy(self.blob(etag)?, &target).map(drop).map_err(io(&target))?;
        Ok(target)
    }

    /// Points `refs/<revision>` at `commit`, atomically (write, then rename).
    pub fn write_ref(&self, revision: &str, commit: &str) -> Result<()> {
        let dest = self.folder.ref_file(revision).map_err(self.name())?;
        // The commit must read back as a snapshot name.
        self.snapshot(commit)?;
        let refs = self.folder.refs_dir();
        std::fs::create_dir_all(&refs).map_err(io(&refs))?;
        let tmp = refs.join(format!(".{revision}.tmp"));
        std::fs::write(&tmp, commit).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &dest).map_err(io(dest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_point_from_the_snapshot_into_blobs_at_any_depth() {
        let root = headroom_test_support::scratch("hub-cache");
        let repo = RepoId::parse("org/m").unwrap();
        let cache = RepoCache::new(&root, &repo);
        cache.create_blobs_dir().unwrap();
        let blob = |e| cache.blob(e).unwrap();
        std::fs::write(blob("e1"), b"top").unwrap();
        std::fs::write(blob("e2"), b"nested").unwrap();
        let top = cache.link("c0ffee", "config.json", "e1").unwrap();
        let nested = cache.link("c0ffee", "sub/dir/x.txt", "e2").unwrap();
        // Linking again replaces the link.
        cache.link("c0ffee", "config.json", "e1").unwrap();
        assert_eq!(std::fs::read(top).ok().as_deref(), Some(&b"top"[..]));
        assert_eq!(std::fs::read(nested).ok().as_deref(), Some(&b"nested"[..]));
        #[cfg(unix)]
        assert_eq!(
            std::fs::read_link(root.join("models--org--m/snapshots/c0ffee/sub/dir/x.txt")).ok(),
            Some(PathBuf::from("../../../../blobs/e2"))
        );
        cache.write_ref("main", "c0ffee").unwrap();
        assert_eq!(std::fs::read_to_string(root.join("models--org--m/refs/main")).ok().as_deref(), Some("c0ffee"));
        // A hostile commit or etag from a server never becomes a path outside the repo.
        assert!(matches!(cache.link("../../x", "config.json", "e1"), Err(HubError::CacheName { .. })));
        assert!(matches!(cache.link("c0ffee", "config.json", "../e1"), Err(HubError::CacheName { .. })));
        assert!(matches!(cache.write_ref("main", "../../etc"), Err(HubError::CacheName { .. })));
    }
}
