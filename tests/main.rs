//! Cross-crate integration tests, compiled as one binary (one link, one rpath).

mod gguf;
mod mlx_link;
mod parity;
