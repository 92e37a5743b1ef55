//! Cross-crate integration tests, compiled as one binary (one link, one rpath).

mod mlx_link;
mod parity;
