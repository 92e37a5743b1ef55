//! The quantized KV cache and the attention over it, as mlx-lm 0.32.2 does
//! both (`QuantizedKVCache` and `quantized_scaled_dot_product_attention`),
//! so that greedy tokens match mlx-lm's with the same `kv_bits`,
//! `kv_group_size` and `quantized_kv_start`.
//!
//! Keys and values are each three arrays, as `mlx.core.quantize` returns
//! them: the packed values (u32, `head_dim × bits / 32` per position), and a
//! scale and a bias per `group_size` elements in the activations' float
//! type. They grow in steps of 256 positions like the float cache; a trim
//! only moves the offset, and the next write lands right after the kept
//! positions.
//!
//! Attention multiplies the queries by the quantized keys and the softmax
//! by the quantized values with `quantized_matmul`, so the scores are
//! materialized (MLX has no fused kernel for quantized keys and values).
//! Unlike mlx-lm, a prompt chunk's queries are taken in blocks of rows
//! whose scores stay within `headroom_core::attention::QUANTIZED_SCORES_BLOCK_BYTES`: every row of the
//! attention is computed by itself (its scores, its mask, its softmax, its
//! weighted sum of values), so the blocks give the same numbers while a
//! 2048-token chunk over a long cache no longer holds all its scores at once.

use mlx_rs::ops::indexing::{Ellipsis, TryIndexMutOp, TryIndexOp};
use mlx_rs::{ops, Array, Dtype};

use crate::error::{MlxContext, Result};
use crate::sizes::KV_STEP;

/// One of keys or values, quantized: `(packed, scales, biases)`, each `[B, kv_heads, positions, …]`.
#[derive(Debug, Clone)]
pub struct Quantized {
    pub packed: Array,
    pub scales: Array,
    pub biases: Array,
}

impl Quantized {
    fn quantize(x: &Array, group_size: i32, bits: i32) -> Result<Self> {
        let (packed, scales, biases) = ops::quantize(x, group_size, bits).op("kv quantize")?;
        Ok(Self { packed, scales, biases })
    }

    fn arrays(&self) -> [&Array; 3] {
        [&self.packed, &self.scales, &self.biases]
    }

    fn map(&self, f: impl Fn(&Array) -> Result<Array>) -> Result<Self> {
        Ok(Self { packed: f(&self.packed)?, scales: f(&self.scales)?, biases: f(&self.biases)? })
    }

    fn nbytes(&self) -> usize {
        self.arrays().iter().map(|a| a.nbytes()).sum()
    }

    fn capacity(&self) -> i32 {
        self.packed.dim(2)
    }
}

/// A layer's keys and values once quantized.
#[derive(Debug, Clone)]
pub struct QuantizedKv {
    keys: Quantized,
    values: Quantized,
    pub group_size: i32,
    pub bits: i32,
}

impl QuantizedKv {
    /// mlx-lm's `KVCache.to_quantized`: the whole buffers (their unused
    /// tail too, so the capacity stays a whole number of steps).
    pub fn from_float(keys: &Array, values: &Array, group_size: i32, bits: i32) -> Result<Self> {
        Ok(Self {
            keys: Quantized::quantize(keys, group_size, bits)?,
            values: Quantized::quantize(values, group_size, bits)?,
            group_size,
            bits,
        })
    }

    /// An empty cache shaped for `keys`/`values` like `[B, kv_heads, L, D]`,
    /// with room for `L` rounded up to whole steps (mlx-lm's `init_quant`).
    fn empty_like(keys: &Array, values: &Array, group_size: i32, bits: i32) -> Result<Self> {
        let steps = (KV_STEP + keys.dim(2) - 1) / KV_STEP * KV_STEP;
        let init = |x: &Array| -> Result<Quantized> {
            let s = x.shape();
            let per_u32 = 32 / bits;
            Ok(Quantized {
                packed: ops::zeros_dtype(&[s[0], s[1], steps, s[3] / per_u32], Dtype::Uint32).op("kv alloc")?,
                scales: ops::zeros_dtype(&[s[0], s[1], steps, s[3] / group_size], x.dtype()).op("kv alloc")?,
                biases: ops::zeros_dtype(&[s[0], s[1], steps, s[3] / group_size], x.dtype()).op("kv alloc")?,
            })
        };
        Ok(Self { keys: init(keys)?, values: init(values)?, group_size, bits })
    }

    /// Writes `[B, kv_heads, L, D]` keys/values at positions `prev..prev+L`
    /// (quantized first) and returns the filled prefix of each.
    pub fn update_and_fetch(
        this: &mut Option<Self>,
        prev: i32,
        keys: &Array,
        values: &Array,
        group_size: i32,
        bits: i32,
    ) -> Result<(Quantized, Quantized)> {
        let new = keys.dim(2);
        let cache = match this.take() {
            None => Self::empty_like(keys, values, group_size, bits)?,
            Some(c) if prev + new <= c.keys.capacity() => c,
            Some(c) => {
                let steps = (KV_STEP + new - 1) / KV_STEP * KV_STEP;
                let grow = |x: &Array| -> Result<Array> {
                    // After a trim the tail past `prev` is stale; drop it so
                    // the new positions land right after the kept ones.
                    let x = if prev % KV_STEP != 0 {
                        x.try_index((Ellipsis, ..prev, ..)).op("kv trim")?
                    } else {
                        x.clone()
                    };
                    let s = x.shape();
                    let fresh = ops::zeros_dtype(&[s[0], s[1], steps, s[3]], x.dtype()).op("kv alloc")?;
                    ops::concatenate(&[x, fresh], 2).op("kv grow")
                };
                Self { keys: c.keys.map(grow)?, values: c.values.map(grow)?, group_size: c.group_size, bits: c.bits }
            }
        };
        let mut cache = cache;
        let end = prev + new;
        let k = Quantized::quantize(keys, cache.group_size, cache.bits)?;
        let v = Quantized::quantize(values, cache.group_size, cache.bits)?;
        for (buf, part) in [(&mut cache.keys, &k), (&mut cache.values, &v)] {
            buf.packed.try_index_mut((Ellipsis, prev..end, ..), &part.packed).op("kv write")?;
            buf.scales.try_index_mut((Ellipsis, prev..end, ..), &part.scales).op("kv write")?;
            buf.biases.try_index_mut((Ellipsis, prev..end, ..), &part.biases).op("kv write")?;
        }
        let fetch = |q: &Quantized| -> Result<Quantized> {
            if end == q.capacity() {
                Ok(q.clone())
            } else {
                q.map(|a| a.try_index((Ellipsis, ..end, ..)).op("kv read"))
            }
        };
        let out = (fetch(&cache.keys)?, fetch(&cache.values)?);
        *this = Some(cache);
        Ok(out)
    }

    pub fn nbytes(&self) -> usize {
        self.keys.nbytes() + self.values.nbytes()
    }

    /// The six buffers by name (`keys.packed`, …), for a saved state (cache/persist.rs).
    pub fn named(&self) -> [(&'static str, &Array); 6] {
        [
            ("keys.packed", &self.keys.packed),
            ("keys.scales", &self.keys.scales),
            ("keys.biases", &self.keys.biases),
            ("values.packed", &self.values.packed),
            ("values.scales", &self.values.scales),
            ("values.biases", &self.values.biases),
        ]
    }

    /// Back from [`Self::named`]'s buffers (checked by the caller).
    pub fn from_named(mut take: impl FnMut(&'static str) -> Option<Array>, group_size: i32, bits: i32) -> Option<Self> {
        let keys =
            Quantized { packed: take("keys.packed")?, scales: take("keys.scales")?, biases: take("keys.biases")? };
        let values = Quantized {
            packed: take("values.packed")?,
            scales: take("values.scales")?,
            biases: take("values.biases")?,
        };
        Some(Self { keys, values, group_size, bits })
    }

    /// The float type of the scales and biases (the activations').
    pub fn float_dtype(&self) -> Dtype {
        self.keys.scales.dtype()
    }

    pub fn arrays(&self) -> impl Iterator<Item = &Array> {
        self.keys.arrays().into_iter().chain(self.values.arrays())
    }

    /// Positions the buffers hold before they must grow.
    pub fn capacity(&self) -> i32 {
        self.keys.capacity()
    }

    /// The dense keys and values of the first `n` positions (tests).
    #[cfg(test)]
    pub fn dequantized(&self, n: i32) -> Result<(Array, Array)> {
        let d = |q: &Quantized| -> Result<Array> {
            let q = q.map(|a| a.try_index((Ellipsis, ..n, ..)).op("kv read"))?;
            ops::dequantize(&q.packed, &q.scales, &q.biases, self.group_size, self.bits).op("dequantize")
        };
        Ok((d(&self.keys)?, d(&self.values)?))
    }
}

/// The most negative finite value of `dtype` (`mx.finfo(dtype).min`): what
/// masked scores become.
fn finfo_min(dtype: Dtype) -> Array {
    let min = match dtype {
        Dtype::Float16 => -65504.0,
        // bf16's largest finite magnitude, exactly representable in f32.
        Dtype::Bfloat16 => -3.389_531_4e38,
        _ => f32::MIN,
    };
    let a = Array::from_f32(min);
    if dtype == Dtype::Float32 {
        a
    } else {
        a.as_dtype(dtype).unwrap_or(a)
    }
}

/// Rows of queries per block: as many as keep one block's scores
/// (`heads × rows × keys` in `dtype_bytes`) within
/// `headroom_core::attention::QUANTIZED_SCORES_BLOCK_BYTES`,
/// at least one.
pub fn query_block_rows(heads: i32, keys: i32, dtype_bytes: usize) -> i32 {
    let rows = headroom_core::attention::quantized_query_block(
        u64::try_from(heads).unwrap_or(1),
        u64::try_from(keys).unwrap_or(1),
        u64::try_from(dtype_bytes).unwrap_or(2),
    );
    i32::try_from(rows).unwrap_or(i32::MAX)
}

/// mlx-lm's `quantized_scaled_dot_product_attention` over `[B, heads, L, D]`
/// queries and quantized `[B, kv_heads, T, …]` keys and values; `causal`
/// masks future keys (the mask aligned to the end of the keys, as MLX's
/// "causal" mode), quantized as `(group_size, bits)`. Queries are taken
/// `rows` at a time (see the module docs).
pub fn quantized_sdpa(
    queries: &Array,
    keys: &Quantized,
    values: &Quantized,
    scale: f32,
    causal: bool,
    (group_size, bits): (i32, i32),
    rows: i32,
) -> Result<Array> {
    let [b, heads, l, d] = queries.shape() else {
        return Err(crate::error::EngineError::Shape {
            what: "attention queries",
            expected: "[B, heads, L, D]".into(),
            found: queries.shape().to_vec(),
        });
    };
    let (b, heads, l, d) = (*b, *heads, *l, *d);
    let kv_heads = keys.packed.dim(1);
    let repeats = heads / kv_heads;
    let dtype = queries.dtype();
    // `queries *= scale`: the Python float becomes the queries' dtype first.
    let scale = Array::from_f32(scale).as_dtype(dtype).op("attention scale")?;
    let mut q = queries.multiply(&scale).op("attention scale")?;
    let (mut k, mut v) = (keys.clone(), values.clone());
    if repeats > 1 {
        q = q.reshape(&[b, kv_heads, repeats, l, d]).op("reshape")?;
        let expand = |x: &Array| x.expand_dims(-3).op("expand_dims");
        k = k.map(expand)?;
        v = v.map(expand)?;
    }
    let kl = keys.packed.dim(2);
    let min = finfo_min(dtype);
    let rows = rows.clamp(1, l.max(1));
    let mut outs = Vec::new();
    let mut start = 0;
    while start < l {
        let end = (start + rows).min(l);
        let block = if rows >= l { q.clone() } else { q.try_index((Ellipsis, start..end, ..)).op("query block")? };
        let scores = ops::quantized_matmul(&block, &k.packed, &k.scales, &k.biases, true, group_size, bits)
            .op("attention scores")?;
        let scores = if causal {
            // mlx-lm's "causal" string: query i of L sits at key kL - L + i.
            let qi = ops::arange::<_, i32>(kl - l + start, kl - l + end, None).op("causal mask")?;
            let ki = ops::arange::<_, i32>(0, kl, None).op("causal mask")?;
            let mask =
                qi.expand_dims(1).op("causal mask")?.ge(&ki.expand_dims(0).op("causal mask")?).op("causal mask")?;
            ops::select(&mask, &scores, &min).op("causal mask")?
        } else {
            scores
        };
        let probs = ops::softmax_axis(&scores, -1, true).op("attention softmax")?;
        let out = ops::quantized_matmul(&probs, &v.packed, &v.scales, &v.biases, false, group_size, bits)
            .op("attention values")?;
        outs.push(out);
        start = end;
    }
    let out = if outs.len() == 1 { outs.remove(0) } else { ops::concatenate(&outs, -2).op("query blocks")? };
    if repeats > 1 {
        out.reshape(&[b, heads, l, d]).op("reshape")
    } else {
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::fit::estimate;
    use headroom_core::kv::KvFormat;
    use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
    use mlx_rs::transforms::eval;

    use super::*;
    use crate::cache::{KvCache, LayerKind};
    use crate::mlx_memory::mlx_memory;
    use crate::testutil::{f32s, normal};

    /// A cache of `n` full-attention layers stored as `format`.
    fn full_cache(n: usize, format: KvFormat) -> KvCache {
        KvCache::with_format(&vec![LayerKind::Full; n], format).expect("full layers take any format")
    }

    #[test]
    fn writes_grow_in_steps_and_a_trim_rewrites_the_tail() -> Result<()> {
        let mut c = full_cache(1, KvFormat::bits_from_start(8));
        let layer = &mut c.layers_mut()[0];
        // Float until the first pass ends; then converted whole.
        let k0 = normal(&[1, 2, 10, 64], 1, Dtype::Float32);
        layer.update_and_fetch(&k0, &k0)?;
        c.maybe_quantize()?;
        assert!(c.is_quantized());
        let layer = &mut c.layers_mut()[0];
        assert_eq!(layer.quantized_kv().map(QuantizedKv::capacity), Some(256));
        let k1 = normal(&[1, 2, 300, 64], 2, Dtype::Float32);
        let (k, _) = layer.update_and_fetch_quantized(&k1, &k1)?;
        assert_eq!(k.packed.shape(), &[1, 2, 310, 64 * 8 / 32]);
        assert_eq!(k.scales.shape(), &[1, 2, 310, 1]);
        // As mlx-lm: the 10 filled positions (the tail past them dropped) + ceil(300 / 256) steps.
        assert_eq!(layer.quantized_kv().map(QuantizedKv::capacity), Some(10 + 512));
        // What is stored is what MLX's quantize gives for those positions.
        let q = layer.quantized_kv().expect("quantized");
        let (dk, _) = q.dequantized(310)?;
        let (w, s, b) = ops::quantize(&k1, 64, 8).op("quantize")?;
        let want = ops::dequantize(&w, &s, &b, 64, 8).op("dequantize")?;
        let got = dk.try_index((Ellipsis, 10..310, ..)).op("slice")?;
        assert_eq!(f32s(&got), f32s(&want));
        // Within 8-bit rounding of the input.
        let worst = f32s(&got).iter().zip(f32s(&k1)).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(worst < 0.05, "{worst}");

        // Trim back to 100 (not a step boundary) and write 200: they land at 100..300.
        c.push_tokens(&(0..310).collect::<Vec<u32>>());
        c.trim(210);
        assert_eq!(c.offset(), 100);
        let k2 = normal(&[1, 2, 200, 64], 3, Dtype::Float32);
        let (k, _) = c.layers_mut()[0].update_and_fetch_quantized(&k2, &k2)?;
        assert_eq!(k.packed.dim(2), 300);
        let q = c.layers()[0].quantized_kv().expect("quantized");
        let (dk, _) = q.dequantized(300)?;
        let (w, s, b) = ops::quantize(&k2, 64, 8).op("quantize")?;
        let want = ops::dequantize(&w, &s, &b, 64, 8).op("dequantize")?;
        assert_eq!(f32s(&dk.try_index((Ellipsis, 100..300, ..)).op("slice")?), f32s(&want));
        // Past a step boundary after a trim: the stale tail is dropped before growing.
        c.trim(50);
        let k3 = normal(&[1, 2, 600, 64], 4, Dtype::Float32);
        let (k, _) = c.layers_mut()[0].update_and_fetch_quantized(&k3, &k3)?;
        assert_eq!(k.packed.dim(2), 850);
        assert_eq!(c.layers()[0].quantized_kv().map(QuantizedKv::capacity), Some(250 + 768));
        Ok(())
    }

    #[test]
    fn the_cache_converts_once_it_holds_its_start_and_stays_quantized() -> Result<()> {
        let format =
            KvFormat::quantized(4, 32, 300).map_err(|source| crate::error::EngineError::KvFormat { source })?;
        let mut c = full_cache(2, format);
        let k = normal(&[1, 2, 299, 32], 5, Dtype::Bfloat16);
        for layer in c.layers_mut() {
            layer.update_and_fetch(&k, &k)?;
        }
        c.maybe_quantize()?;
        assert!(!c.is_quantized());
        assert_eq!(c.label("bf16"), "bf16 (4-bit from 300 tokens)");
        let one = normal(&[1, 2, 1, 32], 6, Dtype::Bfloat16);
        for layer in c.layers_mut() {
            layer.update_and_fetch(&one, &one)?;
        }
        c.maybe_quantize()?;
        assert!(c.is_quantized());
        assert_eq!(c.label("bf16"), "4-bit (group 32)");
        assert_eq!(c.dtype(), Some(Dtype::Bfloat16));
        // A float write into a quantized layer is refused, not misplaced.
        assert!(c.layers_mut()[0].update_and_fetch(&one, &one).is_err());
        c.trim(200);
        c.maybe_quantize()?;
        assert!(c.is_quantized(), "a trim below the start keeps the cache quantized, as mlx-lm's");
        Ok(())
    }

    /// The attention over quantized keys and values, by hand: dequantized
    /// K and V through MLX's float attention.
    #[test]
    fn quantized_attention_is_attention_over_the_dequantized_cache_and_blocks_change_nothing() -> Result<()> {
        for (bits, heads, kv_heads, l, t) in [(8, 4, 2, 37, 37), (4, 4, 4, 5, 300), (8, 8, 2, 1, 129)] {
            let (d, g) = (64, 64);
            let q = normal(&[1, heads, l, d], 7, Dtype::Float32);
            let k = normal(&[1, kv_heads, t, d], 8, Dtype::Float32);
            let v = normal(&[1, kv_heads, t, d], 9, Dtype::Float32);
            let (qk, qv) = (Quantized::quantize(&k, g, bits)?, Quantized::quantize(&v, g, bits)?);
            let scale = 0.125;
            let causal = l > 1;
            let whole = quantized_sdpa(&q, &qk, &qv, scale, causal, (g, bits), l)?;
            assert_eq!(whole.shape(), &[1, heads, l, d]);
            let deq = |x: &Quantized| ops::dequantize(&x.packed, &x.scales, &x.biases, g, bits).expect("dequantize");
            let mask = causal.then_some(ScaledDotProductAttentionMask::Causal);
            let reference =
                fast::scaled_dot_product_attention(&q, deq(&qk), deq(&qv), scale, mask, None).op("attention")?;
            let worst = f32s(&whole).iter().zip(f32s(&reference)).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(worst < 1e-4, "bits {bits}, L {l}: {worst}");
            // Blocks of 1, 3 and 16 query rows give the very same numbers.
            for rows in [1, 3, 16] {
                let blocked = quantized_sdpa(&q, &qk, &qv, scale, causal, (g, bits), rows)?;
                assert_eq!(f32s(&blocked), f32s(&whole), "bits {bits}, L {l}, {rows} rows");
            }
        }
        Ok(())
    }

    /// MLX's own counters against the estimate's KV term: a cache of N
    /// positions in bf16, 8-bit and 4-bit (group 64), shaped like the
    /// `medium` demo model (12 layers, 4 KV heads of 64).
    #[test]
    fn kv_bytes_match_mlx_s_counters_and_the_estimate() -> Result<()> {
        const LAYERS: i32 = 12;
        const N: i32 = 8192;
        let footprint = headroom_core::fit::medium_demo(2);
        let mut measured = Vec::new();
        for format in [KvFormat::Float, KvFormat::bits_from_start(8), KvFormat::bits_from_start(4)] {
            let predicted = estimate(&footprint, u64::try_from(N).unwrap_or(0), format).kv_cache_bytes;
            // Other tests of this binary allocate and free through the same
            // MLX counter meanwhile (3.0 % off was seen in a parallel run):
            // the same cache is built up to four times and the closest
            // reading counts. What MLX holds beyond the arrays every time
            // (a leaked copy, an unfreed bf16 buffer) misses every try.
            let mut best: Option<(f64, u64)> = None;
            for _ in 0..4 {
                let before = mlx_memory()?.active;
                let mut cache = full_cache(usize::try_from(LAYERS).unwrap_or(0), format);
                for (i, layer) in cache.layers_mut().iter_mut().enumerate() {
                    let k = normal(&[1, 4, N, 64], 2 * i as u64, Dtype::Bfloat16);
                    let v = normal(&[1, 4, N, 64], 2 * i as u64 + 1, Dtype::Bfloat16);
                    layer.update_and_fetch(&k, &v)?;
                }
                cache.maybe_quantize()?;
                eval(cache.arrays()).op("eval")?;
                let held = mlx_memory()?.active.saturating_sub(before);
                assert_eq!(cache.nbytes() as u64, predicted, "{format:?}: the arrays' own sizes");
                drop(cache);
                let error = held as f64 / predicted as f64 - 1.0;
                if best.is_none_or(|(e, _)| error.abs() < e.abs()) {
                    best = Some((error, held));
                }
                if error.abs() < 0.01 {
                    break;
                }
            }
            let (error, held) = best.unwrap_or((f64::INFINITY, 0));
            assert!(error.abs() < 0.03, "{format:?}: MLX holds {held}, the estimate says {predicted}");
            measured.push(held as f64);
        }
        let (bf16, q8, q4) = (measured[0], measured[1], measured[2]);
        assert!((q8 / bf16 - 0.53).abs() < 0.02, "8-bit / bf16 = {}", q8 / bf16);
        assert!((q4 / bf16 - 0.28).abs() < 0.02, "4-bit / bf16 = {}", q4 / bf16);
        Ok(())
    }
}
