//! `model_type: gemma3_text` (Gemma 3's language model): mlx-lm 0.32.2's
//! `gemma3_text.ModelArgs`, whose every field has a default (the 1B
//! model's). Most layers attend over a sliding window of `sliding_window`
//! positions with RoPE base `rope_local_base_freq`; every
//! `sliding_window_pattern`-th layer attends over everything with base
//! `rope_theta` (and the file's `rope_scaling`). Scores are scaled by
//! `query_pre_attn_scalar^-0.5`, not `head_dim^-0.5`. The head is tied
//! exactly when the weights have no `lm_head` (decided at load).

use super::config::{read_rope, Common, LayerAttention, RopeNesting, TextConfig};
use super::error::Result;
use super::fields::{limits, Fields};

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub common: Common,
    pub head_dim: i32,
    pub num_key_value_heads: i32,
    pub rope_theta: f32,
    pub rope_local_base_freq: f32,
    pub query_pre_attn_scalar: f32,
    pub sliding_window: i32,
    pub sliding_window_pattern: i32,
    pub max_position_embeddings: i32,
}

impl Config {
    pub(crate) fn from_fields(f: &Fields) -> Result<Self> {
        use limits as l;
        let size = |key: &str, max: u64, default: i32| -> Result<i32> { Ok(f.size(key, max)?.unwrap_or(default)) };
        let (rope_theta, rope_scaling) = read_rope(f, RopeNesting::TopLevelOnly)?;
        let common = Common {
            hidden_size: size("hidden_size", l::HIDDEN_SIZE, 1152)?,
            num_hidden_layers: size("num_hidden_layers", l::LAYERS, 26)?,
            intermediate_size: size("intermediate_size", l::INTERMEDIATE_SIZE, 6912)?,
            num_attention_heads: size("num_attention_heads", l::HEADS, 4)?,
            rms_norm_eps: f.positive("rms_norm_eps", 1.0)?.unwrap_or(1e-6) as f32,
            vocab_size: size("vocab_size", l::VOCAB_SIZE, 262_144)?,
            rope_theta,
            rope_scaling,
        };
        Ok(Self {
            head_dim: size("head_dim", l::HEAD_DIM, 256)?,
            num_key_value_heads: size("num_key_value_heads", l::HEADS, 1)?,
            rope_theta: rope_theta.unwrap_or(1_000_000.0),
            rope_local_base_freq: f.positive("rope_local_base_freq", l::ROPE_THETA)?.unwrap_or(10_000.0) as f32,
            query_pre_attn_scalar: f.positive("query_pre_attn_scalar", 1e9)?.unwrap_or(256.0) as f32,
            sliding_window: size("sliding_window", l::MAX_POSITION_EMBEDDINGS, 512)?,
            sliding_window_pattern: size("sliding_window_pattern", l::LAYERS, 6)?,
            max_position_embeddings: size("max_position_embeddings", l::MAX_POSITION_EMBEDDINGS, 32768)?,
            common,
        })
    }

    /// mlx-lm's rule: every `sliding_window_pattern`-th layer (one-based) is global.
    pub fn is_sliding(&self, layer: i32) -> bool {
        (layer + 1) % self.sliding_window_pattern != 0
    }

    pub fn text(&self) -> TextConfig {
        let c = &self.common;
        TextConfig {
            max_position_embeddings: Some(self.max_position_embeddings),
            layer_types: (0..c.num_hidden_layers)
                .map(|i| if self.is_sliding(i) { LayerAttention::Sliding } else { LayerAttention::Full })
                .collect(),
            sliding_window: Some(self.sliding_window),
            ..c.text(self.num_key_value_heads, self.head_dim, self.rope_theta)
        }
    }
}
