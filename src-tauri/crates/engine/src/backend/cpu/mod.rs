//! MLX's CPU backend's own kernels (x86_64 off macOS only): the
//! row-shared quantized matmul ([`row_shared`]) and its thread team
//! ([`team`]), and AVX2 softmax and SiLU ([`simd`]), behind
//! [`crate::backend::Kernels`]. The test bench's speed, nothing a user's
//! Mac runs: kept fast enough for the tests, tuned no further.

use mlx_rs::ops;
use mlx_rs::{Array, Dtype};

use super::{Kernels, QuantView};
use crate::cache::AttentionMask;
use crate::dtype::to_f32;
use crate::error::{MlxContext, Result};

mod row_shared;
mod simd;
mod team;

/// The CPU backend's table.
#[derive(Debug)]
pub(crate) struct CpuKernels;

impl Kernels for CpuKernels {
    fn row_shared(&self, bits: i32, group: i32) -> bool {
        row_shared::supports(bits, group)
    }

    fn quantized_rows(&self, w: QuantView<'_>, x: &Array) -> Result<Option<(Vec<f32>, Vec<i32>)>> {
        row_shared_f32(w, x)
    }

    /// SwiGLU for a few rows of an f32 model: both projections' rows as
    /// plain buffers, then SiLU and the product eight lanes at a time.
    fn swiglu(&self, gate: QuantView<'_>, up: QuantView<'_>, x: &Array) -> Result<Option<Array>> {
        if x.dtype() != Dtype::Float32 {
            return Ok(None);
        }
        let Some((mut g, shape)) = self.quantized_rows(gate, x)? else { return Ok(None) };
        let Some((u, _)) = self.quantized_rows(up, x)? else { return Ok(None) };
        simd::silu_mul(&mut g, &u);
        Ok(Some(Array::from_slice(&g, &shape)))
    }

    fn attention(
        &self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        scale: f32,
        mask: &AttentionMask,
    ) -> Result<Option<Array>> {
        attention(queries, keys, values, scale, mask)
    }
}

/// Scales or biases as the row-shared kernel reads them (`None`: a dtype it
/// does not take, or a non-contiguous array; MLX's kernel runs instead).
fn params(a: &Array) -> Result<Option<row_shared::Params<'_>>> {
    a.eval().op("quantized params")?;
    Ok(match a.dtype() {
        Dtype::Float32 => a.try_as_slice::<f32>().ok().map(row_shared::Params::F32),
        Dtype::Float16 => a.try_as_slice::<half::f16>().ok().map(row_shared::Params::F16),
        Dtype::Bfloat16 => a.try_as_slice::<half::bf16>().ok().map(row_shared::Params::Bf16),
        _ => None,
    })
}

/// `x · Wᵀ` in f32 by [`row_shared`]: each weight unpacked once for all
/// rows of `x`. `x` is evaluated here (the kernel reads its memory), so
/// a forward pass syncs once per input of its quantized matmuls; on a
/// 2-core machine that costs far less than the kernel saves
/// (`examples/pass_cost.rs`).
/// A matrix whose buffers disagree with its shape gives `None` (MLX's
/// kernel then runs and reports it in MLX's words).
fn row_shared_f32(w: QuantView<'_>, x: &Array) -> Result<Option<(Vec<f32>, Vec<i32>)>> {
    let Some((&inputs, lead)) = x.shape().split_last() else { return Ok(None) };
    let rows: i32 = lead.iter().product();
    let out = w.weight.shape().first().copied().unwrap_or(0);
    w.weight.eval().op("quantized weight")?;
    let (Ok(words), Some(scales), Some(biases)) =
        (w.weight.try_as_slice::<u32>(), params(w.scales)?, params(w.biases)?)
    else {
        return Ok(None);
    };
    let Ok(packed) = row_shared::Packed::new(
        words,
        scales,
        biases,
        out as usize,
        inputs as usize,
        w.group_size as usize,
        w.bits as usize,
    ) else {
        return Ok(None);
    };
    // An f32 `x` whose rows lie one after another (a norm's output) is
    // read where it is: the projections that share it (q, k and v; gate
    // and up) then evaluate it once, and only the first waits for MLX's
    // stream thread. Otherwise a contiguous f32 copy is made.
    // (`try_as_slice` refuses another dtype before evaluating anything.)
    let copy;
    let xs = match x.try_as_slice::<f32>() {
        Ok(xs) => xs,
        Err(_) => {
            copy = to_f32(x)?.reshape(&[rows, inputs]).op("rows of x")?.contiguous().op("rows of x")?;
            copy.eval().op("rows of x")?;
            let Ok(xs) = copy.try_as_slice::<f32>() else { return Ok(None) };
            xs
        }
    };
    #[cfg(feature = "test-support")]
    let started = std::time::Instant::now();
    let y = row_shared::matmul_t(xs, rows as usize, &packed);
    #[cfg(feature = "test-support")]
    super::kernel_clock::add(started.elapsed());
    let mut shape = lead.to_vec();
    shape.push(out);
    Ok(Some((y, shape)))
}

/// Below this many query rows (decode steps, verification passes), f32
/// attention on the CPU backend is [`attention`]. A prompt's prefill
/// chunks keep MLX's whole attention, whose memory the fit's attention
/// term was measured on.
pub(crate) const CPU_ATTENTION_BELOW_ROWS: i32 = 48;

/// What MLX's CPU attention computes (the scaled queries of each KV head's
/// group times its keys, a softmax with the causal mask aligned to the
/// keys' end, times the values), with MLX's products and the softmax of
/// [`simd`]: MLX's own is scalar on x86, and its causal mask a
/// select over every score; both were about a quarter of a 17-row pass.
/// `None` where MLX's attention runs: another backend or dtype, a mask
/// array (sliding windows), a prompt's chunk.
fn attention(queries: &Array, keys: &Array, values: &Array, scale: f32, mask: &AttentionMask) -> Result<Option<Array>> {
    let causal = match mask {
        AttentionMask::None => false,
        AttentionMask::Causal => true,
        AttentionMask::Array(_) => return Ok(None),
    };
    let (&[batch, heads, rows, dim], &[_, kv_heads, keys_len, _]) = (queries.shape(), keys.shape()) else {
        return Ok(None);
    };
    let f32s = [queries, keys, values].iter().all(|a| a.dtype() == Dtype::Float32);
    if !f32s
        || rows >= CPU_ATTENTION_BELOW_ROWS
        || kv_heads == 0
        || heads % kv_heads != 0
        || keys_len < rows
        || !crate::backend::on_cpu()
    {
        return Ok(None);
    }
    // Each KV head's query heads as one block of rows: head h uses KV head
    // h / (heads / kv_heads), so row i of a block is query i % rows.
    let group = heads / kv_heads * rows;
    let q = queries.multiply(Array::from_f32(scale)).op("attention scale")?;
    let q = q.reshape(&[batch, kv_heads, group, dim]).op("attention groups")?;
    let scores = ops::matmul(&q, keys.swap_axes(-1, -2).op("keys transposed")?).op("attention scores")?;
    scores.eval().op("attention scores")?;
    let Ok(flat) = scores.try_as_slice::<f32>() else { return Ok(None) };
    let mut weights = flat.to_vec();
    let (cached, rows) = ((keys_len - rows) as usize, rows as usize);
    for (i, row) in weights.chunks_mut(keys_len as usize).enumerate() {
        // Query i % rows sees the cached keys, the new ones before it, and itself.
        let visible = if causal { cached + i % rows + 1 } else { row.len() };
        simd::softmax_prefix(row, visible);
    }
    let weights = Array::from_slice(&weights, scores.shape());
    let out = ops::matmul(&weights, values).op("attention values")?;
    Ok(Some(out.reshape(&[batch, heads, rows as i32, dim]).op("attention heads")?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{f32s, normal};
    use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
    use mlx_rs::ops::indexing::TryIndexOp;

    /// The CPU attention is MLX's: grouped heads, the causal mask aligned to
    /// the keys' end (a verification pass after a cached context), a single
    /// query without a mask, keys sliced from a longer buffer as the cache
    /// hands them over. It runs exactly where it should.
    #[test]
    fn the_cpu_attention_computes_what_mlx_s_attention_computes() -> Result<()> {
        for (heads, kv_heads, rows, cached, mask) in [
            (9, 3, 17, 300, AttentionMask::Causal),
            (4, 4, 5, 0, AttentionMask::Causal),
            (8, 2, 1, 129, AttentionMask::None),
            (6, 2, 47, 3, AttentionMask::Causal),
        ] {
            let (d, keys_len) = (64, cached + rows);
            let q = normal(&[1, heads, rows, d], 1, Dtype::Float32);
            let buffer = normal(&[1, kv_heads, keys_len + 9, d], 2, Dtype::Float32);
            let k = buffer.try_index((.., .., ..keys_len, ..)).op("slice")?;
            let v = normal(&[1, kv_heads, keys_len, d], 3, Dtype::Float32);
            let ours = attention(&q, &k, &v, 0.125, &mask)?;
            assert_eq!(ours.is_some(), crate::backend::on_cpu(), "runs on the CPU backend only");
            let Some(ours) = ours else { continue };
            assert_eq!(ours.shape(), &[1, heads, rows, d]);
            let fast_mask = match mask {
                AttentionMask::Causal => Some(ScaledDotProductAttentionMask::Causal),
                _ => None,
            };
            let mlx = fast::scaled_dot_product_attention(&q, &k, &v, 0.125, fast_mask, None).op("attention")?;
            let worst = f32s(&ours).iter().zip(f32s(&mlx)).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(worst < 1e-5, "{heads}/{kv_heads} heads, {rows} rows after {cached}: {worst}");
        }
        // MLX's attention stays: a prompt's chunk, bf16, a window's mask array.
        let (q, k) = (normal(&[1, 2, 48, 32], 4, Dtype::Float32), normal(&[1, 2, 48, 32], 5, Dtype::Float32));
        assert!(attention(&q, &k, &k, 1.0, &AttentionMask::Causal)?.is_none());
        let (qb, kb) = (q.as_dtype(Dtype::Bfloat16).op("cast")?, k.as_dtype(Dtype::Bfloat16).op("cast")?);
        let short = |a: &Array| a.try_index((.., .., ..4, ..)).op("slice");
        assert!(attention(&short(&qb)?, &kb, &kb, 1.0, &AttentionMask::Causal)?.is_none());
        let window = AttentionMask::Array(Array::from_bool(true));
        assert!(attention(&short(&q)?, &k, &k, 1.0, &window)?.is_none());
        Ok(())
    }
}
