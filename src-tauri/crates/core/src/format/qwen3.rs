//! `model_type: qwen3`: mlx-lm 0.32.2's `qwen3.ModelArgs`. No projection
//! biases, an explicit `head_dim`, an RMSNorm over each query and key head,
//! and no defaults for the sizes or the head's tying: all are required.

use super::config::{Common, RopeScaling, TextConfig};
use super::error::Result;
use super::fields::{limits, Fields};

/// The fields mlx-lm reads; every one is required but `rope_scaling`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub num_key_value_heads: i32,
    pub max_position_embeddings: i32,
    pub head_dim: i32,
    pub tie_word_embeddings: bool,
    /// Top-level or under `rope_parameters`; required either way.
    pub rope_theta: f32,
    pub rope_scaling: Option<RopeScaling>,
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
            max_position_embeddings: f.required_size("max_position_embeddings", limits::MAX_POSITION_EMBEDDINGS)?,
            head_dim: f.required_size("head_dim", limits::HEAD_DIM)?,
            tie_word_embeddings: f.boolean("tie_word_embeddings")?.ok_or_else(|| f.missing("tie_word_embeddings"))?,
            rope_theta: c.rope.theta.ok_or_else(|| f.missing("rope_theta"))?,
            rope_scaling: c.rope.scaling,
        })
    }

    pub fn text(&self) -> TextConfig {
        TextConfig {
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            intermediate_size: self.intermediate_size,
            num_attention_heads: self.num_attention_heads,
            num_key_value_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            rms_norm_eps: self.rms_norm_eps,
            vocab_size: self.vocab_size,
            max_position_embeddings: Some(self.max_position_embeddings),
            rope_theta: self.rope_theta,
            rope_traditional: false,
            rope_scaling: self.rope_scaling.clone(),
            tie_word_embeddings: self.tie_word_embeddings,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
        }
    }
}
