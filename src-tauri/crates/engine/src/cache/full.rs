//! A full-attention layer's cache: every position's keys and values,
//! preallocated in steps of `KV_STEP` (256) positions.
//!
//! Like mlx-lm's `KVCache`, keys and values are written into a buffer that
//! grows by whole steps (slice assignment), and attention reads the filled
//! prefix `[.., :offset, :]`. Growing by steps instead of concatenating per
//! token keeps decode from copying the whole cache every step.

use mlx_rs::ops::indexing::{Ellipsis, TryIndexMutOp, TryIndexOp};
use mlx_rs::{ops, Array};

use crate::error::{EngineError, MlxContext, Result};
use crate::kv_quant::{Quantized, QuantizedKv};
use crate::sizes::KV_STEP;

/// Keys and values of one attention layer, `[B, kv_heads, capacity, head_dim]`,
/// in the float type or, once converted, quantized (kv_quant.rs).
#[derive(Debug, Default, Clone)]
pub struct LayerKv {
    keys: Option<Array>,
    values: Option<Array>,
    offset: i32,
    quantized: Option<QuantizedKv>,
    /// `(group_size, bits)` once the layer is quantized.
    quant: Option<(i32, i32)>,
}

impl LayerKv {
    /// Positions filled so far (the RoPE offset of the next token).
    pub fn offset(&self) -> i32 {
        self.offset
    }

    /// The keys' float type (their scales' once quantized); `None` before the first write.
    pub(super) fn dtype(&self) -> Option<mlx_rs::Dtype> {
        self.keys.as_ref().map(Array::dtype).or_else(|| self.quantized.as_ref().map(QuantizedKv::float_dtype))
    }

    /// Positions the buffers hold before they must grow.
    #[cfg(test)]
    pub fn capacity(&self) -> i32 {
        self.keys.as_ref().map_or(0, |k| k.dim(2))
    }

    /// `(group_size, bits)` when the layer's keys and values are quantized.
    pub fn quantization(&self) -> Option<(i32, i32)> {
        self.quant
    }

    /// [`Self::update_and_fetch`] for a quantized layer: the filled keys and values, quantized.
    pub fn update_and_fetch_quantized(&mut self, keys: &Array, values: &Array) -> Result<(Quantized, Quantized)> {
        let (group_size, bits) = self.quant.ok_or(EngineError::Shape {
            what: "KV cache",
            expected: "a quantized layer".into(),
            found: vec![self.offset],
        })?;
        let out = QuantizedKv::update_and_fetch(&mut self.quantized, self.offset, keys, values, group_size, bits)?;
        self.offset += keys.dim(2);
        Ok(out)
    }

    /// mlx-lm's `to_quantized`: from now on the keys and values are kept
    /// quantized (whatever was written is converted).
    pub(super) fn quantize(&mut self, group_size: i32, bits: i32) -> Result<()> {
        if let (Some(k), Some(v)) = (self.keys.take(), self.values.take()) {
            self.quantized = Some(QuantizedKv::from_float(&k, &v, group_size, bits)?);
        }
        self.quant = Some((group_size, bits));
        Ok(())
    }

    /// Appends `[B, kv_heads, L, D]` keys/values and returns all filled ones.
    pub fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<(Array, Array)> {
        if self.quant.is_some() {
            return Err(EngineError::Shape {
                what: "KV cache",
                expected: "a float layer (this one is quantized)".into(),
                found: vec![self.offset],
            });
        }
        let prev = self.offset;
        let new = keys.dim(2);
        let (k_buf, v_buf) = match (self.keys.take(), self.values.take()) {
            (Some(k), Some(v)) if prev + new <= k.dim(2) => (k, v),
            (old_k, old_v) => {
                let steps = (KV_STEP + new - 1) / KV_STEP;
                let grow = |like: &Array, old: Option<Array>| -> Result<Array> {
                    let s = like.shape();
                    let fresh = ops::zeros_dtype(&[s[0], s[1], steps * KV_STEP, s[3]], like.dtype()).op("kv alloc")?;
                    match old {
                        None => Ok(fresh),
                        Some(old) => {
                            // After a trim the tail past `prev` is stale; drop it
                            // so the new positions land right after the kept ones.
                            let old = if prev % KV_STEP != 0 {
                                old.try_index((Ellipsis, ..prev, ..)).op("kv trim")?
                            } else {
                                old
                            };
                            ops::concatenate(&[old, fresh], 2).op("kv grow")
                        }
                    }
                };
                (grow(keys, old_k)?, grow(values, old_v)?)
            }
        };
        let (mut k_buf, mut v_buf) = (k_buf, v_buf);
        self.offset = prev + new;
        k_buf.try_index_mut((Ellipsis, prev..self.offset, ..), keys).op("kv write")?;
        v_buf.try_index_mut((Ellipsis, prev..self.offset, ..), values).op("kv write")?;
        let out = if self.offset < k_buf.dim(2) {
            (
                k_buf.try_index((Ellipsis, ..self.offset, ..)).op("kv read")?,
                v_buf.try_index((Ellipsis, ..self.offset, ..)).op("kv read")?,
            )
        } else {
            (k_buf.clone(), v_buf.clone())
        };
        self.keys = Some(k_buf);
        self.values = Some(v_buf);
        Ok(out)
    }

    pub(super) fn trim(&mut self, n: i32) -> i32 {
        let n = n.min(self.offset);
        self.offset -= n;
        n
    }

    pub fn nbytes(&self) -> usize {
        self.keys.as_ref().map_or(0, Array::nbytes)
            + self.values.as_ref().map_or(0, Array::nbytes)
            + self.quantized.as_ref().map_or(0, QuantizedKv::nbytes)
    }

    pub(super) fn arrays(&self) -> impl Iterator<Item = &Array> {
        self.keys.iter().chain(self.values.iter()).chain(self.quantized.iter().flat_map(QuantizedKv::arrays))
    }

    /// The buffers by name, for a saved state (persist.rs): `keys` and
    /// `values` in the float type, or the six quantized ones.
    pub(super) fn named(&self) -> Vec<(&'static str, &Array)> {
        let mut out = super::present([("keys", self.keys.as_ref()), ("values", self.values.as_ref())]);
        out.extend(self.quantized.iter().flat_map(QuantizedKv::named));
        out
    }

    /// A layer back from its saved buffers; the caller checked their shapes
    /// against `offset` (persist.rs).
    pub(super) fn from_saved(
        float: Option<(Array, Array)>,
        quantized: Option<QuantizedKv>,
        offset: i32,
        quant: Option<(i32, i32)>,
    ) -> Self {
        let (keys, values) = float.unzip();
        Self { keys, values, offset, quantized, quant }
    }

    #[cfg(test)]
    pub(crate) fn quantized_kv(&self) -> Option<&QuantizedKv> {
        self.quantized.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{KvCache, LayerKind};

    /// A strided view copied into a fresh, contiguous array, to read back.
    fn values(a: &Array) -> Vec<f32> {
        a.add(Array::from_f32(0.0)).expect("copy").as_slice::<f32>().to_vec()
    }

    fn kv(len: i32, fill: f32) -> Array {
        Array::from_slice(&vec![fill; (2 * len * 4) as usize], &[1, 2, len, 4])
    }

    #[test]
    fn grows_in_steps_and_returns_the_filled_prefix() -> Result<()> {
        let mut c = KvCache::new(&[LayerKind::Full]);
        let layer = c.layers_mut()[0].full_mut().expect("a full layer");
        let (k, _) = layer.update_and_fetch(&kv(3, 1.0), &kv(3, 1.0))?;
        assert_eq!(k.shape(), &[1, 2, 3, 4]);
        assert_eq!(layer.capacity(), 256);
        for _ in 0..253 {
            layer.update_and_fetch(&kv(1, 2.0), &kv(1, 2.0))?;
        }
        assert_eq!((layer.offset(), layer.capacity()), (256, 256));
        let (k, _) = layer.update_and_fetch(&kv(300, 3.0), &kv(300, 3.0))?;
        // 256 kept + ceil(300 / 256) more steps.
        assert_eq!(layer.capacity(), 256 + 512);
        assert_eq!(k.shape(), &[1, 2, 556, 4]);
        let v = values(&k);
        assert_eq!((v[0], v[3 * 4], v[256 * 4]), (1.0, 2.0, 3.0));
        assert_eq!(c.nbytes(), 2 * (2 * 768 * 4 * 4));
        Ok(())
    }

    #[test]
    fn trim_then_write_overwrites_the_tail() -> Result<()> {
        let mut c = KvCache::new(&[LayerKind::Full, LayerKind::Full]);
        for layer in c.layers_mut() {
            layer.update_and_fetch(&kv(10, 1.0), &kv(10, 1.0))?;
        }
        c.push_tokens(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(c.reuse_prefix(&[0, 1, 2, 3, 9, 9]), 4);
        assert_eq!((c.offset(), c.tokens()), (4, &[0u32, 1, 2, 3][..]));
        let (k, _) = c.layers_mut()[0].update_and_fetch(&kv(2, 5.0), &kv(2, 5.0))?;
        assert_eq!(k.shape(), &[1, 2, 6, 4]);
        assert_eq!(values(&k)[4 * 4], 5.0);
        // A prompt the cache holds entirely still leaves one token to feed.
        assert_eq!(c.reuse_prefix(&[0, 1, 2]), 2);
        c.clear();
        assert_eq!((c.offset(), c.nbytes()), (0, 0));
        Ok(())
    }
}
