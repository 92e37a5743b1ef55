//! The decoder the Llama-layout architectures share: embedding -> blocks of
//! (RMSNorm, attention, residual, RMSNorm, SwiGLU MLP or experts, residual)
//! -> RMSNorm -> head (tied to the embedding or not). The architectures
//! differ only in their attention, which each `model_type` file defines,
//! and in whether a layer's MLP is experts (the config's `moe`); biases and
//! `head_dim` are per-arch config defaults.

use mlx_rs::Array;

use super::moe::FeedForward;
use super::{check_cache, mlx, Logits};
use crate::cache::{KvCache, LayerCache};
use crate::error::Result;
use crate::layers::{Embedding, Linear, Params, RmsNorm};
use crate::quant::QuantKernel;
use crate::weights::Weights;
use headroom_core::format::{ModelConfig, TextConfig};

/// The part of a block that differs between architectures.
pub(crate) trait Attention: Sized + std::fmt::Debug {
    /// Loads the weights under `prefix` (`model.layers.{i}.self_attn`).
    fn load(c: &TextConfig, w: &mut Weights, prefix: &str) -> Result<Self>;
    /// `x` is `[B, L, hidden]`; appends this step's keys/values to `cache`.
    fn forward(&self, x: &Array, cache: &mut LayerCache) -> Result<Array>;
    /// Every weight array, for byte counts and evaluation.
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>);
}

#[derive(Debug)]
pub struct Block<A> {
    pub self_attn: A,
    pub mlp: FeedForward,
    pub input_layernorm: RmsNorm,
    pub post_attention_layernorm: RmsNorm,
}

// The bound is crate-private on purpose (it takes the loader's `Weights`):
// outside the crate, models are used through `models::Model`.
#[allow(private_bounds)]
impl<A: Attention> Block<A> {
    fn load(c: &TextConfig, w: &mut Weights, i: i32) -> Result<Self> {
        let p = format!("model.layers.{i}");
        let h = c.hidden_size;
        Ok(Self {
            self_attn: A::load(c, w, &format!("{p}.self_attn"))?,
            mlp: FeedForward::load(c, w, &format!("{p}.mlp"), i)?,
            input_layernorm: w.rms_norm(&format!("{p}.input_layernorm"), h, c.rms_norm_eps)?,
            post_attention_layernorm: w.rms_norm(&format!("{p}.post_attention_layernorm"), h, c.rms_norm_eps)?,
        })
    }

    fn forward(&self, x: &Array, cache: &mut LayerCache) -> Result<Array> {
        let h = x.add(self.self_attn.forward(&self.input_layernorm.forward(x)?, cache)?).map_err(mlx("residual"))?;
        let r = self.mlp.forward(&self.post_attention_layernorm.forward(&h)?)?;
        h.add(r).map_err(mlx("residual"))
    }
}

#[derive(Debug)]
pub struct Decoder<A> {
    pub config: ModelConfig,
    pub embed_tokens: Embedding,
    pub layers: Vec<Block<A>>,
    pub norm: RmsNorm,
    /// `None` when the head is tied to the embeddings.
    pub lm_head: Option<Linear>,
    /// How its quantized matrices multiply (all share one).
    pub kernel: QuantKernel,
}

#[allow(private_bounds)]
impl<A: Attention> Decoder<A> {
    pub(crate) fn load(config: ModelConfig, w: &mut Weights) -> Result<Self> {
        let c = &config.text;
        let embed_tokens = w.embedding("model.embed_tokens", c.vocab_size, c.hidden_size)?;
        let layers = (0..c.num_hidden_layers).map(|i| Block::load(c, w, i)).collect::<Result<_>>()?;
        let norm = w.rms_norm("model.norm", c.hidden_size, c.rms_norm_eps)?;
        let lm_head =
            if c.tie_word_embeddings { None } else { Some(w.linear("lm_head", c.hidden_size, c.vocab_size, false)?) };
        Ok(Self { config, embed_tokens, layers, norm, lm_head, kernel: w.kernel() })
    }

    pub(crate) fn forward(&self, tokens: &Array, cache: &mut KvCache, logits: Logits) -> Result<Array> {
        check_cache(cache, self.layers.len())?;
        let mut h = self.embed_tokens.forward(tokens)?;
        for (layer, c) in self.layers.iter().zip(cache.layers_mut()) {
            h = layer.forward(&h, c)?;
        }
        logits.head(h, |x| self.norm.forward(x), self.lm_head.as_ref(), &self.embed_tokens)
    }

    /// The experts' arrays (a subset of `collect`'s).
    pub(crate) fn expert_arrays(&self) -> Vec<&Array> {
        self.layers.iter().flat_map(|l| l.mlp.expert_arrays()).collect()
    }

    pub(crate) fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        self.embed_tokens.collect(out);
        for l in &self.layers {
            l.self_attn.collect(out);
            l.mlp.collect(out);
            l.input_layernorm.collect(out);
            l.post_attention_layernorm.collect(out);
        }
        self.norm.collect(out);
        if let Some(h) = &self.lm_head {
            h.collect(out);
        }
    }
}
