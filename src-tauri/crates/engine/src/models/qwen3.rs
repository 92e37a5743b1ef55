//! Qwen3 (`model_type: qwen3`): no projection biases, an explicit `head_dim`,
//! and an RMSNorm over each query and key head before RoPE.

use mlx_rs::Array;

use super::decoder::{self, Decoder};
use super::mlx;
use crate::cache::LayerKv;
use crate::config::ModelConfig;
use crate::error::Result;
use crate::layers::{attend, split_heads, to_heads, Linear, Params, RmsNorm, Rope};
use crate::loader::Weights;

pub type Model = Decoder<Attention>;

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

impl decoder::Attention for Attention {
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

    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        for lin in [&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj] {
            lin.collect(out);
        }
        self.q_norm.collect(out);
        self.k_norm.collect(out);
    }
}
