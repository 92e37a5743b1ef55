//! The decoder the Llama-layout architectures share: embedding -> blocks of
//! (RMSNorm, attention, residual, RMSNorm, feed-forward, residual) ->
//! RMSNorm -> head (tied to the embedding, or `lm_head`), the rest under
//! `model.`.
//! An architecture on it picks its [`Attention`] and its [`FeedForward`]
//! (`Decoder<A, F>`); biases and `head_dim` are per-arch config defaults
//! (`headroom_core::format::<type>`).

use mlx_rs::Array;

use super::{check_cache, mlx, Architecture, Logits, Stages};
use crate::cache::{KvCache, LayerCache, LayerKind};
use crate::error::Result;
use crate::layers::{Embedding, Linear, Mlp, Params, RmsNorm};
use crate::quant::QuantKernel;
use crate::weights::Weights;
use headroom_core::format::{ModelConfig, TextConfig};

/// A block's attention: what mixes positions.
pub(crate) trait Attention: Sized + std::fmt::Debug + Send {
    /// Loads the weights under `prefix` (`model.layers.{i}.self_attn`).
    fn load(c: &TextConfig, w: &mut Weights, prefix: &str) -> Result<Self>;
    /// `x` is `[B, L, hidden]`; appends this step's keys/values to `cache`.
    fn forward(&self, x: &Array, cache: &mut LayerCache) -> Result<Array>;
    /// Every weight array, for byte counts and evaluation.
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>);
}

/// A block's feed-forward part: what transforms each position on its own.
pub(crate) trait FeedForward: Sized + std::fmt::Debug + Send {
    /// Loads layer `i`'s weights under `prefix` (`model.layers.{i}.mlp`).
    fn load(c: &TextConfig, w: &mut Weights, prefix: &str, i: i32) -> Result<Self>;
    /// `x` is `[B, L, hidden]`.
    fn forward(&self, x: &Array) -> Result<Array>;
    /// Every weight array, for byte counts and evaluation.
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>);
    /// The experts' arrays among them (none for a dense MLP).
    fn expert_arrays(&self) -> Vec<&Array> {
        Vec::new()
    }
}

/// The dense SwiGLU MLP, `down(silu(gate(x)) * up(x))`, biased where the
/// config's `mlp_bias` says.
impl FeedForward for Mlp {
    fn load(c: &TextConfig, w: &mut Weights, p: &str, _i: i32) -> Result<Self> {
        let (h, m) = (c.hidden_size, c.intermediate_size);
        Ok(Mlp {
            gate_proj: w.linear(&format!("{p}.gate_proj"), h, m, c.mlp_bias)?,
            up_proj: w.linear(&format!("{p}.up_proj"), h, m, c.mlp_bias)?,
            down_proj: w.linear(&format!("{p}.down_proj"), m, h, c.mlp_bias)?,
        })
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        Mlp::forward(self, x)
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        Params::collect(self, out);
    }
}

#[derive(Debug)]
pub struct Block<A, F> {
    pub self_attn: A,
    pub mlp: F,
    pub input_layernorm: RmsNorm,
    pub post_attention_layernorm: RmsNorm,
}

// The bounds are crate-private on purpose (they take the loader's
// `Weights`): outside the crate, models are used through `models::Model`.
#[allow(private_bounds)]
impl<A: Attention, F: FeedForward> Block<A, F> {
    fn load(c: &TextConfig, w: &mut Weights, i: i32) -> Result<Self> {
        let p = format!("model.layers.{i}");
        let h = c.hidden_size;
        Ok(Self {
            self_attn: A::load(c, w, &format!("{p}.self_attn"))?,
            mlp: F::load(c, w, &format!("{p}.mlp"), i)?,
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

impl<A: Attention, F: FeedForward> Stages for Decoder<A, F> {
    fn embed(&self, tokens: &Array) -> Result<Array> {
        self.embed_tokens.forward(tokens)
    }

    fn blocks(&self, mut h: Array, cache: &mut KvCache) -> Result<Array> {
        check_cache(cache, self.layers.len())?;
        for (layer, c) in self.layers.iter().zip(cache.layers_mut()) {
            h = layer.forward(&h, c)?;
        }
        Ok(h)
    }

    fn head(&self, h: Array, logits: Logits) -> Result<Array> {
        logits.head(h, |x| self.norm.forward(x), self.lm_head.as_ref(), &self.embed_tokens)
    }

    fn keep_layers(&mut self, range: std::ops::Range<usize>) -> Result<()> {
        let n = self.layers.len();
        if range.start >= range.end || range.end > n {
            return Err(crate::error::EngineError::Shape {
                what: "layer range",
                expected: format!("a non-empty range within {n} layers"),
                found: vec![
                    i32::try_from(range.start).unwrap_or(i32::MAX),
                    i32::try_from(range.end).unwrap_or(i32::MAX),
                ],
            });
        }
        self.layers.truncate(range.end);
        self.layers.drain(..range.start);
        Ok(())
    }
}

#[derive(Debug)]
pub struct Decoder<A, F> {
    pub config: ModelConfig,
    pub embed_tokens: Embedding,
    pub layers: Vec<Block<A, F>>,
    pub norm: RmsNorm,
    /// `None` when the head is tied to the embeddings.
    pub lm_head: Option<Linear>,
    /// How its quantized matrices multiply (all share one).
    pub kernel: QuantKernel,
}

impl<A: Attention, F: FeedForward> Architecture for Decoder<A, F> {
    fn load(config: ModelConfig, w: &mut Weights) -> Result<Self> {
        let c = &config.text;
        let embed_tokens = w.embedding("model.embed_tokens", c.vocab_size, c.hidden_size)?;
        let layers = (0..c.num_hidden_layers).map(|i| Block::load(c, w, i)).collect::<Result<_>>()?;
        let norm = w.rms_norm("model.norm", c.hidden_size, c.rms_norm_eps)?;
        let lm_head =
            if c.tie_word_embeddings { None } else { Some(w.linear("lm_head", c.hidden_size, c.vocab_size, false)?) };
        Ok(Self { config, embed_tokens, layers, norm, lm_head, kernel: w.kernel() })
    }

    fn forward(&self, tokens: &Array, cache: &mut KvCache, logits: Logits) -> Result<Array> {
        let h = self.blocks(self.embed(tokens)?, cache)?;
        self.head(h, logits)
    }

    fn layer_kinds(&self) -> Vec<LayerKind> {
        vec![LayerKind::Full; self.layers.len()]
    }

    fn stages(&self) -> Option<&dyn Stages> {
        Some(self)
    }

    fn stages_mut(&mut self) -> Option<&mut dyn Stages> {
        Some(self)
    }

    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn kernel(&self) -> QuantKernel {
        self.kernel
    }

    fn embed_tokens(&self) -> &Embedding {
        &self.embed_tokens
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
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

    fn expert_arrays(&self) -> Vec<&Array> {
        self.layers.iter().flat_map(|l| l.mlp.expert_arrays()).collect()
    }
}
