//! Llama 2/3/3.1/3.2 (`model_type: llama`) and Mistral (`mistral`: the
//! same layout, which mlx-lm runs on its llama model too).
//!
//! - Attention: grouped-query (`num_key_value_heads` key/value heads shared
//!   by the query heads), causal over the whole context (a config naming
//!   sliding-window layers is refused when read), RoPE over the whole head
//!   (base `rope_theta`, 1e4 by default; linear or Llama 3.1 scaling where
//!   the config says). q/k/v/o are biased only with `attention_bias`;
//!   `head_dim` is the config's when given, else `hidden / heads`.
//! - Feed-forward: the dense SwiGLU MLP, biased only with `mlp_bias`.
//! - Block and model: the shared pre-norm decoder (decoder.rs); the head is
//!   tied to the embedding unless `tie_word_embeddings` is false.
//!
//! Read top to bottom: the config (`headroom_core::format::llama::Config`,
//! HF names and mlx-lm's defaults, reduced to the shared `TextConfig`), the
//! attention, the feed-forward, the model. Qwen2 (qwen2.rs) runs on this
//! attention, and Qwen3's (qwen3.rs) builds on it.

use mlx_rs::Array;

use super::decoder::{self, Decoder};
use crate::cache::LayerCache;
use crate::error::Result;
use crate::layers::{attend, to_heads, Linear, Mlp, Params, Rope};
use crate::weights::Weights;
use headroom_core::format::TextConfig;

/// `o(attend(rope(q(x)), rope(k(x)), v(x)))` over the cache, the query
/// heads grouped over the key/value heads.
#[derive(Debug)]
pub struct Attention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    pub(super) n_heads: i32,
    pub(super) n_kv_heads: i32,
    pub(super) scale: f32,
    pub(super) rope: Rope,
}

impl decoder::Attention for Attention {
    fn load(c: &TextConfig, w: &mut Weights, p: &str) -> Result<Self> {
        let (h, d) = (c.hidden_size, c.head_dim);
        Ok(Self {
            q_proj: w.linear(&format!("{p}.q_proj"), h, c.num_attention_heads * d, c.qkv_bias)?,
            k_proj: w.linear(&format!("{p}.k_proj"), h, c.num_key_value_heads * d, c.qkv_bias)?,
            v_proj: w.linear(&format!("{p}.v_proj"), h, c.num_key_value_heads * d, c.qkv_bias)?,
            o_proj: w.linear(&format!("{p}.o_proj"), c.num_attention_heads * d, h, c.o_bias)?,
            n_heads: c.num_attention_heads,
            n_kv_heads: c.num_key_value_heads,
            // Computed in f64 and rounded once, like Python's `head_dim**-0.5`.
            scale: (f64::from(d)).powf(-0.5) as f32,
            rope: Rope::new(c)?,
        })
    }

    fn forward(&self, x: &Array, cache: &mut LayerCache) -> Result<Array> {
        let q = to_heads(&self.q_proj.forward(x)?, self.n_heads)?;
        let k = to_heads(&self.k_proj.forward(x)?, self.n_kv_heads)?;
        let v = to_heads(&self.v_proj.forward(x)?, self.n_kv_heads)?;
        let out = attend(&q, &k, &v, &self.rope, self.scale, cache)?;
        self.o_proj.forward(&out)
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        for lin in [&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj] {
            lin.collect(out);
        }
    }
}

/// The dense SwiGLU MLP, `down(silu(gate(x)) * up(x))`.
pub type FeedForward = Mlp;

pub type Model = Decoder<Attention, FeedForward>;
