//! Which attention MLX computes for a shape, and so what it allocates: one
//! rule for the fit estimate and the engine, so the memory the estimate
//! approved is the memory the engine's attention takes.
//!
//! The rules are MLX 0.32.2's own (`mlx/fast.cpp`:
//! `fast::scaled_dot_product_attention`; `mlx/backend/metal/
//! scaled_dot_product_attention.cpp`: `has_fused_kernel` and
//! `ScaledDotProductAttention::use_fallback`; `mlx/backend/no_gpu/
//! primitives.cpp` for the CPU), read, not copied:
//!
//! - On MLX's CPU backend every call takes the fallback: the graph of
//!   `softmax(q·Kᵀ·scale, masked) · V`, which materializes the scores
//!   (`[heads, queries, keys]` in the activations' dtype) and, for a causal
//!   mask, a boolean `[queries, keys]` mask.
//! - On Metal, with more than 8 queries (a prompt chunk), the fused "full"
//!   kernel exists for query and value head dims equal and one of 64, 72,
//!   80, 96, 128, 192, 256, and with a causal mask given as the mode
//!   "causal" (not an array) only while the queries are no more than the
//!   keys; MLX still takes the fallback for head dims 192 and 256 there
//!   (faster unfused; the exception for 256 on NAX devices is not assumed,
//!   which errs on the safe side).
//! - On Metal, with at most 8 queries (decode), the fused "vector" kernel
//!   exists for equal head dims 64, 96, 128, 192, 256 (or 192 for queries
//!   with 128 for values), queries no more than keys, and queries × the
//!   GQA factor at most 32; MLX takes the fallback for equal head dims 192.
//!   Its two-pass form keeps partial results: at most 1024 blocks ×
//!   heads × queries × head dim in the dtype, plus two f32 per block and head.
//! - Every dtype MLX has kernels for (f16, bf16, f32) is covered; training
//!   (never here) would take the fallback.
//! - A quantized KV cache has no fused kernel at all: attention over it is
//!   mlx-lm's `quantized_scaled_dot_product_attention`, whose scores are
//!   materialized like the fallback's, on every backend.
//!
//! The fused kernels allocate nothing beyond their output (which the
//! estimate's activation term already holds), so on Metal a long prompt's
//! attention costs no score matrix: the term the CPU measurements needed
//! (see `fit`) is not spent there.

use serde::{Deserialize, Serialize};

/// The MLX backend a model computes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// MLX's CPU backend (Linux here): every attention takes the fallback.
    #[default]
    Cpu,
    /// Metal (Apple silicon GPU): the fused kernels where MLX has them.
    Metal,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Metal => "metal",
        }
    }
}

/// How one attention call is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum AttentionPath {
    /// A fused Metal kernel: no score matrix.
    Fused,
    /// MLX's unfused fallback: the scores and the mask are materialized.
    Unfused,
    /// mlx-lm's attention over a quantized cache: scores materialized too.
    Quantized,
}

impl AttentionPath {
    /// Whether the scores of the call exist as an array.
    pub fn materializes_scores(self) -> bool {
        !matches!(self, Self::Fused)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fused => "fused",
            Self::Unfused => "unfused",
            Self::Quantized => "quantized",
        }
    }
}

/// The shape of one attention call, as MLX sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    pub queries: u64,
    pub keys: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub value_head_dim: u64,
    /// A causal mask passed as MLX's "causal" mode (the engine's form for
    /// more than one query); `false`: no mask (one query sees every key).
    pub causal: bool,
}

/// The most blocks MLX's two-pass vector kernel splits the keys into (on
/// the largest devices, past 64K keys).
pub const MAX_VECTOR_BLOCKS: u64 = 1024;

/// Which attention MLX takes for `shape` over a float cache on `backend`.
pub fn sdpa_path(backend: Backend, shape: &AttentionShape) -> AttentionPath {
    match backend {
        Backend::Cpu => AttentionPath::Unfused,
        Backend::Metal if metal_fused(shape) => AttentionPath::Fused,
        Backend::Metal => AttentionPath::Unfused,
    }
}

/// The path for a cache of `quantized` keys and values (`true`) or float ones.
pub fn attention_path(backend: Backend, shape: &AttentionShape, quantized: bool) -> AttentionPath {
    if quantized {
        AttentionPath::Quantized
    } else {
        sdpa_path(backend, shape)
    }
}

/// MLX's `has_fused_kernel` and then its `use_fallback` preference, for inference.
fn metal_fused(s: &AttentionShape) -> bool {
    let (d, dv) = (s.head_dim, s.value_head_dim);
    if s.queries == 0 || s.kv_heads == 0 || !s.heads.is_multiple_of(s.kv_heads) {
        return false;
    }
    if s.queries > 8 {
        let kernel = d == dv && [64, 72, 80, 96, 128, 192, 256].contains(&d);
        // A causal mode needs queries <= keys (an array mask would not, but
        // the engine never passes one).
        let mask_ok = !s.causal || s.queries <= s.keys;
        // Unfused is MLX's choice for 192 and 256 at this length.
        kernel && mask_ok && d != 192 && d != 256
    } else {
        let kernel = (d == dv && [64, 96, 128, 192, 256].contains(&d)) || (d == 192 && dv == 128);
        let gqa = s.heads / s.kv_heads;
        kernel && s.queries <= s.keys && s.queries.saturating_mul(gqa) <= 32 && !(d == 192 && dv == 192)
    }
}

/// The most bytes one block of the engine's quantized attention keeps in
/// scores: it takes a prompt chunk's queries in blocks of rows this small
/// (each row's attention is computed by itself, so blocks change no number).
/// mlx-lm attends with the whole chunk at once, which at 32K keys is 5 GB of
/// scores for a 14B model; this keeps that term to tens of MB.
pub const QUANTIZED_SCORES_BLOCK_BYTES: u64 = 64 << 20;

/// Rows of queries per block of the quantized attention over `keys` keys:
/// as many as keep `heads × rows × keys` scores of `dtype_bytes` within
/// [`QUANTIZED_SCORES_BLOCK_BYTES`], at least one.
pub fn quantized_query_block(heads: u64, keys: u64, dtype_bytes: u64) -> u64 {
    let per_row = heads.saturating_mul(keys).saturating_mul(dtype_bytes).max(1);
    (QUANTIZED_SCORES_BLOCK_BYTES / per_row).max(1)
}

/// Bytes the fused vector kernel's two passes keep beside its output, at
/// most: partial outputs for every block plus a running max and sum (f32)
/// per block, for `heads` query heads of `queries` rows.
pub fn vector_partials_bytes(heads: u64, queries: u64, value_head_dim: u64, dtype_bytes: u64) -> u64 {
    let rows = heads.saturating_mul(queries).saturating_mul(MAX_VECTOR_BLOCKS);
    rows.saturating_mul(value_head_dim).saturating_mul(dtype_bytes).saturating_add(rows.saturating_mul(2 * 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(queries: u64, keys: u64, heads: u64, kv_heads: u64, head_dim: u64) -> AttentionShape {
        AttentionShape { queries, keys, heads, kv_heads, head_dim, value_head_dim: head_dim, causal: queries > 1 }
    }

    #[test]
    fn the_cpu_backend_always_materializes() {
        for s in [shape(2048, 8192, 40, 8, 128), shape(1, 8192, 40, 8, 128), shape(16, 16, 4, 2, 16)] {
            assert_eq!(sdpa_path(Backend::Cpu, &s), AttentionPath::Unfused, "{s:?}");
        }
    }

    /// MLX 0.32.2's rules, case by case (Qwen2.5 7B/14B: head dim 128, GQA 7 and 5).
    #[test]
    fn metal_takes_the_fused_kernels_exactly_where_mlx_does() {
        let metal = |s: AttentionShape| sdpa_path(Backend::Metal, &s);
        // A prompt chunk of Qwen2.5-14B at 32K: the full kernel, no scores.
        assert_eq!(metal(shape(2048, 32768, 40, 8, 128)), AttentionPath::Fused);
        // Every full-kernel head dim, and the two MLX leaves unfused.
        for d in [64, 72, 80, 96, 128] {
            assert_eq!(metal(shape(512, 512, 8, 8, d)), AttentionPath::Fused, "{d}");
        }
        for d in [192, 256, 32, 16, 112] {
            assert_eq!(metal(shape(512, 512, 8, 8, d)), AttentionPath::Unfused, "{d}");
        }
        // A causal mode with more queries than keys has no fused kernel.
        assert_eq!(metal(shape(600, 512, 8, 8, 128)), AttentionPath::Unfused);
        // Decode: the vector kernel, for its head dims.
        assert_eq!(metal(shape(1, 32768, 40, 8, 128)), AttentionPath::Fused);
        assert_eq!(metal(shape(1, 100, 28, 4, 64)), AttentionPath::Fused);
        assert_eq!(metal(shape(1, 100, 8, 8, 256)), AttentionPath::Fused);
        for d in [72, 80, 192, 16] {
            assert_eq!(metal(shape(1, 100, 8, 8, d)), AttentionPath::Unfused, "{d}");
        }
        // Head dim 192 for queries with 128 for values (DeepSeek's MLA shape).
        let mla = AttentionShape { value_head_dim: 128, ..shape(1, 100, 8, 8, 192) };
        assert_eq!(metal(mla), AttentionPath::Fused);
        // Up to 8 queries, but queries × GQA factor at most 32.
        assert_eq!(metal(shape(4, 100, 28, 4, 128)), AttentionPath::Fused);
        assert_eq!(metal(shape(5, 100, 28, 4, 128)), AttentionPath::Unfused);
        assert_eq!(metal(shape(8, 100, 8, 2, 128)), AttentionPath::Fused);
        assert_eq!(metal(shape(8, 4, 8, 2, 128)), AttentionPath::Unfused);
        // Nine queries: the full kernel's rules again.
        assert_eq!(metal(shape(9, 100, 28, 4, 128)), AttentionPath::Fused);
        // A quantized cache has no fused kernel on either backend.
        for backend in [Backend::Cpu, Backend::Metal] {
            assert_eq!(attention_path(backend, &shape(2048, 32768, 40, 8, 128), true), AttentionPath::Quantized);
        }
        assert!(AttentionPath::Quantized.materializes_scores() && !AttentionPath::Fused.materializes_scores());
    }

    #[test]
    fn quantized_attention_blocks_keep_the_scores_small() {
        // Qwen2.5-14B at 32K keys: 25 rows per block, 62.5 MiB of bf16 scores.
        assert_eq!(quantized_query_block(40, 32768, 2), 25);
        const { assert!(40 * 25 * 32768 * 2 <= QUANTIZED_SCORES_BLOCK_BYTES) };
        // A tiny model takes a whole prompt chunk at once.
        assert!(quantized_query_block(4, 2048, 2) >= 2048);
        // Absurd sizes give one row, never zero or an overflow.
        assert_eq!(quantized_query_block(u64::MAX, u64::MAX, 2), 1);
        assert_eq!(quantized_query_block(0, 0, 0), QUANTIZED_SCORES_BLOCK_BYTES);
    }

    #[test]
    fn the_vector_kernel_partials_are_small() {
        // Qwen2.5-14B decoding at 64K keys on the largest device: 10 MB at most.
        let b = vector_partials_bytes(40, 1, 128, 2);
        assert_eq!(b, 40 * 1024 * 128 * 2 + 40 * 1024 * 8);
        assert!(b < 11 << 20);
    }
}
