//! headroom-engine: the only crate that talks to MLX (mlx-rs / mlx-sys).
//!
//! It owns everything that touches MLX arrays: the backend facts, quantized
//! weights, model loading and generation on a worker thread. Its public
//! surface is what the app, the server and the CLI use: the engine thread's
//! handle ([`worker`]), model inspection for the fit check, the tokenizer,
//! the benchmark and the demo models. Nothing outside this crate sees an
//! `mlx_rs::Array`, except through the `test-support` feature, which the
//! cross-crate tests turn on to compute with MLX directly.

mod backend;
pub mod bench;
mod cache;
mod config;
pub mod demo;
mod draft;
mod dtype;
mod error;
mod ffi;
mod generate;
mod inspect;
mod kv_quant;
mod layers;
mod loader;
mod lookup;
pub mod meter;
mod mlx_memory;
mod models;
pub mod peer;
pub mod prompt_cache;
mod quant;
mod sampler;
mod sizes;
pub mod source;
#[cfg(test)]
mod testutil;
pub mod tokenizer;
mod weights;
pub mod worker;

pub use backend::{backend_info, BackendInfo, DeviceKind};
pub use draft::{Draft, SameVocabulary};
pub use error::{EngineError, Result};
pub use inspect::{inspect, inspect_model, inspect_model_as, inspect_model_with, load_shape, Inspection};
pub use mlx_memory::{gpu_working_set_bytes, mlx_memory, MlxMemory};
pub use quant::{CpuPaths, QuantKernel};
pub use sampler::SamplingParams;
pub use tokenizer::Tokenizer;
pub use weights::ComputeDtype;

/// MLX-level access for tests outside this crate (the parity test, the
/// rpath check): loading a model as a value and computing on arrays.
#[cfg(feature = "test-support")]
pub mod testing {
    pub use crate::backend::kernel_clock;
    pub use crate::loader::{load_model, load_model_with};
    pub use crate::models::{Logits, Model};
    pub use crate::quant::QuantizedMatrix;
    pub use mlx_rs::Array;
}
