//! Qwen3 MoE (`model_type: qwen3_moe`, e.g. Qwen3-30B-A3B).
//!
//! - Attention: Qwen3's (qwen3.rs): grouped-query with qk-norm (an RMSNorm
//!   over each query and key head before RoPE), no biases, causal over the
//!   whole context, plain RoPE (a `rope_scaling` in the file is not
//!   applied, as in mlx-lm).
//! - Feed-forward: a mixture of SwiGLU experts (moe.rs) on every
//!   `decoder_sparse_step`-th layer not in `mlp_only_layers`: the router's
//!   softmax over `num_experts`, its top `num_experts_per_tok`
//!   (renormalized when `norm_topk_prob`), each token through its chosen
//!   experts by MLX's gathered (quantized) matmul, summed with the router's
//!   weights; no shared expert. The other layers keep the dense SwiGLU MLP.
//! - Block and model: the shared pre-norm decoder (decoder.rs).
//!
//! Read top to bottom: the config (`headroom_core::format::qwen3_moe::Config`,
//! HF names and mlx-lm's defaults, reduced to the shared `TextConfig` with
//! its `moe` part), the attention, the feed-forward, the model.

use super::decoder::Decoder;
use super::moe::MoeMlp;
use super::qwen3;

/// Qwen3's attention.
pub type Attention = qwen3::Attention;

/// Experts on the sparse layers, the dense SwiGLU MLP on the others.
pub type FeedForward = MoeMlp;

pub type Model = Decoder<Attention, FeedForward>;
