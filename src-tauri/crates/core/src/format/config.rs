//! `config.json`: the `model_type`, its architecture's config (one file per
//! architecture, HF field names, mlx-lm 0.32.2's defaults), the sizes every
//! decoder shares ([`TextConfig`]), the quantization block and the EOS ids.
//!
//! Adding an architecture is one file (its `Config` with `from_fields` and
//! `text`) and one line in `model_types!` below.

use serde_json::Value;

use super::error::{FormatError, Result};
use super::fields::{self, Fields, CONFIG};
use super::quant::Quantization;
use super::{gemma3_text, llama, qwen2, qwen3, qwen3_5, qwen3_moe};

/// `rope_scaling`, the kinds the engine implements.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Positions divided by `factor` (`scale = 1/factor` in `fast::rope`).
    Linear { factor: f32 },
    /// Llama 3.1's frequency-dependent rescaling.
    Llama3 { factor: f32, low_freq_factor: f32, high_freq_factor: f32, original_max_position_embeddings: f32 },
}

/// What a layer's token mixer is, and so what its cache keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerAttention {
    /// Attention over every earlier position: its KV cache grows with the context.
    Full,
    /// Attention over the last `TextConfig::sliding_window` positions: its cache stops growing there.
    Sliding,
    /// Linear attention (a gated delta net): a fixed-size state, whatever the context.
    Linear,
}

/// The sizes of a linear-attention (gated delta net) layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearAttention {
    pub num_key_heads: i32,
    pub num_value_heads: i32,
    pub key_head_dim: i32,
    pub value_head_dim: i32,
    /// Width of the causal convolution over q, k and v.
    pub conv_kernel: i32,
}

impl LinearAttention {
    /// Channels the convolution runs over: q, k and v side by side.
    pub fn conv_dim(&self) -> i64 {
        2 * i64::from(self.num_key_heads) * i64::from(self.key_head_dim)
            + i64::from(self.num_value_heads) * i64::from(self.value_head_dim)
    }

    /// Bytes one layer's cache holds whatever the context: the
    /// convolution's last `kernel - 1` inputs in the activations' dtype
    /// (`activation_bytes` each) and the state matrix per value head in f32
    /// (mlx-lm keeps it in f32 whatever the model's dtype).
    pub fn state_bytes(&self, activation_bytes: u64) -> u64 {
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        let conv = n(i64::from(self.conv_kernel) - 1) * n(self.conv_dim()) * activation_bytes;
        let state = n(i64::from(self.num_value_heads))
            * n(i64::from(self.value_head_dim))
            * n(i64::from(self.key_head_dim))
            * 4;
        conv.saturating_add(state)
    }
}

/// A mixture-of-experts MLP: a router picks `experts_per_token` of
/// `num_experts` SwiGLU experts for each token, plus a shared expert where
/// the model has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moe {
    pub num_experts: i32,
    pub experts_per_token: i32,
    pub expert_intermediate_size: i32,
    /// Renormalize the chosen experts' router weights to sum to one.
    pub norm_topk_prob: bool,
    /// The always-on expert's width (Qwen3.5 MoE), gated by a sigmoid.
    pub shared_expert_intermediate_size: Option<i32>,
    /// Per layer: experts (true) or the dense MLP of `intermediate_size`.
    pub sparse_layers: Vec<bool>,
}

/// The sizes and switches of the decoder every supported architecture is
/// built on, with the architecture's defaults applied and every value
/// checked (see `fields::limits`). Sizes are i32 because MLX's shapes are.
#[derive(Debug, Clone, PartialEq)]
pub struct TextConfig {
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
    /// Bias on the q/k/v projections.
    pub qkv_bias: bool,
    /// Bias on the output projection.
    pub o_bias: bool,
    pub mlp_bias: bool,
    /// How many leading dimensions of each head RoPE rotates (all, unless
    /// the model rotates a part: Qwen3.5's `partial_rotary_factor`).
    pub rope_dims: i32,
    /// One per layer.
    pub layer_types: Vec<LayerAttention>,
    /// Positions a sliding layer attends over (set when any layer slides).
    pub sliding_window: Option<i32>,
    /// The linear-attention layers' sizes (set when any layer is linear).
    pub linear_attention: Option<LinearAttention>,
    /// Set for a mixture-of-experts model.
    pub moe: Option<Moe>,
}

impl TextConfig {
    /// Layers of one kind.
    pub fn layers_of(&self, kind: LayerAttention) -> usize {
        self.layer_types.iter().filter(|t| **t == kind).count()
    }

    /// Checks what holds between fields (each field was checked alone on reading).
    pub(crate) fn check(self) -> Result<Self> {
        let bad = |field: &str, value: String, expected: String| Err(FormatError::bad(CONFIG, field, value, expected));
        if self.num_key_value_heads > self.num_attention_heads
            || self.num_attention_heads % self.num_key_value_heads != 0
        {
            return bad(
                "num_key_value_heads",
                self.num_key_value_heads.to_string(),
                format!("a divisor of num_attention_heads ({})", self.num_attention_heads),
            );
        }
        if self.layer_types.len() != usize::try_from(self.num_hidden_layers).unwrap_or(0) {
            return bad(
                "layer_types",
                format!("{} entries", self.layer_types.len()),
                format!("one per layer ({})", self.num_hidden_layers),
            );
        }
        if self.rope_dims < 1 || self.rope_dims > self.head_dim || self.rope_dims % 2 != 0 {
            return bad(
                "partial_rotary_factor",
                format!("{} of {} head dimensions", self.rope_dims, self.head_dim),
                "an even number of dimensions, from 2 to head_dim".into(),
            );
        }
        if let Some(moe) = &self.moe {
            if moe.experts_per_token > moe.num_experts {
                return bad(
                    "num_experts_per_tok",
                    moe.experts_per_token.to_string(),
                    format!("at most num_experts ({})", moe.num_experts),
                );
            }
        }
        if let Some(lin) = &self.linear_attention {
            if lin.num_value_heads % lin.num_key_heads != 0 {
                return bad(
                    "linear_num_value_heads",
                    lin.num_value_heads.to_string(),
                    format!("a multiple of linear_num_key_heads ({})", lin.num_key_heads),
                );
            }
        }
        if self.head_dim < 1 {
            return bad(
                "head_dim",
                format!("{} (hidden_size / num_attention_heads)", self.head_dim),
                "at least 1: hidden_size must not be smaller than num_attention_heads".into(),
            );
        }
        Ok(self)
    }
}

/// The fields every architecture's `ModelArgs` requires, and RoPE's (whose
/// defaults differ by architecture), as the file gives them.
#[derive(Debug, Clone, PartialEq)]
pub struct Common {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    /// Top-level (or under `rope_parameters`, for the architectures whose
    /// mlx-lm reads it there: [`RopeNesting`]); `None` if the file has none.
    pub rope_theta: Option<f32>,
    pub rope_scaling: Option<RopeScaling>,
}

impl Common {
    /// Reads the fields every architecture shares, RoPE's top-level only
    /// (mlx-lm's llama, qwen2, qwen3_moe and gemma3_text ignore `rope_parameters`).
    pub(crate) fn read(f: &Fields) -> Result<Self> {
        Self::read_with(f, RopeNesting::TopLevelOnly)
    }

    /// [`Self::read`], RoPE's fields read by `nesting`.
    pub(crate) fn read_with(f: &Fields, nesting: RopeNesting) -> Result<Self> {
        use fields::limits as l;
        let (rope_theta, rope_scaling) = read_rope(f, nesting)?;
        Ok(Self {
            hidden_size: f.required_size("hidden_size", l::HIDDEN_SIZE)?,
            num_hidden_layers: f.required_size("num_hidden_layers", l::LAYERS)?,
            intermediate_size: f.required_size("intermediate_size", l::INTERMEDIATE_SIZE)?,
            num_attention_heads: f.required_size("num_attention_heads", l::HEADS)?,
            rms_norm_eps: f.positive("rms_norm_eps", 1.0)?.ok_or_else(|| f.missing("rms_norm_eps"))? as f32,
            vocab_size: f.required_size("vocab_size", l::VOCAB_SIZE)?,
            rope_theta,
            rope_scaling,
        })
    }

    /// `hidden_size / num_attention_heads`, mlx-lm's head size when the file gives none.
    pub fn derived_head_dim(&self) -> i32 {
        self.hidden_size / self.num_attention_heads
    }

    /// The decoder these fields and the architecture's `num_key_value_heads`,
    /// `head_dim` and RoPE base describe, with Llama's switches (no biases,
    /// RoPE not traditional, head tied, no context ceiling); an architecture
    /// overrides what differs with struct-update syntax.
    pub fn text(&self, num_key_value_heads: i32, head_dim: i32, rope_theta: f32) -> TextConfig {
        TextConfig {
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            intermediate_size: self.intermediate_size,
            num_attention_heads: self.num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: self.rms_norm_eps,
            vocab_size: self.vocab_size,
            max_position_embeddings: None,
            rope_theta,
            rope_traditional: false,
            rope_scaling: self.rope_scaling.clone(),
            tie_word_embeddings: true,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            rope_dims: head_dim,
            layer_types: vec![LayerAttention::Full; usize::try_from(self.num_hidden_layers).unwrap_or(0)],
            sliding_window: None,
            linear_attention: None,
            moe: None,
        }
    }
}

/// Where an architecture's mlx-lm reads `rope_theta` and `rope_scaling`
/// (transformers ≥ 5 nests them under `rope_parameters`). One config can
/// hold both places; reading them as mlx-lm does keeps the output identical
/// to mlx-lm's even where the two disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RopeNesting {
    /// Top-level keys only: `rope_parameters` is not read (mlx-lm 0.32.2's
    /// llama, qwen2, qwen3_moe, gemma3_text), so a file that nests them alone
    /// gets the architecture's defaults, as there.
    TopLevelOnly,
    /// Top-level first, else under `rope_parameters` (mlx-lm's qwen3).
    Fallback,
}

/// `rope_theta` and `rope_scaling`, read as `nesting` says.
pub(crate) fn read_rope(f: &Fields, nesting: RopeNesting) -> Result<(Option<f32>, Option<RopeScaling>)> {
    let params = match nesting {
        RopeNesting::Fallback => f.object("rope_parameters")?,
        RopeNesting::TopLevelOnly => None,
    };
    let nested = params.map(|p| Fields::nested(p, CONFIG, "rope_parameters.", ""));
    let theta = match f.positive("rope_theta", fields::limits::ROPE_THETA)? {
        Some(t) => Some(t),
        None => match &nested {
            Some(n) => n.positive("rope_theta", fields::limits::ROPE_THETA)?,
            None => None,
        },
    };
    let scaling = match (f.object("rope_scaling")?, params) {
        (Some(s), _) => rope_scaling(&Fields::nested(s, CONFIG, "rope_scaling.", ""))?,
        (None, Some(_)) => nested.as_ref().map(rope_scaling).transpose()?.flatten(),
        (None, None) => None,
    };
    Ok((theta.map(|t| t as f32), scaling))
}

fn rope_scaling(f: &Fields) -> Result<Option<RopeScaling>> {
    let kind = match f.string("type")? {
        Some(t) => t,
        None => f.string("rope_type")?.unwrap_or("default"),
    };
    // Factors are small in practice; 1e6 keeps every product finite.
    let num = |key: &str, default: Option<f64>| -> Result<f32> {
        f.positive(key, 1e6)?.or(default).map(|x| x as f32).ok_or_else(|| f.missing(key))
    };
    match kind {
        "default" => Ok(None),
        "linear" => Ok(Some(RopeScaling::Linear { factor: num("factor", None)? })),
        "llama3" => Ok(Some(RopeScaling::Llama3 {
            factor: num("factor", None)?,
            low_freq_factor: num("low_freq_factor", Some(1.0))?,
            high_freq_factor: num("high_freq_factor", Some(4.0))?,
            original_max_position_embeddings: num("original_max_position_embeddings", Some(8192.0))?,
        })),
        other => Err(FormatError::UnsupportedRopeScaling { rope_type: other.to_owned() }),
    }
}

/// Declares the architectures: `Variant => "model_type" => config type`.
macro_rules! model_types {
    ($($variant:ident => $name:literal => $config:ty),+ $(,)?) => {
        /// A `model_type` the engine runs, with its architecture's config as read.
        #[derive(Debug, Clone, PartialEq)]
        pub enum ModelType {
            $($variant($config),)+
        }

        impl ModelType {
            /// Every supported `model_type`, as config.json spells it.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// config.json's spelling.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Self::$variant(_) => $name,)+
                }
            }

            /// The decoder's sizes, defaults applied.
            pub fn text(&self) -> TextConfig {
                match self {
                    $(Self::$variant(c) => c.text(),)+
                }
            }

            fn read(model_type: &str, f: &Fields) -> Result<Self> {
                match model_type {
                    $($name => Ok(Self::$variant(<$config>::from_fields(f)?)),)+
                    other => Err(FormatError::UnknownModelType { model_type: other.to_owned() }),
                }
            }
        }
    };
}

model_types! {
    Qwen2 => "qwen2" => qwen2::Config,
    Qwen3 => "qwen3" => qwen3::Config,
    Llama => "llama" => llama::Config,
    // mlx-lm maps mistral onto its llama model, and so does the engine.
    Mistral => "mistral" => llama::Config,
    Qwen3Moe => "qwen3_moe" => qwen3_moe::Config,
    Gemma3Text => "gemma3_text" => gemma3_text::Config,
    Qwen3_5 => "qwen3_5" => qwen3_5::Config,
    // The same model file in mlx-lm; experts come from the config's `num_experts`.
    Qwen3_5Moe => "qwen3_5_moe" => qwen3_5::Config,
}

/// A whole config.json, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub model_type: ModelType,
    pub text: TextConfig,
    pub quantization: Option<Quantization>,
    /// EOS ids config.json names (generation_config.json and the tokenizer
    /// may add more; merging them is the tokenizer's business).
    pub eos_token_ids: Vec<u32>,
}

impl ModelConfig {
    /// Parses and checks the bytes of a config.json.
    pub fn parse(text: &[u8]) -> Result<Self> {
        Self::from_object(&fields::object(text, CONFIG)?, CONFIG)
    }

    /// Reads and checks a config already parsed into an object, its errors
    /// labelled with `file`: the GGUF reader writes a GGUF file's metadata
    /// under config.json's names, so both formats share one set of defaults
    /// and checks.
    pub(crate) fn from_object(obj: &serde_json::Map<String, Value>, file: &'static str) -> Result<Self> {
        let top = Fields::new(obj, file, "");
        let model_type = top.string("model_type")?.ok_or_else(|| FormatError::MissingField {
            file,
            field: "model_type".into(),
            model_type: "every model".into(),
        })?;
        let f = Fields::new(obj, file, model_type);
        let model_type = ModelType::read(model_type, &f)?;
        let text = model_type.text().check()?;
        let quantization = Quantization::read(&f)?;
        let eos_token_ids = match f.get("eos_token_id") {
            Some(Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()).into_iter().collect(),
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_u64).filter_map(|n| u32::try_from(n).ok()).collect(),
            _ => Vec::new(),
        };
        Ok(Self { model_type, text, quantization, eos_token_ids })
    }

    /// config.json's `model_type`.
    pub fn model_type_name(&self) -> &'static str {
        self.model_type.name()
    }

    /// A tensor the loader drops, as mlx-lm's `sanitize` does: precomputed
    /// RoPE tables are not parameters, and a tied model ignores a stored `lm_head`.
    pub fn is_dropped(&self, tensor: &str) -> bool {
        match &self.model_type {
            // Gemma 3 ties its head exactly when the file has none (mlx-lm's sanitize).
            ModelType::Gemma3Text(_) => false,
            // Qwen3.5's multi-token-prediction head is not used for generation.
            ModelType::Qwen3_5(_) | ModelType::Qwen3_5Moe(_) => {
                tensor.contains("mtp.") || (self.text.tie_word_embeddings && tensor == "language_model.lm_head.weight")
            }
            _ => {
                tensor.contains("self_attn.rotary_emb.inv_freq")
                    || (self.text.tie_word_embeddings && tensor == "lm_head.weight")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::quant::{LayerQuant, QuantParams};

    fn parse(json: &str) -> Result<ModelConfig> {
        ModelConfig::parse(json.as_bytes())
    }

    const BASE: &str = r#""hidden_size":64,"num_hidden_layers":2,"intermediate_size":128,"num_attention_heads":4,"rms_norm_eps":1e-5,"vocab_size":256"#;

    #[test]
    fn qwen2_defaults_and_per_layer_quantization() -> Result<()> {
        let c = parse(
            r#"{"model_type":"qwen2","hidden_size":64,"num_hidden_layers":2,
            "intermediate_size":128,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":999,
            "rms_norm_eps":1e-6,"vocab_size":256,"eos_token_id":[5,7],
            "quantization":{"group_size":64,"bits":4,
                "model.layers.0.mlp.down_proj":{"group_size":32,"bits":8},
                "lm_head":false}}"#,
        )?;
        assert!(matches!(c.model_type, ModelType::Qwen2(_)));
        // mlx-lm's qwen2 derives head_dim and ignores the config's.
        assert_eq!(c.text.head_dim, 16);
        assert_eq!(c.text.rope_theta, 1e6);
        assert_eq!(c.text.max_position_embeddings, Some(32768), "mlx-lm's qwen2 default");
        assert!(c.text.tie_word_embeddings && c.text.qkv_bias && !c.text.o_bias);
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
        let c = parse(&format!(
            r#"{{"model_type":"llama",{BASE},"rope_theta":500000.0,
            "rope_scaling":{{"factor":32.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
            "original_max_position_embeddings":8192,"rope_type":"llama3"}},"tie_word_embeddings":false}}"#
        ))?;
        assert_eq!(c.text.num_key_value_heads, 4);
        assert_eq!(c.text.max_position_embeddings, None);
        assert!(!c.text.tie_word_embeddings && !c.text.qkv_bias && !c.text.mlp_bias);
        assert!(matches!(c.text.rope_scaling, Some(RopeScaling::Llama3 { factor, .. }) if factor == 32.0));
        let m = parse(&format!(r#"{{"model_type":"mistral",{BASE}}}"#))?;
        assert_eq!((m.model_type_name(), m.text.rope_theta), ("mistral", 10_000.0));
        Ok(())
    }

    #[test]
    fn rope_parameters_are_read_where_mlx_lm_reads_them() -> Result<()> {
        let nested = r#""rope_parameters":{"rope_theta":5000.0,"rope_type":"linear","factor":2.0}"#;
        // qwen3: top-level first, else nested (mlx-lm's qwen3.ModelArgs.__post_init__).
        let c = parse(&format!(
            r#"{{"model_type":"qwen3",{BASE},"num_key_value_heads":2,"head_dim":16,"max_position_embeddings":4096,
            "tie_word_embeddings":true,{nested}}}"#
        ))?;
        assert_eq!(c.text.rope_theta, 5000.0);
        assert_eq!(c.text.rope_scaling, Some(RopeScaling::Linear { factor: 2.0 }));
        // llama, qwen2, gemma3_text: mlx-lm never reads rope_parameters, so
        // neither do we: the architecture's default base and no scaling.
        for (model_type, default_theta) in [("llama", 10_000.0), ("qwen2", 1_000_000.0), ("gemma3_text", 1_000_000.0)] {
            let c = parse(&format!(
                r#"{{"model_type":"{model_type}",{BASE},"num_key_value_heads":2,"head_dim":16,{nested}}}"#
            ))?;
            assert_eq!((c.text.rope_theta, &c.text.rope_scaling), (default_theta, &None), "{model_type}");
        }
        // qwen3_moe requires a top-level rope_theta in mlx-lm: nested alone is missing.
        let moe = parse(&format!(
            r#"{{"model_type":"qwen3_moe",{BASE},"num_key_value_heads":2,"head_dim":16,"max_position_embeddings":4096,
            "num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":32,{nested}}}"#
        ));
        assert!(matches!(moe, Err(FormatError::MissingField { ref field, .. }) if field == "rope_theta"), "{moe:?}");
        Ok(())
    }

    #[test]
    fn unsupported_things_are_named() {
        let err = parse(r#"{"model_type":"gemma3","hidden_size":64}"#).expect_err("gemma3 is not supported");
        assert!(matches!(&err, FormatError::UnknownModelType { model_type } if model_type == "gemma3"));
        assert!(err.to_string().contains("qwen2, qwen3, llama, mistral, qwen3_moe, gemma3_text, qwen3_5"), "{err}");
        let yarn = format!(r#"{{"model_type":"llama",{BASE},"rope_scaling":{{"type":"yarn","factor":4.0}}}}"#);
        assert!(matches!(parse(&yarn), Err(FormatError::UnsupportedRopeScaling { rope_type }) if rope_type == "yarn"));
        let sliding =
            format!(r#"{{"model_type":"llama",{BASE},"layer_types":["full_attention","sliding_attention"]}}"#);
        assert!(
            matches!(parse(&sliding), Err(FormatError::UnsupportedLayerType { layer_type }) if layer_type == "sliding_attention")
        );
        let missing =
            parse(r#"{"model_type":"qwen2","hidden_size":64,"num_attention_heads":4}"#).expect_err("incomplete");
        assert_eq!(missing.field(), Some("num_hidden_layers"), "{missing}");
        assert!(missing.to_string().contains("qwen2 needs it"), "{missing}");
    }

    #[test]
    fn every_size_out_of_range_names_its_field() {
        let qwen3 = |extra: &str| {
            let mut v: serde_json::Map<String, Value> = serde_json::from_str(&format!(
                r#"{{"model_type":"qwen3",{BASE},"num_key_value_heads":2,"head_dim":16,"max_position_embeddings":4096,"tie_word_embeddings":true,"rope_theta":1e6}}"#
            ))
            .expect("json");
            let patch: serde_json::Map<String, Value> = serde_json::from_str(extra).expect("patch");
            v.extend(patch);
            parse(&Value::Object(v).to_string())
        };
        assert!(qwen3("{}").is_ok());
        for field in [
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "num_hidden_layers",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
            "rope_theta",
            "rms_norm_eps",
        ] {
            for value in ["0", "-1", "-2147483648", "18446744073709551616", "1e300", "\"64\"", "2.5"] {
                // 2.5 is a fine rope_theta / eps; every other value is out of range for every field.
                if value == "2.5" && matches!(field, "rope_theta" | "rms_norm_eps") {
                    continue;
                }
                let err = qwen3(&format!(r#"{{"{field}":{value}}}"#))
                    .err()
                    .unwrap_or_else(|| panic!("{field} = {value} was accepted"));
                assert_eq!(err.field(), Some(field), "{field} = {value}: {err}");
                assert!(err.to_string().contains(field), "{err}");
            }
        }
        let err = qwen3(r#"{"num_key_value_heads":3}"#).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("num_key_value_heads") && err.contains("divisor"), "{err}");
        let err = parse(&format!(r#"{{"model_type":"llama",{BASE},"hidden_size":2}}"#))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("head_dim"), "{err}");
        for bad in ["[]", "3", "\"x\"", "{"] {
            assert!(matches!(parse(bad), Err(FormatError::Json { .. })), "{bad}");
        }
    }
}
