//! Cross-crate integration tests, compiled as one binary (one link, one rpath).

// clippy.toml's allow-unwrap-in-tests covers `#[test]` functions only; the
// helpers of this test binary read as plainly as the tests they serve.
#![allow(clippy::unwrap_used)]

mod chat_template;
mod gguf;
mod layout;
mod mlx_link;
mod parity;
