//! The quantization block, read as mlx-lm 0.32.2 reads it: `"quantization"`,
//! else `"quantization_config"`. Only MLX's affine mode in the mlx-community
//! layout (packed u32 weights + scales + biases) is run; every other mode or
//! method mlx-lm knows (mxfp4, mxfp8, nvfp4, fp8, gptq, awq, bitnet,
//! compressed-tensors, modelopt) is refused by name before anything loads.
//!
//! One leniency over mlx-lm: a `quantization_config` without a
//! `quant_method` is read as the affine block it copies (mlx-lm's convert
//! writes both keys with the same content; older checkpoints kept only this one).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::error::{FormatError, Result};
use super::fields::{Fields, CONFIG};

/// Bit widths MLX's affine quantization supports.
pub const SUPPORTED_BITS: [i32; 6] = [2, 3, 4, 5, 6, 8];
/// Group sizes MLX's affine quantization supports.
pub const SUPPORTED_GROUP_SIZES: [i32; 3] = [32, 64, 128];

/// One `{group_size, bits}` pair of MLX affine quantization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QuantParams {
    pub group_size: i32,
    pub bits: i32,
}

impl QuantParams {
    /// "4-bit, group 64": the stats label.
    pub fn label(self) -> String {
        format!("{}-bit, group {}", self.bits, self.group_size)
    }
}

/// What a per-layer entry says about one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerQuant {
    /// Quantized with these parameters (they may differ from the default).
    Quantized(QuantParams),
    /// `false`: the layer stays dense although the model is quantized.
    Dense,
}

/// The block: defaults plus per-layer overrides
/// (`"model.layers.0.mlp.down_proj": {"group_size": 32, "bits": 8}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantization {
    pub default: QuantParams,
    pub overrides: BTreeMap<String, LayerQuant>,
}

/// The `quantization_config` methods mlx-lm 0.32.2 converts, none of which
/// is the affine mlx-community layout the engine loads.
const FOREIGN_METHODS: [&str; 8] = ["mxfp4", "mxfp8", "fp8", "bitnet", "compressed-tensors", "modelopt", "awq", "gptq"];

impl Quantization {
    /// The setting for the layer at `prefix` (e.g. `model.layers.3.self_attn.q_proj`).
    pub fn for_layer(&self, prefix: &str) -> LayerQuant {
        self.overrides.get(prefix).copied().unwrap_or(LayerQuant::Quantized(self.default))
    }

    /// Reads the block from a config's fields; `None` for an unquantized model.
    pub(crate) fn read(f: &Fields) -> Result<Option<Self>> {
        if let Some(q) = f.object("quantization")? {
            return Self::mlx(q, "quantization").map(Some);
        }
        let Some(q) = f.object("quantization_config")? else { return Ok(None) };
        match q.get("quant_method").filter(|v| !v.is_null()) {
            None => Self::mlx(q, "quantization_config").map(Some),
            Some(Value::String(method)) => {
                let mode = match method.as_str() {
                    "modelopt" => "nvfp4 (modelopt)".to_owned(),
                    m if FOREIGN_METHODS.contains(&m) => m.to_owned(),
                    other => format!("{other} (quant_method)"),
                };
                Err(FormatError::UnsupportedQuantMode { mode })
            }
            Some(other) => Err(FormatError::bad(CONFIG, "quantization_config.quant_method", other, "a string")),
        }
    }

    fn mlx(obj: &Map<String, Value>, key: &'static str) -> Result<Self> {
        let prefix = format!("{key}.");
        let f = Fields::nested(obj, CONFIG, &prefix, "a quantized model");
        match f.string("mode")? {
            None | Some("affine") => {}
            Some(mode) => return Err(FormatError::UnsupportedQuantMode { mode: mode.to_owned() }),
        }
        let default = params(&f)?;
        let mut overrides = BTreeMap::new();
        for (layer, value) in obj {
            let entry = match value {
                Value::Bool(false) => LayerQuant::Dense,
                Value::Bool(true) => LayerQuant::Quantized(default),
                Value::Object(o) => {
                    let name = format!("{prefix}{layer}.");
                    let lf = Fields::nested(o, CONFIG, &name, "a quantized layer");
                    match lf.string("mode")? {
                        None | Some("affine") => {}
                        Some(mode) => return Err(FormatError::UnsupportedQuantMode { mode: mode.to_owned() }),
                    }
                    LayerQuant::Quantized(params(&lf)?)
                }
                // group_size, bits, mode and other scalars are not layer entries.
                _ => continue,
            };
            overrides.insert(layer.clone(), entry);
        }
        Ok(Self { default, overrides })
    }
}

fn params(f: &Fields) -> Result<QuantParams> {
    let pick = |key: &str, allowed: &[i32]| -> Result<i32> {
        let v = f.get(key).ok_or_else(|| f.missing(key))?;
        match v.as_i64().and_then(|n| i32::try_from(n).ok()) {
            Some(n) if allowed.contains(&n) => Ok(n),
            _ => Err(FormatError::BadField {
                file: CONFIG,
                field: format!("{}{key}", f.prefix()),
                value: v.to_string(),
                expected: format!("one of {allowed:?} (what MLX's affine quantization supports)"),
            }),
        }
    };
    Ok(QuantParams { group_size: pick("group_size", &SUPPORTED_GROUP_SIZES)?, bits: pick("bits", &SUPPORTED_BITS)? })
}

#[cfg(test)]
mod tests {
    use crate::format::{FormatError, ModelConfig};

    fn with(quant: &str) -> Result<ModelConfig, FormatError> {
        ModelConfig::parse(
            format!(
                r#"{{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"intermediate_size":128,
                "num_attention_heads":4,"rms_norm_eps":1e-5,"vocab_size":256,{quant}}}"#
            )
            .as_bytes(),
        )
    }

    #[test]
    fn mlx_lm_s_order_and_modes() {
        let q = with(r#""quantization_config":{"group_size":32,"bits":8}"#).ok().and_then(|c| c.quantization);
        assert_eq!(q.map(|q| q.default.label()).as_deref(), Some("8-bit, group 32"));
        // `quantization` wins over `quantization_config`.
        let q = with(r#""quantization":{"group_size":64,"bits":4},"quantization_config":{"quant_method":"gptq"}"#);
        assert_eq!(q.ok().and_then(|c| c.quantization).map(|q| q.default.bits), Some(4));
        for (block, mode) in [
            (r#""quantization":{"group_size":32,"bits":4,"mode":"mxfp4"}"#, "mxfp4"),
            (r#""quantization":{"group_size":32,"bits":8,"mode":"mxfp8"}"#, "mxfp8"),
            (r#""quantization":{"group_size":16,"bits":4,"mode":"nvfp4"}"#, "nvfp4"),
            (r#""quantization_config":{"quant_method":"awq","bits":4}"#, "awq"),
            (r#""quantization_config":{"quant_method":"modelopt"}"#, "nvfp4 (modelopt)"),
            (r#""quantization_config":{"quant_method":"hqq"}"#, "hqq (quant_method)"),
            (
                r#""quantization":{"group_size":64,"bits":4,"lm_head":{"group_size":32,"bits":4,"mode":"mxfp4"}}"#,
                "mxfp4",
            ),
        ] {
            let err = with(block).err();
            assert!(
                matches!(&err, Some(FormatError::UnsupportedQuantMode { mode: m }) if m == mode),
                "{block}: {err:?}"
            );
        }
    }

    #[test]
    fn bits_and_group_sizes_are_checked_by_field() {
        for (block, field) in [
            (r#""quantization":{"group_size":0,"bits":4}"#, "quantization.group_size"),
            (r#""quantization":{"group_size":-64,"bits":4}"#, "quantization.group_size"),
            (r#""quantization":{"group_size":4294967360,"bits":4}"#, "quantization.group_size"),
            (r#""quantization":{"group_size":64,"bits":7}"#, "quantization.bits"),
            (r#""quantization":{"group_size":64,"bits":-4}"#, "quantization.bits"),
            (r#""quantization":{"group_size":64}"#, "quantization.bits"),
            (
                r#""quantization":{"group_size":64,"bits":4,"model.layers.0.mlp.up_proj":{"group_size":64,"bits":0}}"#,
                "quantization.model.layers.0.mlp.up_proj.bits",
            ),
            (r#""quantization_config":{"group_size":64,"bits":"4"}"#, "quantization_config.bits"),
            (r#""quantization":[4]"#, "quantization"),
        ] {
            let err = with(block).err();
            assert_eq!(err.as_ref().and_then(FormatError::field), Some(field), "{block}: {err:?}");
        }
    }
}
