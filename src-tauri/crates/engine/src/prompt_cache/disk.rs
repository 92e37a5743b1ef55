//! The prompt cache's disk tier: a chat's KV state as one safetensors file,
//! written when the chat goes idle, when its entry must leave memory, when
//! the model unloads and when the process quits, and read back when the
//! chat continues, after a restart too (and for `headroom chat`, whose
//! every turn is a new process).
//!
//! A state is for one model computed one way: its file names the model's
//! fingerprint (config, tokenizer and weight headers, the compute dtype and
//! the matmul kernel, which all change the keys and values) and the KV
//! format; any difference makes it a miss, never a wrong answer. Reading
//! checks the header with the one safetensors reader
//! (`headroom_core::format`) before MLX sees the file, then every claim of
//! the state against the model (cache/persist.rs); a file that fails is a
//! miss, and is deleted.
//!
//! Bounded by bytes: after each write the least recently used files go
//! until the folder is within its limit.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use headroom_core::kv::KvFormat;
use mlx_rs::transforms::eval;
use mlx_rs::{Array, Dtype};

use crate::cache::persist::StateMeta;
use crate::cache::{KvCache, LayerKind};
use crate::error::{EngineError, MlxContext, Result};
use crate::quant::QuantKernel;
use crate::source::{read_gguf_header, ModelFiles};
use crate::weights::{read_header, weight_files, ComputeDtype};

const META_STATE: &str = "headroom.kv_state";
const META_MODEL: &str = "headroom.model";
const META_SESSION: &str = "headroom.session";
const EXT: &str = "safetensors";
/// Beside the states: each weight file's content digest, by path, size and
/// modification time ([`DiskTier::weights_key`]).
pub const DIGESTS_FILE: &str = "weights-digests.json";

/// Which of a chat's two states: its latest, or its checkpoint at the end
/// of the last prompt (caches that cannot step back keep one; see
/// prompt_cache.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    State,
    Prompt,
}

impl Part {
    pub fn of(checkpoint: bool) -> Self {
        if checkpoint {
            Self::Prompt
        } else {
            Self::State
        }
    }

    fn infix(self) -> &'static str {
        match self {
            Self::State => "",
            Self::Prompt => ".prompt",
        }
    }
}

/// Where states go and how many bytes they may take. A limit of 0 is the
/// tier turned off: nothing is written or read back, but a deleted chat's
/// files (from when it was on) are still deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskTier {
    pub dir: PathBuf,
    pub limit_bytes: u64,
}

impl DiskTier {
    /// Whether states are written and read back (a limit above 0).
    pub fn is_on(&self) -> bool {
        self.limit_bytes > 0
    }

    /// The key a saved state of the model `fingerprint` (its layout:
    /// [`model_fingerprint`]) whose weights are `files` is filed under: the
    /// layout and the weights' content. A fine-tune or a re-quantization with
    /// the same layout has other weights, and continuing a chat from a state
    /// computed on them answers wrongly. Each file is hashed (sha256) once:
    /// its digest is kept in [`DIGESTS_FILE`] by path, size and modification
    /// time, so a load of an unchanged model never reads its gigabytes again.
    pub fn weights_key(&self, fingerprint: &str, files: &[PathBuf]) -> Result<String> {
        let cache = self.dir.join(DIGESTS_FILE);
        let mut known: BTreeMap<String, FileDigest> =
            fs::read(&cache).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        let mut parts = vec![fingerprint.as_bytes().to_vec()];
        let mut learned = false;
        for file in files {
            let meta = fs::metadata(file).map_err(Self::io(file))?;
            let modified_ns = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            let name = file.to_string_lossy().into_owned();
            let digest = match known.get(&name) {
                Some(d) if d.len == meta.len() && d.modified_ns == modified_ns => d.sha256.clone(),
                _ => {
                    let sha256 = sha256_of(file)?;
                    known.insert(name, FileDigest { len: meta.len(), modified_ns, sha256: sha256.clone() });
                    learned = true;
                    sha256
                }
            };
            parts.push(digest.into_bytes());
        }
        if learned {
            // Kept for the next load; one that cannot be written costs only a hash then.
            let _ = write_digests(&self.dir, &cache, &known);
        }
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        Ok(format!("{:016x}", fnv(&refs)))
    }
}

/// One weight file's digest, as [`DIGESTS_FILE`] keeps it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct FileDigest {
    len: u64,
    modified_ns: u64,
    sha256: String,
}

/// Writes `known` to `cache` (beside, then renamed: a reader never sees half of it).
fn write_digests(dir: &Path, cache: &Path, known: &BTreeMap<String, FileDigest>) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(known).map_err(std::io::Error::other)?;
    fs::create_dir_all(dir)?;
    let partial = cache.with_extension("json.partial");
    fs::write(&partial, bytes)?;
    fs::rename(&partial, cache)
}

/// The sha256 of a file's content, in hex, read 1 MB at a time.
fn sha256_of(file: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let io = |source| EngineError::Io { path: file.to_owned(), source };
    let mut f = fs::File::open(file).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Files and bytes in the folder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    pub files: usize,
    pub bytes: u64,
}

/// 64-bit FNV-1a: a stable name for a session, and the model's fingerprint.
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        // Each part's length first, so ("ab","c") and ("a","bc") differ.
        for b in (part.len() as u64).to_le_bytes().iter().chain(part.iter()) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// What a saved state must have been computed with to be used for the model
/// in `dir` loaded as `dtype` with `kernel`: config.json, the tokenizer's
/// files, every weight file's header and length, the dtype and the kernel.
pub fn model_fingerprint(dir: &Path, dtype: ComputeDtype, kernel: QuantKernel) -> Result<String> {
    if let ModelFiles::Gguf(file) = ModelFiles::locate(dir) {
        return gguf_fingerprint(&file, dtype, kernel);
    }
    let read = |name: &str| -> Result<Vec<u8>> {
        let path = dir.join(name);
        match fs::read(&path) {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(source) => Err(EngineError::Io { path, source }),
        }
    };
    let mut parts = vec![read("config.json")?, read("tokenizer.json")?, read("tokenizer_config.json")?];
    for file in weight_files(dir)? {
        let header = read_header(&file)?;
        let len = fs::metadata(&file).map_err(|source| EngineError::Io { path: file.clone(), source })?.len();
        let tensors: Vec<String> =
            header.tensors.iter().map(|(n, t)| format!("{n}:{}:{:?}:{:?}", t.dtype, t.shape, t.data_offsets)).collect();
        parts.push(format!("{len};{}", tensors.join(",")).into_bytes());
    }
    parts.push(format!("{dtype:?};{}", kernel.as_str()).into_bytes());
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    Ok(format!("{:016x}", fnv(&refs)))
}

/// A GGUF model's fingerprint: its header bytes (metadata, tokenizer and
/// tensor table, everything before the tensor data), its length, the dtype
/// and the kernel.
fn gguf_fingerprint(file: &Path, dtype: ComputeDtype, kernel: QuantKernel) -> Result<String> {
    use std::io::Read;
    let header = read_gguf_header(file)?;
    let io = |source| EngineError::Io { path: file.to_owned(), source };
    let f = fs::File::open(file).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let mut bytes = Vec::new();
    f.take(header.data_offset).read_to_end(&mut bytes).map_err(io)?;
    let tail = format!("{len};{dtype:?};{}", kernel.as_str());
    Ok(format!("{:016x}", fnv(&[&bytes, tail.as_bytes()])))
}

impl DiskTier {
    /// The file of `session` (its id hashed: ids are any text; the file
    /// repeats the id, so two ids with one hash never share a state).
    pub fn path(&self, session: &str) -> PathBuf {
        self.path_of(session, Part::State)
    }

    fn path_of(&self, session: &str, part: Part) -> PathBuf {
        self.dir.join(format!("{:016x}{}.{EXT}", fnv(&[session.as_bytes()]), part.infix()))
    }

    fn io(path: &Path) -> impl Fn(std::io::Error) -> EngineError + '_ {
        move |source| EngineError::Io { path: path.to_owned(), source }
    }

    /// Writes `cache` as `session`'s state for `model` (a fingerprint),
    /// keys and values in `dtype`; then trims the folder to its limit,
    /// oldest first. Returns the file's bytes.
    pub fn save(&self, session: &str, part: Part, model: &str, cache: &KvCache, dtype: &str) -> Result<u64> {
        fs::create_dir_all(&self.dir).map_err(Self::io(&self.dir))?;
        let path = self.path_of(session, part);
        // Written beside, then renamed: a crash mid-write leaves the old state, not half a new one.
        let partial = path.with_extension(format!("partial.{EXT}"));
        let (arrays, meta) = cache.to_saved(dtype);
        let json = serde_json::to_string(&meta)
            .map_err(|e| EngineError::InvalidConfig { path: path.clone(), reason: e.to_string() })?;
        let metadata: HashMap<String, String> = [
            (META_STATE.to_owned(), json),
            (META_MODEL.to_owned(), model.to_owned()),
            (META_SESSION.to_owned(), session.to_owned()),
        ]
        .into();
        Array::save_safetensors(arrays.iter().map(|(k, a)| (k.as_str(), a)), &metadata, &partial)
            .map_err(|e| EngineError::Io { path: partial.clone(), source: std::io::Error::other(e.to_string()) })?;
        // A state holds the conversation's token ids: this user's only.
        #[cfg(unix)]
        fs::set_permissions(&partial, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(Self::io(&partial))?;
        fs::rename(&partial, &path).map_err(Self::io(&path))?;
        let bytes = fs::metadata(&path).map_err(Self::io(&path))?.len();
        self.trim_to_limit(&path)?;
        Ok(bytes)
    }

    /// `session`'s state, if it has a file for `model` and a cache of
    /// `kinds` stored as `format` in `dtype`. A file that cannot be used (for
    /// another model or other settings, or not readable) is a miss, and is
    /// deleted.
    pub fn load(
        &self,
        session: &str,
        part: Part,
        model: &str,
        kinds: &[LayerKind],
        format: KvFormat,
        dtype: Dtype,
    ) -> Option<KvCache> {
        let path = self.path_of(session, part);
        if !path.is_file() {
            return None;
        }
        match self.read(&path, session, model, kinds, format, dtype) {
            Ok(cache) => {
                // Recently used: the last to go when the folder is trimmed.
                let _ = fs::File::options()
                    .append(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                Some(cache)
            }
            // Whichever check failed, the answer is the same: a miss.
            Err(_why) => {
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    fn read(
        &self,
        path: &Path,
        session: &str,
        model: &str,
        kinds: &[LayerKind],
        format: KvFormat,
        dtype: Dtype,
    ) -> std::result::Result<KvCache, String> {
        // The header first, checked (lengths, offsets, dtypes), and the
        // claims in it: nothing of a state for another model is read.
        let header = read_header(path).map_err(|e| e.to_string())?;
        let meta = |k: &str| header.metadata.get(k).map(String::as_str);
        if meta(META_SESSION) != Some(session) {
            return Err("the file is another chat's".into());
        }
        if meta(META_MODEL) != Some(model) {
            return Err("saved for another model, or the same one loaded another way (dtype, kernel)".into());
        }
        let state: StateMeta = serde_json::from_str(meta(META_STATE).unwrap_or_default())
            .map_err(|e| format!("no state description: {e}"))?;
        let arrays = Array::load_safetensors(path).map_err(|e| e.to_string())?;
        eval(arrays.values()).op("read a saved state").map_err(|e| e.to_string())?;
        KvCache::from_saved(arrays, &state, kinds, format, dtype).map_err(|e| e.to_string())
    }

    /// Deletes `session`'s states (the chat was deleted).
    pub fn delete(&self, session: &str) -> Result<()> {
        for part in [Part::State, Part::Prompt] {
            let path = self.path_of(session, part);
            match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(EngineError::Io { path, source: e }),
                _ => {}
            }
        }
        Ok(())
    }

    /// Every state file, newest first, with its bytes.
    fn files(&self) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
        let Ok(dir) = fs::read_dir(&self.dir) else { return Vec::new() };
        let mut files: Vec<_> = dir
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == EXT))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((e.path(), m.len(), m.modified().ok()?))
            })
            .collect();
        files.sort_by_key(|f| std::cmp::Reverse(f.2));
        files
    }

    pub fn usage(&self) -> DiskUsage {
        let files = self.files();
        DiskUsage { files: files.len(), bytes: files.iter().map(|f| f.1).sum() }
    }

    /// Deletes the least recently used files beyond the limit; `keep` (the
    /// one just written) goes last, and only if it alone is over the limit.
    fn trim_to_limit(&self, keep: &Path) -> Result<()> {
        let files = self.files();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        // Oldest first, the kept one at the very end.
        let order: Vec<_> = {
            let (mut others, kept): (Vec<_>, Vec<_>) = files.into_iter().partition(|f| f.0 != keep);
            others.reverse();
            others.into_iter().chain(kept).collect()
        };
        for (path, bytes, _) in order {
            if total <= self.limit_bytes {
                break;
            }
            fs::remove_file(&path).map_err(Self::io(&path))?;
            total -= bytes;
        }
        Ok(())
    }
}
