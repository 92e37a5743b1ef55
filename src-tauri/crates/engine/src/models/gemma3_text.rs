//! Gemma 3's language model (`model_type: gemma3_text`).
//!
//! - Attention: grouped-query with qk-norm (Gemma's norm over each query
//!   and key head before RoPE), no biases, scores scaled by
//!   `query_pre_attn_scalar^-0.5`. Local and global layers alternate: most
//!   attend over a sliding window of the last `sliding_window` positions
//!   (RoPE base `rope_local_base_freq`, a rotating cache,
//!   `cache/rotating.rs`); every `sliding_window_pattern`-th layer attends
//!   over everything (RoPE base `rope_theta` with the config's scaling, a
//!   full cache). The window mask comes from each layer's cache.
//! - Feed-forward: a GELU-gated MLP (GeGLU, tanh approximation),
//!   `down(gelu(gate(x)) * up(x))`, unbiased.
//! - Block and model, apart from Llama's layout: Gemma's RMSNorm scales by
//!   `1 + weight`; each block normalizes both the input and the output of
//!   its attention and of its MLP; an f16 residual is summed in f32 and
//!   clipped; the embeddings are multiplied by `sqrt(hidden)` (rounded to
//!   bf16 first); the head is tied exactly when the checkpoint has no
//!   `lm_head`. mlx-lm 0.32.2's gemma3_text has no logit soft-capping, so
//!   neither has this.
//!
//! Read top to bottom: the config (`headroom_core::format::gemma3_text::Config`),
//! the norm, the attention, the MLP, the block, the model.

use mlx_rs::{fast, ops, Array, Dtype};

use super::{check_cache, Architecture, Logits};
use crate::cache::{KvCache, LayerCache, LayerKind};
use crate::error::{MlxContext, Result};
use crate::layers::{attend, gelu_approx, to_heads, Embedding, Linear, Params, Rope};
use crate::quant::QuantKernel;
use crate::weights::Weights;
use headroom_core::format::{gemma3_text, ModelConfig, ModelType, TextConfig};

/// Gemma's RMSNorm: `rms_norm(x) * (1 + weight)`, the `1 + weight` kept in
/// the weight's dtype (as mlx-lm's Python scalar does).
#[derive(Debug)]
pub struct RmsNorm {
    pub weight: Array,
    scale: Array,
    eps: f32,
}

impl RmsNorm {
    fn load(w: &mut Weights, prefix: &str, dim: i32, eps: f32) -> Result<Self> {
        let weight = w.float(&format!("{prefix}.weight"), &[dim])?;
        let one = Array::from_f32(1.0).as_dtype(weight.dtype()).op("cast")?;
        let scale = one.add(&weight).op("gemma norm")?;
        Ok(Self { weight, scale, eps })
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
        fast::rms_norm(x, Some(&self.scale), self.eps).op("rms_norm")
    }
}

impl Params for RmsNorm {
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        out.push(&self.weight);
    }
}

#[derive(Debug)]
pub struct Attention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    pub q_norm: RmsNorm,
    pub k_norm: RmsNorm,
    n_heads: i32,
    n_kv_heads: i32,
    scale: f32,
    rope: Rope,
}

impl Attention {
    fn load(g: &gemma3_text::Config, c: &TextConfig, w: &mut Weights, p: &str, sliding: bool) -> Result<Self> {
        let (h, d) = (c.hidden_size, c.head_dim);
        let rope = if sliding {
            Rope::with(c, g.rope_local_base_freq, None)?
        } else {
            Rope::with(c, g.rope_theta, c.rope_scaling.as_ref())?
        };
        Ok(Self {
            q_proj: w.linear(&format!("{p}.q_proj"), h, c.num_attention_heads * d, false)?,
            k_proj: w.linear(&format!("{p}.k_proj"), h, c.num_key_value_heads * d, false)?,
            v_proj: w.linear(&format!("{p}.v_proj"), h, c.num_key_value_heads * d, false)?,
            o_proj: w.linear(&format!("{p}.o_proj"), c.num_attention_heads * d, h, false)?,
            q_norm: RmsNorm::load(w, &format!("{p}.q_norm"), d, c.rms_norm_eps)?,
            k_norm: RmsNorm::load(w, &format!("{p}.k_norm"), d, c.rms_norm_eps)?,
            n_heads: c.num_attention_heads,
            n_kv_heads: c.num_key_value_heads,
            // Python's `query_pre_attn_scalar**-0.5` in f64, rounded once.
            scale: f64::from(g.query_pre_attn_scalar).powf(-0.5) as f32,
            rope,
        })
    }

    fn forward(&self, x: &Array, cache: &mut LayerCache) -> Result<Array> {
        let q = self.q_norm.forward(&to_heads(&self.q_proj.forward(x)?, self.n_heads)?)?;
        let k = self.k_norm.forward(&to_heads(&self.k_proj.forward(x)?, self.n_kv_heads)?)?;
        let v = to_heads(&self.v_proj.forward(x)?, self.n_kv_heads)?;
        let out = attend(&q, &k, &v, &self.rope, self.scale, cache)?;
        self.o_proj.forward(&out)
    }
}

impl Params for Attention {
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        for lin in [&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj] {
            lin.collect(out);
        }
        self.q_norm.collect(out);
        self.k_norm.collect(out);
    }
}

/// `down(gelu_approx(gate(x)) * up(x))`.
#[derive(Debug)]
pub struct Mlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

impl Mlp {
    fn forward(&self, x: &Array) -> Result<Array> {
        let gate = gelu_approx(&self.gate_proj.forward(x)?)?;
        self.down_proj.forward(&gate.multiply(self.up_proj.forward(x)?).op("gelu gate")?)
    }
}

impl Params for Mlp {
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        self.gate_proj.collect(out);
        self.up_proj.collect(out);
        self.down_proj.collect(out);
    }
}

/// `x + y`; in f16, summed in f32 and clipped to f16's range (mlx-lm's `clip_residual`).
fn clip_residual(x: &Array, y: &Array) -> Result<Array> {
    if x.dtype() != Dtype::Float16 {
        return x.add(y).op("residual");
    }
    let bound = 65504.0f32;
    let sum = x.as_dtype(Dtype::Float32).op("cast")?.add(y.as_dtype(Dtype::Float32).op("cast")?).op("residual")?;
    ops::clip(&sum, (Array::from_f32(-bound), Array::from_f32(bound))).op("clip")?.as_dtype(Dtype::Float16).op("cast")
}

#[derive(Debug)]
pub struct Block {
    pub self_attn: Attention,
    pub mlp: Mlp,
    pub input_layernorm: RmsNorm,
    pub post_attention_layernorm: RmsNorm,
    pub pre_feedforward_layernorm: RmsNorm,
    pub post_feedforward_layernorm: RmsNorm,
}

impl Block {
    fn forward(&self, x: &Array, cache: &mut LayerCache) -> Result<Array> {
        let r = self.self_attn.forward(&self.input_layernorm.forward(x)?, cache)?;
        let h = clip_residual(x, &self.post_attention_layernorm.forward(&r)?)?;
        let r = self.mlp.forward(&self.pre_feedforward_layernorm.forward(&h)?)?;
        clip_residual(&h, &self.post_feedforward_layernorm.forward(&r)?)
    }
}

#[derive(Debug)]
pub struct Model {
    pub config: ModelConfig,
    pub embed_tokens: Embedding,
    pub layers: Vec<Block>,
    pub norm: RmsNorm,
    /// `None`: the checkpoint has no `lm_head`, so the embeddings are the head.
    pub lm_head: Option<Linear>,
    /// `sqrt(hidden)`; rounded to bf16 before use, as mlx-lm does.
    embed_scale: f32,
    window: i32,
    sliding: Vec<bool>,
    pub kernel: QuantKernel,
}

impl Architecture for Model {
    fn load(config: ModelConfig, w: &mut Weights) -> Result<Self> {
        let ModelType::Gemma3Text(g) = &config.model_type else {
            return Err(crate::error::EngineError::Shape {
                what: "gemma3_text config",
                expected: "model_type gemma3_text".into(),
                found: Vec::new(),
            });
        };
        let g = g.clone();
        let c = &config.text;
        let (h, eps) = (c.hidden_size, c.rms_norm_eps);
        let sliding: Vec<bool> = (0..c.num_hidden_layers).map(|i| g.is_sliding(i)).collect();
        let mut layers = Vec::new();
        for (i, slides) in sliding.iter().enumerate() {
            let p = format!("model.layers.{i}");
            let (m, ln) =
                (c.intermediate_size, |w: &mut Weights, n: &str| RmsNorm::load(w, &format!("{p}.{n}"), h, eps));
            layers.push(Block {
                self_attn: Attention::load(&g, c, w, &format!("{p}.self_attn"), *slides)?,
                mlp: Mlp {
                    gate_proj: w.linear(&format!("{p}.mlp.gate_proj"), h, m, false)?,
                    up_proj: w.linear(&format!("{p}.mlp.up_proj"), h, m, false)?,
                    down_proj: w.linear(&format!("{p}.mlp.down_proj"), m, h, false)?,
                },
                input_layernorm: ln(w, "input_layernorm")?,
                post_attention_layernorm: ln(w, "post_attention_layernorm")?,
                pre_feedforward_layernorm: ln(w, "pre_feedforward_layernorm")?,
                post_feedforward_layernorm: ln(w, "post_feedforward_layernorm")?,
            });
        }
        let embed_tokens = w.embedding("model.embed_tokens", c.vocab_size, h)?;
        let norm = RmsNorm::load(w, "model.norm", h, eps)?;
        let lm_head = if w.has("lm_head.weight") { Some(w.linear("lm_head", h, c.vocab_size, false)?) } else { None };
        let embed_scale = f64::from(h).sqrt() as f32;
        Ok(Self {
            embed_scale,
            window: g.sliding_window,
            sliding,
            embed_tokens,
            layers,
            norm,
            lm_head,
            kernel: w.kernel(),
            config,
        })
    }

    fn forward(&self, tokens: &Array, cache: &mut KvCache, logits: Logits) -> Result<Array> {
        check_cache(cache, self.layers.len())?;
        let h = self.embed_tokens.forward(tokens)?;
        let scale =
            Array::from_f32(self.embed_scale).as_dtype(Dtype::Bfloat16).op("cast")?.as_dtype(h.dtype()).op("cast")?;
        let mut h = h.multiply(&scale).op("embed scale")?;
        for (layer, c) in self.layers.iter().zip(cache.layers_mut()) {
            h = layer.forward(&h, c)?;
        }
        logits.head(h, |x| self.norm.forward(x), self.lm_head.as_ref(), &self.embed_tokens)
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

    /// A rotating cache for each sliding layer, a full one for each global layer.
    fn layer_kinds(&self) -> Vec<LayerKind> {
        self.sliding
            .iter()
            .map(|s| if *s { LayerKind::Rotating { window: self.window } } else { LayerKind::Full })
            .collect()
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        self.embed_tokens.collect(out);
        for l in &self.layers {
            l.self_attn.collect(out);
            l.mlp.collect(out);
            for n in [
                &l.input_layernorm,
                &l.post_attention_layernorm,
                &l.pre_feedforward_layernorm,
                &l.post_feedforward_layernorm,
            ] {
                n.collect(out);
            }
        }
        self.norm.collect(out);
        if let Some(h) = &self.lm_head {
            h.collect(out);
        }
    }
}
