//! `model_type: qwen2` (Qwen2, Qwen2.5): mlx-lm 0.32.2's `qwen2.ModelArgs`.
//! Biased q/k/v projections, an unbiased o_proj, `head_dim = hidden /
//! heads` (a `head_dim` in the file is ignored, as mlx-lm ignores it), RoPE
//! base 1e6 and a tied head unless the file says otherwise.

use super::config::{Common, TextConfig};
use super::error::Result;
use super::fields::{limits, Fields};

/// The fields mlx-lm reads, with its defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub common: Common,
    pub num_key_value_heads: i32,
    /// Default 32768.
    pub max_position_embeddings: i32,
    /// Default 1e6.
    pub rope_theta: f32,
    pub rope_traditional: bool,
    /// Default true.
    pub tie_word_embeddings: bool,
}

impl Config {
    pub(crate) fn from_fields(f: &Fields) -> Result<Self> {
        let common = Common::read(f)?;
        Ok(Self {
            num_key_value_heads: f.required_size("num_key_value_heads", limits::HEADS)?,
            max_position_embeddings: f
                .size("max_position_embeddings", limits::MAX_POSITION_EMBEDDINGS)?
                .unwrap_or(32768),
            rope_theta: common.rope_theta.unwrap_or(1_000_000.0),
            rope_traditional: f.boolean("rope_traditional")?.unwrap_or(false),
            tie_word_embeddings: f.boolean("tie_word_embeddings")?.unwrap_or(true),
            common,
        })
    }

    pub fn text(&self) -> TextConfig {
        TextConfig {
            max_position_embeddings: Some(self.max_position_embeddings),
            rope_traditional: self.rope_traditional,
            tie_word_embeddings: self.tie_word_embeddings,
            qkv_bias: true,
            ..self.common.text(self.num_key_value_heads, self.common.derived_head_dim(), self.rope_theta)
        }
    }
}
