//! The hub's HTTP endpoints this crate calls (see Cargo.toml for why not
//! hf-hub): the revision API, HEAD on resolve URLs for the blob's ETag and
//! size, and ranged GETs for headers and resumed downloads; with the
//! user's token for gated repos, sent to the hub and nowhere else.

use std::time::Duration;

use reqwest::header::{
    HeaderMap, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, ETAG, LOCATION, RANGE,
};
use reqwest::{redirect, RequestBuilder, Response, StatusCode};
use serde::Deserialize;

use crate::error::{HubError, Result};
use crate::repo::{encode_path, is_safe_file_path, Endpoint, RepoId};
use crate::token::HfToken;

/// How long to wait for a connection and for each read before calling the hub unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// config.json and the shard index are small; a bigger answer is not what we asked for.
pub const MAX_SMALL_FILE: u64 = 16 << 20;

/// A commit of a repo and the files in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    /// The commit sha the revision points at (snapshot folder name).
    pub commit: String,
    /// Every file of the commit (`rfilename`), as listed.
    pub files: Vec<String>,
}

/// What HEAD on a resolve URL says about a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    /// The cache's blob name: the LFS sha256 (`X-Linked-Etag`) or the git blob id (`ETag`).
    pub etag: String,
    pub size: u64,
    /// Stored in LFS: then `etag` is the content's sha256 and is checked.
    pub lfs: bool,
}

#[derive(Debug, Deserialize)]
struct RevisionJson {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Debug, Deserialize)]
struct Sibling {
    rfilename: String,
}

/// A client for one hub endpoint.
#[derive(Debug, Clone)]
pub struct HubClient {
    endpoint: Endpoint,
    /// HEAD requests must see the hub's redirect itself: the LFS headers are on it.
    meta: reqwest::Client,
    /// GETs follow redirects (the hub sends LFS bytes from a CDN).
    data: reqwest::Client,
    /// Sent only on requests to `endpoint` (see [`HubClient::authorize`]); its Debug is redacted.
    token: Option<HfToken>,
}

impl HubClient {
    pub fn new(endpoint: Endpoint) -> Result<Self> {
        let build = |policy| {
            reqwest::Client::builder()
                .user_agent(concat!("headroom/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(CONNECT_TIMEOUT)
                .read_timeout(READ_TIMEOUT)
                .redirect(policy)
                .build()
                .map_err(|source| HubError::Http { url: endpoint.to_string(), source })
        };
        Ok(Self {
            meta: build(redirect::Policy::none())?,
            data: build(redirect::Policy::limited(10))?,
            endpoint,
            token: None,
        })
    }

    /// A client with the user's token where huggingface_hub finds it
    /// (`HF_TOKEN`, the file `huggingface-cli login` writes; see
    /// [`HfToken::from_lookup`]), or none: what the CLI and the app pull with.
    pub fn from_env(endpoint: Endpoint) -> Result<Self> {
        Ok(Self::new(endpoint)?.with_token(HfToken::from_env()?))
    }

    /// Sends `token` to the endpoint with every request (gated and private repos).
    #[must_use]
    pub fn with_token(mut self, token: Option<HfToken>) -> Self {
        self.token = token;
        self
    }

    /// The token this client sends, if any.
    pub fn token(&self) -> Option<&HfToken> {
        self.token.as_ref()
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn resolve_url(&self, repo: &RepoId, revision: &str, file: &str) -> String {
        format!("{}/{repo}/resolve/{revision}/{}", self.endpoint, encode_path(file))
    }

    fn get(&self, url: &str) -> RequestBuilder {
        self.authorize(self.data.get(url))
    }

    fn head(&self, url: &str) -> RequestBuilder {
        self.authorize(self.meta.head(url))
    }

    /// Adds the token. Every URL this client builds is on the endpoint, so
    /// the token goes to the hub; it must not follow a redirect to the CDN
    /// that serves LFS bytes (another host, which has no use for it).
    /// reqwest 0.13 drops `Authorization` on a redirect that changes host,
    /// port or scheme (`redirect::remove_sensitive_headers`); the test
    /// `a_gated_repo_pulls_with_the_token_which_goes_to_the_hub_and_not_to_the_cdn`
    /// holds it to that.
    fn authorize(&self, req: RequestBuilder) -> RequestBuilder {
        match &self.token {
            Some(token) => req.header(AUTHORIZATION, token.bearer().clone()),
            None => req,
        }
    }

    /// The error for a 401/403 from the hub: what to do about a gated repo,
    /// or that the token we sent was refused.
    fn refused(&self, repo: &RepoId, status: StatusCode) -> Option<HubError> {
        if !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            return None;
        }
        let page = format!("{}/{repo}", self.endpoint);
        Some(match &self.token {
            Some(token) => HubError::TokenRefused {
                repo: repo.to_string(),
                page,
                endpoint: self.endpoint.to_string(),
                status: status.as_u16(),
                origin: token.origin().to_string(),
            },
            None => HubError::Gated { repo: repo.to_string(), page, status: status.as_u16() },
        })
    }

    /// `GET /api/models/{repo}/revision/{rev}`: the commit and its files.
    pub async fn revision(&self, repo: &RepoId, revision: &str) -> Result<Revision> {
        let url = format!("{}/api/models/{repo}/revision/{revision}", self.endpoint);
        let resp = send(&url, self.get(&url)).await?;
        let status = resp.status();
        let code = header_str(resp.headers(), "x-error-code").unwrap_or_default();
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::NOT_FOUND) && code == "RevisionNotFound" {
            return Err(HubError::RevisionNotFound {
                repo: repo.to_string(),
                revision: revision.to_owned(),
                endpoint: self.endpoint.to_string(),
            });
        }
        // Without a token the hub answers 401 for a missing repo and a
        // private one alike; with one, a 401 without `RepoNotFound` is the
        // token itself refused ("Invalid credentials in Authorization header").
        let missing = status == StatusCode::NOT_FOUND
            || (status == StatusCode::UNAUTHORIZED
                && (code == "RepoNotFound" || (self.token.is_none() && code != "GatedRepo")));
        if missing {
            return Err(HubError::RepoNotFound {
                repo: repo.to_string(),
                endpoint: self.endpoint.to_string(),
                status: status.as_u16(),
            });
        }
        if let Some(e) = self.refused(repo, status) {
            return Err(e);
        }
        if !status.is_success() {
            return Err(HubError::Status { url, status: status.as_u16() });
        }
        let body = read_small(&url, resp).await?;
        let json: RevisionJson = serde_json::from_slice(&body)
            .map_err(|e| HubError::Protocol { url: url.clone(), reason: format!("not the revision JSON: {e}") })?;
        let commit = json.sha;
        if commit.is_empty() || !commit.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(HubError::Protocol { url, reason: format!("commit `{commit}` is not a hex sha") });
        }
        let mut files = Vec::with_capacity(json.siblings.len());
        for s in json.siblings {
            if !is_safe_file_path(&s.rfilename) {
                return Err(HubError::Protocol { url, reason: format!("unsafe file path `{}`", s.rfilename) });
            }
            files.push(s.rfilename);
        }
        Ok(Revision { commit, files })
    }

    /// `HEAD {repo}/resolve/{commit}/{file}` without following the hub's
    /// redirect (huggingface_hub's way): the blob's ETag and size, from the
    /// `X-Linked-*` headers for LFS files. A redirect without them (a
    /// renamed repo) is followed to the same host.
    pub async fn file_meta(&self, repo: &RepoId, commit: &str, file: &str) -> Result<FileMeta> {
        let mut url = self.resolve_url(repo, commit, file);
        for _ in 0..5 {
            let resp = send(&url, self.head(&url).header(ACCEPT_ENCODING, "identity")).await?;
            let status = resp.status();
            let headers = resp.headers();
            if status == StatusCode::NOT_FOUND {
                return Err(HubError::FileNotFound {
                    repo: repo.to_string(),
                    revision: commit.to_owned(),
                    file: file.to_owned(),
                });
            }
            if let Some(e) = self.refused(repo, status) {
                return Err(e);
            }
            let linked = headers.get("x-linked-etag").is_some();
            if status.is_redirection() && !linked {
                let next = headers.get(LOCATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
                if !next.starts_with('/') {
                    return Err(HubError::Protocol {
                        url,
                        reason: format!("redirect to `{next}` without X-Linked-Etag"),
                    });
                }
                url = format!("{}{next}", self.endpoint);
                continue;
            }
            if !status.is_success() && !status.is_redirection() {
                return Err(HubError::Status { url, status: status.as_u16() });
            }
            let etag = header_str(headers, "x-linked-etag")
                .or_else(|| header_str(headers, ETAG.as_str()))
                .map(|e| e.trim_start_matches("W/").trim_matches('"').to_owned())
                .filter(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
                .ok_or_else(|| HubError::Protocol { url: url.clone(), reason: "no usable ETag".into() })?;
            let size = header_str(headers, "x-linked-size")
                .or_else(|| header_str(headers, CONTENT_LENGTH.as_str()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| HubError::Protocol { url: url.clone(), reason: "no file size".into() })?;
            if linked && (etag.len() != 64 || !etag.chars().all(|c| c.is_ascii_hexdigit())) {
                return Err(HubError::Protocol { url, reason: format!("LFS ETag `{etag}` is not a sha256") });
            }
            return Ok(FileMeta { etag: etag.to_ascii_lowercase(), size, lfs: linked });
        }
        Err(HubError::Protocol { url, reason: "too many redirects".into() })
    }

    /// A whole small file (config.json, the shard index), at most [`MAX_SMALL_FILE`] bytes.
    pub async fn get_small(&self, repo: &RepoId, commit: &str, file: &str) -> Result<Vec<u8>> {
        let url = self.resolve_url(repo, commit, file);
        let resp = send(&url, self.get(&url)).await?;
        if let Some(e) = self.refused(repo, resp.status()) {
            return Err(e);
        }
        if resp.status() == StatusCode::NOT_FOUND {
            return Err(HubError::FileNotFound {
                repo: repo.to_string(),
                revision: commit.to_owned(),
                file: file.to_owned(),
            });
        }
        if !resp.status().is_success() {
            return Err(HubError::Status { url, status: resp.status().as_u16() });
        }
        read_small(&url, resp).await
    }

    /// Bytes `start..start+len` of a file, with a Range request. A server
    /// that ignores Range (200) is read only as far as needed.
    pub async fn get_range(&self, repo: &RepoId, commit: &str, file: &str, start: u64, len: u64) -> Result<Vec<u8>> {
        let url = self.resolve_url(repo, commit, file);
        if len == 0 {
            return Ok(Vec::new());
        }
        let range = format!("bytes={start}-{}", start + len - 1);
        let mut resp = send(&url, self.get(&url).header(RANGE, range)).await?;
        let skip = match resp.status() {
            StatusCode::PARTIAL_CONTENT => 0,
            StatusCode::OK => start,
            s @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                return Err(self.refused(repo, s).unwrap_or(HubError::Status { url, status: s.as_u16() }))
            }
            s => return Err(HubError::Status { url, status: s.as_u16() }),
        };
        let mut out = Vec::new();
        let mut seen = 0u64;
        while (out.len() as u64) < len {
            let Some(chunk) = resp.chunk().await.map_err(|source| HubError::Http { url: url.clone(), source })? else {
                break;
            };
            let from = skip.saturating_sub(seen).min(chunk.len() as u64) as usize;
            seen += chunk.len() as u64;
            let want = (len - out.len() as u64).min((chunk.len() - from) as u64) as usize;
            out.extend_from_slice(&chunk[from..from + want]);
        }
        if (out.len() as u64) < len {
            return Err(HubError::Protocol {
                url,
                reason: format!("asked for {len} bytes at {start}, got {}", out.len()),
            });
        }
        Ok(out)
    }

    /// Starts a download of `file` from byte `offset`. Returns the response
    /// and the offset its body starts at: `offset` if the server honoured the
    /// Range (206), 0 if it sent the whole file (200).
    pub async fn get_from(&self, repo: &RepoId, commit: &str, file: &str, offset: u64) -> Result<(Response, u64)> {
        let url = self.resolve_url(repo, commit, file);
        let mut req = self.get(&url).header(ACCEPT_ENCODING, "identity");
        if offset > 0 {
            req = req.header(RANGE, format!("bytes={offset}-"));
        }
        let resp = send(&url, req).await?;
        match resp.status() {
            StatusCode::PARTIAL_CONTENT => {
                let starts = header_str(resp.headers(), CONTENT_RANGE.as_str())
                    .and_then(|r| r.strip_prefix("bytes ")?.split('-').next()?.parse::<u64>().ok());
                if starts != Some(offset) {
                    return Err(HubError::Protocol {
                        url,
                        reason: format!("asked for bytes from {offset}, got Content-Range {starts:?}"),
                    });
                }
                Ok((resp, offset))
            }
            StatusCode::OK => Ok((resp, 0)),
            s @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                Err(self.refused(repo, s).unwrap_or(HubError::Status { url, status: s.as_u16() }))
            }
            StatusCode::NOT_FOUND => Err(HubError::FileNotFound {
                repo: repo.to_string(),
                revision: commit.to_owned(),
                file: file.to_owned(),
            }),
            s => Err(HubError::Status { url, status: s.as_u16() }),
        }
    }
}

async fn send(url: &str, req: reqwest::RequestBuilder) -> Result<Response> {
    req.send().await.map_err(|source| HubError::Http { url: url.to_owned(), source })
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

async fn read_small(url: &str, mut resp: Response) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|source| HubError::Http { url: url.to_owned(), source })? {
        out.extend_from_slice(&chunk);
        if out.len() as u64 > MAX_SMALL_FILE {
            return Err(HubError::Protocol {
                url: url.to_owned(),
                reason: format!("more than {MAX_SMALL_FILE} bytes"),
            });
        }
    }
    Ok(out)
}
