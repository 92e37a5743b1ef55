//! Qwen2 / Qwen2.5 (`model_type: qwen2`).
//!
//! - Attention: Llama's grouped-query attention (llama.rs), causal over the
//!   whole context, with the config's qwen2 defaults: biased q/k/v
//!   projections, an unbiased o_proj, `head_dim = hidden / heads` (a
//!   `head_dim` in the file is ignored, as in mlx-lm), RoPE over the whole
//!   head with base `rope_theta` (1e6 by default).
//! - Feed-forward: the dense SwiGLU MLP, unbiased.
//! - Block and model: the shared pre-norm decoder (decoder.rs); the head is
//!   tied to the embedding unless `tie_word_embeddings` is false.
//!
//! Read top to bottom: the config (`headroom_core::format::qwen2::Config`,
//! HF names and mlx-lm's defaults, reduced to the shared `TextConfig`), the
//! attention, the feed-forward, the model. Nothing here computes on its
//! own: what sets Qwen2 apart from Llama is all in its config, so each part
//! names the shared one it is.

use super::decoder::Decoder;
use super::llama;
use crate::layers::Mlp;

/// Llama's attention; the q/k/v biases come from the config.
pub type Attention = llama::Attention;

/// The dense SwiGLU MLP, `down(silu(gate(x)) * up(x))`.
pub type FeedForward = Mlp;

pub type Model = Decoder<Attention, FeedForward>;
