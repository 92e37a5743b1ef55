//! The mixture-of-experts MLP every MoE architecture shares (mlx-lm's
//! `switch_layers.py` and the sparse blocks of `qwen3_moe.py` /
//! `qwen3_next.py`): a router scores every expert, softmax, the top k are
//! kept (renormalized where the config says), each token goes through its k
//! SwiGLU experts by MLX's gathered matmuls (`gather_qmm` over the packed
//! experts, `gather_mm` unquantized), and the results are summed with the
//! router's weights; Qwen3.5 adds an always-on shared expert behind a
//! sigmoid gate.
//!
//! Only the chosen experts' weights are read per token, which is why a
//! 30B-parameter MoE model decodes like a 3B dense one; all of them must
//! still be resident.

use mlx_rs::ops::indexing::{take_along_axis, TryIndexOp};
use mlx_rs::ops::{self};
use mlx_rs::Array;

use super::decoder::FeedForward;
use crate::error::{MlxContext, Result};
use crate::layers::{Linear, Mlp, Params, SwitchLinear};
use crate::weights::Weights;
use headroom_core::format::{Moe, TextConfig};

/// The experts: `down(silu(gate(x)) * up(x))` per chosen expert.
#[derive(Debug)]
pub struct SwitchGlu {
    pub gate_proj: SwitchLinear,
    pub up_proj: SwitchLinear,
    pub down_proj: SwitchLinear,
}

impl SwitchGlu {
    fn load(w: &mut Weights, p: &str, experts: i32, hidden: i32, inner: i32) -> Result<Self> {
        Ok(Self {
            gate_proj: w.switch_linear(&format!("{p}.gate_proj"), experts, hidden, inner)?,
            up_proj: w.switch_linear(&format!("{p}.up_proj"), experts, hidden, inner)?,
            down_proj: w.switch_linear(&format!("{p}.down_proj"), experts, inner, hidden)?,
        })
    }

    /// `x` `[B, L, H]`, `indices` `[B, L, k]` -> `[B, L, k, H]`.
    fn forward(&self, x: &Array, indices: &Array) -> Result<Array> {
        let x = x.expand_dims_axes(&[-2, -3]).op("expand")?;
        let k = indices.dim(-1);
        // Many tokens: sort them by expert so each expert's rows are read
        // together (mlx-lm's threshold and order).
        let sort = indices.size() >= 64;
        let (x, idx, inv_order) = if sort {
            let flat = indices.flatten(None, None).op("flatten")?;
            let order = ops::argsort_axis(&flat, 0).op("argsort")?;
            let inv = ops::argsort_axis(&order, 0).op("argsort")?;
            let rows = order.floor_divide(Array::from_int(k)).op("divide")?;
            let x = x.flatten(0, -3).op("flatten")?.take_axis(&rows, 0).op("gather")?;
            (x, flat.take_axis(&order, 0).op("gather")?, Some(inv))
        } else {
            (x, indices.clone(), None)
        };
        let up = self.up_proj.forward(&x, &idx, sort)?;
        let gate = self.gate_proj.forward(&x, &idx, sort)?;
        let h = mlx_rs::nn::silu(gate).op("silu")?.multiply(up).op("swiglu")?;
        let mut y = self.down_proj.forward(&h, &idx, sort)?;
        if let Some(inv) = inv_order {
            y = ops::unflatten(y.take_axis(&inv, 0).op("scatter")?, 0, indices.shape()).op("unflatten")?;
        }
        y.squeeze_axes(&[-2]).op("squeeze")
    }
}

impl Params for SwitchGlu {
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        self.gate_proj.collect(out);
        self.up_proj.collect(out);
        self.down_proj.collect(out);
    }
}

/// A sigmoid-gated SwiGLU expert every token goes through (Qwen3.5 MoE).
#[derive(Debug)]
pub struct SharedExpert {
    pub mlp: Mlp,
    pub gate: Linear,
}

/// Router + experts (+ shared expert).
#[derive(Debug)]
pub struct SparseMoe {
    /// `[hidden] -> [experts]` router.
    pub gate: Linear,
    pub switch_mlp: SwitchGlu,
    pub shared: Option<SharedExpert>,
    top_k: i32,
    norm_topk_prob: bool,
}

impl SparseMoe {
    /// Loads the block under `p` (`….mlp`).
    pub(crate) fn load(c: &TextConfig, m: &Moe, w: &mut Weights, p: &str) -> Result<Self> {
        let h = c.hidden_size;
        let shared = match m.shared_expert_intermediate_size {
            Some(s) => Some(SharedExpert {
                mlp: Mlp {
                    gate_proj: w.linear(&format!("{p}.shared_expert.gate_proj"), h, s, false)?,
                    up_proj: w.linear(&format!("{p}.shared_expert.up_proj"), h, s, false)?,
                    down_proj: w.linear(&format!("{p}.shared_expert.down_proj"), s, h, false)?,
                },
                gate: w.linear(&format!("{p}.shared_expert_gate"), h, 1, false)?,
            }),
            None => None,
        };
        Ok(Self {
            gate: w.linear(&format!("{p}.gate"), h, m.num_experts, false)?,
            switch_mlp: SwitchGlu::load(w, &format!("{p}.switch_mlp"), m.num_experts, h, m.expert_intermediate_size)?,
            shared,
            top_k: m.experts_per_token,
            norm_topk_prob: m.norm_topk_prob,
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
        let gates = ops::softmax_axis(self.gate.forward(x)?, -1, true).op("router softmax")?;
        let experts = gates.dim(-1);
        let k = self.top_k;
        let inds = ops::argpartition_axis(&gates, experts - k, -1).op("top-k")?;
        let inds = inds.try_index((.., .., (experts - k)..)).op("top-k")?;
        let mut scores = take_along_axis(&gates, &inds, -1).op("top-k scores")?;
        if self.norm_topk_prob {
            scores = scores.divide(scores.sum_axis(-1, true).op("sum")?).op("normalize")?;
        }
        let y = self.switch_mlp.forward(x, &inds)?;
        let y = y.multiply(scores.expand_dims(-1).op("expand")?).op("weigh")?.sum_axis(-2, None).op("sum")?;
        let y = if y.dtype() == x.dtype() { y } else { y.as_dtype(x.dtype()).op("cast")? };
        match &self.shared {
            None => Ok(y),
            Some(s) => {
                let shared = s.mlp.forward(x)?;
                let gate = ops::sigmoid(s.gate.forward(x)?).op("sigmoid")?;
                y.add(gate.multiply(shared).op("shared gate")?).op("shared expert")
            }
        }
    }
}

impl Params for SparseMoe {
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        self.gate.collect(out);
        self.switch_mlp.collect(out);
        if let Some(s) = &self.shared {
            Params::collect(&s.mlp, out);
            s.gate.collect(out);
        }
    }
}

/// A block's feed-forward part in a model with experts: the experts on
/// the layers the config makes sparse, the dense SwiGLU MLP on the others.
#[derive(Debug)]
pub enum MoeMlp {
    Dense(Mlp),
    Moe(Box<SparseMoe>),
}

impl FeedForward for MoeMlp {
    /// The MLP of layer `i` under `p` (`model.layers.{i}.mlp`): experts
    /// where the config makes layer `i` sparse, else the dense MLP.
    fn load(c: &TextConfig, w: &mut Weights, p: &str, i: i32) -> Result<Self> {
        let sparse = c.moe.as_ref().filter(|m| m.sparse_layers.get(usize::try_from(i).unwrap_or(0)) == Some(&true));
        match sparse {
            Some(m) => Ok(Self::Moe(Box::new(SparseMoe::load(c, m, w, p)?))),
            None => Ok(Self::Dense(<Mlp as FeedForward>::load(c, w, p, i)?)),
        }
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            Self::Dense(m) => m.forward(x),
            Self::Moe(m) => m.forward(x),
        }
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        match self {
            Self::Dense(m) => Params::collect(m, out),
            Self::Moe(m) => m.collect(out),
        }
    }

    /// The arrays of the experts (all resident, `k / experts` of them read per token).
    fn expert_arrays(&self) -> Vec<&Array> {
        let mut out = Vec::new();
        if let Self::Moe(m) = self {
            m.switch_mlp.collect(&mut out);
        }
        out
    }
}
