//! What a GGUF header means for the engine: whether it can run the file at
//! all (architecture, tensor types, RoPE, tokenizer size), the
//! [`ModelConfig`] a config.json would give, and the tensors as MLX's GGUF
//! reader returns them, renamed to the Hugging Face names the engine's
//! models take, so the loader, the fit check and the model list treat a
//! GGUF exactly like the equivalent mlx-community folder.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::types::{GgmlType, MetaArray, MetaValue};
use super::{GgufFile, GgufTensor, ARCHITECTURE_KEY};
use crate::format::config::ModelConfig;
use crate::format::error::{FormatError, Result};
use crate::format::quant::{LayerQuant, QuantParams, Quantization};
use crate::format::safetensors::{Dtype, Header, TensorInfo};

/// The architectures the engine runs from a GGUF file (llama.cpp writes
/// Llama, Mistral and SmolLM as `llama`).
pub const SUPPORTED_ARCHITECTURES: [&str; 3] = ["llama", "qwen2", "qwen3"];

/// What errors about metadata name as their file.
const GGUF: &str = "GGUF metadata";
/// MLX's affine group for every GGUF quantized type it maps.
const GROUP: i32 = 32;

/// One array `mlx_load_gguf` returns, and the name the engine takes it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufArrayName {
    /// MLX's key: `blk.0.attn_q.weight`, `blk.0.attn_q.scales`, …
    pub mlx: String,
    /// The Hugging Face name: `model.layers.0.self_attn.q_proj.weight`, …
    pub hf: String,
}

/// A GGUF file as the engine will run it.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufModel {
    /// What the equivalent config.json says; `quantization` describes the
    /// storage of each layer (see [`GgufFile::model`]).
    pub config: ModelConfig,
    /// The arrays as MLX holds them, under Hugging Face names, with MLX's
    /// dtypes and shapes; offsets are consecutive (never used to read data).
    pub header: Header,
    /// Every array MLX returns, with its Hugging Face name.
    pub arrays: Vec<GgufArrayName>,
    /// Hugging Face tensors whose rows llama.cpp's converter permuted for
    /// its RoPE layout, and the head count to undo it with (llama only:
    /// q_proj by the attention heads, k_proj by the key/value heads).
    pub unpermute: Vec<(String, i32)>,
}

/// llama.cpp's per-block names, and the Hugging Face module each is.
const BLOCK_NAMES: [(&str, &str); 11] = [
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
];

/// config.json's field, and the `<arch>.` key that gives it.
const CONFIG_KEYS: [(&str, &str); 9] = [
    ("hidden_size", "embedding_length"),
    ("num_hidden_layers", "block_count"),
    ("intermediate_size", "feed_forward_length"),
    ("num_attention_heads", "attention.head_count"),
    ("num_key_value_heads", "attention.head_count_kv"),
    ("head_dim", "attention.key_length"),
    ("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
    ("max_position_embeddings", "context_length"),
    ("rope_theta", "rope.freq_base"),
];

/// The Hugging Face module (without `.weight`/`.bias`) of a GGUF tensor
/// base name, or `None` if the architecture has no such tensor.
fn hf_module(base: &str, layers: u64) -> Option<String> {
    match base {
        "token_embd" => return Some("model.embed_tokens".into()),
        "output_norm" => return Some("model.norm".into()),
        "output" => return Some("lm_head".into()),
        _ => {}
    }
    let rest = base.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    // Plain decimal only: "01" or "+1" would alias layer 1.
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) || (layer.len() > 1 && layer.starts_with('0')) {
        return None;
    }
    let index: u64 = layer.parse().ok().filter(|&i| i < layers)?;
    let module = BLOCK_NAMES.iter().find(|(g, _)| *g == part)?.1;
    Some(format!("model.layers.{index}.{module}"))
}

fn bad(field: impl Into<String>, value: impl std::fmt::Display, expected: impl Into<String>) -> FormatError {
    FormatError::bad(GGUF, field, value, expected)
}

/// Short form of a value for an error message (never a whole vocabulary).
fn show(v: &MetaValue) -> String {
    match v {
        MetaValue::String(s) if s.len() > 40 => format!("a string of {} bytes", s.len()),
        MetaValue::String(s) => format!("{s:?}"),
        MetaValue::Array(a) => format!("an array of {} {}", a.len(), a.element_name()),
        other => format!("{other:?}"),
    }
}

impl GgufFile {
    fn arch_key(&self, arch: &str, suffix: &str) -> (String, Option<&MetaValue>) {
        let key = format!("{arch}.{suffix}");
        let v = self.metadata.get(&key);
        (key, v)
    }

    /// An `<arch>.` integer, if present.
    fn arch_int(&self, arch: &str, suffix: &str) -> Result<Option<u64>> {
        match self.arch_key(arch, suffix) {
            (_, None) => Ok(None),
            (key, Some(v)) => v.as_u64().map(Some).ok_or_else(|| bad(key, show(v), "a whole number")),
        }
    }

    fn arch_float(&self, arch: &str, suffix: &str) -> Result<Option<f64>> {
        match self.arch_key(arch, suffix) {
            (_, None) => Ok(None),
            (key, Some(v)) => v.as_f64().map(Some).ok_or_else(|| bad(key, show(v), "a number")),
        }
    }

    /// Whether the engine can run this file, and how: see [`GgufModel`].
    /// Refused before any data is read: an architecture the engine does not
    /// run, a tensor type MLX cannot load, a tensor with no place in the
    /// model, RoPE scaling the engine cannot express, metadata MLX's reader
    /// rejects (nested arrays), a tokenizer larger than the embedding.
    pub fn model(&self) -> Result<GgufModel> {
        let arch = match self.get(ARCHITECTURE_KEY) {
            None => {
                return Err(FormatError::MissingField {
                    file: GGUF,
                    field: ARCHITECTURE_KEY.into(),
                    model_type: "every model".into(),
                })
            }
            Some(v) => v.as_str().ok_or_else(|| bad(ARCHITECTURE_KEY, show(v), "a string"))?,
        };
        if !SUPPORTED_ARCHITECTURES.contains(&arch) {
            return Err(FormatError::UnsupportedGgufArchitecture {
                architecture: arch.to_owned(),
                supported: SUPPORTED_ARCHITECTURES.join(", "),
            });
        }
        // MLX's reader reads the metadata too, and throws on nested arrays.
        if let Some((key, _)) = self.metadata.iter().find(|(_, v)| matches!(v, MetaValue::Array(MetaArray::Array(_)))) {
            return Err(FormatError::Gguf {
                reason: format!("metadata \"{key}\" is an array of arrays, which MLX's GGUF reader refuses"),
            });
        }
        for t in &self.tensors {
            check_loadable(t)?;
        }
        if self.tensor("rope_freqs.weight").is_some() {
            return Err(FormatError::UnsupportedRopeScaling {
                rope_type: "rope_freqs.weight (per-frequency factors, e.g. Llama 3.1's llama3 scaling, in a GGUF)"
                    .into(),
            });
        }
        let config = self.config(arch)?;
        self.check_tokenizer_fits(config.text.vocab_size)?;
        let text = &config.text;
        let layers = u64::try_from(text.num_hidden_layers).unwrap_or(0);

        let mut header = Header::default();
        let mut arrays = Vec::new();
        let mut unpermute = Vec::new();
        let mut at = 0u64;
        let mut quantized: BTreeMap<String, QuantParams> = BTreeMap::new();
        let mut dense: Vec<String> = Vec::new();
        for t in &self.tensors {
            let (base, suffix) = t
                .name
                .rsplit_once('.')
                .filter(|(_, s)| *s == "weight" || *s == "bias")
                .ok_or_else(|| no_place(t, arch))?;
            let module = hf_module(base, layers).ok_or_else(|| no_place(t, arch))?;
            let mut add = |mlx: String, hf: String, dtype: Dtype, shape: Vec<u64>| {
                // Within the file's size (read checked it), so never saturates.
                let bytes = shape.iter().fold(dtype.size(), |acc, &d| acc.saturating_mul(d));
                let end = at.saturating_add(bytes);
                header.tensors.insert(hf.clone(), TensorInfo { dtype, shape, data_offsets: (at, end) });
                at = end;
                arrays.push(GgufArrayName { mlx, hf });
            };
            let mut names = vec![format!("{module}.{suffix}")];
            let shape = t.shape();
            match t.ggml_type.mlx_bits() {
                Some(bits) => {
                    let (last, lead) = shape.split_last().map(|(l, r)| (*l, r.to_vec())).unwrap_or_default();
                    let with = |n: u64| [lead.as_slice(), &[n]].concat();
                    let words = last * u64::try_from(bits).unwrap_or(0) / 32;
                    let groups = last / GROUP as u64;
                    add(t.name.clone(), format!("{module}.weight"), Dtype::U32, with(words));
                    add(format!("{base}.scales"), format!("{module}.scales"), Dtype::F16, with(groups));
                    add(format!("{base}.biases"), format!("{module}.biases"), Dtype::F16, with(groups));
                    names.extend([format!("{module}.scales"), format!("{module}.biases")]);
                    quantized.insert(module.clone(), QuantParams { group_size: GROUP, bits });
                }
                None => {
                    // MLX widens BF16 to F16 on reading (gguf_tensor_to_f16).
                    let dtype = if t.ggml_type == GgmlType::F32 { Dtype::F32 } else { Dtype::F16 };
                    add(t.name.clone(), format!("{module}.{suffix}"), dtype, shape.clone());
                    if suffix == "weight" && shape.len() >= 2 {
                        dense.push(module.clone());
                    }
                }
            }
            if arch == "llama" {
                let heads = if module.ends_with(".self_attn.q_proj") {
                    Some(text.num_attention_heads)
                } else if module.ends_with(".self_attn.k_proj") {
                    Some(text.num_key_value_heads)
                } else {
                    None
                };
                if let Some(heads) = heads {
                    unpermute.extend(names.into_iter().map(|n| (n, heads)));
                }
            }
        }
        let config = ModelConfig { quantization: quantization(&quantized, &dense), ..config };
        Ok(GgufModel { config, header, arrays, unpermute })
    }

    /// The config.json the metadata amounts to, read by the same code (and
    /// so with the same mlx-lm defaults and checks) as a real one; errors
    /// name the GGUF key rather than config.json's field.
    fn config(&self, arch: &str) -> Result<ModelConfig> {
        let mut obj = Map::new();
        obj.insert("model_type".into(), json!(arch));
        for (field, suffix) in CONFIG_KEYS {
            let value = if matches!(field, "rms_norm_eps" | "rope_theta") {
                self.arch_float(arch, suffix)?.map(|x| json!(x))
            } else {
                self.arch_int(arch, suffix)?.map(|n| json!(n))
            };
            if let Some(v) = value {
                obj.insert(field.into(), v);
            }
        }
        if let (Some(k), Some(v)) =
            (self.arch_int(arch, "attention.key_length")?, self.arch_int(arch, "attention.value_length")?)
        {
            if k != v {
                let (key, _) = self.arch_key(arch, "attention.value_length");
                return Err(bad(
                    key,
                    v,
                    format!("attention.key_length ({k}): the engine's attention has one head size"),
                ));
            }
        }
        let embed = self.tensor("token_embd.weight").ok_or_else(|| FormatError::GgufTensor {
            tensor: "token_embd.weight".into(),
            reason: "is missing: the model has no token embedding".into(),
        })?;
        let [hidden, rows] = embed.dims[..] else {
            return Err(FormatError::GgufTensor {
                tensor: embed.name.clone(),
                reason: format!("has dimensions {:?}, not [hidden, vocabulary]", embed.dims),
            });
        };
        if let Some(declared) = obj.get("hidden_size").and_then(Value::as_u64) {
            if declared != hidden {
                let (key, _) = self.arch_key(arch, "embedding_length");
                return Err(bad(key, declared, format!("token_embd.weight's width ({hidden})")));
            }
        }
        if let Some(declared) = self.arch_int(arch, "vocab_size")? {
            if declared != rows {
                let (key, _) = self.arch_key(arch, "vocab_size");
                return Err(bad(key, declared, format!("token_embd.weight's rows ({rows})")));
            }
        }
        obj.insert("vocab_size".into(), json!(rows));
        obj.insert("tie_word_embeddings".into(), json!(self.tensor("output.weight").is_none()));
        if arch == "llama" && self.tensor("blk.0.attn_q.bias").is_some() {
            obj.insert("attention_bias".into(), json!(true));
        }
        let (scaling_key, scaling) = self.arch_key(arch, "rope.scaling.type");
        match scaling.map(|v| v.as_str().ok_or_else(|| bad(scaling_key.clone(), show(v), "a string"))).transpose()? {
            None | Some("none") => {}
            Some("linear") => {
                let factor = self.arch_float(arch, "rope.scaling.factor")?;
                obj.insert("rope_scaling".into(), json!({"type": "linear", "factor": factor}));
            }
            Some(other) => return Err(FormatError::UnsupportedRopeScaling { rope_type: other.to_owned() }),
        }
        let ids = ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"];
        let mut eos: Vec<u64> = ids.iter().filter_map(|k| self.get(k).and_then(MetaValue::as_u64)).collect();
        eos.dedup();
        obj.insert("eos_token_id".into(), json!(eos));
        let config = ModelConfig::from_object(&obj, GGUF).map_err(|e| self.rename_field(arch, e))?;
        if let Some(dims) = self.arch_int(arch, "rope.dimension_count")? {
            if dims != u64::try_from(config.text.head_dim).unwrap_or(0) {
                let (key, _) = self.arch_key(arch, "rope.dimension_count");
                return Err(bad(
                    key,
                    dims,
                    format!("the head size ({}): the engine rotates whole heads", config.text.head_dim),
                ));
            }
        }
        Ok(config)
    }

    /// An error about config.json's `field` becomes one about the GGUF key
    /// that gave it.
    fn rename_field(&self, arch: &str, e: FormatError) -> FormatError {
        let key = |field: &str| -> String {
            if let Some((_, suffix)) = CONFIG_KEYS.iter().find(|(f, _)| *f == field) {
                return format!("{arch}.{suffix}");
            }
            match field {
                "vocab_size" => "token_embd.weight (rows)".into(),
                "rope_scaling.factor" => format!("{arch}.rope.scaling.factor"),
                other => other.to_owned(),
            }
        };
        match e {
            FormatError::MissingField { field, model_type, .. } => {
                FormatError::MissingField { file: GGUF, field: key(&field), model_type }
            }
            FormatError::BadField { field, value, expected, .. } => {
                FormatError::BadField { file: GGUF, field: key(&field), value, expected }
            }
            other => other,
        }
    }

    /// The tokenizer must not name a row the embedding does not have.
    fn check_tokenizer_fits(&self, rows: i32) -> Result<()> {
        let rows = u64::try_from(rows).unwrap_or(0);
        if let Some(tokens) = self.get("tokenizer.ggml.tokens").and_then(MetaValue::as_array) {
            if tokens.len() as u64 > rows {
                return Err(FormatError::GgufTokenizer {
                    reason: format!("{} tokens, but the embedding has {rows} rows", tokens.len()),
                });
            }
        }
        for key in super::vocab::SPECIAL_ID_KEYS {
            if let Some(id) = self.get(key).and_then(MetaValue::as_u64) {
                if id >= rows {
                    return Err(FormatError::GgufTokenizer {
                        reason: format!("{key} is {id}, but the embedding has {rows} rows"),
                    });
                }
            }
        }
        Ok(())
    }
}

fn no_place(t: &GgufTensor, arch: &str) -> FormatError {
    FormatError::GgufTensor {
        tensor: t.name.clone(),
        reason: format!("has no place in a {arch} model the engine runs"),
    }
}

/// Refuses what MLX cannot load: a type it does not map, a quantized tensor
/// whose name does not end in `.weight` (MLX names the scales by cutting
/// that suffix), and one whose packed word count overflows the `int` MLX's
/// GGUF reader counts it in.
fn check_loadable(t: &GgufTensor) -> Result<()> {
    if !t.ggml_type.is_loadable() {
        return Err(FormatError::UnsupportedGgufType {
            tensor: t.name.clone(),
            ggml_type: t.ggml_type.name(),
            supported: GgmlType::LOADABLE.map(GgmlType::name).join(", "),
        });
    }
    if let Some(bits) = t.ggml_type.mlx_bits() {
        if !t.name.ends_with(".weight") {
            return Err(FormatError::GgufTensor {
                tensor: t.name.clone(),
                reason: format!("is quantized ({}) but its name does not end in .weight", t.ggml_type),
            });
        }
        let words = u128::from(t.elements()) * u128::try_from(bits).unwrap_or(0) / 32;
        if words > i32::MAX as u128 {
            return Err(FormatError::GgufTensor {
                tensor: t.name.clone(),
                reason: format!("packs into {words} words, more than MLX's GGUF reader can count ({})", i32::MAX),
            });
        }
    }
    Ok(())
}

/// The storage as the engine's `Weights::layer_quant` reads it: the most
/// common quantized form is the default, any other is an override, and a
/// float matrix is `Dense`. `None` when nothing is quantized.
fn quantization(quantized: &BTreeMap<String, QuantParams>, dense: &[String]) -> Option<Quantization> {
    let mut counts: BTreeMap<i32, usize> = BTreeMap::new();
    for p in quantized.values() {
        *counts.entry(p.bits).or_default() += 1;
    }
    // Most tensors; on a tie, fewer bits (the file's nominal type).
    let bits = counts.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?.0;
    let default = QuantParams { group_size: GROUP, bits: *bits };
    let mut overrides: BTreeMap<String, LayerQuant> =
        quantized.iter().filter(|(_, p)| **p != default).map(|(m, p)| (m.clone(), LayerQuant::Quantized(*p))).collect();
    overrides.extend(dense.iter().map(|m| (m.clone(), LayerQuant::Dense)));
    Some(Quantization { default, overrides })
}
