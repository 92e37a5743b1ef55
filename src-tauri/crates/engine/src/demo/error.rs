//! What writing a demo model can fail with.

use std::path::PathBuf;

/// Errors of [`super::write_demo_model`] and of parsing its options.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A CLI-style option value that names no known arch / preset / bit width.
    #[error("unknown {what} `{given}` (expected one of: {expected})")]
    UnknownOption { what: &'static str, given: String, expected: &'static str },
    /// The spec asks for something the layout cannot hold (e.g. a group size
    /// that does not divide a layer's input width).
    #[error("invalid demo model spec: {reason}")]
    InvalidSpec { reason: String },
    /// Creating, writing or removing a file in the output folder failed.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// MLX refused an operation while making the weights.
    #[error("MLX error while {op} `{tensor}`: {source}")]
    Mlx {
        op: &'static str,
        tensor: String,
        #[source]
        source: mlx_rs::error::Exception,
    },
    /// MLX could not save a safetensors shard.
    #[error("cannot save {}: {source}", path.display())]
    Save {
        path: PathBuf,
        #[source]
        source: mlx_rs::error::IoError,
    },
    /// Training or serialising the BPE tokenizer failed.
    #[error("demo tokenizer: {source}")]
    Tokenizer {
        #[source]
        source: tokenizers::Error,
    },
    /// Serialising one of the JSON files failed.
    #[error("cannot serialise {file}: {source}")]
    Json {
        file: &'static str,
        #[source]
        source: serde_json::Error,
    },
}
