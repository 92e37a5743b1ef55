//! The model format: the ONE reader of a model's files, for the engine, the
//! hub, the model list, the stats labels and the fit check.
//!
//! - [`safetensors`]: the header (length, JSON, dtypes, offsets, checked
//!   arithmetic) and the shard index;
//! - [`config`]: config.json, one [`ModelType`] with a config per
//!   architecture ([`qwen2`], [`qwen3`], [`llama`], [`qwen3_moe`],
//!   [`gemma3_text`], [`qwen3_5`]: HF field names, mlx-lm
//!   0.32.2's defaults) and the sizes their decoder shares;
//! - [`gguf`]: a GGUF file's header, metadata and tokenizer, and the model
//!   they describe as MLX will load it;
//! - [`quant`]: the quantization block as mlx-lm reads it;
//! - [`footprint`]: what the fit check consumes;
//! - [`hf_cache`]: the Hugging Face cache layout, read and written.
//!
//! Pure: bytes in, checked values or a [`FormatError`] naming the field out.
//! Every size a file gives is checked before any arithmetic uses it.

pub mod config;
mod error;
mod fields;
pub mod footprint;
pub mod gemma3_text;
pub mod gguf;
pub mod hf_cache;
pub mod llama;
pub mod quant;
pub mod qwen2;
pub mod qwen3;
pub mod qwen3_5;
pub mod qwen3_moe;
pub mod safetensors;

pub use config::{LayerAttention, LinearAttention, ModelConfig, ModelType, Moe, RopeScaling, TextConfig};
pub use error::{FormatError, Result};
pub use fields::limits;
pub use footprint::{footprint, LoadShape, WeightBytes};
pub use quant::{LayerQuant, QuantParams, Quantization};
pub use safetensors::{Dtype, Header, TensorInfo};

/// The file every model folder has.
pub const CONFIG_FILE: &str = "config.json";

#[cfg(test)]
mod fuzz;
