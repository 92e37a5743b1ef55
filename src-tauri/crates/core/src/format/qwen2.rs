//! `model_type: qwen2` (Qwen2, Qwen2.5): mlx-lm 0.32.2's `qwen2.ModelArgs`.
//! Biased q/k/v projections, an unbiased o_proj, `head_dim = hidden /
//! heads` (a `head_dim` in the file is ignored, as mlx-lm ignores it), RoPE
//! base 1e6 and a tied head unless the file says otherwise.

use super::config::{Common, RopeScaling, TextConfig};
use super::error::Result;
use super::fields::{limits, Fields};

/// The fields mlx-lm reads, with its defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub num_key_value_heads: i32,
    /// Default 32768.
    pub max_position_embeddings: i32,
    /// Default 1e6.
    pub rope_theta: f32,
    pub rope_traditional: bool,
    pub rope_scaling: Option<RopeScaling>,
    /// Default true.
    pub tie_word_embeddings: bool,
}

impl Config {
    pub(crate) fn from_fields(f: &Fields) -> Result<Self> {
        let c: Common = TextConfig::common(f)?;
        Ok(Self {
            hidden_size: c.hidden_size,
            num_hidden_layers: c.num_hidden_layers,
            intermediate_size: c.intermediate_size,
            num_attention_heads: c.num_attention_heads,
            rms_norm_eps: c.rms_norm_eps,
            vocab_size: c.vocab_size,
            num_key_value_heads: f.required_size("num_key_value_heads", limits::HEADS)?,
            max_position_embeddings: f
                .size("max_position_embeddings", limits::MAX_POSITION_EMBEDDINGS)?
                .unwrap_or(32768),
            rope_theta: c.rope.theta.unwrap_or(1_000_000.0),
            rope_traditional: f.boolean("rope_traditional")?.unwrap_or(false),
            rope_scaling: c.rope.scaling,
            tie_word_embeddings: f.boolean("tie_word_embeddings")?.unwrap_or(true),
        })
    }

    pub fn text(&self) -> TextConfig {
        TextConfig {
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            intermediate_size: self.intermediate_size,
            num_attention_heads: self.num_attention_heads,
            num_key_value_heads: self.num_key_value_heads,
            head_dim: self.hidden_size / self.num_attention_heads,
            rms_norm_eps: self.rms_norm_eps,
            vocab_size: self.vocab_size,
            max_position_embeddings: Some(self.max_position_embeddings),
            rope_theta: self.rope_theta,
            rope_traditional: self.rope_traditional,
            rope_scaling: self.rope_scaling.clone(),
            tie_word_embeddings: self.tie_word_embeddings,
            qkv_bias: true,
            o_bias: false,
            mlp_bias: false,
        }
    }
}
