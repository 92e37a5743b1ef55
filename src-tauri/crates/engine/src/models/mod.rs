//! The architectures, one file per `model_type` over one shared decoder
//! (decoder.rs), behind one `Model` enum.

use mlx_rs::Array;

use crate::cache::{KvCache, LayerKind};
use crate::error::{EngineError, Result};
use crate::layers::{last_position, Embedding, Linear};
use crate::quant::QuantKernel;
use headroom_core::bench::WeightBytes;
use headroom_core::format::ModelConfig;
use headroom_core::kv::KvFormat;

pub mod decoder;
pub mod gemma3_text;
pub mod llama;
pub mod moe;
pub mod qwen2;
pub mod qwen3;
pub mod qwen3_5;
pub mod qwen3_moe;

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

/// Whether the keys and values of the model `config` describes can be
/// stored as `format` (checked before a model is built, from its config).
pub(crate) fn check_kv_format(config: &ModelConfig, format: KvFormat) -> Result<()> {
    let head_dim = u64::try_from(config.text.head_dim).unwrap_or(0);
    format.check_head_dim(head_dim).map_err(|source| EngineError::KvFormat { source })?;
    KvCache::with_format(&LayerKind::for_config(&config.text), format)
        .map(drop)
        .map_err(|source| EngineError::KvFormat { source })
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

impl Logits {
    /// What every model does after its last block: keep the last position
    /// alone when that is all the caller wants (the vocab-wide head then
    /// runs once), the final norm (each architecture's own), the output head (or the tied embedding),
    /// and the logits' shape.
    pub(crate) fn head(
        self,
        h: Array,
        norm: impl FnOnce(&Array) -> Result<Array>,
        lm_head: Option<&Linear>,
        embed: &Embedding,
    ) -> Result<Array> {
        let h = if self == Logits::Last { last_position(&h)? } else { h };
        let h = norm(&h)?;
        let out = match lm_head {
            Some(head) => head.forward(&h)?,
            None => embed.as_linear(&h)?,
        };
        match self {
            Logits::Last => out.squeeze_axes(&[1]).map_err(mlx("squeeze")),
            #[cfg(test)]
            Logits::All => Ok(out),
        }
    }
}

/// A loaded model of any supported architecture.
#[derive(Debug)]
pub enum Model {
    Qwen2(qwen2::Model),
    Qwen3(qwen3::Model),
    Llama(llama::Model),
    Qwen3Moe(qwen3_moe::Model),
    Gemma3(gemma3_text::Model),
    Qwen3_5(qwen3_5::Model),
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
            Model::Qwen3Moe(m) => m.forward(tokens, cache, logits),
            Model::Gemma3(m) => m.forward(tokens, cache, logits),
            Model::Qwen3_5(m) => m.forward(tokens, cache, logits),
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
            Model::Qwen3Moe(m) => &m.config,
            Model::Gemma3(m) => &m.config,
            Model::Qwen3_5(m) => &m.config,
        }
    }

    /// How the quantized matrices multiply; `None` for an unquantized model.
    pub fn quant_kernel(&self) -> Option<QuantKernel> {
        let kernel = match self {
            Model::Qwen2(m) => m.kernel,
            Model::Qwen3(m) => m.kernel,
            Model::Llama(m) => m.kernel,
            Model::Qwen3Moe(m) => m.kernel,
            Model::Gemma3(m) => m.kernel,
            Model::Qwen3_5(m) => m.kernel,
        };
        self.config().quantization.as_ref().map(|_| kernel)
    }

    /// What each layer keeps between forward passes, in order.
    pub fn layer_kinds(&self) -> Vec<LayerKind> {
        match self {
            Model::Gemma3(m) => m.layer_kinds(),
            Model::Qwen3_5(m) => m.layer_kinds(),
            _ => vec![LayerKind::Full; usize::try_from(self.config().text.num_hidden_layers).unwrap_or(0)],
        }
    }

    /// An empty float cache with one entry per layer of this model, each of the kind its layer needs.
    #[cfg(any(test, feature = "test-support"))]
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(&self.layer_kinds())
    }

    /// An empty cache that stores keys and values as `format`; refused when
    /// MLX cannot quantize this model's heads that way.
    pub fn new_cache_as(&self, format: KvFormat) -> Result<KvCache> {
        self.check_kv_format(format)?;
        KvCache::with_format(&self.layer_kinds(), format).map_err(|source| EngineError::KvFormat { source })
    }

    /// Whether this model's keys and values can be stored as `format`.
    pub fn check_kv_format(&self, format: KvFormat) -> Result<()> {
        check_kv_format(self.config(), format)
    }

    /// The dtype activations (and so the KV cache) take on: the embedding's
    /// float dtype, as in mlx-lm.
    pub fn activation_dtype(&self) -> mlx_rs::Dtype {
        match self {
            Model::Qwen2(m) => m.embed_tokens.dtype(),
            Model::Qwen3(m) => m.embed_tokens.dtype(),
            Model::Llama(m) => m.embed_tokens.dtype(),
            Model::Qwen3Moe(m) => m.embed_tokens.dtype(),
            Model::Gemma3(m) => m.embed_tokens.dtype(),
            Model::Qwen3_5(m) => m.embed_tokens.dtype(),
        }
    }

    /// Every weight array.
    pub fn parameters(&self) -> Vec<&Array> {
        let mut out = Vec::new();
        match self {
            Model::Qwen2(m) => m.collect(&mut out),
            Model::Qwen3(m) => m.collect(&mut out),
            Model::Llama(m) => m.collect(&mut out),
            Model::Qwen3Moe(m) => m.collect(&mut out),
            Model::Gemma3(m) => m.collect(&mut out),
            Model::Qwen3_5(m) => m.collect(&mut out),
        }
        out
    }

    /// The model's weights by what one decoded token reads of them.
    pub fn weight_bytes(&self) -> WeightBytes {
        let sum = |arrays: Vec<&Array>| arrays.iter().map(|a| a.nbytes() as u64).sum::<u64>();
        let (embedding, experts) = match self {
            Model::Qwen2(m) => (m.embed_tokens.nbytes(), 0),
            Model::Qwen3(m) => (m.embed_tokens.nbytes(), 0),
            Model::Llama(m) => (m.embed_tokens.nbytes(), 0),
            Model::Qwen3Moe(m) => (m.embed_tokens.nbytes(), sum(m.expert_arrays())),
            Model::Gemma3(m) => (m.embed_tokens.nbytes(), 0),
            Model::Qwen3_5(m) => (m.embed_tokens.nbytes(), sum(m.expert_arrays())),
        };
        WeightBytes { resident: self.nbytes() as u64, embedding, experts }
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
