//! Scratch folders: a new empty folder per call, removed when dropped.

use std::ops::Deref;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// A fresh empty folder under the workspace's `target/test-tmp` (not /tmp:
/// CI machines may mount it small, and `cargo clean` sweeps what a killed
/// test leaves). Each call gets its own folder, so tests running in parallel
/// threads never share one, and the folder goes with the value.
///
/// It derefs to [`Path`], so `dir.join("x")` and `&dir` (as `&Path`) read as
/// they would with a `PathBuf`.
#[derive(Debug)]
pub struct Scratch(TempDir);

impl Scratch {
    /// A new folder named after `tag` (plus a random part), for a test that
    /// failed to leave a trail one can find.
    ///
    /// # Panics
    ///
    /// When the folder cannot be made: a test cannot run without it.
    pub fn new(tag: &str) -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../target/test-tmp");
        std::fs::create_dir_all(&root).expect("target/test-tmp");
        let dir = tempfile::Builder::new()
            .prefix(&format!("{tag}-"))
            .tempdir_in(&root)
            .expect("a scratch folder in target/test-tmp");
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// The folder as an owned path (it is still removed on drop).
    pub fn to_path_buf(&self) -> PathBuf {
        self.0.path().to_path_buf()
    }
}

/// [`Scratch::new`].
pub fn scratch(tag: &str) -> Scratch {
    Scratch::new(tag)
}

impl Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_gets_its_own_empty_folder_and_drop_removes_it() {
        let a = scratch("same");
        let b = scratch("same");
        assert_ne!(a.path(), b.path());
        assert!(a.is_dir() && std::fs::read_dir(&a).unwrap().next().is_none());
        std::fs::write(a.join("file"), "x").unwrap();
        let kept = a.to_path_buf();
        drop(a);
        assert!(!kept.exists(), "{} is still there", kept.display());
        assert!(b.is_dir());
    }
}
