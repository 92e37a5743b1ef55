//! `config.json` of a model folder: the architecture, its sizes, RoPE and quantization.
//!
//! Field names are Hugging Face's. Defaults are the ones mlx-lm 0.32.2 applies
//! per architecture (its `ModelArgs` dataclasses), because a checkpoint that
//! leaves a field out means "whatever the reference implementation does".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::error::{EngineError, Result};

/// The architectures the engine implements, keyed by `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Qwen2,
    Qwen3,
    /// Llama 2/3/3.1/3.2; `mistral` checkpoints use the same layout (mlx-lm maps it here too).
    Llama,
}

/// One `{group_size, bits}` pair of MLX affine quantization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct QuantParams {
    pub group_size: i32,
    pub bits: i32,
}

/// What a per-layer entry inside `"quantization"` says about one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerQuant {
    /// Quantized with these parameters (they may differ from the default).
    Quantized(QuantParams),
    /// `false`: the layer stays dense although the model is quantized.
    Dense,
}

/// The `"quantization"` object: defaults plus per-layer overrides
/// (`"model.layers.0.mlp.down_proj": {"group_size": 32, "bits": 8}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantization {
    pub default: QuantParams,
    pub overrides: BTreeMap<String, LayerQuant>,
}

impl Quantization {
    /// The setting for the layer at `prefix` (e.g. `model.layers.3.self_attn.q_proj`).
    pub fn for_layer(&self, prefix: &str) -> LayerQuant {
        self.overrides.get(prefix).copied().unwrap_or(LayerQuant::Quantized(self.default))
    }

    fn from_json(v: &Value, path: &Path) -> Result<Self> {
        let invalid = |reason: String| EngineError::InvalidConfig { path: path.to_owned(), reason };
        let obj = v.as_object().ok_or_else(|| invalid("\"quantization\" is not an object".into()))?;
        if let Some(mode) = obj.get("mode").and_then(Value::as_str) {
            if mode != "affine" {
                return Err(EngineError::UnsupportedQuantMode { mode: mode.to_owned(), path: path.to_owned() });
            }
        }
        let int = |key: &str| -> Result<i32> {
            obj.get(key)
                .and_then(Value::as_i64)
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| invalid(format!("quantization.{key} missing or not an integer")))
        };
        let default = QuantParams { group_size: int("group_size")?, bits: int("bits")? };
        let mut overrides = BTreeMap::new();
        for (key, value) in obj {
            let layer = match value {
                Value::Bool(false) => LayerQuant::Dense,
                Value::Bool(true) => LayerQuant::Quantized(default),
                Value::Object(_) => {
                    let p: QuantParams = serde_json::from_value(value.clone())
                        .map_err(|e| invalid(format!("quantization.{key}: {e}")))?;
                    LayerQuant::Quantized(p)
                }
                // group_size, bits, mode and anything scalar are not layer entries.
                _ => continue,
            };
            overrides.insert(key.clone(), layer);
        }
        Ok(Self { default, overrides })
    }
}

/// `rope_scaling`, the kinds implemented here.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Positions divided by `factor` (`scale = 1/factor` in `fast::rope`).
    Linear { factor: f32 },
    /// Llama 3.1's frequency-dependent rescaling.
    Llama3 { factor: f32, low_freq_factor: f32, high_freq_factor: f32, original_max_position_embeddings: f32 },
}

/// The `config.json` fields the models use, with mlx-lm's per-arch defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    /// As written in the file (`mistral` stays `mistral` here).
    pub model_type: String,
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub max_position_embeddings: Option<i32>,
    pub rope_theta: f32,
    pub rope_traditional: bool,
    pub rope_scaling: Option<RopeScaling>,
    pub tie_word_embeddings: bool,
    /// Bias on q/k/v projections.
    pub qkv_bias: bool,
    /// Bias on the output projection.
    pub o_bias: bool,
    pub mlp_bias: bool,
    pub quantization: Option<Quantization>,
    /// EOS ids named by config.json (generation_config.json and the
    /// tokenizer may add more; merging them is the caller's business).
    pub eos_token_ids: Vec<u32>,
}

/// The fields as they may appear; which are required depends on the arch.
#[derive(Debug, Deserialize)]
struct RawConfig {
    hidden_size: Option<i32>,
    num_hidden_layers: Option<i32>,
    intermediate_size: Option<i32>,
    num_attention_heads: Option<i32>,
    num_key_value_heads: Option<i32>,
    head_dim: Option<i32>,
    rms_norm_eps: Option<f64>,
    vocab_size: Option<i32>,
    max_position_embeddings: Option<i32>,
    rope_theta: Option<f64>,
    rope_traditional: Option<bool>,
    rope_scaling: Option<Value>,
    rope_parameters: Option<Value>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    eos_token_id: Option<Value>,
}

impl ModelConfig {
    /// Reads `<dir>/config.json`.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(EngineError::MissingConfig { dir: dir.to_owned() })
            }
            Err(source) => return Err(EngineError::Io { path, source }),
        };
        Self::from_json_str(&text, &path)
    }

    /// Parses the text of a config.json; `path` only labels errors.
    pub fn from_json_str(text: &str, path: &Path) -> Result<Self> {
        let invalid = |reason: String| EngineError::InvalidConfig { path: path.to_owned(), reason };
        let value: Value = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let model_type = value
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("no \"model_type\"".into()))?
            .to_owned();
        let arch = match model_type.as_str() {
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "llama" | "mistral" => Arch::Llama,
            _ => return Err(EngineError::UnknownModelType { model_type, path: path.to_owned() }),
        };
        let raw: RawConfig = serde_json::from_value(value.clone()).map_err(|e| invalid(e.to_string()))?;
        let need = |v: Option<i32>, name: &str| v.ok_or_else(|| invalid(format!("missing \"{name}\"")));

        let hidden_size = need(raw.hidden_size, "hidden_size")?;
        let num_attention_heads = need(raw.num_attention_heads, "num_attention_heads")?;
        if num_attention_heads <= 0 || hidden_size <= 0 {
            return Err(invalid("hidden_size and num_attention_heads must be positive".into()));
        }
        // transformers >= 5 nests rope_theta / rope_scaling under rope_parameters.
        let rope_params = raw.rope_parameters.as_ref();
        let rope_theta =
            raw.rope_theta.or_else(|| rope_params.and_then(|p| p.get("rope_theta")).and_then(Value::as_f64));
        let rope_scaling_json = raw.rope_scaling.clone().or_else(|| raw.rope_parameters.clone());

        let (head_dim, num_key_value_heads, rope_theta, tie, qkv_bias, o_bias, mlp_bias, traditional) = match arch {
            Arch::Qwen2 => (
                // mlx-lm's qwen2 ignores any head_dim in the config.
                hidden_size / num_attention_heads,
                need(raw.num_key_value_heads, "num_key_value_heads")?,
                rope_theta.unwrap_or(1_000_000.0),
                raw.tie_word_embeddings.unwrap_or(true),
                true,
                false,
                false,
                raw.rope_traditional.unwrap_or(false),
            ),
            Arch::Qwen3 => (
                need(raw.head_dim, "head_dim")?,
                need(raw.num_key_value_heads, "num_key_value_heads")?,
                rope_theta.ok_or_else(|| invalid("missing \"rope_theta\"".into()))?,
                raw.tie_word_embeddings.ok_or_else(|| invalid("missing \"tie_word_embeddings\"".into()))?,
                false,
                false,
                false,
                false,
            ),
            Arch::Llama => {
                let bias = raw.attention_bias.unwrap_or(false);
                (
                    raw.head_dim.unwrap_or(hidden_size / num_attention_heads),
                    raw.num_key_value_heads.unwrap_or(num_attention_heads),
                    rope_theta.unwrap_or(10_000.0),
                    raw.tie_word_embeddings.unwrap_or(true),
                    bias,
                    bias,
                    raw.mlp_bias.unwrap_or(false),
                    raw.rope_traditional.unwrap_or(false),
                )
            }
        };
        if num_key_value_heads <= 0 || num_attention_heads % num_key_value_heads != 0 {
            return Err(invalid(format!(
                "num_attention_heads ({num_attention_heads}) must be a multiple of num_key_value_heads ({num_key_value_heads})"
            )));
        }

        let quantization = match value.get("quantization") {
            Some(q) => Some(Quantization::from_json(q, path)?),
            None => None,
        };
        let rope_scaling = match rope_scaling_json {
            Some(v) if !v.is_null() => parse_rope_scaling(&v, path)?,
            _ => None,
        };
        let eos_token_ids = match raw.eos_token_id {
            Some(Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()).into_iter().collect(),
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_u64).filter_map(|n| u32::try_from(n).ok()).collect(),
            _ => Vec::new(),
        };

        Ok(Self {
            arch,
            model_type,
            hidden_size,
            num_hidden_layers: need(raw.num_hidden_layers, "num_hidden_layers")?,
            intermediate_size: need(raw.intermediate_size, "intermediate_size")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: raw.rms_norm_eps.ok_or_else(|| invalid("missing \"rms_norm_eps\"".into()))? as f32,
            vocab_size: need(raw.vocab_size, "vocab_size")?,
            max_position_embeddings: raw.max_position_embeddings,
            rope_theta: rope_theta as f32,
            rope_traditional: traditional,
            rope_scaling,
            tie_word_embeddings: tie,
            qkv_bias,
            o_bias,
            mlp_bias,
            quantization,
            eos_token_ids,
        })
    }
}

fn parse_rope_scaling(v: &Value, path: &Path) -> Result<Option<RopeScaling>> {
    let invalid = |reason: String| EngineError::InvalidConfig { path: PathBuf::from(path), reason };
    let rope_type = v.get("type").or_else(|| v.get("rope_type")).and_then(Value::as_str).unwrap_or("default");
    let num = |key: &str, default: Option<f64>| -> Result<f32> {
        v.get(key)
            .and_then(Value::as_f64)
            .or(default)
            .map(|x| x as f32)
            .ok_or_else(|| invalid(format!("rope_scaling.{key} missing")))
    };
    match rope_type {
        "default" => Ok(None),
        "linear" => Ok(Some(RopeScaling::Linear { factor: num("factor", None)? })),
        "llama3" => Ok(Some(RopeScaling::Llama3 {
            factor: num("factor", None)?,
            low_freq_factor: num("low_freq_factor", Some(1.0))?,
            high_freq_factor: num("high_freq_factor", Some(4.0))?,
            original_max_position_embeddings: num("original_max_position_embeddings", Some(8192.0))?,
        })),
        other => Err(EngineError::UnsupportedRopeScaling { rope_type: other.to_owned(), path: path.to_owned() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<ModelConfig> {
        ModelConfig::from_json_str(json, Path::new("config.json"))
    }

    const QWEN2: &str = r#"{"model_type":"qwen2","hidden_size":64,"num_hidden_layers":2,
        "intermediate_size":128,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":999,
        "rms_norm_eps":1e-6,"vocab_size":256,"eos_token_id":[5,7],
        "quantization":{"group_size":64,"bits":4,
            "model.layers.0.mlp.down_proj":{"group_size":32,"bits":8},
            "lm_head":false}}"#;

    #[test]
    fn qwen2_defaults_and_per_layer_quantization() -> Result<()> {
        let c = parse(QWEN2)?;
        assert_eq!(c.arch, Arch::Qwen2);
        // mlx-lm's qwen2 derives head_dim and ignores the config's.
        assert_eq!(c.head_dim, 16);
        assert_eq!(c.rope_theta, 1e6);
        assert!(c.tie_word_embeddings && c.qkv_bias && !c.o_bias);
        assert_eq!(c.eos_token_ids, [5, 7]);
        let q = c.quantization.as_ref().expect("quantized");
        assert_eq!(
            q.for_layer("model.layers.1.mlp.down_proj"),
            LayerQuant::Quantized(QuantParams { group_size: 64, bits: 4 })
        );
        assert_eq!(
            q.for_layer("model.layers.0.mlp.down_proj"),
            LayerQuant::Quantized(QuantParams { group_size: 32, bits: 8 })
        );
        assert_eq!(q.for_layer("lm_head"), LayerQuant::Dense);
        Ok(())
    }

    #[test]
    fn llama3_rope_scaling_and_llama_defaults() -> Result<()> {
        let c = parse(
            r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"intermediate_size":128,
            "num_attention_heads":4,"rms_norm_eps":1e-5,"vocab_size":256,"rope_theta":500000.0,
            "rope_scaling":{"factor":32.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
            "original_max_position_embeddings":8192,"rope_type":"llama3"},"tie_word_embeddings":false}"#,
        )?;
        assert_eq!(c.num_key_value_heads, 4);
        assert!(!c.tie_word_embeddings && !c.qkv_bias && !c.mlp_bias);
        assert!(matches!(c.rope_scaling, Some(RopeScaling::Llama3 { factor, .. }) if factor == 32.0));
        Ok(())
    }

    #[test]
    fn unknown_model_type_is_named() {
        let err = parse(r#"{"model_type":"gemma3","hidden_size":64}"#).expect_err("gemma3 is not supported");
        assert!(matches!(&err, EngineError::UnknownModelType { model_type, .. } if model_type == "gemma3"));
        assert!(err.to_string().contains("gemma3"));
    }

    #[test]
    fn unsupported_rope_and_quant_mode_are_typed() {
        let base = r#""hidden_size":64,"num_hidden_layers":2,"intermediate_size":128,"num_attention_heads":4,"rms_norm_eps":1e-5,"vocab_size":256"#;
        let yarn = format!(r#"{{"model_type":"llama",{base},"rope_scaling":{{"type":"yarn","factor":4.0}}}}"#);
        assert!(
            matches!(parse(&yarn), Err(EngineError::UnsupportedRopeScaling { rope_type, .. }) if rope_type == "yarn")
        );
        let mx =
            format!(r#"{{"model_type":"llama",{base},"quantization":{{"group_size":32,"bits":4,"mode":"mxfp4"}}}}"#);
        assert!(matches!(parse(&mx), Err(EngineError::UnsupportedQuantMode { mode, .. }) if mode == "mxfp4"));
        let missing = r#"{"model_type":"qwen2","hidden_size":64,"num_attention_heads":4}"#;
        assert!(matches!(parse(missing), Err(EngineError::InvalidConfig { .. })));
    }
}
