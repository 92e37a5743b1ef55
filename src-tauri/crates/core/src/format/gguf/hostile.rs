//! Hostile GGUF files (the `test-support` feature): each one lies in one
//! way, and says which typed error reading it must end in. The core tests
//! run them through [`read_gguf`], [`GgufFile::model`] and
//! [`GgufFile::vocab`]; the engine's and the app's tests run them through
//! their loaders, which must refuse them the same way and keep working.

use super::types::{GgmlType, MetaArray, MetaValue};
use super::write::{GgufWriter, TinyModel};
use super::{read_gguf, GgufFile};
use crate::format::error::FormatError;

/// One hostile file.
#[derive(Debug, Clone)]
pub struct HostileGguf {
    pub name: &'static str,
    pub bytes: Vec<u8>,
    /// Whether the first error (see [`HostileGguf::first_error`]) is the right one.
    pub expect: fn(&FormatError) -> bool,
}

impl HostileGguf {
    /// The first error of reading the header, then the model, then the
    /// tokenizer; `None` if the file passes all three (a corpus bug).
    pub fn first_error(&self) -> Option<FormatError> {
        let run = || -> Result<GgufFile, FormatError> {
            let file = read_gguf(&mut self.bytes.as_slice(), self.bytes.len() as u64)?;
            file.model()?;
            file.vocab()?;
            Ok(file)
        };
        run().err()
    }
}

fn gguf_says(e: &FormatError, needle: &str) -> bool {
    matches!(e, FormatError::Gguf { reason } if reason.contains(needle))
}

fn tensor_says(e: &FormatError, name: &str, needle: &str) -> bool {
    matches!(e, FormatError::GgufTensor { tensor, reason } if tensor == name && reason.contains(needle))
}

/// Where `needle` first occurs, plus `skip`.
fn find(bytes: &[u8], needle: &[u8], skip: usize) -> Option<usize> {
    bytes.windows(needle.len()).position(|w| w == needle).map(|at| at + needle.len() + skip)
}

/// `bytes` with `patch` written where `needle` ends, plus `skip`.
fn patched(bytes: &[u8], needle: &[u8], skip: usize, patch: &[u8]) -> Option<Vec<u8>> {
    let at = find(bytes, needle, skip)?;
    let mut out = bytes.to_vec();
    out.get_mut(at..at + patch.len())?.copy_from_slice(patch);
    Some(out)
}

/// The tiny llama every hostile file starts from, plus a few marked keys to
/// patch: a string, an array, a u8 and a bool.
fn base() -> Option<GgufWriter> {
    let mut w = TinyModel::default().writer()?;
    w.meta_str("hostile.s", "abcd")
        .meta("hostile.a", MetaValue::Array(MetaArray::U32(vec![1, 2, 3])))
        .meta("hostile.t", MetaValue::U8(7))
        .meta("hostile.b", MetaValue::Bool(true));
    Some(w)
}

fn bytes_with(edit: impl FnOnce(&mut GgufWriter)) -> Option<Vec<u8>> {
    let mut w = base()?;
    edit(&mut w);
    Some(w.to_bytes())
}

/// The corpus: at least 20 files, each refused with its own typed error.
pub fn hostile_corpus() -> Vec<HostileGguf> {
    corpus().unwrap_or_default()
}

fn corpus() -> Option<Vec<HostileGguf>> {
    let good = base()?.to_bytes();
    let infos_start = find(&good, b"hostile.b", 4 + 1)?;
    let mut c: Vec<HostileGguf> = Vec::new();
    let mut add = |name: &'static str, bytes: Vec<u8>, expect: fn(&FormatError) -> bool| {
        c.push(HostileGguf { name, bytes, expect });
    };

    // Truncated at several points.
    add("empty", Vec::new(), |e| gguf_says(e, "truncated"));
    add("truncated in the magic", good[..2].to_vec(), |e| gguf_says(e, "the magic needs 4 bytes"));
    add("truncated after the version", good[..8].to_vec(), |e| gguf_says(e, "the tensor count"));
    add("truncated in the metadata", good[..find(&good, b"tokenizer.ggml.tokens", 40)?].to_vec(), |e| {
        gguf_says(e, "truncated")
    });
    add("truncated in the tensor infos", good[..infos_start + 30].to_vec(), |e| gguf_says(e, "tensor info"));
    add("truncated in the tensor data", good[..good.len() - 40].to_vec(), |e| {
        tensor_says(e, "output_norm.weight", "past the end of the file")
    });

    // Magic and version.
    let mut magic = good.clone();
    magic[..4].copy_from_slice(b"GGML");
    add("bad magic", magic, |e| gguf_says(e, "not a GGUF file"));
    add("version 1", patched(&good, b"GGUF", 0, &1u32.to_le_bytes())?, |e| gguf_says(e, "version 1"));
    add("version 99", patched(&good, b"GGUF", 0, &99u32.to_le_bytes())?, |e| gguf_says(e, "version 99"));
    add("big-endian version", patched(&good, b"GGUF", 0, &3u32.to_be_bytes())?, |e| gguf_says(e, "big-endian"));

    // Counts that lie.
    add("huge tensor count", patched(&good, b"GGUF", 4, &(1u64 << 40).to_le_bytes())?, |e| {
        gguf_says(e, "the tensor count is 1099511627776, over the limit")
    });
    add("tensor count past the file", patched(&good, b"GGUF", 4, &100_000u64.to_le_bytes())?, |e| {
        gguf_says(e, "the tensor count is 100000, more than")
    });
    add("huge metadata count", patched(&good, b"GGUF", 12, &u64::MAX.to_le_bytes())?, |e| {
        gguf_says(e, "the metadata count")
    });
    add("metadata count past the file", patched(&good, b"GGUF", 12, &1_000_000u64.to_le_bytes())?, |e| {
        gguf_says(e, "more than")
    });

    // Lengths that lie.
    add("huge string length", patched(&good, b"hostile.s", 4, &u64::MAX.to_le_bytes())?, |e| {
        gguf_says(e, "metadata \"hostile.s\" is a string of 18446744073709551615 bytes, over the limit")
    });
    add("string length past the file", patched(&good, b"hostile.s", 4, &(1u64 << 23).to_le_bytes())?, |e| {
        gguf_says(e, "metadata \"hostile.s\" needs 8388608 bytes")
    });
    let key_at = find(&good, b"GGUF", 20)?;
    let mut key_len = good.clone();
    key_len.get_mut(key_at..key_at + 8)?.copy_from_slice(&(1u64 << 40).to_le_bytes());
    add("huge key length", key_len, |e| gguf_says(e, "metadata key 0 is a string"));
    add("huge array", patched(&good, b"hostile.a", 8, &(1u64 << 60).to_le_bytes())?, |e| {
        gguf_says(e, "over the limit")
    });
    add("array count past the file", patched(&good, b"hostile.a", 8, &(1u64 << 24).to_le_bytes())?, |e| {
        gguf_says(e, "claims 16777216 elements")
    });
    let deep = (0..6).fold(MetaArray::U8(vec![1]), |inner, _| MetaArray::Array(vec![inner]));
    add(
        "arrays nested too deep",
        bytes_with(|w| {
            w.meta("hostile.deep", MetaValue::Array(deep));
        })?,
        |e| gguf_says(e, "nests arrays deeper"),
    );
    add("unknown value type", patched(&good, b"hostile.t", 0, &13u32.to_le_bytes())?, |e| {
        gguf_says(e, "value type 13")
    });
    add("unknown array element type", patched(&good, b"hostile.a", 4, &77u32.to_le_bytes())?, |e| {
        gguf_says(e, "value type 77")
    });
    add("bool that is neither 0 nor 1", patched(&good, b"hostile.b", 4, &[2])?, |e| gguf_says(e, "stored as 2"));
    add("string that is not UTF-8", patched(&good, b"hostile.s", 12, &[0xff, 0xfe])?, |e| gguf_says(e, "not UTF-8"));
    let duplicate_key = {
        let bytes = good.clone();
        // Rename the last key to an earlier one of the same length.
        let at = bytes.windows(9).rposition(|k| k == b"hostile.b")?;
        let mut out = bytes.clone();
        out.get_mut(at..at + 9)?.copy_from_slice(b"hostile.t");
        out
    };
    add("duplicate metadata key", duplicate_key, |e| gguf_says(e, "appears twice"));

    // Tensor infos that lie.
    let f32s = |n: usize| vec![0u8; n * 4];
    add(
        "overlapping tensors",
        bytes_with(|w| {
            w.raw_tensor("hostile.x", &[16], GgmlType::F32.id(), f32s(16), Some(1 << 16));
            w.raw_tensor("hostile.y", &[16], GgmlType::F32.id(), f32s(16), Some((1 << 16) + 32));
        })?,
        |e| tensor_says(e, "hostile.y", "overlaps hostile.x"),
    );
    add(
        "tensor past the end of the file",
        bytes_with(|w| {
            w.raw_tensor("hostile.x", &[16], GgmlType::F32.id(), Vec::new(), Some(1 << 30));
        })?,
        |e| tensor_says(e, "hostile.x", "past the end of the file"),
    );
    add(
        "unaligned tensor offset",
        bytes_with(|w| {
            w.raw_tensor("hostile.x", &[16], GgmlType::F32.id(), f32s(16), Some((1 << 16) + 4));
        })?,
        |e| tensor_says(e, "hostile.x", "not a multiple of the alignment 32"),
    );
    add(
        "zero dimension",
        bytes_with(|w| {
            w.raw_tensor("hostile.x", &[16, 0], GgmlType::F32.id(), Vec::new(), None);
        })?,
        |e| tensor_says(e, "hostile.x", "dimension 1 is 0"),
    );
    add(
        "negative-looking dimension",
        bytes_with(|w| {
            w.raw_tensor("hostile.x", &[u64::MAX - 1], GgmlType::F32.id(), Vec::new(), None);
        })?,
        |e| tensor_says(e, "hostile.x", "beyond MLX's limit"),
    );
    let big = i32::MAX as u64;
    add(
        "dimensions whose product overflows",
        bytes_with(|w| {
            w.raw_tensor("hostile.x", &[big, big, big, big], GgmlType::F32.id(), Vec::new(), None);
        })?,
        |e| tensor_says(e, "hostile.x", "more than 2^64 elements"),
    );
    add(
        "five dimensions",
        bytes_with(|w| {
            w.raw_tensor("hostile.x", &[1, 1, 1, 1, 1], GgmlType::F32.id(), Vec::new(), None);
        })?,
        |e| tensor_says(e, "hostile.x", "5 dimensions"),
    );
    add(
        "quantized rows that are not whole blocks",
        bytes_with(|w| {
            w.raw_tensor("hostile.x", &[48, 2], GgmlType::Q8_0.id(), vec![0; 34 * 3], None);
        })?,
        |e| tensor_says(e, "hostile.x", "not whole Q8_0 blocks of 32"),
    );
    add(
        "duplicate tensor names",
        bytes_with(|w| {
            w.raw_tensor("output_norm.weight", &[64], GgmlType::F32.id(), f32s(64), None);
        })?,
        |e| tensor_says(e, "output_norm.weight", "appears twice"),
    );
    add(
        "alignment not a power of two",
        bytes_with(|w| {
            w.meta_u32("general.alignment", 48);
        })?,
        |e| gguf_says(e, "general.alignment"),
    );
    add(
        "alignment zero",
        bytes_with(|w| {
            w.meta_u32("general.alignment", 0);
        })?,
        |e| gguf_says(e, "general.alignment"),
    );
    // MLX honours the alignment only as a UINT32 (else it uses 32): a U64
    // one would have MLX read the tensors from other offsets than checked.
    add(
        "alignment as a U64",
        bytes_with(|w| {
            w.meta("general.alignment", MetaValue::U64(64));
        })?,
        |e| gguf_says(e, "general.alignment") && gguf_says(e, "only as a UINT32"),
    );
    add(
        "alignment of the wrong type",
        bytes_with(|w| {
            w.meta_str("general.alignment", "32");
        })?,
        |e| gguf_says(e, "general.alignment"),
    );

    // Readable, but not a model the engine can run.
    let q4k = bytes_with(|w| {
        w.remove_tensor("blk.0.attn_q.weight");
        w.raw_tensor("blk.0.attn_q.weight", &[256, 64], GgmlType::Q4K.id(), vec![0; 144 * 64], None);
    })?;
    add("a K-quant tensor (Q4_K)", q4k, |e| {
        matches!(e, FormatError::UnsupportedGgufType { tensor, ggml_type, supported }
            if tensor == "blk.0.attn_q.weight" && ggml_type == "Q4_K" && supported.contains("Q4_1"))
    });
    add(
        "an unknown ggml type",
        bytes_with(|w| {
            w.raw_tensor("hostile.x", &[16], 99, Vec::new(), None);
        })?,
        |e| matches!(e, FormatError::UnsupportedGgufType { ggml_type, .. } if ggml_type == "type 99"),
    );
    let many: Vec<String> = (0..65).map(|i| format!("t{i}")).collect();
    add(
        "a tokenizer larger than the embedding",
        bytes_with(|w| {
            w.meta_strings("tokenizer.ggml.tokens", &many).remove_meta("tokenizer.ggml.token_type");
        })?,
        |e| matches!(e, FormatError::GgufTokenizer { reason } if reason.contains("65 tokens")),
    );
    add(
        "an EOS id past the embedding",
        bytes_with(|w| {
            w.meta_u32("tokenizer.ggml.eos_token_id", 64);
        })?,
        |e| matches!(e, FormatError::GgufTokenizer { reason } if reason.contains("eos_token_id is 64")),
    );
    add(
        "a missing architecture key",
        bytes_with(|w| {
            w.remove_meta("llama.block_count");
        })?,
        |e| matches!(e, FormatError::MissingField { field, .. } if field == "llama.block_count"),
    );
    add(
        "an unknown architecture",
        bytes_with(|w| {
            w.meta_str("general.architecture", "rwkv6");
        })?,
        |e| {
            matches!(e, FormatError::UnsupportedGgufArchitecture { architecture, supported }
            if architecture == "rwkv6" && supported.contains("qwen3"))
        },
    );
    add(
        "no architecture",
        bytes_with(|w| {
            w.remove_meta("general.architecture");
        })?,
        |e| matches!(e, FormatError::MissingField { field, .. } if field == "general.architecture"),
    );
    add(
        "key/value heads that do not divide the heads",
        bytes_with(|w| {
            w.meta_u32("llama.attention.head_count_kv", 3);
        })?,
        |e| matches!(e, FormatError::BadField { field, .. } if field == "llama.attention.head_count_kv"),
    );
    add(
        "a hidden size the embedding does not have",
        bytes_with(|w| {
            w.meta_u32("llama.embedding_length", 128);
        })?,
        |e| matches!(e, FormatError::BadField { field, .. } if field == "llama.embedding_length"),
    );
    add(
        "a layer count of zero",
        bytes_with(|w| {
            w.meta_u32("llama.block_count", 0);
        })?,
        |e| {
            matches!(e, FormatError::GgufTensor { tensor, .. } if tensor.starts_with("blk."))
                || matches!(e, FormatError::BadField { field, .. } if field == "llama.block_count")
        },
    );
    add(
        "a layer past the block count",
        bytes_with(|w| {
            w.raw_tensor("blk.7.attn_norm.weight", &[64], GgmlType::F32.id(), f32s(64), None);
        })?,
        |e| tensor_says(e, "blk.7.attn_norm.weight", "has no place"),
    );
    add(
        "a tensor with no place in the model",
        bytes_with(|w| {
            w.raw_tensor("blk.0.attn_qkv.weight", &[64], GgmlType::F32.id(), f32s(64), None);
        })?,
        |e| tensor_says(e, "blk.0.attn_qkv.weight", "has no place"),
    );
    add(
        "rope frequency factors",
        bytes_with(|w| {
            w.raw_tensor("rope_freqs.weight", &[8], GgmlType::F32.id(), f32s(8), None);
        })?,
        |e| matches!(e, FormatError::UnsupportedRopeScaling { rope_type } if rope_type.contains("rope_freqs")),
    );
    add(
        "yarn rope scaling",
        bytes_with(|w| {
            w.meta_str("llama.rope.scaling.type", "yarn");
        })?,
        |e| matches!(e, FormatError::UnsupportedRopeScaling { rope_type } if rope_type == "yarn"),
    );
    let nested = MetaValue::Array(MetaArray::Array(vec![MetaArray::U8(vec![1])]));
    add(
        "an array of arrays (MLX refuses it)",
        bytes_with(|w| {
            w.meta("hostile.nested", nested);
        })?,
        |e| gguf_says(e, "array of arrays"),
    );
    add(
        "a quantized tensor not named .weight",
        bytes_with(|w| {
            w.raw_tensor("blk.0.attn_q.bias", &[64], GgmlType::Q8_0.id(), vec![0; 68], None);
        })?,
        |e| tensor_says(e, "blk.0.attn_q.bias", "does not end in .weight"),
    );
    Some(c)
}

/// Headers too large to keep in memory as a corpus entry, written as sparse
/// files (the zeros cost no disk): one whose header runs past
/// [`super::limits::MAX_HEADER_BYTES`] (an array of 20M U64s, 160 MB) and one
/// whose decoded size runs past [`super::limits::MAX_DECODED_BYTES`] (20M
/// empty strings: 160 MB in the file, three times that decoded). Each path
/// with the check its error must pass.
pub fn write_oversized_headers(
    dir: &std::path::Path,
) -> std::io::Result<Vec<(std::path::PathBuf, fn(&FormatError) -> bool)>> {
    use super::types::value_type as vt;
    use std::io::Write;
    const COUNT: u64 = 20_000_000;
    let mut out: Vec<(std::path::PathBuf, fn(&FormatError) -> bool)> = Vec::new();
    for (name, elem, says) in [
        ("huge-header.gguf", vt::U64, (|e| gguf_says(e, "header budget")) as fn(&FormatError) -> bool),
        ("huge-decoded-header.gguf", vt::STRING, |e| gguf_says(e, "decoded-bytes budget")),
    ] {
        let mut head = Vec::new();
        head.extend_from_slice(b"GGUF");
        head.extend_from_slice(&3u32.to_le_bytes());
        head.extend_from_slice(&0u64.to_le_bytes()); // tensors
        head.extend_from_slice(&1u64.to_le_bytes()); // metadata pairs
        let key = b"hostile.huge";
        head.extend_from_slice(&(key.len() as u64).to_le_bytes());
        head.extend_from_slice(key);
        head.extend_from_slice(&vt::ARRAY.to_le_bytes());
        head.extend_from_slice(&elem.to_le_bytes());
        head.extend_from_slice(&COUNT.to_le_bytes());
        let path = dir.join(name);
        let mut f = std::fs::File::create(&path)?;
        f.write_all(&head)?;
        // Every element is zeros: a U64 0, or an empty string's length 0.
        f.set_len(head.len() as u64 + COUNT * 8)?;
        out.push((path, says));
    }
    Ok(out)
}
