//! headroom-engine: the only crate that talks to MLX (mlx-rs / mlx-sys).
//!
//! It owns everything that touches MLX arrays: the backend facts, quantized
//! weights, and (as the engine grows) model loading and generation on a
//! worker thread. Nothing outside this crate sees an `mlx_rs::Array`.

mod backend;
mod error;
mod ffi;
pub mod quant;

pub use backend::{backend_info, BackendInfo, DeviceKind};
// Re-exported so tests and callers can build inputs without naming mlx-rs.
pub use mlx_rs::Array;
pub use error::{EngineError, Result};
