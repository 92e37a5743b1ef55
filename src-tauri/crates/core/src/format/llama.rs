//! `model_type: llama` (Llama 2/3/3.1/3.2) and `mistral` (mlx-lm maps it
//! here): mlx-lm 0.32.2's `llama.ModelArgs`. Optional biases
//! (`attention_bias` on q/k/v/o, `mlp_bias`), `head_dim` from the file or
//! `hidden / heads`, `num_key_value_heads` defaulting to the head count,
//! RoPE base 1e4, a tied head unless the file says otherwise. Every layer
//! must be full attention: `layer_types` naming sliding-window layers is
//! refused rather than run as full attention.

use super::config::{Common, TextConfig};
use super::error::{FormatError, Result};
use super::fields::{limits, Fields, CONFIG};

/// The fields mlx-lm reads, with its defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub common: Common,
    /// Default `hidden_size / num_attention_heads`.
    pub head_dim: Option<i32>,
    pub max_position_embeddings: Option<i32>,
    /// Default `num_attention_heads`.
    pub num_key_value_heads: Option<i32>,
    pub attention_bias: bool,
    pub mlp_bias: bool,
    /// Default 1e4.
    pub rope_theta: f32,
    pub rope_traditional: bool,
    /// Default true.
    pub tie_word_embeddings: bool,
}

impl Config {
    pub(crate) fn from_fields(f: &Fields) -> Result<Self> {
        let common = Common::read(f)?;
        if let Some(types) = f.get("layer_types") {
            let list = types.as_array().ok_or_else(|| FormatError::bad(CONFIG, "layer_types", types, "a list"))?;
            if let Some(other) = list.iter().find(|t| t.as_str() != Some("full_attention")) {
                let layer_type = other.as_str().map_or_else(|| other.to_string(), str::to_owned);
                return Err(FormatError::UnsupportedLayerType { layer_type });
            }
        }
        Ok(Self {
            head_dim: f.size("head_dim", limits::HEAD_DIM)?,
            max_position_embeddings: f.size("max_position_embeddings", limits::MAX_POSITION_EMBEDDINGS)?,
            num_key_value_heads: f.size("num_key_value_heads", limits::HEADS)?,
            attention_bias: f.boolean("attention_bias")?.unwrap_or(false),
            mlp_bias: f.boolean("mlp_bias")?.unwrap_or(false),
            rope_theta: common.rope_theta.unwrap_or(10_000.0),
            rope_traditional: f.boolean("rope_traditional")?.unwrap_or(false),
            tie_word_embeddings: f.boolean("tie_word_embeddings")?.unwrap_or(true),
            common,
        })
    }

    pub fn text(&self) -> TextConfig {
        let c = &self.common;
        let kv_heads = self.num_key_value_heads.unwrap_or(c.num_attention_heads);
        TextConfig {
            max_position_embeddings: self.max_position_embeddings,
            rope_traditional: self.rope_traditional,
            tie_word_embeddings: self.tie_word_embeddings,
            qkv_bias: self.attention_bias,
            o_bias: self.attention_bias,
            mlp_bias: self.mlp_bias,
            ..c.text(kv_heads, self.head_dim.unwrap_or_else(|| c.derived_head_dim()), self.rope_theta)
        }
    }
}
