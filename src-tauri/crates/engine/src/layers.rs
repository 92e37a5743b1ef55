//! The building blocks every architecture shares: linear layers (dense or
//! affine-quantized), embeddings, RMSNorm, RoPE, the SwiGLU MLP, the
//! experts' stacked projections and the attention core over the KV cache.
//!
//! Each op is the one mlx-lm's layer calls (`addmm` for a biased dense
//! layer, `quantized_matmul` + bias, `fast::rms_norm`, `fast::rope`,
//! `fast::scaled_dot_product_attention`), in the same order, so the logits
//! agree with mlx-lm's to float rounding.

use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops::{self, indexing::TryIndexOp};
use mlx_rs::{Array, Dtype};

use crate::backend::kernels;
use crate::cache::{AttentionMask, LayerCache};
use crate::error::{MlxContext, Result};
use crate::quant::{QuantKernel, QuantizedMatrix};
use headroom_core::format::{RopeScaling, TextConfig};

/// The weight of a linear layer: dense `[out, in]` or packed as on disk.
#[derive(Debug)]
pub enum LinearWeight {
    Dense(Array),
    Quantized(QuantizedMatrix),
}

/// `y = x · Wᵀ (+ b)`.
#[derive(Debug)]
pub struct Linear {
    pub weight: LinearWeight,
    pub bias: Option<Array>,
}

impl Linear {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        match (&self.weight, &self.bias) {
            // mlx's nn.Linear fuses the bias with addmm; the same op keeps the rounding the same.
            (LinearWeight::Dense(w), Some(b)) => ops::addmm(b, x, w.t(), None, None).op("addmm"),
            (LinearWeight::Dense(w), None) => ops::matmul(x, w.t()).op("matmul"),
            (LinearWeight::Quantized(q), bias) => {
                let y = q.matmul_t(x)?;
                match bias {
                    Some(b) => y.add(b).op("linear bias"),
                    None => Ok(y),
                }
            }
        }
    }
}

/// Token embeddings; a tied model also uses them as its output head.
#[derive(Debug)]
pub enum Embedding {
    Dense(Array),
    Quantized(QuantizedMatrix),
}

impl Embedding {
    /// `[B, L]` ids -> `[B, L, hidden]`.
    pub fn forward(&self, ids: &Array) -> Result<Array> {
        match self {
            Embedding::Dense(w) => w.take_axis(ids, 0).op("embedding"),
            // Gather the packed rows first, then dequantize only those.
            Embedding::Quantized(q) => {
                let w = q.weight.take_axis(ids, 0).op("embedding")?;
                let s = q.scales.take_axis(ids, 0).op("embedding")?;
                let b = q.biases.take_axis(ids, 0).op("embedding")?;
                ops::dequantize(&w, &s, &b, q.group_size, q.bits).op("embedding dequantize")
            }
        }
    }

    /// The tied output head: `x · Eᵀ`.
    pub fn as_linear(&self, x: &Array) -> Result<Array> {
        match self {
            Embedding::Dense(w) => ops::matmul(x, w.t()).op("tied head"),
            Embedding::Quantized(q) => q.matmul_t(x),
        }
    }

    /// Bytes of the table.
    pub fn nbytes(&self) -> u64 {
        let mut out = Vec::new();
        self.collect(&mut out);
        out.iter().map(|a| a.nbytes() as u64).sum()
    }

    /// The dtype activations take on after the lookup: mlx-lm's compute dtype.
    pub fn dtype(&self) -> Dtype {
        match self {
            Embedding::Dense(w) => w.dtype(),
            Embedding::Quantized(q) => q.scales.dtype(),
        }
    }
}

#[derive(Debug)]
pub struct RmsNorm {
    pub weight: Array,
    pub eps: f32,
}

impl RmsNorm {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        fast::rms_norm(x, Some(&self.weight), self.eps).op("rms_norm")
    }
}

/// Rotary position embedding, incl. Llama 3.1's rescaled frequencies.
#[derive(Debug)]
pub struct Rope {
    dims: i32,
    traditional: bool,
    base: Option<f32>,
    scale: f32,
    freqs: Option<Array>,
}

impl Rope {
    /// RoPE as the config gives it: its base, scaling and rotated dimensions.
    pub fn new(config: &TextConfig) -> Result<Self> {
        Self::with(config, config.rope_theta, config.rope_scaling.as_ref())
    }

    /// The config's rotated dimensions with another base and scaling (Gemma 3's sliding layers).
    pub fn with(config: &TextConfig, base: f32, scaling: Option<&RopeScaling>) -> Result<Self> {
        let dims = config.rope_dims;
        let traditional = config.rope_traditional;
        match scaling {
            None => Ok(Self { dims, traditional, base: Some(base), scale: 1.0, freqs: None }),
            Some(RopeScaling::Linear { factor }) => {
                Ok(Self { dims, traditional, base: Some(base), scale: 1.0 / factor, freqs: None })
            }
            Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            }) => {
                let freqs = llama3_freqs(
                    dims,
                    base,
                    *factor,
                    *low_freq_factor,
                    *high_freq_factor,
                    *original_max_position_embeddings,
                )?;
                Ok(Self { dims, traditional, base: None, scale: 1.0, freqs: Some(freqs) })
            }
        }
    }

    /// Rotates `[B, H, L, D]` as positions `offset..offset + L`.
    pub fn forward(&self, x: &Array, offset: i32) -> Result<Array> {
        fast::rope(x, self.dims, self.traditional, self.base, self.scale, offset, self.freqs.as_ref()).op("rope")
    }
}

/// Llama 3.1 frequencies, computed with the same f32 ops as mlx-lm's
/// `Llama3RoPE` so that both round alike.
fn llama3_freqs(dims: i32, base: f32, factor: f32, low: f32, high: f32, old_ctx: f32) -> Result<Array> {
    let f = |v: f32| Array::from_f32(v);
    let low_wavelen = old_ctx / low;
    let high_wavelen = old_ctx / high;
    let exponents = ops::arange::<_, i32>(0, dims, 2).op("arange")?.divide(f(dims as f32)).op("llama3 rope")?;
    let freqs = f(base).power(&exponents).op("llama3 rope")?;
    let wavelens = f(2.0 * std::f32::consts::PI).multiply(&freqs).op("llama3 rope")?;
    let freqs = ops::select(
        &wavelens.gt(f(low_wavelen)).op("llama3 rope")?,
        &freqs.multiply(f(factor)).op("llama3 rope")?,
        &freqs,
    )
    .op("llama3 rope")?;
    let is_medium = wavelens
        .gt(f(high_wavelen))
        .op("llama3 rope")?
        .logical_and(&wavelens.lt(f(low_wavelen)).op("llama3 rope")?)
        .op("llama3 rope")?;
    let smooth = f(old_ctx)
        .divide(&wavelens)
        .op("llama3 rope")?
        .subtract(f(low))
        .op("llama3 rope")?
        .divide(f(high - low))
        .op("llama3 rope")?;
    let denom = f(1.0)
        .subtract(&smooth)
        .op("llama3 rope")?
        .divide(f(factor))
        .op("llama3 rope")?
        .add(&smooth)
        .op("llama3 rope")?;
    let smooth_freqs = freqs.divide(&denom).op("llama3 rope")?;
    ops::select(&is_medium, &smooth_freqs, &freqs).op("llama3 rope")
}

/// `down(silu(gate(x)) * up(x))`.
#[derive(Debug)]
pub struct Mlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

impl Mlp {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        if let Some(h) = self.cpu_swiglu(x)? {
            return self.down_proj.forward(&h);
        }
        let gate = mlx_rs::nn::silu(self.gate_proj.forward(x)?).op("silu")?;
        let h = gate.multiply(self.up_proj.forward(x)?).op("swiglu")?;
        self.down_proj.forward(&h)
    }
}

impl Mlp {
    /// SwiGLU's hidden state by the backend's own kernel
    /// ([`crate::backend::Kernels::swiglu`]: on the CPU backend, for a few
    /// rows of an f32 model, where MLX's SiLU is scalar on x86). `None`
    /// elsewhere, where MLX's ops run as mlx-lm's do.
    fn cpu_swiglu(&self, x: &Array) -> Result<Option<Array>> {
        let (LinearWeight::Quantized(gate), LinearWeight::Quantized(up), None, None) =
            (&self.gate_proj.weight, &self.up_proj.weight, &self.gate_proj.bias, &self.up_proj.bias)
        else {
            return Ok(None);
        };
        if !(gate.takes_row_shared(x) && up.takes_row_shared(x)) {
            return Ok(None);
        }
        kernels().swiglu(gate.view(), up.view(), x)
    }
}

/// A mixture-of-experts projection (mlx-lm's `SwitchLinear`): every
/// expert's `[out, in]` projection, stacked: `[experts, out, in]`.
#[derive(Debug)]
pub enum SwitchLinear {
    Dense(Array),
    Quantized(QuantizedMatrix),
}

impl SwitchLinear {
    /// `x · W[e]ᵀ` for each expert index `e` in `indices` (broadcast
    /// against `x`'s leading axes); `sorted` says the indices are in order.
    pub(crate) fn forward(&self, x: &Array, indices: &Array, sorted: bool) -> Result<Array> {
        match self {
            Self::Dense(w) => {
                ops::gather_mm(x, w.swap_axes(-1, -2).op("swapaxes")?, None, indices, sorted).op("gather_mm")
            }
            Self::Quantized(q) => {
                let gather = |x: &Array, scales: &Array, biases: &Array| {
                    ops::gather_qmm(x, &q.weight, scales, biases, None, indices, true, q.group_size, q.bits, sorted)
                        .op("gather_qmm")
                };
                match q.kernel {
                    QuantKernel::Fused => gather(x, &q.scales, &q.biases),
                    // As the CPU kernel's decode path: MLX's CPU kernels have
                    // no bf16 arithmetic, so multiply in f32 and round once.
                    // Experts are never dequantized whole (that would be all
                    // of them, for a few rows each).
                    QuantKernel::CpuF32 { .. } if x.dtype() != Dtype::Float32 => {
                        let f32 = |a: &Array| a.as_dtype(Dtype::Float32).op("cast to f32");
                        gather(&f32(x)?, &f32(&q.scales)?, &f32(&q.biases)?)?.as_dtype(x.dtype()).op("cast back")
                    }
                    QuantKernel::CpuF32 { .. } => gather(x, &q.scales, &q.biases),
                }
            }
        }
    }
}

impl Params for SwitchLinear {
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        match self {
            Self::Dense(w) => out.push(w),
            Self::Quantized(q) => out.extend([&q.weight, &q.scales, &q.biases]),
        }
    }
}

/// `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))` in `x`'s
/// dtype, as mlx's `nn.gelu_approx` (whose Python scalars take `x`'s dtype;
/// mlx-rs's version would widen bf16 to f32), and compiled as mlx's is:
/// one fused kernel instead of eight element-wise passes and their
/// `rows × intermediate` temporaries. Measured on the `medium` gemma3_text
/// demo (CPU backend): MLX's peak 3.0 MB lower at 512 prompt tokens and
/// 6.0 MB at 1,024; the process's resident peak the same (MLX's capped
/// buffer cache had held what the temporaries freed).
pub fn gelu_approx(x: &Array) -> Result<Array> {
    let gelu = |x: &Array| -> std::result::Result<Array, mlx_rs::error::Exception> {
        let c = |v: f64| Array::from_f32(v as f32).as_dtype(x.dtype());
        let inner = x.add(c(0.044715)?.multiply(x.power(&c(3.0)?)?)?)?;
        let t = ops::tanh(c((2.0 / std::f64::consts::PI).sqrt())?.multiply(&inner)?)?;
        c(0.5)?.multiply(x)?.multiply(c(1.0)?.add(&t)?)
    };
    // Shapeless: one trace serves every chunk length (MLX keys it by dtype).
    let mut compiled = mlx_rs::transforms::compile::compile(gelu, true);
    compiled(x).op("gelu")
}

/// `[B, L, H*D]` -> `[B, L, H, D]`.
pub fn split_heads(x: &Array, heads: i32) -> Result<Array> {
    let shape = x.shape();
    x.reshape(&[shape[0], shape[1], heads, -1]).op("reshape")
}

/// Splits `[B, L, H*D]` into heads: `[B, H, L, D]`.
pub fn to_heads(x: &Array, heads: i32) -> Result<Array> {
    split_heads(x, heads)?.transpose_axes(&[0, 2, 1, 3]).op("transpose")
}

/// RoPE at the cache's offset, append K/V to the cache, attend, and merge
/// the heads back to `[B, L, H*D]`. K/V keep their `n_kv_heads`: the fused
/// attention handles grouped queries without tiling them.
///
/// The path is the one the fit estimate assumed (`headroom_core::attention`,
/// MLX's own dispatch rules, for this backend): over a quantized cache,
/// mlx-lm's quantized attention (kv_quant.rs); over a float cache, MLX's
/// `scaled_dot_product_attention` given exactly what its rule was evaluated
/// on: the causal mask as MLX's "causal" mode (never an array, which would
/// change what MLX may fuse), or no mask for a single query, and keys and
/// values sliced from the cache with their head dimension contiguous (no
/// copy). Where the rule says fused (Metal, its head dims and lengths),
/// MLX runs the fused kernel and no score matrix exists.
pub fn attend(
    queries: &Array,
    keys: &Array,
    values: &Array,
    rope: &Rope,
    scale: f32,
    cache: &mut LayerCache,
) -> Result<Array> {
    let offset = cache.offset();
    let queries = rope.forward(queries, offset)?;
    let keys = rope.forward(keys, offset)?;
    attend_cached(&queries, &keys, values, scale, cache)
}

/// Appends RoPE'd `[B, kv_heads, L, D]` keys/values to the layer's cache and
/// attends over what it holds, by the cache's storage: over quantized keys
/// and values, mlx-lm's quantized attention (kv_quant.rs); over float ones,
/// MLX's `scaled_dot_product_attention` ([`sdpa`]). Returns `[B, L, H*D]`.
pub fn attend_cached(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
    cache: &mut LayerCache,
) -> Result<Array> {
    // Taken before the keys are appended, as mlx-lm does: one new token
    // sees every cached key; several need the causal mask, which MLX aligns
    // to the end of the keys, so it also holds past an offset; a window
    // narrower than the keys needs it spelled out.
    let mask = cache.attention_mask(queries.dim(2))?;
    let Some(quant) = cache.quantization() else {
        let (keys, values) = cache.update_and_fetch(keys, values)?;
        return sdpa(queries, &keys, &values, scale, &mask);
    };
    let causal = match mask {
        AttentionMask::None => false,
        AttentionMask::Causal => true,
        // Only sliding-window layers need an array, and they are never quantized (cache/mod.rs).
        AttentionMask::Array(_) => {
            return Err(crate::error::EngineError::Shape {
                what: "quantized attention mask",
                expected: "none or causal (a full-attention layer)".into(),
                found: vec![],
            })
        }
    };
    let (keys, values) = cache.update_and_fetch_quantized(keys, values)?;
    let rows = crate::kv_quant::query_block_rows(queries.dim(1), keys.packed.dim(2), queries.item_size());
    let out = crate::kv_quant::quantized_sdpa(queries, &keys, &values, scale, causal, quant, rows)?;
    merge_heads(&out)
}

/// Attention over `[B, H, L, D]` queries, then the heads merged back to
/// `[B, L, H*D]`: MLX's `scaled_dot_product_attention`, or, for a few f32
/// rows on the CPU backend, its own ([`crate::backend::Kernels::attention`]).
pub fn sdpa(queries: &Array, keys: &Array, values: &Array, scale: f32, mask: &AttentionMask) -> Result<Array> {
    if let Some(out) = kernels().attention(queries, keys, values, scale, mask)? {
        return merge_heads(&out);
    }
    let mask = match mask {
        AttentionMask::None => None,
        AttentionMask::Causal => Some(ScaledDotProductAttentionMask::Causal),
        AttentionMask::Array(m) => Some(ScaledDotProductAttentionMask::Array(m)),
    };
    let out = fast::scaled_dot_product_attention(queries, keys, values, scale, mask, None).op("attention")?;
    merge_heads(&out)
}

/// `[B, H, L, D]` back to `[B, L, H*D]`.
fn merge_heads(out: &Array) -> Result<Array> {
    let (b, l) = (out.dim(0), out.dim(2));
    out.transpose_axes(&[0, 2, 1, 3]).op("transpose")?.reshape(&[b, l, -1]).op("reshape")
}

/// `x[:, -1:, :]`: the hidden state of the last position only.
pub fn last_position(h: &Array) -> Result<Array> {
    let l = h.dim(1);
    h.try_index((.., (l - 1)..l, ..)).op("last position")
}

/// Collects a layer's arrays (to evaluate them once after loading, or to count bytes).
pub trait Params {
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>);
}

fn collect_matrix<'a>(q: &'a QuantizedMatrix, out: &mut Vec<&'a Array>) {
    out.extend([&q.weight, &q.scales, &q.biases]);
}

impl Params for Linear {
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        match &self.weight {
            LinearWeight::Dense(w) => out.push(w),
            LinearWeight::Quantized(q) => collect_matrix(q, out),
        }
        out.extend(self.bias.iter());
    }
}

impl Params for Embedding {
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        match self {
            Embedding::Dense(w) => out.push(w),
            Embedding::Quantized(q) => collect_matrix(q, out),
        }
    }
}

impl Params for RmsNorm {
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        out.push(&self.weight);
    }
}

impl Params for Mlp {
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>) {
        self.gate_proj.collect(out);
        self.up_proj.collect(out);
        self.down_proj.collect(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{f32s, normal};

    /// The compiled GELU is the tanh approximation in `x`'s dtype, for any
    /// number of rows (the trace is shapeless): f32 against double
    /// precision, bf16 stays bf16.
    #[test]
    fn gelu_approx_is_the_tanh_approximation_in_the_input_dtype() -> Result<()> {
        let reference = |v: f32| {
            let v = f64::from(v);
            0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
        };
        for rows in [3, 64] {
            let x = normal(&[rows, 96], rows as u64, Dtype::Float32).multiply(Array::from_f32(3.0)).op("scale")?;
            let got = gelu_approx(&x)?;
            assert_eq!(got.dtype(), Dtype::Float32);
            for (v, g) in f32s(&x).into_iter().zip(f32s(&got)) {
                assert!((f64::from(g) - reference(v)).abs() <= 1e-5 * (1.0 + reference(v).abs()), "gelu({v}) = {g}");
            }
        }
        let x = normal(&[5, 96], 9, Dtype::Bfloat16);
        let got = gelu_approx(&x)?;
        assert_eq!(got.dtype(), Dtype::Bfloat16);
        for (v, g) in f32s(&x).into_iter().zip(f32s(&got)) {
            assert!((f64::from(g) - reference(v)).abs() <= 2e-2 * (1.0 + reference(v).abs()), "bf16 gelu({v}) = {g}");
        }
        Ok(())
    }

    /// SwiGLU on the CPU kernel's rows is MLX's SiLU times the up
    /// projection, for one row and for a pass's worth; a prompt's chunk
    /// (48 rows and more) keeps MLX's ops.
    #[test]
    fn the_cpu_swiglu_computes_what_mlx_s_silu_computes() -> Result<()> {
        let (hidden, inner) = (128, 384);
        let linear = |out: i32, inp: i32, seed: u64| -> Result<Linear> {
            let mut q = QuantizedMatrix::quantize(&normal(&[out, inp], seed, Dtype::Float32), 64, 4)?;
            q.kernel = QuantKernel::CPU;
            Ok(Linear { weight: LinearWeight::Quantized(q), bias: None })
        };
        let mlp = Mlp {
            gate_proj: linear(inner, hidden, 1)?,
            up_proj: linear(inner, hidden, 2)?,
            down_proj: linear(hidden, inner, 3)?,
        };
        for rows in [1, 17, 48] {
            let x = normal(&[1, rows, hidden], 4, Dtype::Float32);
            let ours = mlp.cpu_swiglu(&x)?;
            // Only where this build's table has the row-shared kernel (never on a Mac).
            let expected = rows < QuantKernel::CPU_ROW_SHARED_BELOW_ROWS && kernels().row_shared(4, 64);
            assert_eq!(ours.is_some(), expected, "{rows} rows");
            let Some(ours) = ours else { continue };
            let gate = mlx_rs::nn::silu(mlp.gate_proj.forward(&x)?).op("silu")?;
            let mlx = gate.multiply(mlp.up_proj.forward(&x)?).op("swiglu")?;
            assert_eq!(ours.shape(), mlx.shape());
            let worst =
                f32s(&ours).iter().zip(f32s(&mlx)).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(0.0, f32::max);
            assert!(worst < 1e-5, "{rows} rows: {worst}");
        }
        Ok(())
    }
}
