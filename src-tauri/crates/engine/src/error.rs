//! The engine's typed errors.

use std::path::PathBuf;

use headroom_core::format::FormatError;

/// Everything the engine can fail with; variants carry what the user needs to act.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// MLX itself refused an operation (shape mismatch, unsupported dtype, …).
    #[error("MLX error in {op}: {source}")]
    Mlx {
        op: &'static str,
        #[source]
        source: mlx_rs::error::Exception,
    },
    /// A quantization parameter MLX does not support.
    #[error("unsupported quantization: {bits}-bit with group size {group_size} (supported: bits 2, 3, 4, 5, 6, 8; group sizes 32, 64, 128)")]
    UnsupportedQuantization { bits: i32, group_size: i32 },
    /// A tensor whose shape does not fit the operation it is used in.
    #[error("shape mismatch in {what}: expected {expected}, found {found:?}")]
    Shape { what: &'static str, expected: String, found: Vec<i32> },
    /// The model folder has no `config.json`.
    #[error("no config.json in model folder {dir}")]
    MissingConfig { dir: PathBuf },
    /// A file could not be read (permissions, I/O error).
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A JSON file beside the model (tokenizer_config.json) is not valid or lacks a field.
    #[error("invalid {path}: {reason}")]
    InvalidConfig { path: PathBuf, reason: String },
    /// `config.json` or the shard index cannot be used: the reason names the
    /// field (an unsupported `model_type`, quantization mode or RoPE scaling
    /// among them).
    #[error("{}: {source}", path.display())]
    Format {
        path: PathBuf,
        #[source]
        source: FormatError,
    },
    /// The folder has neither `model.safetensors` nor `model.safetensors.index.json`.
    #[error("no weights in {dir}: expected model.safetensors or model.safetensors.index.json")]
    MissingWeights { dir: PathBuf },
    /// A shard the index names is not in the folder.
    #[error("weight file {file} is listed in {index} but missing")]
    MissingShard { file: PathBuf, index: PathBuf },
    /// A weight file whose header is malformed or lies about its data (truncated, overlapping, wrong sizes).
    #[error("corrupt weight file {}: {source}", file.display())]
    Weights {
        file: PathBuf,
        #[source]
        source: FormatError,
    },
    /// A weight file MLX could not read although its header was sound.
    #[error("corrupt or truncated weight file {file}: {reason}")]
    CorruptWeights { file: PathBuf, reason: String },
    /// A parameter the architecture needs that no weight file holds.
    #[error("missing tensor {tensor} (looked in {file})")]
    MissingTensor { tensor: String, file: PathBuf },
    /// A tensor in a weight file that the architecture has no place for.
    #[error("unexpected tensor {tensor} in {file}")]
    UnexpectedTensor { tensor: String, file: PathBuf },
    /// The same tensor appears twice (in two shards, or listed twice).
    #[error("tensor {tensor} appears in both {first} and {second}")]
    DuplicateTensor { tensor: String, first: PathBuf, second: PathBuf },
    /// A tensor whose shape is not what the config implies.
    #[error("tensor {tensor} in {file} has shape {found:?}, expected {expected:?}")]
    WrongShape { tensor: String, file: PathBuf, expected: Vec<i32>, found: Vec<i32> },
    /// A tensor whose dtype cannot be used where it sits.
    #[error("tensor {tensor} in {file} has dtype {found}, expected {expected}")]
    WrongDtype { tensor: String, file: PathBuf, expected: String, found: String },
    /// A grammar (JSON schema, Lark, regex) that cannot be used, or that
    /// failed while generating: the run ends, the engine goes on.
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
    /// A sampling or generation setting outside its valid range.
    #[error("invalid generation setting {name} = {value}: {reason}")]
    InvalidSetting { name: &'static str, value: String, reason: &'static str },
    /// A prompt with no tokens: there is nothing to condition on.
    #[error("empty prompt: at least one token is needed")]
    EmptyPrompt,
    /// A prompt id the embedding has no row for. MLX's gather does not
    /// check bounds: it would read whatever memory follows the table, and
    /// the logits would differ from run to run.
    #[error("token id {token} is outside the model's vocabulary of {vocab_size}")]
    TokenOutOfVocab { token: u32, vocab_size: i32 },
    /// The tokenizer can produce ids the model's embedding has no row for
    /// (an out-of-bounds read in MLX): the tokenizer belongs to another model.
    #[error("the tokenizer in {dir} has ids up to {max_token_id} but the model's embedding has {embedding_rows} rows: they do not belong together")]
    VocabMismatch { dir: PathBuf, max_token_id: u32, embedding_rows: i32 },
    /// The model folder has no `tokenizer.json`.
    #[error("no tokenizer.json in model folder {dir}")]
    MissingTokenizer { dir: PathBuf },
    /// `tokenizer.json` could not be parsed, or encoding/decoding failed.
    #[error("tokenizer {path}: {source}")]
    Tokenizer {
        path: PathBuf,
        #[source]
        source: tokenizers::Error,
    },
    /// A chat was asked of a model whose folder has no chat template (a base model).
    #[error("no chat template in {dir} (looked for chat_template.jinja and tokenizer_config.json \"chat_template\")")]
    NoChatTemplate { dir: PathBuf },
    /// The chat template does not parse, or it refused the conversation (`raise_exception`).
    #[error("chat template: {source}")]
    TemplateRender {
        #[source]
        source: minijinja::Error,
    },
    /// The prompt does not fit in the context limit the model was loaded with.
    #[error("prompt of {prompt_tokens} tokens exceeds the context limit of {limit} tokens")]
    ContextOverflow { prompt_tokens: usize, limit: usize },
    /// A generate/unload request while no model is loaded.
    #[error("no model is loaded")]
    NoModelLoaded,

    /// A request admitted for one model found another loaded when it ran
    /// (`GenerateRequest::load`).
    #[error(
        "the model this request was sent to was replaced before it ran (another model is loaded now): send it again"
    )]
    ModelChanged,

    /// A KV-cache format this model (or MLX) cannot use.
    #[error("KV cache: {source}")]
    KvFormat {
        #[source]
        source: headroom_core::kv::KvFormatError,
    },
    /// Loading failed after the previous model was unloaded: no model is loaded now.
    #[error("{source}; the previous model had already been unloaded, so no model is loaded now")]
    NothingLoaded {
        #[source]
        source: Box<EngineError>,
    },
    /// The control connection to a peer Mac failed or said something
    /// unexpected (unreachable, silent, another protocol).
    #[error("two Macs: {reason}")]
    Peer { reason: String },
    /// Pairing with a lender failed its check: the code typed was not the
    /// one it shows (or someone between the Macs does not know it).
    #[error("wrong pairing code")]
    PairingCode,
    /// The peer's key is not the one this Mac pinned when they paired (or
    /// it never paired with it).
    #[error("the Mac at {peer} {reason}")]
    PeerNotTrusted { peer: String, reason: String },
    /// The peer Mac refused the placement, with its reason (its own fit
    /// verdict and numbers, a missing copy of the model).
    #[error("the Mac at {peer} refused: {message}")]
    PeerRefused { peer: String, message: String },
    /// A hand-off to the peer failed mid-answer (it was killed, its network
    /// dropped, or it stopped answering): the ring is gone for this
    /// process; what was generated before stands.
    #[error("the peer Mac is gone: {reason}")]
    PeerLost { reason: String },
    /// A placement with a field out of bounds (a lender checks every field
    /// before it reads or sizes anything from one): the field, and why.
    #[error("the placement's `{field}` is refused: {reason}")]
    BadPlacement { field: &'static str, reason: String },
    /// The peer answered the placement but never joined MLX's ring within
    /// the deadline: nothing is placed, the engine goes on without it.
    #[error("the Mac at {peer} did not join the ring within {secs} s: the model is not split across two Macs")]
    PeerRingTimeout { peer: String, secs: u64 },
    /// An architecture the engine does not split across two Macs yet.
    #[error("{model_type} models do not run across two Macs yet (only full-attention decoders: llama, mistral, qwen2, qwen3, qwen3_moe)")]
    PeerUnsupported { model_type: String },
    /// A draft model that cannot propose to the loaded one.
    #[error("cannot use {} as a draft model: {reason}", path.display())]
    DraftModel { path: std::path::PathBuf, reason: String },
    /// A bug (a panic) inside the engine thread; the thread survives it.
    #[error("internal error during {during}: {message}")]
    Panicked { during: &'static str, message: String },
    /// The engine thread has stopped (it panicked or was shut down).
    #[error("the engine thread has stopped")]
    EngineStopped,
    /// A benchmark was stopped (cancelled, or its listener went away) before its last run.
    #[error("the benchmark was cancelled")]
    BenchCancelled,
    /// A benchmark case needs more cache positions than the model was loaded for.
    #[error(
        "the bench case needs {} cache positions (depth {depth} + prompt {prompt} + generated {generated} − 1), beyond the context limit of {limit} tokens the model was loaded with",
        depth + prompt + generated - 1
    )]
    BenchContext { depth: usize, prompt: usize, generated: usize, limit: usize },
    /// Unloading the old model did not give its memory back (something still
    /// holds its arrays), so the next model was not loaded on top of it.
    #[error(
        "the unloaded model's memory did not come back: MLX's active memory fell by {:.1} MB of the {:.1} MB it held; nothing new was loaded",
        *returned_bytes as f64 / 1e6,
        *expected_bytes as f64 / 1e6
    )]
    MemoryNotReturned { expected_bytes: u64, returned_bytes: u64 },
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Attaches the name of the operation to an MLX exception.
pub(crate) trait MlxContext<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T> MlxContext<T> for std::result::Result<T, mlx_rs::error::Exception> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|source| EngineError::Mlx { op, source })
    }
}
