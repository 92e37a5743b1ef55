//! Finding a model given as a Hugging Face repo id in the local HF cache,
//! offline, the way huggingface_hub lays it out:
//! `<hub>/models--org--name/refs/main` names a folder in `snapshots/`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::CliError;

/// The environment variables that place the cache, read once so tests can fake them.
#[derive(Debug, Clone, Default)]
pub struct HubEnv {
    pub hf_hub_cache: Option<OsString>,
    pub hf_home: Option<OsString>,
    pub xdg_cache_home: Option<OsString>,
    pub home: Option<OsString>,
}

impl HubEnv {
    pub fn from_process() -> Self {
        let get = |k| std::env::var_os(k).filter(|v| !v.is_empty());
        Self {
            hf_hub_cache: get("HF_HUB_CACHE"),
            hf_home: get("HF_HOME"),
            xdg_cache_home: get("XDG_CACHE_HOME"),
            home: get("HOME"),
        }
    }

    /// Where the hub cache may be, in huggingface_hub's order of precedence.
    fn hub_dirs(&self) -> Vec<PathBuf> {
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

/// MODEL as a folder: itself if it is one, else its snapshot in the HF cache.
pub fn resolve_model(model: &str, env: &HubEnv) -> Result<PathBuf, CliError> {
    let as_path = Path::new(model);
    if as_path.is_dir() {
        return Ok(as_path.to_owned());
    }
    let searched = env.hub_dirs();
    // A repo id is `org/name`; anything else can only have been a path.
    let Some((org, name)) = model.split_once('/').filter(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
    else {
        return Err(CliError::ModelNotFound { model: model.into(), searched: Vec::new() });
    };
    for hub in &searched {
        let repo_dir = hub.join(format!("models--{org}--{name}"));
        if !repo_dir.is_dir() {
            continue;
        }
        let broken = |reason: String| CliError::BrokenCacheEntry { model: model.into(), repo_dir: repo_dir.clone(), reason };
        let refs = repo_dir.join("refs").join("main");
        let sha = std::fs::read_to_string(&refs).map_err(|e| broken(format!("{}: {e}", refs.display())))?;
        let snapshot = repo_dir.join("snapshots").join(sha.trim());
        if !snapshot.is_dir() {
            return Err(broken(format!("refs/main names {}, which is missing", snapshot.display())));
        }
        return Ok(snapshot);
    }
    Err(CliError::ModelNotFound { model: model.into(), searched })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("headroom-hub-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        dir
    }

    fn cached_repo(hub: &Path, id: &str, sha: &str) -> PathBuf {
        let repo = hub.join(format!("models--{}", id.replace('/', "--")));
        let snap = repo.join("snapshots").join(sha);
        std::fs::create_dir_all(&snap).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(repo.join("refs")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(repo.join("refs/main"), format!("{sha}\n")).unwrap_or_else(|e| panic!("{e}"));
        snap
    }

    #[test]
    fn repo_ids_resolve_through_refs_main_in_precedence_order() {
        let root = scratch("order");
        let home = root.join("home");
        let in_home = cached_repo(&home.join(".cache/huggingface/hub"), "mlx-community/Qwen2.5-7B-Instruct-4bit", "abc123");
        let env = HubEnv { home: Some(home.clone().into()), ..HubEnv::default() };
        let found = resolve_model("mlx-community/Qwen2.5-7B-Instruct-4bit", &env).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(found, in_home);

        // HF_HOME/hub beats ~/.cache, HF_HUB_CACHE beats both.
        let in_hf_home = cached_repo(&root.join("hfhome/hub"), "mlx-community/Qwen2.5-7B-Instruct-4bit", "def456");
        let env = HubEnv { hf_home: Some(root.join("hfhome").into()), ..env };
        assert_eq!(resolve_model("mlx-community/Qwen2.5-7B-Instruct-4bit", &env).ok(), Some(in_hf_home));
        let in_hub_cache = cached_repo(&root.join("hubcache"), "mlx-community/Qwen2.5-7B-Instruct-4bit", "0f0f");
        let env = HubEnv { hf_hub_cache: Some(root.join("hubcache").into()), ..env };
        assert_eq!(resolve_model("mlx-community/Qwen2.5-7B-Instruct-4bit", &env).ok(), Some(in_hub_cache));

        // A folder path wins over everything.
        assert_eq!(resolve_model(root.to_str().unwrap_or_default(), &env).ok(), Some(root.clone()));
    }

    #[test]
    fn unknown_ids_and_broken_entries_are_clear_errors() {
        let root = scratch("missing");
        let env = HubEnv { hf_hub_cache: Some(root.clone().into()), ..HubEnv::default() };
        let err = resolve_model("org/absent", &env).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("org/absent") && err.contains(&root.display().to_string()), "{err}");
        let err = resolve_model("./no/such/dir", &env).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("not found"), "{err}");

        let snap = cached_repo(&root, "org/broken", "aaa");
        std::fs::remove_dir_all(&snap).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(resolve_model("org/broken", &env), Err(CliError::BrokenCacheEntry { .. })));
    }
}
