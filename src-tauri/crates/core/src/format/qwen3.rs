//! `model_type: qwen3`: mlx-lm 0.32.2's `qwen3.ModelArgs`. No projection
//! biases, an explicit `head_dim`, an RMSNorm over each query and key head
//! (the engine's qwen3 attention), and no defaults for the sizes or the
//! head's tying: all are required.

use super::config::{Common, RopeNesting, TextConfig};
use super::error::Result;
use super::fields::{limits, Fields};

/// The fields mlx-lm reads; every one is required but `rope_scaling`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `rope_theta` is required too (top-level or under `rope_parameters`).
    pub common: Common,
    pub num_key_value_heads: i32,
    pub max_position_embeddings: i32,
    pub head_dim: i32,
    pub tie_word_embeddings: bool,
}

impl Config {
    pub(crate) fn from_fields(f: &Fields) -> Result<Self> {
        let common = Common::read_with(f, RopeNesting::Fallback)?;
        if common.rope_theta.is_none() {
            return Err(f.missing("rope_theta"));
        }
        Ok(Self {
            num_key_value_heads: f.required_size("num_key_value_heads", limits::HEADS)?,
            max_position_embeddings: f.required_size("max_position_embeddings", limits::MAX_POSITION_EMBEDDINGS)?,
            head_dim: f.required_size("head_dim", limits::HEAD_DIM)?,
            tie_word_embeddings: f.boolean("tie_word_embeddings")?.ok_or_else(|| f.missing("tie_word_embeddings"))?,
            common,
        })
    }

    pub fn text(&self) -> TextConfig {
        TextConfig {
            max_position_embeddings: Some(self.max_position_embeddings),
            tie_word_embeddings: self.tie_word_embeddings,
            // Checked present when read.
            ..self.common.text(self.num_key_value_heads, self.head_dim, self.common.rope_theta.unwrap_or(0.0))
        }
    }
}
