//! Qwen3 (`model_type: qwen3`): no projection biases, an explicit `head_dim`,
//! and an RMSNorm over each query and key head before RoPE.

use mlx_rs::Array;

use super::{check_cache, mlx, Logits};
use crate::cache::{KvCache, LayerKv};
use crate::config::ModelConfig;
use crate::error::Result;
use crate::layers::{attend, last_position, split_heads, to_heads, Embedding, Linear, Mlp, Params, RmsNorm, Rope};
use crate::loader::Weights;

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
    fn load(c: &ModelConfig, w: &mut Weights, p: &str) -> Result<Self> {
        let (h, d) = (c.hidden_size, c.head_dim);
        Ok(Self {
            q_proj: w.linear(&format!("{p}.q_proj"), h, c.num_attention_heads * d, false)?,
            k_proj: w.linear(&format!("{p}.k_proj"), h, c.num_key_value_heads * d, false)?,
            v_proj: w.linear(&format!("{p}.v_proj"), h, c.num_key_value_heads * d, false)?,
            o_proj: w.linear(&format!("{p}.o_proj"), c.num_attention_heads * d, h, false)?,
            q_norm: w.rms_norm(&format!("{p}.q_norm"), d, c.rms_norm_eps)?,
            k_norm: w.rms_norm(&format!("{p}.k_norm"), d, c.rms_norm_eps)?,
            n_heads: c.num_attention_heads,
            n_kv_heads: c.num_key_value_heads,
            // Computed in f64 and rounded once, like Python's `head_dim**-0.5`.
            scale: (f64::from(d)).powf(-0.5) as f32,
            rope: Rope::new(c)?,
        })
    }

    fn forward(&self, x: &Array, cache: &mut LayerKv) -> Result<Array> {
        // The norms act on each head's vector, before the heads move to axis 1.
        let q = self.q_norm.forward(&split_heads(&self.q_proj.forward(x)?, self.n_heads)?)?;
        let k = self.k_norm.forward(&split_heads(&self.k_proj.forward(x)?, self.n_kv_heads)?)?;
        let q = q.transpose_axes(&[0, 2, 1, 3]).map_err(mlx("transpose"))?;
        let k = k.transpose_axes(&[0, 2, 1, 3]).map_err(mlx("transpose"))?;
        let v = to_heads(&self.v_proj.forward(x)?, self.n_kv_heads)?;
        let out = attend(&q, &k, &v, &self.rope, self.scale, cache)?;
        self.o_proj.forward(&out)
    }
}

#[derive(Debug)]
pub struct Block {
    pub self_attn: Attention,
    pub mlp: Mlp,
    pub input_layernorm: RmsNorm,
    pub post_attention_layernorm: RmsNorm,
}

impl Block {
    fn load(c: &ModelConfig, w: &mut Weights, i: i32) -> Result<Self> {
        let p = format!("model.layers.{i}");
        let (h, m) = (c.hidden_size, c.intermediate_size);
        Ok(Self {
            self_attn: Attention::load(c, w, &format!("{p}.self_attn"))?,
            mlp: Mlp {
                gate_proj: w.linear(&format!("{p}.mlp.gate_proj"), h, m, false)?,
                up_proj: w.linear(&format!("{p}.mlp.up_proj"), h, m, false)?,
                down_proj: w.linear(&format!("{p}.mlp.down_proj"), m, h, false)?,
            },
            input_layernorm: w.rms_norm(&format!("{p}.input_layernorm"), h, c.rms_norm_eps)?,
            post_attention_layernorm: w.rms_norm(&format!("{p}.post_attention_layernorm"), h, c.rms_norm_eps)?,
        })
    }

    fn forward(&self, x: &Array, cache: &mut LayerKv) -> Result<Array> {
        let h = x.add(self.self_attn.forward(&self.input_layernorm.forward(x)?, cache)?).map_err(mlx("residual"))?;
        let r = self.mlp.forward(&self.post_attention_layernorm.forward(&h)?)?;
        h.add(r).map_err(mlx("residual"))
    }
}


#[derive(Debug)]
pub struct Model {
    pub config: ModelConfig,
    pub embed_tokens: Embedding,
    pub layers: Vec<Block>,
    pub norm: RmsNorm,
    /// `None` when the head is tied to the embeddings.
    pub lm_head: Option<Linear>,
}

impl Model {
    pub(crate) fn load(config: ModelConfig, w: &mut Weights) -> Result<Self> {
        let c = &config;
        let embed_tokens = w.embedding("model.embed_tokens", c.vocab_size, c.hidden_size)?;
        let layers = (0..c.num_hidden_layers).map(|i| Block::load(c, w, i)).collect::<Result<_>>()?;
        let norm = w.rms_norm("model.norm", c.hidden_size, c.rms_norm_eps)?;
        let lm_head = if c.tie_word_embeddings {
            None
        } else {
            Some(w.linear("lm_head", c.hidden_size, c.vocab_size, false)?)
        };
        Ok(Self { config, embed_tokens, layers, norm, lm_head })
    }

    pub fn forward(&self, tokens: &Array, cache: &mut KvCache, logits: Logits) -> Result<Array> {
        check_cache(cache, self.layers.len())?;
        let mut h = self.embed_tokens.forward(tokens)?;
        for (layer, c) in self.layers.iter().zip(cache.layers_mut()) {
            h = layer.forward(&h, c)?;
        }
        if logits == Logits::Last {
            h = last_position(&h)?;
        }
        let h = self.norm.forward(&h)?;
        let out = match &self.lm_head {
            Some(head) => head.forward(&h)?,
            None => self.embed_tokens.as_linear(&h)?,
        };
        match logits {
            Logits::Last => out.squeeze_axes(&[1]).map_err(mlx("squeeze")),
            Logits::All => Ok(out),
        }
    }

    pub(crate) fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        self.embed_tokens.collect(out);
        for l in &self.layers {
            for lin in [&l.self_attn.q_proj, &l.self_attn.k_proj, &l.self_attn.v_proj, &l.self_attn.o_proj] {
                lin.collect(out);
            }
            l.self_attn.q_norm.collect(out);
            l.self_attn.k_norm.collect(out);
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
