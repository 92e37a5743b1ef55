//! A pull in two steps: [`inspect`] reads the repo's file list, config.json
//! and the safetensors headers (Range requests) so the caller can show the
//! fit verdict first; [`download`] then fetches every file into the HF cache
//! with progress, resume and verification, and only then makes the snapshot
//! visible.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use headroom_core::fit::ModelFootprint;
use headroom_core::format::safetensors::{header_len, parse_header, parse_index, Header, INDEX_FILE, SINGLE_FILE};
use headroom_core::format::{footprint, LoadShape, ModelConfig, CONFIG_FILE};
use serde::Serialize;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::cache::RepoCache;
use crate::client::{FileMeta, HubClient};
use crate::error::{io, HubError, Result};
use crate::repo::{check_revision, RepoId};
/// Attempts per file when a transfer breaks off; each resumes where the last stopped.
pub const MAX_ATTEMPTS: u32 = 5;
/// Progress events at most this often (plus one at the end of each file).
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// One file of the pull.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct RemoteFile {
    pub path: String,
    pub size: u64,
    /// The blob name in the cache (the sha256 for LFS files).
    pub etag: String,
    pub lfs: bool,
}

/// What [`inspect`] learned about a repo without downloading its weights.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct RemoteModel {
    pub repo: String,
    pub revision: String,
    pub commit: String,
    /// HF `model_type`.
    pub arch: String,
    pub bits: Option<u32>,
    /// "4-bit, group 64"; `None` if unquantized.
    pub quantization: Option<String>,
    pub files: Vec<RemoteFile>,
    /// Sum of every file's size.
    pub total_bytes: u64,
    /// Bytes already complete in the cache (blobs shared with an earlier pull).
    pub cached_bytes: u64,
    /// Weights, layers, heads… as the engine will load them: the fit check's input.
    pub footprint: ModelFootprint,
    /// config.json as the hub served it (the starter shelf keeps it as a record).
    #[serde(skip)]
    pub config_bytes: Vec<u8>,
    /// Every weight file's safetensors header, in the index's order.
    #[serde(skip)]
    pub headers: Vec<Header>,
}

/// Progress of [`download`], for `--json` lines and the app's Channel.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum PullEvent {
    Started {
        repo: String,
        commit: String,
        files: usize,
        total_bytes: u64,
        cached_bytes: u64,
    },
    Progress {
        file: String,
        file_bytes: u64,
        file_size: u64,
        /// Bytes present so far, cached ones included.
        done_bytes: u64,
        total_bytes: u64,
        /// Bytes received in this pull per second since it started.
        bytes_per_sec: f64,
        /// Seconds left at that rate; `None` before anything arrived.
        eta_secs: Option<f64>,
    },
    /// A transfer broke off; the next attempt resumes at `resume_from`.
    Retrying {
        file: String,
        attempt: u32,
        resume_from: u64,
        reason: String,
    },
    FileDone {
        file: String,
        size: u64,
        verified: Verified,
        reused: bool,
    },
    Finished {
        repo: String,
        snapshot: PathBuf,
        downloaded_bytes: u64,
        elapsed_secs: f64,
    },
}

/// How a blob was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Verified {
    /// LFS file: its sha256 equals the hub's ETag.
    Sha256,
    /// Regular git file: its git blob id (the sha1 of `blob <size>\0` and
    /// its bytes) equals the hub's ETag.
    GitBlob,
    /// Regular git file whose ETag is not a git blob id (a mirror's own
    /// tag): only its size can be checked.
    Size,
}

impl Verified {
    /// How `f` is checked once it has arrived.
    fn of(f: &RemoteFile) -> Self {
        let git_oid = f.etag.len() == 40 && f.etag.chars().all(|c| c.is_ascii_hexdigit());
        match (f.lfs, git_oid) {
            (true, _) => Verified::Sha256,
            (false, true) => Verified::GitBlob,
            (false, false) => Verified::Size,
        }
    }
}

/// What a finished pull left in the cache.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PullOutcome {
    pub snapshot: PathBuf,
    pub downloaded_bytes: u64,
    pub reused_bytes: u64,
    pub elapsed_secs: f64,
}

/// Reads the repo's file list, every file's size and ETag, config.json and
/// the safetensors headers (8 bytes, then the header's own length, per
/// weight file), and computes the model's footprint as it would be loaded
/// (`shape`: the engine's dtype and kernel, see `headroom_engine::load_shape`).
/// Downloads no weights.
pub async fn inspect(
    client: &HubClient,
    repo: &RepoId,
    revision: &str,
    cache_root: &std::path::Path,
    shape: LoadShape,
) -> Result<RemoteModel> {
    check_revision(revision)?;
    let rev = client.revision(repo, revision).await?;
    let name = repo.to_string();
    let mut files = Vec::with_capacity(rev.files.len());
    for path in &rev.files {
        let FileMeta { etag, size, lfs } = client.file_meta(repo, &rev.commit, path).await?;
        files.push(RemoteFile { path: path.clone(), size, etag, lfs });
    }
    let has = |f: &str| files.iter().any(|x| x.path == f);
    if !has(CONFIG_FILE) {
        return Err(HubError::NoConfig { repo: name });
    }
    let format = |file: &str| {
        let (repo, file) = (name.clone(), file.to_owned());
        move |source| HubError::Format { repo, file, source: Box::new(source) }
    };
    let config_bytes = client.get_small(repo, &rev.commit, CONFIG_FILE).await?;
    // Architectures and quantizations the engine cannot run are refused here, before anything is downloaded.
    let config = ModelConfig::parse(&config_bytes).map_err(format(CONFIG_FILE))?;

    let weights: Vec<String> = if has(INDEX_FILE) {
        let bytes = client.get_small(repo, &rev.commit, INDEX_FILE).await?;
        parse_index(&bytes).map_err(format(INDEX_FILE))?
    } else if has(SINGLE_FILE) {
        vec![SINGLE_FILE.to_owned()]
    } else {
        return Err(HubError::NoWeights { repo: name });
    };
    let mut headers = Vec::with_capacity(weights.len());
    for w in &weights {
        let size = files
            .iter()
            .find(|f| &f.path == w)
            .map(|f| f.size)
            .ok_or_else(|| HubError::MissingShard { repo: name.clone(), file: w.clone() })?;
        let prefix = client.get_range(repo, &rev.commit, w, 0, 8.min(size)).await?;
        let len = header_len(&prefix, size).map_err(format(w))?;
        let json = client.get_range(repo, &rev.commit, w, 8, len).await?;
        headers.push(parse_header(&json, size).map_err(format(w))?);
    }
    let cache = RepoCache::new(cache_root, repo);
    let cached_bytes = files.iter().filter(|f| blob_is_complete(&cache, f)).map(|f| f.size).sum();
    let quant = config.quantization.as_ref().map(|q| q.default);
    Ok(RemoteModel {
        repo: name,
        revision: revision.to_owned(),
        commit: rev.commit,
        arch: config.model_type_name().to_owned(),
        bits: quant.and_then(|q| u32::try_from(q.bits).ok()),
        quantization: quant.map(|q| q.label()),
        total_bytes: files.iter().map(|f| f.size).sum(),
        cached_bytes,
        footprint: footprint(&config, &headers, shape),
        files,
        config_bytes,
        headers,
    })
}

fn blob_is_complete(cache: &RepoCache, f: &RemoteFile) -> bool {
    cache.blob(&f.etag).is_ok_and(|b| std::fs::metadata(b).is_ok_and(|m| m.is_file() && m.len() == f.size))
}

/// Downloads every file of `model` into the hub cache at `cache_root`,
/// reporting through `on_event`. Each blob is written to `<etag>.incomplete`
/// (resuming one left by an earlier pull), verified (sha256 for LFS files,
/// the git blob id for others) and renamed; a transfer that breaks off is resumed with
/// a Range request up to [`MAX_ATTEMPTS`] times. Only when every file is in
/// place are the snapshot links and `refs/<revision>` written. Cancelling
/// returns [`HubError::Cancelled`] and leaves the `.incomplete` files for the next pull.
pub async fn download(
    client: &HubClient,
    cache_root: &std::path::Path,
    model: &RemoteModel,
    cancel: &CancellationToken,
    mut on_event: impl FnMut(PullEvent),
) -> Result<PullOutcome> {
    let repo = RepoId::parse(&model.repo)?;
    let cache = RepoCache::new(cache_root, &repo);
    cache.create_blobs_dir()?;
    let cached_bytes: u64 = model.files.iter().filter(|f| blob_is_complete(&cache, f)).map(|f| f.size).sum();
    on_event(PullEvent::Started {
        repo: model.repo.clone(),
        commit: model.commit.clone(),
        files: model.files.len(),
        total_bytes: model.total_bytes,
        cached_bytes,
    });
    let mut meter =
        Meter { started: Instant::now(), received: 0, done_before: cached_bytes, total: model.total_bytes, last: None };
    let mut reused_bytes = 0;
    for f in &model.files {
        if cancel.is_cancelled() {
            return Err(HubError::Cancelled { repo: model.repo.clone() });
        }
        let verified = Verified::of(f);
        if blob_is_complete(&cache, f) {
            reused_bytes += f.size;
            on_event(PullEvent::FileDone { file: f.path.clone(), size: f.size, verified, reused: true });
            continue;
        }
        fetch_blob(client, &repo, &cache, &model.commit, f, cancel, &mut meter, &mut on_event).await?;
        meter.done_before += f.size;
        on_event(PullEvent::FileDone { file: f.path.clone(), size: f.size, verified, reused: false });
    }
    // Every blob is verified: now the model may appear.
    for f in &model.files {
        cache.link(&model.commit, &f.path, &f.etag)?;
    }
    if model.revision != model.commit {
        cache.write_ref(&model.revision, &model.commit)?;
    }
    let snapshot = cache.snapshot(&model.commit)?;
    let elapsed_secs = meter.started.elapsed().as_secs_f64();
    on_event(PullEvent::Finished {
        repo: model.repo.clone(),
        snapshot: snapshot.clone(),
        downloaded_bytes: meter.received,
        elapsed_secs,
    });
    Ok(PullOutcome { snapshot, downloaded_bytes: meter.received, reused_bytes, elapsed_secs })
}

/// Bytes, rate and ETA across the whole pull.
#[derive(Debug)]
struct Meter {
    started: Instant,
    /// Received over the network in this pull.
    received: u64,
    /// Complete before the current file (cached or finished files).
    done_before: u64,
    total: u64,
    last: Option<Instant>,
}

impl Meter {
    fn event(&mut self, f: &RemoteFile, file_bytes: u64, force: bool) -> Option<PullEvent> {
        let now = Instant::now();
        if !force && self.last.is_some_and(|t| now.duration_since(t) < PROGRESS_EVERY) {
            return None;
        }
        self.last = Some(now);
        let secs = now.duration_since(self.started).as_secs_f64();
        let bytes_per_sec = if secs > 0.0 { self.received as f64 / secs } else { 0.0 };
        let done_bytes = self.done_before + file_bytes;
        let eta_secs = (bytes_per_sec > 0.0).then(|| self.total.saturating_sub(done_bytes) as f64 / bytes_per_sec);
        Some(PullEvent::Progress {
            file: f.path.clone(),
            file_bytes,
            file_size: f.size,
            done_bytes,
            total_bytes: self.total,
            bytes_per_sec,
            eta_secs,
        })
    }
}

/// Hashes the bytes already in a partial blob, so a resumed download is
/// verified over the whole file.
async fn hash_existing(path: &std::path::Path, hasher: &mut impl Digest) -> Result<u64> {
    let mut file = tokio::fs::File::open(path).await.map_err(io(path))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let read = file.read(&mut buf).await.map_err(io(path))?;
        if read == 0 {
            return Ok(n);
        }
        hasher.update(&buf[..read]);
        n += read as u64;
    }
}

#[allow(clippy::too_many_arguments)]
async fn fetch_blob(
    client: &HubClient,
    repo: &RepoId,
    cache: &RepoCache,
    commit: &str,
    f: &RemoteFile,
    cancel: &CancellationToken,
    meter: &mut Meter,
    on_event: &mut impl FnMut(PullEvent),
) -> Result<()> {
    let part = cache.incomplete(&f.etag)?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match transfer(client, repo, commit, f, &part, cancel, meter, on_event).await {
            Ok(()) => break,
            Err(Transfer::Fatal(e)) => return Err(e),
            Err(Transfer::Broken(reason)) => {
                let kept = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
                if attempt >= MAX_ATTEMPTS {
                    return Err(HubError::TransferFailed { file: f.path.clone(), attempts: attempt, kept, reason });
                }
                on_event(PullEvent::Retrying { file: f.path.clone(), attempt: attempt + 1, resume_from: kept, reason });
                tokio::select! {
                    () = cancel.cancelled() => return Err(HubError::Cancelled { repo: repo.to_string() }),
                    () = tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))) => {}
                }
            }
        }
    }
    // Verify the whole blob before it gets its real name.
    let verified = Verified::of(f);
    let (len, digest) = if verified == Verified::GitBlob {
        // Git hashes a header before the content; its size is the one the
        // hub announced (a different length fails the size check below).
        let mut hasher = Sha1::new();
        hasher.update(format!("blob {}\0", f.size).as_bytes());
        let len = hash_existing(&part, &mut hasher).await?;
        (len, hex(&hasher.finalize()))
    } else {
        let mut hasher = Sha256::new();
        let len = hash_existing(&part, &mut hasher).await?;
        (len, hex(&hasher.finalize()))
    };
    let discard = |e: HubError| {
        let _ = std::fs::remove_file(&part);
        e
    };
    if len != f.size {
        return Err(discard(HubError::SizeMismatch { file: f.path.clone(), expected: f.size, actual: len }));
    }
    let (file, expected, actual) = (f.path.clone(), f.etag.clone(), digest);
    match verified {
        Verified::Sha256 if actual != expected => {
            return Err(discard(HubError::HashMismatch { file, expected, actual }))
        }
        Verified::GitBlob if actual != expected => {
            return Err(discard(HubError::BlobIdMismatch { file, expected, actual }))
        }
        _ => {}
    }
    let blob = cache.blob(&f.etag)?;
    std::fs::rename(&part, &blob).map_err(io(blob))
}

/// Why one attempt stopped.
#[derive(Debug)]
enum Transfer {
    /// The connection broke off or the server failed: worth resuming.
    Broken(String),
    /// Cancelled, a local IO error, or an answer that will not change.
    Fatal(HubError),
}

impl From<HubError> for Transfer {
    fn from(e: HubError) -> Self {
        match e {
            HubError::Http { url, source } => Transfer::Broken(format!("{url}: {source}")),
            HubError::Status { status, url } if status >= 500 => Transfer::Broken(format!("{url}: HTTP {status}")),
            other => Transfer::Fatal(other),
        }
    }
}

/// One attempt: appends to `part` from its current length to the file's end.
#[allow(clippy::too_many_arguments)]
async fn transfer(
    client: &HubClient,
    repo: &RepoId,
    commit: &str,
    f: &RemoteFile,
    part: &std::path::Path,
    cancel: &CancellationToken,
    meter: &mut Meter,
    on_event: &mut impl FnMut(PullEvent),
) -> std::result::Result<(), Transfer> {
    let have = std::fs::metadata(part).map(|m| m.len()).unwrap_or(0);
    if have > f.size {
        // Not a prefix of this blob: start over.
        std::fs::remove_file(part).map_err(|e| Transfer::Fatal(io(part)(e)))?;
    } else if have == f.size && f.size > 0 {
        return Ok(());
    }
    let have = have.min(f.size);
    let (mut resp, starts_at) = client.get_from(repo, commit, &f.path, have).await?;
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(starts_at > 0)
        .write(true)
        .truncate(starts_at == 0)
        .open(part)
        .await
        .map_err(|e| Transfer::Fatal(io(part)(e)))?;
    let mut written = starts_at;
    if let Some(e) = meter.event(f, written, true) {
        on_event(e);
    }
    loop {
        let chunk = tokio::select! {
            biased;
            () = cancel.cancelled() => {
                file.flush().await.map_err(|e| Transfer::Fatal(io(part)(e)))?;
                return Err(Transfer::Fatal(HubError::Cancelled { repo: repo.to_string() }));
            }
            chunk = resp.chunk() => chunk,
        };
        let chunk = match chunk {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                file.flush().await.map_err(|e| Transfer::Fatal(io(part)(e)))?;
                return Err(Transfer::Broken(format!("connection lost after {written} of {} bytes: {e}", f.size)));
            }
        };
        if written + chunk.len() as u64 > f.size {
            return Err(Transfer::Fatal(HubError::SizeMismatch {
                file: f.path.clone(),
                expected: f.size,
                actual: written + chunk.len() as u64,
            }));
        }
        file.write_all(&chunk).await.map_err(|e| Transfer::Fatal(io(part)(e)))?;
        written += chunk.len() as u64;
        meter.received += chunk.len() as u64;
        if let Some(e) = meter.event(f, written, false) {
            on_event(e);
        }
    }
    file.flush().await.map_err(|e| Transfer::Fatal(io(part)(e)))?;
    file.sync_all().await.map_err(|e| Transfer::Fatal(io(part)(e)))?;
    if let Some(e) = meter.event(f, written, true) {
        on_event(e);
    }
    if written < f.size {
        return Err(Transfer::Broken(format!("the body ended after {written} of {} bytes", f.size)));
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The sha256 of `bytes` in lower-case hex (the hub's LFS ETag).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}
