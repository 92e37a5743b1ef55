//! MLX dtypes as the engine's labels spell them and as its byte counts size
//! them: one home for what the worker's stats, the benchmark's labels and
//! the saved KV states' headers all print.

use mlx_rs::{Array, Dtype};

use crate::error::{MlxContext, Result};

/// A float type as the KV labels spell it ("bf16", "f16", "f32").
pub(crate) fn short_dtype_name(d: Dtype) -> &'static str {
    match d {
        Dtype::Bfloat16 => "bf16",
        Dtype::Float16 => "f16",
        Dtype::Float32 => "f32",
        Dtype::Float64 => "f64",
        _ => "other",
    }
}

/// A float type as MLX names it ("bfloat16", "float32").
pub(crate) fn dtype_name(d: Dtype) -> &'static str {
    match d {
        Dtype::Bfloat16 => "bfloat16",
        Dtype::Float16 => "float16",
        Dtype::Float32 => "float32",
        Dtype::Float64 => "float64",
        _ => "other",
    }
}

/// Bytes per element.
pub(crate) fn dtype_bytes(d: Dtype) -> u64 {
    match d {
        Dtype::Bfloat16 | Dtype::Float16 | Dtype::Int16 | Dtype::Uint16 => 2,
        Dtype::Float64 | Dtype::Int64 | Dtype::Uint64 | Dtype::Complex64 => 8,
        Dtype::Bool | Dtype::Int8 | Dtype::Uint8 => 1,
        _ => 4,
    }
}

/// `a` in f32 (itself if it already is).
pub(crate) fn to_f32(a: &Array) -> Result<Array> {
    if a.dtype() == Dtype::Float32 {
        Ok(a.clone())
    } else {
        a.as_dtype(Dtype::Float32).op("cast to f32")
    }
}
