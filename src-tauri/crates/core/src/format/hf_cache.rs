//! The standard Hugging Face cache layout, as huggingface_hub reads and
//! writes it, so other tools (mlx-lm, transformers) share the same files:
//!
//! ```text
//! <hub>/models--<org>--<name>/
//!     blobs/<etag>                        file contents (<etag>.incomplete while downloading)
//!     snapshots/<commit>/<path>           -> ../../blobs/<etag> (one ../ more per folder in <path>)
//!     refs/<revision>                     the commit <revision> points at
//! ```
//!
//! The paths only: the hub crate writes them, the model list reads them.
//! Every name that comes from a file (a ref's commit) or the network (an
//! etag) is checked here before it becomes part of a path.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::error::{FormatError, Result};

/// The environment variables that place the cache, in huggingface_hub's
/// order of precedence; read once so tests can give their own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HubEnv {
    pub hf_hub_cache: Option<OsString>,
    pub hf_home: Option<OsString>,
    pub xdg_cache_home: Option<OsString>,
    pub home: Option<OsString>,
}

impl HubEnv {
    /// This process's variables (empty ones count as unset).
    pub fn from_process() -> Self {
        let get = |k| std::env::var_os(k).filter(|v| !v.is_empty());
        Self {
            hf_hub_cache: get("HF_HUB_CACHE"),
            hf_home: get("HF_HOME"),
            xdg_cache_home: get("XDG_CACHE_HOME"),
            home: get("HOME"),
        }
    }

    /// Where the hub cache may be, first = where huggingface_hub writes.
    pub fn hub_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if let Some(p) = &self.hf_hub_cache {
            dirs.push(PathBuf::from(p));
        }
        if let Some(p) = &self.hf_home {
            dirs.push(Path::new(p).join("hub"));
        }
        if let Some(p) = &self.xdg_cache_home {
            dirs.push(Path::new(p).join("huggingface").join("hub"));
        }
        if let Some(p) = &self.home {
            dirs.push(Path::new(p).join(".cache").join("huggingface").join("hub"));
        }
        dirs.dedup();
        dirs
    }
}

/// The revision every listing and offline lookup resolves.
pub const MAIN: &str = "main";

/// A name that may be one path segment: not empty, no separator, no `..`.
fn is_segment(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0'])
}

/// One repo's folder inside a hub cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFolder {
    dir: PathBuf,
}

impl RepoFolder {
    /// `models--org--name` for the repo `org/name`.
    pub fn folder_name(org: &str, name: &str) -> String {
        format!("models--{org}--{name}")
    }

    /// The repo id (`org/name`) a folder name stands for; `None` if it is not a model repo folder.
    pub fn repo_id(folder_name: &str) -> Option<String> {
        let (org, name) = folder_name.strip_prefix("models--")?.split_once("--")?;
        (is_segment(org) && is_segment(name)).then(|| format!("{org}/{name}"))
    }

    /// The folder of `org/name` under the hub cache `root`.
    pub fn new(root: &Path, org: &str, name: &str) -> Self {
        Self { dir: root.join(Self::folder_name(org, name)) }
    }

    /// The folder of repo id `org/name` under `root`; `None` if `id` is not `org/name`.
    pub fn for_id(root: &Path, id: &str) -> Option<Self> {
        let (org, name) = id.split_once('/')?;
        (is_segment(org) && is_segment(name)).then(|| Self::new(root, org, name))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn blobs_dir(&self) -> PathBuf {
        self.dir.join("blobs")
    }

    pub fn blob(&self, etag: &str) -> Result<PathBuf> {
        check_name(etag, "etag")?;
        Ok(self.blobs_dir().join(etag))
    }

    pub fn incomplete(&self, etag: &str) -> Result<PathBuf> {
        check_name(etag, "etag")?;
        Ok(self.blobs_dir().join(format!("{etag}.incomplete")))
    }

    pub fn snapshot(&self, commit: &str) -> Result<PathBuf> {
        check_name(commit, "commit")?;
        Ok(self.dir.join("snapshots").join(commit))
    }

    pub fn refs_dir(&self) -> PathBuf {
        self.dir.join("refs")
    }

    pub fn ref_file(&self, revision: &str) -> Result<PathBuf> {
        check_name(revision, "revision")?;
        Ok(self.refs_dir().join(revision))
    }

    /// The snapshot a ref file's text names (huggingface_hub writes the bare
    /// commit; a trailing newline is tolerated, anything path-like is not).
    pub fn snapshot_for_ref(&self, ref_text: &str) -> Result<PathBuf> {
        self.snapshot(ref_text.trim())
    }

    /// What `snapshots/<commit>/<file>` links to: the blob, relative to the link.
    pub fn link_target(file: &str, etag: &str) -> Result<PathBuf> {
        check_name(etag, "etag")?;
        if !file.split('/').all(is_segment) {
            return Err(FormatError::Cache { reason: format!("{file:?} is not a relative file path") });
        }
        let depth = file.split('/').count() - 1;
        Ok(PathBuf::from(format!("{}../../blobs/{etag}", "../".repeat(depth))))
    }
}

fn check_name(s: &str, what: &str) -> Result<()> {
    if is_segment(s) && s.len() <= 256 && !s.starts_with('.') {
        Ok(())
    } else {
        Err(FormatError::Cache { reason: format!("the {what} {s:?} cannot name a file in the cache") })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways_and_hostile_ones_are_refused() {
        assert_eq!(RepoFolder::folder_name("mlx-community", "Qwen2.5-7B"), "models--mlx-community--Qwen2.5-7B");
        assert_eq!(
            RepoFolder::repo_id("models--mlx-community--Qwen2.5-7B").as_deref(),
            Some("mlx-community/Qwen2.5-7B")
        );
        for bad in ["datasets--a--b", "models--a", "models----b", "models--a--"] {
            assert_eq!(RepoFolder::repo_id(bad), None, "{bad}");
        }
        let repo = RepoFolder::for_id(Path::new("/hub"), "org/m").expect("id");
        assert_eq!(repo.dir(), Path::new("/hub/models--org--m"));
        assert!(RepoFolder::for_id(Path::new("/hub"), "org/../x").is_none());
        assert_eq!(repo.snapshot_for_ref("abc123\n").ok(), Some(PathBuf::from("/hub/models--org--m/snapshots/abc123")));
        for hostile in ["../../../etc", "a/b", "", "..", ".hidden"] {
            assert!(repo.snapshot_for_ref(hostile).is_err(), "{hostile:?}");
        }
        assert_eq!(RepoFolder::link_target("sub/dir/x.txt", "e2").ok(), Some(PathBuf::from("../../../../blobs/e2")));
        assert_eq!(RepoFolder::link_target("config.json", "e1").ok(), Some(PathBuf::from("../../blobs/e1")));
        assert!(RepoFolder::link_target("../x", "e").is_err() && RepoFolder::link_target("x", "../e").is_err());
    }

    #[test]
    fn hub_dirs_follow_huggingface_hub_s_precedence() {
        let env = HubEnv {
            hf_hub_cache: Some("/a".into()),
            hf_home: Some("/b".into()),
            xdg_cache_home: Some("/c".into()),
            home: Some("/d".into()),
        };
        assert_eq!(
            env.hub_dirs(),
            ["/a", "/b/hub", "/c/huggingface/hub", "/d/.cache/huggingface/hub"].map(PathBuf::from)
        );
        assert!(HubEnv::default().hub_dirs().is_empty());
    }
}
