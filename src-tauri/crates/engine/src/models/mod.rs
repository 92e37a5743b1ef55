//! The architectures, one file per `model_type` over one shared decoder
//! (decoder.rs), behind one `Model` enum.

use mlx_rs::Array;

use crate::cache::KvCache;
use crate::error::{EngineError, Result};
use crate::quant::QuantKernel;
use headroom_core::format::ModelConfig;
use headroom_core::kv::KvFormat;

pub mod decoder;
pub mod llama;
pub mod qwen2;
pub mod qwen3;

/// Wraps an MLX error with the op it came from (for `map_err`).
pub(crate) fn mlx(op: &'static str) -> impl Fn(mlx_rs::error::Exception) -> EngineError {
    move |source| EngineError::Mlx { op, source }
}

/// A cache made for another model would misplace keys; refuse it up front.
pub(crate) fn check_cache(cache: &KvCache, layers: usize) -> Result<()> {
    if cache.num_layers() == layers {
        Ok(())
    } else {
        Err(EngineError::Shape {
            what: "KV cache",
            expected: format!("{layers} layers"),
            found: vec![i32::try_from(cache.num_layers()).unwrap_or(i32::MAX)],
        })
    }
}

/// Which positions' logits a forward pass returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// `[B, vocab]` for the last position: all generation needs, and it
    /// skips the output head for every other position (a vocab-wide matmul).
    Last,
    /// `[B, L, vocab]`, as mlx-lm's model returns (for parity checks).
    #[cfg(test)]
    All,
}

/// A loaded model of any supported architecture.
#[derive(Debug)]
pub enum Model {
    Qwen2(qwen2::Model),
    Qwen3(qwen3::Model),
    Llama(llama::Model),
}

impl Model {
    /// Runs `tokens` (`[B, L]` ids) after what `cache` holds, appends their
    /// keys/values to it, and returns the logits of the last position, `[B, vocab]`.
    pub fn forward(&self, tokens: &Array, cache: &mut KvCache) -> Result<Array> {
        self.forward_with(tokens, cache, Logits::Last)
    }

    pub fn forward_with(&self, tokens: &Array, cache: &mut KvCache, logits: Logits) -> Result<Array> {
        let out = match self {
            Model::Qwen2(m) => m.forward(tokens, cache, logits),
            Model::Qwen3(m) => m.forward(tokens, cache, logits),
            Model::Llama(m) => m.forward(tokens, cache, logits),
        }?;
        // After the model call, as mlx-lm's generate_step does: the pass
        // that reached the start ran over the float cache.
        cache.maybe_quantize()?;
        Ok(out)
    }

    pub fn config(&self) -> &ModelConfig {
        match self {
            Model::Qwen2(m) => &m.config,
            Model::Qwen3(m) => &m.config,
            Model::Llama(m) => &m.config,
        }
    }

    /// How the quantized matrices multiply; `None` for an unquantized model.
    pub fn quant_kernel(&self) -> Option<QuantKernel> {
        let kernel = match self {
            Model::Qwen2(m) => m.kernel,
            Model::Qwen3(m) => m.kernel,
            Model::Llama(m) => m.kernel,
        };
        self.config().quantization.as_ref().map(|_| kernel)
    }

    /// An empty float cache with one entry per layer of this model.
    #[cfg(any(test, feature = "test-support"))]
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(usize::try_from(self.config().text.num_hidden_layers).unwrap_or(0))
    }

    /// An empty cache that stores keys and values as `format`; refused when
    /// MLX cannot quantize this model's heads that way.
    pub fn new_cache_as(&self, format: KvFormat) -> Result<KvCache> {
        self.check_kv_format(format)?;
        Ok(KvCache::with_format(usize::try_from(self.config().text.num_hidden_layers).unwrap_or(0), format))
    }

    /// Whether this model's keys and values can be stored as `format`.
    pub fn check_kv_format(&self, format: KvFormat) -> Result<()> {
        let head_dim = u64::try_from(self.config().text.head_dim).unwrap_or(0);
        format.check_head_dim(head_dim).map_err(|source| EngineError::KvFormat { source })
    }

    /// The dtype activations (and so the KV cache) take on: the embedding's
    /// float dtype, as in mlx-lm.
    pub fn activation_dtype(&self) -> mlx_rs::Dtype {
        match self {
            Model::Qwen2(m) => m.embed_tokens.dtype(),
            Model::Qwen3(m) => m.embed_tokens.dtype(),
            Model::Llama(m) => m.embed_tokens.dtype(),
        }
    }

    /// Every weight array.
    pub fn parameters(&self) -> Vec<&Array> {
        let mut out = Vec::new();
        match self {
            Model::Qwen2(m) => m.collect(&mut out),
            Model::Qwen3(m) => m.collect(&mut out),
            Model::Llama(m) => m.collect(&mut out),
        }
        out
    }

    /// The next-token logits after `prompt` (fresh cache), as f32: what
    /// parity checks compare with the reference implementation.
    #[cfg(feature = "test-support")]
    pub fn prompt_logits(&self, prompt: &[u32]) -> Result<Vec<f32>> {
        let len = i32::try_from(prompt.len()).unwrap_or(i32::MAX);
        let logits = self.forward(&Array::from_slice(prompt, &[1, len]), &mut self.new_cache())?;
        let logits = logits.as_dtype(mlx_rs::Dtype::Float32).map_err(mlx("cast logits"))?;
        Ok(logits.as_slice::<f32>().to_vec())
    }

    /// Bytes of all weights as loaded.
    pub fn nbytes(&self) -> usize {
        self.parameters().iter().map(|a| a.nbytes()).sum()
    }
}
