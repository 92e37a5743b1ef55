//! GGUF (llama.cpp's single-file format), read from its header alone: the
//! metadata, the tensor infos, and what they mean for the engine (a
//! [`GgufModel`]: the config, the tensors as MLX will hold them under Hugging
//! Face names) and for the tokenizer (a [`GgufVocab`]).
//!
//! - [`read_gguf`] reads the header and stops where the tensor data starts;
//!   every count, length and offset is checked against the file's size and
//!   against [`limits`] before anything is allocated;
//! - [`GgufFile::model`] says whether the engine can run the file, and how;
//! - [`GgufFile::vocab`] reads the `tokenizer.*` keys.
//!
//! MLX's own GGUF reader (`mlx_load_gguf`) loads the data; this module must
//! describe exactly the arrays it returns: F32 and F16 as they are, BF16
//! widened to F16, Q4_0/Q4_1/Q8_0 as MLX affine triples (`.weight` packed
//! u32, `.scales` and `.biases` f16, group 32), shapes reversed from GGUF's
//! innermost-first order.

mod model;
mod read;
mod types;
pub mod vocab;

#[cfg(any(test, feature = "test-support"))]
pub mod hostile;
#[cfg(any(test, feature = "test-support"))]
pub mod write;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use model::{GgufArrayName, GgufModel, SUPPORTED_ARCHITECTURES};
pub use types::{value_type, GgmlType, MetaArray, MetaValue};
pub use vocab::GgufVocab;

use super::error::Result;

/// The first four bytes of every GGUF file.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Where tensor data is aligned unless `general.alignment` says otherwise.
pub const DEFAULT_ALIGNMENT: u64 = 32;
pub const ALIGNMENT_KEY: &str = "general.alignment";
pub const ARCHITECTURE_KEY: &str = "general.architecture";

/// Bounds on what a header may declare, far above any real file (the
/// largest public GGUFs have a few thousand tensors, a few dozen keys,
/// vocabularies of 262144 and chat templates of tens of kilobytes) and low
/// enough that a lying count is refused before it costs memory.
pub mod limits {
    pub const MAX_TENSORS: u64 = 1 << 20;
    pub const MAX_METADATA: u64 = 1 << 20;
    /// GGUF's own limit on a key.
    pub const MAX_KEY_BYTES: u64 = 1 << 16;
    /// ggml names tensors in 64 bytes; some writers go further.
    pub const MAX_TENSOR_NAME_BYTES: u64 = 1 << 10;
    pub const MAX_STRING_BYTES: u64 = 1 << 24;
    pub const MAX_ARRAY_LEN: u64 = 1 << 26;
    /// An array of arrays of arrays; no writer nests deeper (MLX reads one level).
    pub const MAX_ARRAY_DEPTH: u32 = 3;
    /// ggml's `GGML_MAX_DIMS`.
    pub const MAX_DIMS: u32 = 4;
    pub const MAX_ALIGNMENT: u64 = 1 << 20;
    /// The whole header (metadata and tensor infos): the largest public
    /// GGUFs' headers are a few MB (vocabularies, chat templates).
    pub const MAX_HEADER_BYTES: u64 = 128 << 20;
    /// What reading the header may allocate: an element's decoded size can
    /// be three times its bytes in the file (an empty string is 8 bytes
    /// there, a 24-byte `String` here), and every model listing reads it.
    pub const MAX_DECODED_BYTES: u64 = 256 << 20;
}

/// One tensor info, checked: inside the file, aligned, not overlapping another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensor {
    pub name: String,
    /// GGUF's order: innermost (contiguous) dimension first; 1 to 4 dims,
    /// each from 1 to `i32::MAX`.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Absolute byte offset of its data in the file.
    pub offset: u64,
    /// Bytes of data (0 for a type whose block size is unknown: `GgmlType::Other`).
    pub nbytes: u64,
}

impl GgufTensor {
    /// The shape in MLX's (row-major, outermost-first) order.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    /// Elements (checked to fit u64 when read).
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A GGUF file's header.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufFile {
    /// 2 or 3.
    pub version: u32,
    pub metadata: BTreeMap<String, MetaValue>,
    /// In file order.
    pub tensors: Vec<GgufTensor>,
    /// A power of two; `general.alignment` or 32.
    pub alignment: u64,
    /// Absolute offset where the tensor data starts.
    pub data_offset: u64,
}

impl GgufFile {
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    pub fn tensor(&self, name: &str) -> Option<&GgufTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// `general.architecture`, when it is a string.
    pub fn architecture(&self) -> Option<&str> {
        self.get(ARCHITECTURE_KEY).and_then(MetaValue::as_str)
    }
}

/// Reads the header of a GGUF file of `file_len` bytes from its start,
/// never its tensor data: magic, version (2 or 3), counts, metadata (every
/// value type, arrays nested up to [`limits::MAX_ARRAY_DEPTH`]), tensor
/// infos, alignment and data offset. A tensor of a type MLX cannot load is
/// read (so [`GgufFile::model`] can name it), not refused here.
pub fn read_gguf(reader: &mut impl std::io::Read, file_len: u64) -> Result<GgufFile> {
    read::read(reader, file_len)
}
