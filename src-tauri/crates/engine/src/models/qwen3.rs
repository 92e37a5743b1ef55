//! Qwen3 (`model_type: qwen3`).
//!
//! - Attention: grouped-query with qk-norm: Llama's projections (no biases,
//!   per the config's qwen3 defaults) and an RMSNorm over each query and
//!   key head before RoPE; causal over the whole context, RoPE over the
//!   whole head; an explicit `head_dim`.
//! - Feed-forward: the dense SwiGLU MLP, unbiased.
//! - Block and model: the shared pre-norm decoder (decoder.rs).
//!
//! Read top to bottom: the config (`headroom_core::format::qwen3::Config`,
//! HF names and mlx-lm's defaults, reduced to the shared `TextConfig`), the
//! attention, the feed-forward, the model. Qwen3 MoE (qwen3_moe.rs) runs on
//! this attention.

use mlx_rs::Array;

use super::decoder::{self, Decoder};
use super::{llama, mlx};
use crate::cache::LayerCache;
use crate::error::Result;
use crate::layers::{attend, split_heads, to_heads, Mlp, Params, RmsNorm};
use crate::weights::Weights;
use headroom_core::format::TextConfig;

/// Llama's attention (no biases: the config's qwen3 defaults) plus a norm
/// over each query and key head.
#[derive(Debug)]
pub struct Attention {
    pub base: llama::Attention,
    pub q_norm: RmsNorm,
    pub k_norm: RmsNorm,
}

impl decoder::Attention for Attention {
    fn load(c: &TextConfig, w: &mut Weights, p: &str) -> Result<Self> {
        Ok(Self {
            base: llama::Attention::load(c, w, p)?,
            q_norm: w.rms_norm(&format!("{p}.q_norm"), c.head_dim, c.rms_norm_eps)?,
            k_norm: w.rms_norm(&format!("{p}.k_norm"), c.head_dim, c.rms_norm_eps)?,
        })
    }

    fn forward(&self, x: &Array, cache: &mut LayerCache) -> Result<Array> {
        let b = &self.base;
        // The norms act on each head's vector, before the heads move to axis 1.
        let q = self.q_norm.forward(&split_heads(&b.q_proj.forward(x)?, b.n_heads)?)?;
        let k = self.k_norm.forward(&split_heads(&b.k_proj.forward(x)?, b.n_kv_heads)?)?;
        let q = q.transpose_axes(&[0, 2, 1, 3]).map_err(mlx("transpose"))?;
        let k = k.transpose_axes(&[0, 2, 1, 3]).map_err(mlx("transpose"))?;
        let v = to_heads(&b.v_proj.forward(x)?, b.n_kv_heads)?;
        let out = attend(&q, &k, &v, &b.rope, b.scale, cache)?;
        b.o_proj.forward(&out)
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        self.base.collect(out);
        self.q_norm.collect(out);
        self.k_norm.collect(out);
    }
}

/// The dense SwiGLU MLP, `down(silu(gate(x)) * up(x))`.
pub type FeedForward = Mlp;

pub type Model = Decoder<Attention, FeedForward>;
