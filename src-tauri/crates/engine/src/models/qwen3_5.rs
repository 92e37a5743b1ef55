//! Qwen3.5's language model (`model_type: qwen3_5`, and `qwen3_5_moe` with
//! experts): a hybrid of linear and full attention.
//!
//! - Attention: every `full_attention_interval`-th layer (by default the
//!   fourth) is full attention: grouped-query, qk-norm (an RMSNorm
//!   over each query and key head), partial RoPE (over the first
//!   `head_dim × partial_rotary_factor` of each head) and a sigmoid output
//!   gate computed alongside the queries. The other layers are gated delta
//!   nets, a linear attention whose memory of the past is one fixed-size
//!   state per head: a causal depthwise convolution over q, k and v, then
//!   the delta rule `S ← g·S + β·k·(v − S·k)`, read out as `S·q` through a
//!   gated RMSNorm.
//! - Feed-forward: the dense SwiGLU MLP (`qwen3_5`) or, with `num_experts`
//!   (`qwen3_5_moe`), on every layer a mixture of SwiGLU experts (the
//!   router's top `num_experts_per_tok`, moe.rs) plus an always-on shared
//!   expert behind a sigmoid gate.
//! - Block and model: pre-norm residual blocks as in Llama's layout; the
//!   weights sit under `language_model.` (the layout mlx-lm saves this
//!   model in), and its multi-token-prediction head is not loaded.
//!
//! Read top to bottom, as mlx-lm 0.32.2's `qwen3_5.py` / `qwen3_next.py` /
//! `gated_delta.py`: the config (`headroom_core::format::qwen3_5::Config`),
//! the gated norm, the gated delta net and its recurrence, the full
//! attention, the block, the model.
//!
//! The recurrence runs as mlx-lm runs it on MLX's CPU backend (its Metal
//! kernel is Apple-only): one step per position, state in f32.

use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::{fast, ops, Array, Dtype};

use super::decoder::FeedForward as _;
use super::moe::MoeMlp;
use super::{check_cache, Architecture, Logits};
use crate::cache::{KvCache, LayerCache, LayerKind, RecurrentState};
use crate::error::{EngineError, MlxContext, Result};
use crate::layers::{attend_cached, split_heads, Embedding, Linear, Params, RmsNorm, Rope};
use crate::quant::QuantKernel;
use crate::weights::Weights;
use headroom_core::format::{LinearAttention, ModelConfig, TextConfig};

/// Where mlx-lm's saved checkpoint keeps the language model.
const PREFIX: &str = "language_model.model";

/// `rms_norm(x) * weight`, then gated: `silu(gate) * that`, in f32, rounded
/// to `x`'s dtype once (mlx-lm's `Qwen3NextRMSNormGated` + `precise_swiglu`).
#[derive(Debug)]
pub struct GatedNorm {
    pub weight: Array,
    eps: f32,
}

impl GatedNorm {
    fn forward(&self, x: &Array, gate: &Array) -> Result<Array> {
        let normed = fast::rms_norm(x, Some(&self.weight), self.eps).op("rms_norm")?;
        let gate = mlx_rs::nn::silu(gate.as_dtype(Dtype::Float32).op("cast")?).op("silu")?;
        gate.multiply(normed.as_dtype(Dtype::Float32).op("cast")?).op("gated norm")?.as_dtype(x.dtype()).op("cast")
    }
}

/// The gated delta net: a causal depthwise convolution over q, k and v,
/// then the delta rule `S ← g·S + β·k·(v − S·k)`, read out as `S·q`.
#[derive(Debug)]
pub struct GatedDeltaNet {
    pub in_proj_qkv: Linear,
    pub in_proj_z: Linear,
    pub in_proj_b: Linear,
    pub in_proj_a: Linear,
    /// `[conv_dim, kernel, 1]`: one filter per channel.
    pub conv1d: Array,
    pub dt_bias: Array,
    pub a_log: Array,
    pub norm: GatedNorm,
    pub out_proj: Linear,
    sizes: LinearAttention,
}

impl GatedDeltaNet {
    fn load(c: &TextConfig, lin: LinearAttention, w: &mut Weights, p: &str) -> Result<Self> {
        let h = c.hidden_size;
        let key_dim = lin.num_key_heads * lin.key_head_dim;
        let value_dim = lin.num_value_heads * lin.value_head_dim;
        let conv_dim = 2 * key_dim + value_dim;
        Ok(Self {
            in_proj_qkv: w.linear(&format!("{p}.in_proj_qkv"), h, conv_dim, false)?,
            in_proj_z: w.linear(&format!("{p}.in_proj_z"), h, value_dim, false)?,
            in_proj_b: w.linear(&format!("{p}.in_proj_b"), h, lin.num_value_heads, false)?,
            in_proj_a: w.linear(&format!("{p}.in_proj_a"), h, lin.num_value_heads, false)?,
            conv1d: w.float(&format!("{p}.conv1d.weight"), &[conv_dim, lin.conv_kernel, 1])?,
            dt_bias: w.float(&format!("{p}.dt_bias"), &[lin.num_value_heads])?,
            a_log: w.float(&format!("{p}.A_log"), &[lin.num_value_heads])?,
            norm: GatedNorm {
                weight: w.float(&format!("{p}.norm.weight"), &[lin.value_head_dim])?,
                eps: c.rms_norm_eps,
            },
            out_proj: w.linear(&format!("{p}.out_proj"), value_dim, h, false)?,
            sizes: lin,
        })
    }

    fn forward(&self, x: &Array, cache: &mut RecurrentState) -> Result<Array> {
        let LinearAttention {
            num_key_heads: hk,
            num_value_heads: hv,
            key_head_dim: dk,
            value_head_dim: dv,
            conv_kernel,
        } = self.sizes;
        let (b, s) = (x.dim(0), x.dim(1));
        let qkv = self.in_proj_qkv.forward(x)?;
        let z = self.in_proj_z.forward(x)?.reshape(&[b, s, hv, dv]).op("reshape")?;
        let beta_in = self.in_proj_b.forward(x)?;
        let a = self.in_proj_a.forward(x)?;

        // The convolution sees the last kernel - 1 inputs of earlier calls.
        let conv_dim = qkv.dim(-1);
        let conv_state = match cache.conv.take() {
            Some(c) => c,
            None => ops::zeros_dtype(&[b, conv_kernel - 1, conv_dim], x.dtype()).op("conv state")?,
        };
        let conv_input = ops::concatenate(&[conv_state, qkv], 1).op("conv input")?;
        let keep = conv_input.dim(1) - (conv_kernel - 1);
        cache.conv = Some(conv_input.try_index((.., keep.., ..)).op("conv state")?.contiguous().op("contiguous")?);
        let conv = ops::conv1d(&conv_input, &self.conv1d, 1, 0, 1, conv_dim).op("conv1d")?;
        let conv = mlx_rs::nn::silu(conv).op("silu")?;

        let key_dim = hk * dk;
        let parts = ops::split_at_indices(&conv, &[key_dim, 2 * key_dim], -1).op("split qkv")?;
        let [q, k, v] = parts.as_slice() else {
            return Err(EngineError::Shape { what: "q/k/v split", expected: "3 parts".into(), found: vec![] });
        };
        let q = q.reshape(&[b, s, hk, dk]).op("reshape")?;
        let k = k.reshape(&[b, s, hk, dk]).op("reshape")?;
        let v = v.reshape(&[b, s, hv, dv]).op("reshape")?;
        let (q, k) = normalize_qk(&q, &k, f64::from(dk).powf(-0.5))?;

        let (out, state) =
            gated_delta_update(&q, &k, &v, &a, &beta_in, &self.a_log, &self.dt_bias, cache.state.take())?;
        cache.state = Some(state);
        cache.advance(s);

        let out = self.norm.forward(&out, &z)?;
        self.out_proj.forward(&out.reshape(&[b, s, -1]).op("reshape")?)
    }
}

impl Params for GatedDeltaNet {
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        for lin in [&self.in_proj_qkv, &self.in_proj_z, &self.in_proj_b, &self.in_proj_a, &self.out_proj] {
            lin.collect(out);
        }
        out.extend([&self.conv1d, &self.dt_bias, &self.a_log, &self.norm.weight]);
    }
}

/// L2-normalizes q and k per head and folds the `dk^-0.5` readout scale
/// into q (mlx-lm's `normalize_qk`: RMSNorm with the epsilon rescaled).
fn normalize_qk(q: &Array, k: &Array, inv_scale: f64) -> Result<(Array, Array)> {
    let eps = 1e-6 * inv_scale * inv_scale;
    let c = |v: f64, like: &Array| Array::from_f32(v as f32).as_dtype(like.dtype()).op("scale");
    let q = c(inv_scale * inv_scale, q)?.multiply(fast::rms_norm(q, None, eps as f32).op("rms_norm")?).op("scale q")?;
    let k = c(inv_scale, k)?.multiply(fast::rms_norm(k, None, eps as f32).op("rms_norm")?).op("scale k")?;
    Ok((q, k))
}

/// The recurrence over a chunk: `q`, `k` `[B, T, Hk, Dk]`, `v` `[B, T, Hv, Dv]`,
/// `a`, `b` `[B, T, Hv]`; returns the outputs `[B, T, Hv, Dv]` and the state
/// `[B, Hv, Dv, Dk]` (f32), as mlx-lm's `gated_delta_update` does off Metal.
#[allow(clippy::too_many_arguments)]
fn gated_delta_update(
    q: &Array,
    k: &Array,
    v: &Array,
    a: &Array,
    b: &Array,
    a_log: &Array,
    dt_bias: &Array,
    state: Option<Array>,
) -> Result<(Array, Array)> {
    let beta = ops::sigmoid(b).op("sigmoid")?;
    // g = exp(-exp(A_log) * softplus(a + dt_bias)), in f32 (A_log is widened).
    let decay = a_log.as_dtype(Dtype::Float32).op("cast")?.exp().op("exp")?.negative().op("negate")?;
    let g = decay.multiply(mlx_rs::nn::softplus(a.add(dt_bias).op("dt")?).op("softplus")?).op("g")?.exp().op("exp")?;
    let (bsz, t, hk, dk) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let (hv, dv) = (v.dim(2), v.dim(3));
    let mut state = match state {
        Some(s) => s,
        None => ops::zeros_dtype(&[bsz, hv, dv, dk], Dtype::Float32).op("state")?,
    };
    let (q, k) = if hv / hk > 1 {
        (
            Array::repeat_axis::<f32>(q.clone(), hv / hk, -2).op("repeat")?,
            Array::repeat_axis::<f32>(k.clone(), hv / hk, -2).op("repeat")?,
        )
    } else {
        (q.clone(), k.clone())
    };
    let mut ys = Vec::with_capacity(usize::try_from(t).unwrap_or(0));
    for i in 0..t {
        let at = |x: &Array| x.try_index((.., i)).op("step");
        let (qt, kt, vt, gt, bt) = (at(&q)?, at(&k)?, at(v)?, at(&g)?, at(&beta)?);
        // S ← g·S; kv = S·k; Δ = (v − kv)·β; S ← S + k ⊗ Δ; y = S·q.
        state = state.multiply(gt.expand_dims_axes(&[-1, -2]).op("expand")?).op("decay")?;
        let k_row = kt.expand_dims(-2).op("expand")?;
        let kv_mem = state.multiply(&k_row).op("kv")?.sum_axis(-1, None).op("kv")?;
        let delta = vt.subtract(&kv_mem).op("delta")?.multiply(bt.expand_dims(-1).op("expand")?).op("delta")?;
        state = state.add(k_row.multiply(delta.expand_dims(-1).op("expand")?).op("update")?).op("update")?;
        let y = state.multiply(qt.expand_dims(-2).op("expand")?).op("read")?.sum_axis(-1, None).op("read")?;
        ys.push(y.as_dtype(q.dtype()).op("cast")?);
    }
    Ok((ops::stack(&ys, 1).op("stack")?, state))
}

/// Full attention with a sigmoid output gate, per-head q/k norms and RoPE
/// over the first `rope_dims` of each head.
#[derive(Debug)]
pub struct Attention {
    /// Queries and the gate side by side per head: `heads × 2 × head_dim`.
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
    fn load(c: &TextConfig, w: &mut Weights, p: &str) -> Result<Self> {
        let (h, d) = (c.hidden_size, c.head_dim);
        Ok(Self {
            q_proj: w.linear(&format!("{p}.q_proj"), h, c.num_attention_heads * d * 2, c.qkv_bias)?,
            k_proj: w.linear(&format!("{p}.k_proj"), h, c.num_key_value_heads * d, c.qkv_bias)?,
            v_proj: w.linear(&format!("{p}.v_proj"), h, c.num_key_value_heads * d, c.qkv_bias)?,
            o_proj: w.linear(&format!("{p}.o_proj"), c.num_attention_heads * d, h, c.o_bias)?,
            q_norm: w.rms_norm(&format!("{p}.q_norm"), d, c.rms_norm_eps)?,
            k_norm: w.rms_norm(&format!("{p}.k_norm"), d, c.rms_norm_eps)?,
            n_heads: c.num_attention_heads,
            n_kv_heads: c.num_key_value_heads,
            scale: f64::from(d).powf(-0.5) as f32,
            rope: Rope::new(c)?,
        })
    }

    fn forward(&self, x: &Array, cache: &mut LayerCache) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let both = split_heads(&self.q_proj.forward(x)?, self.n_heads)?;
        let halves = both.split_equal(2, -1).op("split gate")?;
        let [queries, gate] = halves.as_slice() else {
            return Err(EngineError::Shape { what: "query/gate split", expected: "2 parts".into(), found: vec![] });
        };
        let gate = gate.reshape(&[b, l, -1]).op("reshape")?;
        let q = self.q_norm.forward(queries)?.transpose_axes(&[0, 2, 1, 3]).op("transpose")?;
        let k = self.k_norm.forward(&split_heads(&self.k_proj.forward(x)?, self.n_kv_heads)?)?;
        let k = k.transpose_axes(&[0, 2, 1, 3]).op("transpose")?;
        let v =
            split_heads(&self.v_proj.forward(x)?, self.n_kv_heads)?.transpose_axes(&[0, 2, 1, 3]).op("transpose")?;
        let offset = cache.offset();
        let q = self.rope.forward(&q, offset)?;
        let k = self.rope.forward(&k, offset)?;
        let out = attend_cached(&q, &k, &v, self.scale, cache)?;
        self.o_proj.forward(&out.multiply(ops::sigmoid(&gate).op("sigmoid")?).op("output gate")?)
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

#[derive(Debug)]
pub enum Mixer {
    Linear(GatedDeltaNet),
    Full(Attention),
}

#[derive(Debug)]
pub struct Block {
    pub mixer: Mixer,
    pub mlp: MoeMlp,
    pub input_layernorm: RmsNorm,
    pub post_attention_layernorm: RmsNorm,
}

impl Block {
    fn forward(&self, x: &Array, cache: &mut LayerCache) -> Result<Array> {
        let normed = self.input_layernorm.forward(x)?;
        let r = match &self.mixer {
            Mixer::Linear(m) => m.forward(&normed, cache.recurrent_mut()?)?,
            Mixer::Full(m) => m.forward(&normed, cache)?,
        };
        let h = x.add(r).op("residual")?;
        h.add(self.mlp.forward(&self.post_attention_layernorm.forward(&h)?)?).op("residual")
    }
}

#[derive(Debug)]
pub struct Model {
    pub config: ModelConfig,
    pub embed_tokens: Embedding,
    pub layers: Vec<Block>,
    pub norm: RmsNorm,
    pub lm_head: Option<Linear>,
    pub kernel: QuantKernel,
}

impl Architecture for Model {
    fn load(config: ModelConfig, w: &mut Weights) -> Result<Self> {
        let c = &config.text;
        let h = c.hidden_size;
        let lin = c.linear_attention.ok_or(EngineError::Shape {
            what: "qwen3_5 config",
            expected: "linear-attention sizes".into(),
            found: Vec::new(),
        })?;
        let mut layers = Vec::new();
        for (i, kind) in c.layer_types.iter().enumerate() {
            let p = format!("{PREFIX}.layers.{i}");
            let mixer = match kind {
                headroom_core::format::LayerAttention::Linear => {
                    Mixer::Linear(GatedDeltaNet::load(c, lin, w, &format!("{p}.linear_attn"))?)
                }
                _ => Mixer::Full(Attention::load(c, w, &format!("{p}.self_attn"))?),
            };
            layers.push(Block {
                mixer,
                mlp: MoeMlp::load(c, w, &format!("{p}.mlp"), i32::try_from(i).unwrap_or(0))?,
                input_layernorm: w.rms_norm(&format!("{p}.input_layernorm"), h, c.rms_norm_eps)?,
                post_attention_layernorm: w.rms_norm(&format!("{p}.post_attention_layernorm"), h, c.rms_norm_eps)?,
            });
        }
        let embed_tokens = w.embedding(&format!("{PREFIX}.embed_tokens"), c.vocab_size, h)?;
        let norm = w.rms_norm(&format!("{PREFIX}.norm"), h, c.rms_norm_eps)?;
        let lm_head = if c.tie_word_embeddings {
            None
        } else {
            Some(w.linear("language_model.lm_head", h, c.vocab_size, false)?)
        };
        Ok(Self { embed_tokens, layers, norm, lm_head, kernel: w.kernel(), config })
    }

    fn forward(&self, tokens: &Array, cache: &mut KvCache, logits: Logits) -> Result<Array> {
        check_cache(cache, self.layers.len())?;
        let mut h = self.embed_tokens.forward(tokens)?;
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

    /// A recurrent state for each linear layer, a full cache for each attention layer.
    fn layer_kinds(&self) -> Vec<LayerKind> {
        self.layers
            .iter()
            .map(|l| match l.mixer {
                Mixer::Linear(_) => LayerKind::Recurrent,
                Mixer::Full(_) => LayerKind::Full,
            })
            .collect()
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        self.embed_tokens.collect(out);
        for l in &self.layers {
            match &l.mixer {
                Mixer::Linear(m) => m.collect(out),
                Mixer::Full(m) => m.collect(out),
            }
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
