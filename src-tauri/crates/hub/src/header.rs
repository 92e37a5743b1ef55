//! The footprint of a remote model from config.json and the safetensors
//! headers alone (a few KB per file, fetched with Range requests), so the fit
//! verdict comes before a single weight byte is downloaded.
//!
//! The arithmetic mirrors `headroom_engine::inspect_model` (which reads the
//! same headers from disk): the same strict header checks, the same per-arch
//! config defaults (mlx-lm's), the same dropped tensors and activation dtype.
//! This crate cannot depend on the engine (MLX), so `src-tauri/tests/pull.rs`
//! checks that both give the identical footprint for the demo models.

use std::collections::BTreeMap;

use headroom_core::fit::ModelFootprint;
use serde::Deserialize;
use serde_json::Value;

/// Safetensors headers larger than this are refused (the format's own limit).
pub const MAX_HEADER_BYTES: u64 = 100 << 20;

/// One tensor of a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub dtype: String,
    pub shape: Vec<u64>,
}

#[derive(Debug, Deserialize)]
struct HeaderEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// Bytes per element of a safetensors dtype; `None` for one the engine does not know.
pub fn dtype_size(dtype: &str) -> Option<u64> {
    match dtype {
        "F32" | "U32" | "I32" => Some(4),
        "F16" | "BF16" | "U16" | "I16" => Some(2),
        "U8" | "I8" | "BOOL" => Some(1),
        "F64" | "I64" | "U64" => Some(8),
        _ => None,
    }
}

/// The header length a safetensors file declares in its first 8 bytes,
/// checked against the file's size.
pub fn header_len(prefix: [u8; 8], file_size: u64) -> Result<u64, String> {
    let len = u64::from_le_bytes(prefix);
    if len > file_size.saturating_sub(8) || len > MAX_HEADER_BYTES {
        return Err(format!("header length {len} exceeds the file ({file_size} bytes)"));
    }
    Ok(len)
}

/// Parses a header's JSON and checks, like the engine's loader, that every
/// tensor's bytes lie inside a file of `file_size` bytes and match its
/// dtype × shape. Sorted by tensor name (the engine's order).
pub fn parse_header(json: &[u8], file_size: u64) -> Result<BTreeMap<String, TensorInfo>, String> {
    let raw: BTreeMap<String, Value> =
        serde_json::from_slice(json).map_err(|e| format!("header is not valid JSON: {e}"))?;
    let data_len = file_size.saturating_sub(8 + json.len() as u64);
    let mut out = BTreeMap::new();
    for (name, value) in raw {
        if name == "__metadata__" {
            continue;
        }
        let e: HeaderEntry = serde_json::from_value(value).map_err(|err| format!("header entry {name}: {err}"))?;
        let [start, end] = e.data_offsets;
        if end > data_len || start > end {
            return Err(format!(
                "tensor {name} needs bytes {start}..{end} but the file holds {data_len} bytes of data (truncated?)"
            ));
        }
        let elem = dtype_size(&e.dtype).ok_or_else(|| format!("tensor {name} has unknown dtype {}", e.dtype))?;
        let numel = e.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        if numel.and_then(|n| n.checked_mul(elem)) != Some(end - start) {
            return Err(format!("tensor {name}: {} bytes for shape {:?} {}", end - start, e.shape, e.dtype));
        }
        out.insert(name, TensorInfo { dtype: e.dtype, shape: e.shape });
    }
    Ok(out)
}

/// The sizes a config.json gives, with mlx-lm's per-arch defaults (as the engine's `ModelConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSizes {
    pub model_type: String,
    pub layers: u64,
    pub attention_heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub hidden_size: u64,
    pub intermediate_size: u64,
    pub vocab_size: u64,
    pub max_context: Option<u64>,
    pub tie_word_embeddings: bool,
    /// Quantization bits, if quantized.
    pub bits: Option<u32>,
}

/// Reads the sizes from a parsed config.json. Architectures the engine
/// cannot run are refused here, before anything is downloaded.
pub fn config_sizes(config: &Value) -> Result<ConfigSizes, String> {
    let model_type = config["model_type"].as_str().ok_or("no \"model_type\"")?.to_owned();
    if !matches!(model_type.as_str(), "qwen2" | "qwen3" | "llama" | "mistral") {
        return Err(format!("model_type `{model_type}` is not one Headroom runs (qwen2, qwen3, llama, mistral)"));
    }
    let num = |key: &str| config[key].as_u64();
    let need = |key: &str| num(key).filter(|&n| n > 0).ok_or_else(|| format!("missing \"{key}\""));
    let hidden_size = need("hidden_size")?;
    let attention_heads = need("num_attention_heads")?;
    let tie = config["tie_word_embeddings"].as_bool();
    let (head_dim, kv_heads, tie) = match model_type.as_str() {
        // mlx-lm's qwen2 ignores any head_dim in the config.
        "qwen2" => (hidden_size / attention_heads, need("num_key_value_heads")?, tie.unwrap_or(true)),
        "qwen3" => (need("head_dim")?, need("num_key_value_heads")?, tie.ok_or("missing \"tie_word_embeddings\"")?),
        // llama, mistral (the same layout)
        _ => (
            num("head_dim").unwrap_or(hidden_size / attention_heads),
            num("num_key_value_heads").unwrap_or(attention_heads),
            tie.unwrap_or(true),
        ),
    };
    if kv_heads == 0 || attention_heads % kv_heads != 0 {
        return Err(format!(
            "num_attention_heads ({attention_heads}) must be a multiple of num_key_value_heads ({kv_heads})"
        ));
    }
    let quant =
        if config["quantization"].is_object() { &config["quantization"] } else { &config["quantization_config"] };
    Ok(ConfigSizes {
        model_type,
        layers: need("num_hidden_layers")?,
        attention_heads,
        kv_heads,
        head_dim,
        hidden_size,
        intermediate_size: need("intermediate_size")?,
        vocab_size: need("vocab_size")?,
        max_context: num("max_position_embeddings"),
        tie_word_embeddings: tie,
        bits: quant["bits"].as_u64().and_then(|b| u32::try_from(b).ok()),
    })
}

/// The footprint of a model: `headers` are the weight files' headers in the
/// engine's order (file names sorted). Counts what the loader keeps: RoPE
/// tables and a tied `lm_head` are dropped; the KV cache and activations use
/// the embedding's float dtype (a quantized embedding dequantizes to its
/// scales' dtype), as the engine's default (native) dtype does.
pub fn footprint(sizes: &ConfigSizes, headers: &[BTreeMap<String, TensorInfo>]) -> ModelFootprint {
    let mut weight_bytes = 0u64;
    let mut embed_float = None;
    let mut any_float = None;
    for header in headers {
        for (name, t) in header {
            if name.contains("self_attn.rotary_emb.inv_freq") || (sizes.tie_word_embeddings && name == "lm_head.weight")
            {
                continue;
            }
            let elem = dtype_size(&t.dtype).unwrap_or(0);
            let numel: u64 = t.shape.iter().product();
            weight_bytes = weight_bytes.saturating_add(numel.saturating_mul(elem));
            if matches!(t.dtype.as_str(), "F32" | "F16" | "BF16") {
                any_float.get_or_insert(elem);
                if name.starts_with("model.embed_tokens.") {
                    embed_float = Some(elem);
                }
            }
        }
    }
    ModelFootprint {
        weight_bytes,
        layers: sizes.layers,
        attention_heads: sizes.attention_heads,
        kv_heads: sizes.kv_heads,
        head_dim: sizes.head_dim,
        hidden_size: sizes.hidden_size,
        intermediate_size: sizes.intermediate_size,
        vocab_size: sizes.vocab_size,
        kv_bytes_per_element: embed_float.or(any_float).unwrap_or(4),
        max_context: sizes.max_context,
        // The engine's kernel choice (`QuantKernel::for_device`) without
        // asking MLX, which this crate does not link: MLX computes on Metal on
        // a Mac and on its CPU backend elsewhere. src-tauri/tests/pull.rs
        // holds the two equal on this machine.
        prefill_dequantizes: sizes.bits.is_some() && !cfg!(target_os = "macos"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(header: &str, data: u64) -> (Vec<u8>, u64) {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        let size = bytes.len() as u64 + data;
        (bytes, size)
    }

    #[test]
    fn headers_are_checked_like_the_loader_does() {
        let h = r#"{"__metadata__":{"format":"mlx"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},"b":{"dtype":"U32","shape":[4],"data_offsets":[12,28]}}"#;
        let (bytes, size) = file_with(h, 28);
        let prefix: [u8; 8] = bytes[..8].try_into().unwrap_or_default();
        let len = header_len(prefix, size).unwrap_or_else(|e| panic!("{e}"));
        let tensors = parse_header(&bytes[8..8 + len as usize], size).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tensors.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(tensors["a"], TensorInfo { dtype: "BF16".into(), shape: vec![2, 3] });

        // Data cut short: the last tensor runs past the end.
        let err = parse_header(h.as_bytes(), size - 1).err().unwrap_or_default();
        assert!(err.contains("tensor b needs bytes 12..28") && err.contains("truncated"), "{err}");
        let bad = r#"{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}}"#;
        assert!(parse_header(bad.as_bytes(), 100).err().unwrap_or_default().contains("10 bytes for shape [2, 3] BF16"));
        let bad = r#"{"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}}"#;
        assert!(parse_header(bad.as_bytes(), 100).err().unwrap_or_default().contains("unknown dtype Q9"));
        assert!(parse_header(b"{not json", 100).err().unwrap_or_default().contains("not valid JSON"));
        assert!(header_len(1_000u64.to_le_bytes(), 500)
            .err()
            .unwrap_or_default()
            .contains("exceeds the file (500 bytes)"));
    }

    #[test]
    fn the_footprint_drops_what_the_loader_drops_and_takes_the_embedding_dtype() {
        let config: Value = serde_json::from_str(
            r#"{"model_type":"llama","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,
                "num_hidden_layers":2,"intermediate_size":128,"vocab_size":100,"max_position_embeddings":4096,
                "quantization":{"group_size":64,"bits":4}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let sizes = config_sizes(&config).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((sizes.head_dim, sizes.kv_heads, sizes.tie_word_embeddings, sizes.bits), (16, 2, true, Some(4)));
        let t = |dtype: &str, shape: &[u64]| TensorInfo { dtype: dtype.into(), shape: shape.to_vec() };
        let header = BTreeMap::from([
            ("lm_head.weight".to_owned(), t("BF16", &[100, 64])),
            ("model.embed_tokens.scales".to_owned(), t("F16", &[100, 1])),
            ("model.embed_tokens.weight".to_owned(), t("U32", &[100, 8])),
            ("model.layers.0.self_attn.rotary_emb.inv_freq".to_owned(), t("F32", &[8])),
            ("model.norm.weight".to_owned(), t("F32", &[64])),
        ]);
        let fp = footprint(&sizes, &[header]);
        assert_eq!(fp.weight_bytes, 100 * 2 + 100 * 8 * 4 + 64 * 4);
        assert_eq!(fp.kv_bytes_per_element, 2, "the embedding's scales are F16");
        assert_eq!(fp.max_context, Some(4096));

        let err = config_sizes(&serde_json::json!({"model_type": "gpt2"})).err().unwrap_or_default();
        assert!(err.contains("model_type `gpt2` is not one Headroom runs"), "{err}");
        let err =
            config_sizes(&serde_json::json!({"model_type": "qwen2", "hidden_size": 64})).err().unwrap_or_default();
        assert_eq!(err, "missing \"num_attention_heads\"");
    }
}
