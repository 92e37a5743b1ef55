//! Qwen2 / Qwen2.5 (`model_type: qwen2`): exactly Llama's layout. What sets
//! it apart is carried by the config's per-arch defaults (`headroom_core::format::qwen2`): biased
//! q/k/v projections, an unbiased o_proj, `head_dim = hidden / heads` (any
//! config value is ignored, as in mlx-lm), `rope_theta` 1e6, tied head by
//! default. So it runs on Llama's attention.
//!
//! Read top to bottom: the config (`headroom_core::format::qwen2::Config`, HF
//! names and mlx-lm's defaults, reduced to the shared `TextConfig`), the
//! attention, the model.

use super::decoder::Decoder;
use super::llama::Attention;

pub type Model = Decoder<Attention>;
