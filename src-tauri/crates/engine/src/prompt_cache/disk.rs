//! The prompt cache's disk tier: a chat's KV state as one safetensors file,
//! written when the chat goes idle, when its entry must leave memory, when
//! the model unloads and when the process quits, and read back when the
//! chat continues, after a restart too (and for `headroom chat`, whose
//! every turn is a new process).
//!
//! A state is for one model computed one way: its file names the model's
//! key (its fingerprint: config, tokenizer and weight headers, the compute
//! dtype and the matmul kernel; and its weights' content,
//! [`DiskTier::weights_key`]: all change the keys and values) and the KV
//! format; any difference makes it a miss, never a wrong answer. Reading
//! takes the header alone first (a bounded length, then the JSON, checked
//! by the one safetensors reader, `headroom_core::format`): the file's size
//! against the allowance, then every claim of it against the loaded model
//! (layers, heads, head width, dtype, positions within the context:
//! cache/persist.rs). Only a state that passes has its data read, by this
//! code, not by MLX; a file that fails is a miss, and is deleted.
//!
//! Bounded by bytes: after each write the least recently used files go
//! until the folder is within its limit.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use mlx_rs::transforms::eval;
use mlx_rs::Array;

use headroom_core::format::safetensors::{header_len, parse_header};
use headroom_core::format::TensorInfo;

use crate::cache::persist::{self, StateMeta, StateShape};
use crate::cache::KvCache;
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

/// The infix of a state being written (`<name>.partial.safetensors`).
const PARTIAL: &str = "partial";

/// Creates (or empties) `path` readable and writable by this user only.
fn private_file(path: &Path) -> std::io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path)?;
    // An older partial file keeps the mode it was created with.
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    drop(file);
    Ok(())
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
        self.create_private_dir()?;
        let path = self.path_of(session, part);
        // Written beside, then renamed: a crash mid-write leaves the old state, not half a new one.
        let partial = path.with_extension(format!("{PARTIAL}.{EXT}"));
        // A state holds the conversation's token ids: this user's only, from
        // its first byte (MLX writes into the file created here, keeping its mode).
        private_file(&partial).map_err(Self::io(&partial))?;
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
        fs::rename(&partial, &path).map_err(Self::io(&path))?;
        let bytes = fs::metadata(&path).map_err(Self::io(&path))?.len();
        self.trim_to_limit(&path)?;
        Ok(bytes)
    }

    /// `session`'s state, if it has a file for `model` (its state key) that
    /// fits the allowance and whose header matches `want` (the loaded model,
    /// the request's KV format, the load's context). A file that cannot be
    /// used (for another model or other settings, the wrong shapes, too
    /// large, not readable) is a miss, logged with why, and is deleted. Only
    /// its header is read before it is known to be usable ([`read_state`]).
    pub fn load(&self, session: &str, part: Part, model: &str, want: &StateShape) -> Option<KvCache> {
        let path = self.path_of(session, part);
        if !path.is_file() {
            return None;
        }
        let read = fs::File::open(&path)
            .and_then(|f| Ok((f.metadata()?.len(), f)))
            .map_err(|e| Miss::Damaged(format!("cannot be read: {e}")))
            .and_then(|(len, mut f)| read_state(&mut f, len, self.limit_bytes, session, model, want));
        match read {
            Ok(cache) => {
                // Recently used: the last to go when the folder is trimmed.
                let _ = fs::File::options()
                    .append(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                Some(cache)
            }
            // Whichever check failed, the answer is the same: a miss. Only a
            // damaged file is deleted; one for another model or other
            // settings still serves those (switching back), and the folder's
            // limit bounds what it keeps.
            Err(why) => {
                match &why {
                    // Expected after a model or settings change.
                    Miss::Other(_) => tracing::debug!("saved state {} not used: {why}", path.display()),
                    Miss::Damaged(_) => {
                        tracing::warn!("saved state {} not used: {why}", path.display());
                        let _ = fs::remove_file(&path);
                    }
                }
                None
            }
        }
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

    /// Deletes every state file (partial ones too): the tier was turned
    /// off. Returns how many went.
    pub fn clear(&self) -> Result<usize> {
        let Ok(dir) = fs::read_dir(&self.dir) else { return Ok(0) };
        let mut n = 0;
        for path in dir.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == EXT)) {
            match fs::remove_file(&path) {
                Ok(()) => n += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(EngineError::Io { path, source: e }),
            }
        }
        Ok(n)
    }

    /// The folder, created this user's only (0700) and made so if it was not.
    fn create_private_dir(&self) -> Result<()> {
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&self.dir).map_err(Self::io(&self.dir))?;
        #[cfg(unix)]
        fs::set_permissions(&self.dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .map_err(Self::io(&self.dir))?;
        Ok(())
    }

    /// Every finished state file, newest first, with its bytes. A partial
    /// one (a save under way, or cut short) is not a state and does not
    /// count toward the limit.
    fn files(&self) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
        let Ok(dir) = fs::read_dir(&self.dir) else { return Vec::new() };
        let mut files: Vec<_> = dir
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == EXT))
            .filter(|e| !e.file_name().to_string_lossy().ends_with(&format!(".{PARTIAL}.{EXT}")))
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

/// Why a saved state was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Miss {
    /// Another chat's, another model's or other settings': nothing wrong with it.
    #[error("{0}")]
    Other(String),
    /// Unreadable, damaged, too large, or its shapes are not the model's.
    #[error("{0}")]
    Damaged(String),
}

/// The most header bytes a state may have: its tensors' entries (at most
/// seven per layer, about 100 bytes each) and its description (about 60
/// bytes per layer) take under 1 KB per layer, so 1 MB is room for a
/// thousand layers, and a hostile length never allocates more.
pub const MAX_STATE_HEADER_BYTES: u64 = 1 << 20;

/// Reads `session`'s state for `model` from `r` (a file of `len` bytes) in
/// two steps: the header alone (the 8-byte length and the JSON it
/// announces, at most [`MAX_STATE_HEADER_BYTES`]), checked against the
/// allowance, the chat, the model and `want`'s shapes
/// ([`persist::check_header`]); then, only when all of that holds, the
/// data, tensor by tensor in file order. A file over `allowance` is refused
/// before a byte is read.
pub(crate) fn read_state(
    r: &mut impl Read,
    len: u64,
    allowance: u64,
    session: &str,
    model: &str,
    want: &StateShape,
) -> std::result::Result<KvCache, Miss> {
    let damaged = |e: &dyn std::fmt::Display| Miss::Damaged(e.to_string());
    if len > allowance {
        return Err(Miss::Damaged(format!("{len} bytes, more than the {allowance} saved states may take")));
    }
    let mut prefix = [0u8; 8];
    r.read_exact(&mut prefix).map_err(|e| damaged(&e))?;
    let declared = u64::from_le_bytes(prefix);
    if declared > MAX_STATE_HEADER_BYTES {
        return Err(Miss::Damaged(format!(
            "a header of {declared} bytes (a state's is under {MAX_STATE_HEADER_BYTES})"
        )));
    }
    let header_bytes = header_len(&prefix, len).map_err(|e| damaged(&e))?;
    let mut json = vec![0u8; usize::try_from(header_bytes).map_err(|e| damaged(&e))?];
    r.read_exact(&mut json).map_err(|e| damaged(&e))?;
    let header = parse_header(&json, len).map_err(|e| damaged(&e))?;
    let meta = |k: &str| header.metadata.get(k).map(String::as_str);
    if meta(META_SESSION) != Some(session) {
        return Err(Miss::Other("the file is another chat's".into()));
    }
    if meta(META_MODEL) != Some(model) {
        return Err(Miss::Other(
            "saved for another model, other weights, or the same one loaded another way (dtype, kernel)".into(),
        ));
    }
    let state: StateMeta = serde_json::from_str(meta(META_STATE).unwrap_or_default())
        .map_err(|e| Miss::Damaged(format!("no state description: {e}")))?;
    persist::check_header(&header.tensors, &state, want).map_err(|e| {
        // A state kept for another KV format is another setting's, not a damaged one.
        if state.format == want.format {
            damaged(&e)
        } else {
            Miss::Other(e.to_string())
        }
    })?;
    // The header is the model's: now the data. parse_header checked that the
    // tensors tile it exactly, so in offset order they are read back to back.
    let mut tensors: Vec<_> = header.tensors.iter().collect();
    tensors.sort_by_key(|(_, t)| t.data_offsets.0);
    let mut arrays = HashMap::with_capacity(tensors.len());
    for (name, t) in tensors {
        let mut bytes = vec![0u8; usize::try_from(t.nbytes()).map_err(|e| damaged(&e))?];
        r.read_exact(&mut bytes).map_err(|e| damaged(&e))?;
        arrays.insert(name.clone(), array_of(&bytes, t).map_err(|e| Miss::Damaged(format!("{name}: {e}")))?);
    }
    eval(arrays.values()).op("read a saved state").map_err(|e| damaged(&e))?;
    let kv_dtype = persist::state_dtype(&state).map_err(|e| damaged(&e))?;
    KvCache::from_saved(arrays, &state, &want.kinds, want.format, kv_dtype).map_err(|e| damaged(&e))
}

/// One tensor's array from its bytes: read as bytes, then viewed as its
/// dtype (the header was checked, so the dtype is one a state holds).
fn array_of(bytes: &[u8], t: &TensorInfo) -> std::result::Result<Array, String> {
    let dtype = persist::mlx_dtype(t.dtype).ok_or_else(|| format!("a {} tensor", t.dtype))?;
    let mut shape = t.shape_i32();
    // The last axis in bytes: viewing as the dtype divides it by its size.
    let last = shape.last_mut().ok_or("a scalar")?;
    *last = last
        .checked_mul(i32::try_from(t.dtype.size()).unwrap_or(i32::MAX))
        .ok_or_else(|| format!("{:?} is too wide", t.shape))?;
    Array::from_slice(bytes, &shape).view_dtype(dtype).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use headroom_core::kv::KvFormat;
    use mlx_rs::Dtype;

    use super::*;
    use crate::cache::LayerKind;
    use crate::testutil::temp_dir;

    /// Counts the bytes a read takes from the file: what shows that a
    /// refused state's data is never read.
    struct Counting<R> {
        inner: R,
        read: u64,
    }

    impl<R: Read> Read for Counting<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.read += n as u64;
            Ok(n)
        }
    }

    const MODEL: &str = "model-key";
    const IDS: [u32; 5] = [11, 12, 13, 14, 15];

    /// Two full layers of 2 KV heads, each 4 wide, in f32, fed `IDS`.
    fn cache() -> KvCache {
        let mut c = KvCache::new(&[LayerKind::Full, LayerKind::Full]);
        let n = IDS.len() as i32;
        let x = Array::from_slice(&(0..2 * n * 4).map(|v| v as f32).collect::<Vec<_>>(), &[1, 2, n, 4]);
        for layer in c.layers_mut() {
            layer.update_and_fetch(&x, &x).expect("write");
        }
        c.push_tokens(&IDS);
        c
    }

    /// What the saved cache is: the model it must match.
    fn shape() -> StateShape {
        StateShape {
            kinds: vec![LayerKind::Full, LayerKind::Full],
            kv_heads: 2,
            head_dim: 4,
            linear: None,
            format: KvFormat::Float,
            dtypes: vec![Dtype::Float32],
            context_limit: 64,
        }
    }

    /// Reads `path` as `session`'s state for `model` and `want`: the outcome and the bytes read.
    fn read_counted(
        path: &Path,
        allowance: u64,
        session: &str,
        model: &str,
        want: &StateShape,
    ) -> (std::result::Result<KvCache, Miss>, u64) {
        let file = fs::File::open(path).expect("open");
        let len = file.metadata().expect("metadata").len();
        let mut r = Counting { inner: file, read: 0 };
        let out = read_state(&mut r, len, allowance, session, model, want);
        (out, r.read)
    }

    #[test]
    fn a_state_of_the_wrong_shape_or_size_is_a_miss_without_its_data_being_read() {
        let tier = DiskTier { dir: temp_dir("kv-header"), limit_bytes: 1 << 30 };
        tier.save("s", Part::State, MODEL, &cache(), "float32").expect("save");
        let path = tier.path("s");
        let len = fs::metadata(&path).expect("saved").len();
        let bytes = fs::read(&path).expect("read");
        let header = 8 + u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        assert!(len > header + 2 * 2 * 2 * 256 * 4 * 4, "the data is most of the file: {len} vs {header}");

        // The model it was saved for: read whole, and the same cache.
        let (out, read) = read_counted(&path, tier.limit_bytes, "s", MODEL, &shape());
        let restored = out.expect("the state is this model's");
        assert_eq!((restored.tokens(), restored.offset(), read), (&IDS[..], IDS.len(), len));

        // Each way the model differs from the header: a miss after the header alone.
        let differs: Vec<(&str, StateShape)> = vec![
            ("key/value heads", StateShape { kv_heads: 4, ..shape() }),
            ("head width", StateShape { head_dim: 8, ..shape() }),
            ("layer count", StateShape { kinds: vec![LayerKind::Full; 3], ..shape() }),
            ("layer kinds", StateShape { kinds: vec![LayerKind::Full, LayerKind::Rotating { window: 4 }], ..shape() }),
            ("dtype", StateShape { dtypes: vec![Dtype::Bfloat16, Dtype::Float16], ..shape() }),
            ("KV format", StateShape { format: KvFormat::bits_from_start(8), ..shape() }),
            ("context", StateShape { context_limit: IDS.len() - 1, ..shape() }),
        ];
        assert_eq!(differs.len(), 7);
        for (what, want) in &differs {
            let (out, read) = read_counted(&path, tier.limit_bytes, "s", MODEL, want);
            assert!(out.is_err(), "{what}: used");
            assert_eq!(read, header, "{what}: only the header was read");
        }
        // Another model's (other weights) or another chat's: the same.
        for (session, model) in [("s", "other-weights"), ("t", MODEL)] {
            let (out, read) = read_counted(&path, tier.limit_bytes, session, model, &shape());
            assert!(matches!(out, Err(Miss::Other(_))), "{session} {model}: {out:?}");
            assert_eq!(read, header);
        }
        // Larger than the allowance: refused before its first byte.
        let (out, read) = read_counted(&path, len - 1, "s", MODEL, &shape());
        assert!(matches!(&out, Err(Miss::Damaged(why)) if why.contains("more than")), "{out:?}");
        assert_eq!(read, 0);

        // A hostile header length (beyond the format's limit, or within it but
        // beyond any state's): the 8 bytes are read, nothing is allocated for it.
        for declared in [u64::MAX, 50 << 20] {
            let mut forged = declared.to_le_bytes().to_vec();
            forged.extend_from_slice(&bytes[8..]);
            fs::write(&path, &forged).expect("write");
            let (out, read) = read_counted(&path, tier.limit_bytes, "s", MODEL, &shape());
            assert!(matches!(&out, Err(Miss::Damaged(why)) if why.contains("header")), "{declared}: {out:?}");
            assert_eq!(read, 8, "{declared}");
        }
        let _ = fs::remove_dir_all(&tier.dir);
    }

    #[test]
    fn a_miss_for_other_settings_keeps_the_file_a_damaged_one_is_deleted() {
        let tier = DiskTier { dir: temp_dir("kv-refused"), limit_bytes: 1 << 30 };
        tier.save("s", Part::State, MODEL, &cache(), "float32").expect("save");
        let used = tier.load("s", Part::State, MODEL, &shape()).expect("a hit");
        assert_eq!(used.tokens(), &IDS[..]);
        assert!(tier.path("s").exists());
        assert!(tier.load("s", Part::State, "another model's key", &shape()).is_none());
        assert!(tier.path("s").exists(), "a state for another model stays: it serves that model when it is back");
        assert!(tier.load("s", Part::State, MODEL, &shape()).is_some(), "and still serves its own");
        let bytes = fs::read(tier.path("s")).unwrap();
        fs::write(tier.path("s"), &bytes[..bytes.len() / 2]).unwrap();
        assert!(tier.load("s", Part::State, MODEL, &shape()).is_none());
        assert!(!tier.path("s").exists(), "a damaged state is gone");
        let _ = fs::remove_dir_all(&tier.dir);
    }

    #[cfg(unix)]
    #[test]
    fn the_folder_is_0700_a_state_0600_and_a_partial_file_does_not_count() {
        use std::os::unix::fs::PermissionsExt;
        let tier = DiskTier { dir: temp_dir("kv-modes").join("kv-states"), limit_bytes: 1 << 30 };
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        tier.save("s", Part::State, MODEL, &cache(), "float32").expect("save");
        assert_eq!(mode(&tier.dir), 0o700);
        assert_eq!(mode(&tier.path("s")), 0o600);
        let one = tier.usage();
        assert_eq!(one.files, 1);
        // A save cut short leaves its partial file: not a state, not counted.
        fs::write(tier.dir.join(format!("0123456789abcdef.{PARTIAL}.{EXT}")), vec![0u8; 4096]).unwrap();
        assert_eq!(tier.usage(), one);
        // Turning the tier off clears both.
        assert_eq!(tier.clear().unwrap(), 2);
        assert_eq!(tier.usage().files, 0);
        let _ = fs::remove_dir_all(tier.dir.parent().unwrap());
    }
}
