//! Qwen3 MoE (`model_type: qwen3_moe`, e.g. Qwen3-30B-A3B): Qwen3's
//! attention (no biases, an RMSNorm over each query and key head) and, on
//! the layers the config makes sparse, a mixture of SwiGLU experts in place
//! of the MLP: the router's softmax, its top `num_experts_per_tok`
//! (renormalized when `norm_topk_prob`), MLX's gathered quantized matmul
//! over the chosen experts (`moe.rs`, shared with Qwen3.5).
//!
//! Read top to bottom: the config (`headroom_core::format::qwen3_moe::Config`,
//! HF names and mlx-lm's defaults, reduced to the shared `TextConfig` with
//! its `moe` part), the attention (Qwen3's), the experts (moe.rs), the model
//! (the shared decoder, whose blocks take experts where the config says).

use super::decoder::Decoder;
use super::qwen3::Attention;

pub type Model = Decoder<Attention>;
