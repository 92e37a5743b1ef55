//! Names on the hub: repo ids, revisions, file paths inside a repo, and the
//! endpoint, each checked before it goes into a URL or a cache path.

use std::fmt;

use crate::error::{HubError, Result};

/// The public hub, used when neither `--endpoint` nor `HF_ENDPOINT` says otherwise.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// An `org/name` model repo id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepoId {
    org: String,
    name: String,
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 96
        && !s.starts_with(['.', '-'])
        && !s.contains("..")
        && !s.contains("--")
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl RepoId {
    /// Parses `org/name`. `--` is refused because the cache folder
    /// `models--org--name` could not be split back unambiguously.
    pub fn parse(s: &str) -> Result<Self> {
        match s.split_once('/') {
            Some((org, name)) if is_name(org) && is_name(name) => {
                Ok(Self { org: org.to_owned(), name: name.to_owned() })
            }
            _ => Err(HubError::InvalidRepoId { repo: s.to_owned() }),
        }
    }

    pub fn org(&self) -> &str {
        &self.org
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The HF cache's folder name for this repo.
    pub fn cache_folder(&self) -> String {
        headroom_core::format::hf_cache::RepoFolder::folder_name(&self.org, &self.name)
    }
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.org, self.name)
    }
}

/// Checks a branch, tag or commit name; it becomes a file name under `refs/`.
pub fn check_revision(revision: &str) -> Result<()> {
    let ok = !revision.is_empty()
        && revision.len() <= 128
        && !revision.starts_with('.')
        && !revision.contains("..")
        && revision.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(HubError::InvalidRevision { revision: revision.to_owned() })
    }
}

/// Whether a file path the server lists is safe to place under a snapshot
/// folder: relative, no `..`, no empty or hidden-parent tricks.
pub fn is_safe_file_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\\')
        && path.split('/').all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

/// A hub base URL without a trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint(String);

impl Endpoint {
    /// An https:// URL, or http:// on this machine's loopback (a local
    /// mirror, the tests' stub hub); http:// elsewhere is refused.
    pub fn parse(s: &str) -> Result<Self> {
        let trimmed = s.trim().trim_end_matches('/');
        let (rest, plain) = match trimmed.strip_prefix("https://") {
            Some(rest) => (Some(rest), false),
            None => (trimmed.strip_prefix("http://"), true),
        };
        match rest {
            Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => {
                if plain && !is_loopback_authority(host) {
                    return Err(HubError::PlainHttpEndpoint { endpoint: s.to_owned() });
                }
                Ok(Self(trimmed.to_owned()))
            }
            _ => Err(HubError::InvalidEndpoint { endpoint: s.to_owned() }),
        }
    }

    /// `$HF_ENDPOINT` if set (as huggingface_hub reads it), else the public hub.
    pub fn from_env() -> Result<Self> {
        match std::env::var("HF_ENDPOINT") {
            Ok(v) if !v.trim().is_empty() => Self::parse(&v),
            _ => Self::parse(DEFAULT_ENDPOINT),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether the host of `rest` (what follows `scheme://`) is loopback:
/// `localhost`, 127.0.0.0/8 or `[::1]`.
fn is_loopback_authority(rest: &str) -> bool {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // user:password@ is no part of where the bytes go.
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Percent-encodes a repo file path for a URL, keeping its `/` separators.
pub(crate) fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_are_checked_before_they_reach_a_url_or_a_path() {
        let id = RepoId::parse("mlx-community/Qwen2.5-7B-Instruct-4bit").unwrap();
        assert_eq!((id.org(), id.name()), ("mlx-community", "Qwen2.5-7B-Instruct-4bit"));
        assert_eq!(id.cache_folder(), "models--mlx-community--Qwen2.5-7B-Instruct-4bit");
        assert_eq!(id.to_string(), "mlx-community/Qwen2.5-7B-Instruct-4bit");
        for bad in
            ["", "name", "org/", "/name", "a/b/c", "org/../x", "org/na me", "org/a--b", "../etc/passwd", ".hidden/x"]
        {
            let err = RepoId::parse(bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains("is not a Hugging Face repo id"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn revisions_file_paths_and_endpoints_are_checked() {
        assert!(check_revision("main").is_ok() && check_revision("v1.0").is_ok());
        assert!(check_revision("a/b").is_err() && check_revision("..").is_err() && check_revision("").is_err());
        assert!(is_safe_file_path("config.json") && is_safe_file_path("sub/dir/file.txt"));
        for bad in ["", "/etc/passwd", "../x", "a/../b", "a//b", "a\\b", "./a"] {
            assert!(!is_safe_file_path(bad), "{bad}");
        }
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:8080/").map(|e| e.to_string()).ok().as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert!(Endpoint::parse("ftp://x").is_err() && Endpoint::parse("https://").is_err());
        for local in ["http://localhost:8080", "http://127.0.0.1:9", "http://[::1]:80/", "http://127.3.2.1"] {
            assert!(Endpoint::parse(local).is_ok(), "{local}");
        }
        for remote in [
            "http://hf-mirror.example",
            "http://10.0.0.2:8080",
            "http://127.0.0.1.evil.example",
            "http://localhost@evil.example",
        ] {
            assert!(matches!(Endpoint::parse(remote), Err(HubError::PlainHttpEndpoint { .. })), "{remote}");
        }
        assert!(Endpoint::parse("https://hf-mirror.example").is_ok());
        assert_eq!(encode_path("sub dir/a+b.json"), "sub%20dir/a%2Bb.json");
    }
}
