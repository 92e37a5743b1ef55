//! `model_type: qwen3_moe` (Qwen3-30B-A3B, Qwen3-235B-A22B): mlx-lm 0.32.2's
//! `qwen3_moe.ModelArgs`. Qwen3's attention (no biases, per-head q/k norms)
//! with a mixture of SwiGLU experts in place of the MLP on every
//! `decoder_sparse_step`-th layer not listed in `mlp_only_layers`. As in
//! mlx-lm, RoPE is plain (a `rope_scaling` in the file is not applied), and
//! every field is required.

use super::config::{Common, Moe, TextConfig};
use super::error::Result;
use super::fields::{limits, Fields};

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub common: Common,
    pub num_key_value_heads: i32,
    pub max_position_embeddings: i32,
    pub head_dim: i32,
    pub tie_word_embeddings: bool,
    pub num_experts: i32,
    pub num_experts_per_tok: i32,
    pub decoder_sparse_step: i32,
    pub mlp_only_layers: Vec<i32>,
    pub moe_intermediate_size: i32,
    pub norm_topk_prob: bool,
}

impl Config {
    pub(crate) fn from_fields(f: &Fields) -> Result<Self> {
        let common = Common::read(f)?;
        if common.rope_theta.is_none() {
            return Err(f.missing("rope_theta"));
        }
        let layers = u64::try_from(common.num_hidden_layers).unwrap_or(0);
        Ok(Self {
            num_key_value_heads: f.required_size("num_key_value_heads", limits::HEADS)?,
            max_position_embeddings: f.required_size("max_position_embeddings", limits::MAX_POSITION_EMBEDDINGS)?,
            head_dim: f.required_size("head_dim", limits::HEAD_DIM)?,
            tie_word_embeddings: f.boolean("tie_word_embeddings")?.ok_or_else(|| f.missing("tie_word_embeddings"))?,
            num_experts: f.required_size("num_experts", limits::EXPERTS)?,
            num_experts_per_tok: f.required_size("num_experts_per_tok", limits::EXPERTS)?,
            decoder_sparse_step: f.required_size("decoder_sparse_step", limits::LAYERS)?,
            mlp_only_layers: f.indices("mlp_only_layers", layers)?.ok_or_else(|| f.missing("mlp_only_layers"))?,
            moe_intermediate_size: f.required_size("moe_intermediate_size", limits::INTERMEDIATE_SIZE)?,
            norm_topk_prob: f.boolean("norm_topk_prob")?.ok_or_else(|| f.missing("norm_topk_prob"))?,
            common,
        })
    }

    /// mlx-lm's rule: experts where the layer is not MLP-only and its
    /// one-based index is a multiple of `decoder_sparse_step`.
    pub fn is_sparse(&self, layer: i32) -> bool {
        !self.mlp_only_layers.contains(&layer) && (layer + 1) % self.decoder_sparse_step == 0
    }

    pub fn text(&self) -> TextConfig {
        let c = &self.common;
        TextConfig {
            max_position_embeddings: Some(self.max_position_embeddings),
            tie_word_embeddings: self.tie_word_embeddings,
            rope_scaling: None,
            moe: Some(Moe {
                num_experts: self.num_experts,
                experts_per_token: self.num_experts_per_tok,
                expert_intermediate_size: self.moe_intermediate_size,
                norm_topk_prob: self.norm_topk_prob,
                shared_expert_intermediate_size: None,
                sparse_layers: (0..c.num_hidden_layers).map(|i| self.is_sparse(i)).collect(),
            }),
            // Checked present when read.
            ..c.text(self.num_key_value_heads, self.head_dim, c.rope_theta.unwrap_or(0.0))
        }
    }
}
