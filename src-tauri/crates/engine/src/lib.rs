//! headroom-engine: the only crate that talks to MLX (mlx-rs / mlx-sys).
//!
//! It owns everything that touches MLX arrays: the backend facts, quantized
//! weights, and (as the engine grows) model loading and generation on a
//! worker thread. Nothing outside this crate sees an `mlx_rs::Array`.

mod backend;
pub mod bench;
pub mod cache;
pub mod config;
pub mod demo;
mod error;
mod ffi;
pub mod generate;
pub mod inspect;
pub mod layers;
pub mod loader;
mod mlx_memory;
pub mod models;
pub mod quant;
pub mod sampler;
#[cfg(test)]
mod testutil;
pub mod tokenizer;
pub mod worker;

pub use backend::{backend_info, BackendInfo, DeviceKind};
// Re-exported so tests and callers can build inputs without naming mlx-rs.
pub use cache::KvCache;
pub use config::{Arch, ModelConfig};
pub use error::{EngineError, Result};
pub use generate::{generate, Clock, FinishReason, GenerateOptions, Generation, WallClock};
pub use inspect::{inspect_model, inspect_model_as};
pub use loader::{load_model, load_model_with, ComputeDtype};
pub use mlx_memory::{gpu_working_set_bytes, mlx_memory, MlxMemory};
pub use mlx_rs::Array;
pub use models::{Logits, Model};
pub use quant::QuantKernel;
pub use sampler::{Sampler, SamplingParams};
pub use tokenizer::{Detokenizer, Tokenizer};
