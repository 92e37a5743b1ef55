//! A sliding-window layer's cache: at most `window` positions' keys and
//! values, overwritten in a ring once full, so its memory stops growing.
//!
//! It follows mlx-lm 0.32.2's `RotatingKVCache` (with no kept prefix) step
//! for step, because which keys attention sees, and in which order, decides
//! the rounding: a prompt chunk is appended to the window's keys in temporal
//! order (keeping `window - 1` old positions, so every new token still sees
//! a full window); a single decoded token is written in place, into a
//! buffer grown in steps of 256 up to `window`, then round the ring.

use mlx_rs::ops::indexing::{Ellipsis, TryIndexMutOp, TryIndexOp};
use mlx_rs::{ops, Array};

use crate::error::{MlxContext, Result};
use crate::sizes::KV_STEP;

#[derive(Debug, Clone)]
pub struct RotatingKv {
    keys: Option<Array>,
    values: Option<Array>,
    /// Positions fed so far (the RoPE offset of the next token), not those kept.
    offset: i32,
    window: i32,
    /// Where the next in-place write goes.
    idx: i32,
}

/// `v[..., from.., :]` with `append` after it, along the positions axis.
fn drop_front(v: &Array, from: i32, append: Option<&Array>) -> Result<Array> {
    let kept = if from > 0 { v.try_index((Ellipsis, from.., ..)).op("window trim")? } else { v.clone() };
    match append {
        Some(a) => ops::concatenate(&[kept, a.clone()], 2).op("window append"),
        None => Ok(kept),
    }
}

impl RotatingKv {
    pub fn new(window: i32) -> Self {
        Self { keys: None, values: None, offset: 0, window: window.max(1), idx: 0 }
    }

    pub fn offset(&self) -> i32 {
        self.offset
    }

    pub fn window(&self) -> i32 {
        self.window
    }

    /// Appends `[B, kv_heads, L, D]` keys/values; returns the keys/values
    /// attention sees (for a prompt chunk, the kept window then the chunk).
    pub fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<(Array, Array)> {
        if keys.dim(2) == 1 {
            self.update_in_place(keys, values)
        } else {
            self.update_concat(keys, values)
        }
    }

    /// The ring back in the order the positions came in, without unused capacity.
    fn temporal_order(&self, v: &Array) -> Result<Array> {
        if self.idx == v.dim(2) {
            Ok(v.clone())
        } else if self.idx < self.offset {
            let newer = v.try_index((Ellipsis, self.idx.., ..)).op("window order")?;
            let older = v.try_index((Ellipsis, ..self.idx, ..)).op("window order")?;
            ops::concatenate(&[newer, older], 2).op("window order")
        } else {
            v.try_index((Ellipsis, ..self.idx, ..)).op("window order")
        }
    }

    fn update_concat(&mut self, keys: &Array, values: &Array) -> Result<(Array, Array)> {
        let (k, v) = match (self.keys.take(), self.values.take()) {
            (Some(old_k), Some(old_v)) => {
                let (old_k, old_v) = (self.temporal_order(&old_k)?, self.temporal_order(&old_v)?);
                // Keep window - 1 old positions: the first new token then still sees a full window.
                let from = old_k.dim(2) - self.window + 1;
                (drop_front(&old_k, from, Some(keys))?, drop_front(&old_v, from, Some(values))?)
            }
            _ => (keys.clone(), values.clone()),
        };
        self.offset += keys.dim(2);
        self.idx = k.dim(2);
        self.keys = Some(k.clone());
        self.values = Some(v.clone());
        Ok((k, v))
    }

    fn update_in_place(&mut self, keys: &Array, values: &Array) -> Result<(Array, Array)> {
        let prev = self.offset;
        let grow = match &self.keys {
            None => true,
            Some(k) => prev >= k.dim(2) && k.dim(2) < self.window,
        };
        if grow {
            let new_size = KV_STEP.min(self.window - prev).max(1);
            let fresh = |like: &Array| {
                let s = like.shape();
                ops::zeros_dtype(&[s[0], s[1], new_size, s[3]], like.dtype()).op("window alloc")
            };
            let (nk, nv) = (fresh(keys)?, fresh(values)?);
            let (k, v) = match (self.keys.take(), self.values.take()) {
                (Some(k), Some(v)) => {
                    (ops::concatenate(&[k, nk], 2).op("window grow")?, ops::concatenate(&[v, nv], 2).op("window grow")?)
                }
                _ => (nk, nv),
            };
            self.keys = Some(k);
            self.values = Some(v);
            self.idx = prev;
        }
        let (mut k, mut v) = match (self.keys.take(), self.values.take()) {
            (Some(k), Some(v)) => (k, v),
            // Set just above when missing.
            _ => {
                return Err(crate::error::EngineError::Shape {
                    what: "window cache",
                    expected: "buffers".into(),
                    found: vec![],
                })
            }
        };
        let over = k.dim(2) - self.window;
        if over > 0 {
            k = drop_front(&k, over, None)?;
            v = drop_front(&v, over, None)?;
            self.idx = self.window;
        }
        if self.idx == self.window {
            self.idx = 0;
        }
        let s = keys.dim(2);
        k.try_index_mut((Ellipsis, self.idx..self.idx + s, ..), keys).op("window write")?;
        v.try_index_mut((Ellipsis, self.idx..self.idx + s, ..), values).op("window write")?;
        self.offset += s;
        self.idx += s;
        let out = if self.offset < k.dim(2) {
            (
                k.try_index((Ellipsis, ..self.offset, ..)).op("window read")?,
                v.try_index((Ellipsis, ..self.offset, ..)).op("window read")?,
            )
        } else {
            (k.clone(), v.clone())
        };
        self.keys = Some(k);
        self.values = Some(v);
        Ok(out)
    }

    /// The mask for `n` new queries, as mlx-lm's `make_mask` with the
    /// window as the size: `None` means causal (or, for one query, none).
    pub fn window_mask(&self, n: i32) -> Result<Option<Array>> {
        if n <= 1 {
            return Ok(None);
        }
        let offset = (self.window - 1).min(self.offset);
        if offset + n <= self.window {
            return Ok(None);
        }
        causal_window_mask(n, offset, self.window).map(Some)
    }

    /// Nothing is lost yet: every position is still held, in order, so
    /// stepping back is exact (mlx-lm's `is_trimmable`).
    pub fn can_trim(&self, n: i32) -> bool {
        n == 0 || self.offset < self.window
    }

    pub fn trim(&mut self, n: i32) -> i32 {
        let n = n.min(self.offset);
        self.offset -= n;
        self.idx -= n;
        n
    }

    pub fn nbytes(&self) -> usize {
        self.keys.as_ref().map_or(0, Array::nbytes) + self.values.as_ref().map_or(0, Array::nbytes)
    }

    pub(super) fn dtype(&self) -> Option<mlx_rs::Dtype> {
        self.keys.as_ref().map(Array::dtype)
    }

    pub(super) fn arrays(&self) -> impl Iterator<Item = &Array> {
        self.keys.iter().chain(self.values.iter())
    }

    /// Where the next in-place write goes (for a saved state).
    pub(super) fn idx(&self) -> i32 {
        self.idx
    }

    /// The buffers by name, for a saved state (persist.rs).
    pub(super) fn named(&self) -> Vec<(&'static str, &Array)> {
        super::present([("keys", self.keys.as_ref()), ("values", self.values.as_ref())])
    }

    /// A window back from its saved buffers; the caller checked them against
    /// `window`, `offset` and `idx` (persist.rs).
    pub(super) fn from_saved(buffers: Option<(Array, Array)>, window: i32, offset: i32, idx: i32) -> Self {
        let (keys, values) = buffers.unzip();
        Self { keys, values, offset, window: window.max(1), idx }
    }
}

/// `[n, offset + n]`: query `i` (at position `offset + i`) sees key `j` iff
/// `j <= offset + i < j + window` (mlx-lm's `create_causal_mask`).
pub fn causal_window_mask(n: i32, offset: i32, window: i32) -> Result<Array> {
    let keys = ops::arange::<_, i32>(0, offset + n, 1).op("mask")?.reshape(&[1, -1]).op("mask")?;
    let queries = ops::arange::<_, i32>(offset, offset + n, 1).op("mask")?.reshape(&[-1, 1]).op("mask")?;
    let causal = queries.ge(&keys).op("mask")?;
    let in_window = queries.lt(keys.add(Array::from_int(window)).op("mask")?).op("mask")?;
    causal.logical_and(&in_window).op("mask")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys whose every element is its position, so what is kept can be read back.
    fn at(positions: std::ops::Range<i32>) -> Array {
        let v: Vec<f32> = positions.clone().map(|p| p as f32).collect();
        Array::from_slice(&v, &[1, 1, positions.len() as i32, 1])
    }

    fn read(a: &Array) -> Vec<i32> {
        a.add(Array::from_f32(0.0)).expect("copy").as_slice::<f32>().iter().map(|x| *x as i32).collect()
    }

    #[test]
    fn a_window_keeps_the_last_positions_in_a_ring() -> Result<()> {
        let mut c = RotatingKv::new(4);
        // A prompt of 6: all six are attended (the mask limits each to its window).
        let (k, _) = c.update_and_fetch(&at(0..6), &at(0..6))?;
        assert_eq!(read(&k), [0, 1, 2, 3, 4, 5]);
        assert!(!c.can_trim(1) && c.can_trim(0));
        // Decoding: the buffer is cut to the window, then written round the ring.
        let (k, _) = c.update_and_fetch(&at(6..7), &at(6..7))?;
        assert_eq!(read(&k), [6, 3, 4, 5]);
        let (k, _) = c.update_and_fetch(&at(7..8), &at(7..8))?;
        assert_eq!(read(&k), [6, 7, 4, 5]);
        assert_eq!(c.offset(), 8);
        // A chunk after the ring: back in order, window - 1 old ones kept.
        let (k, _) = c.update_and_fetch(&at(8..10), &at(8..10))?;
        assert_eq!(read(&k), [5, 6, 7, 8, 9]);
        assert_eq!(c.nbytes(), 2 * 5 * 4);
        Ok(())
    }

    #[test]
    fn before_it_is_full_a_window_steps_back_exactly() -> Result<()> {
        let mut c = RotatingKv::new(8);
        c.update_and_fetch(&at(0..3), &at(0..3))?;
        c.update_and_fetch(&at(3..4), &at(3..4))?;
        assert!(c.can_trim(2));
        assert_eq!(c.trim(2), 2);
        let (k, _) = c.update_and_fetch(&at(2..3), &at(2..3))?;
        assert_eq!(read(&k), [0, 1, 2]);
        Ok(())
    }

    #[test]
    fn the_window_mask_is_mlx_lms() -> Result<()> {
        let m = causal_window_mask(3, 2, 3)?;
        let got: Vec<bool> = m.as_slice::<bool>().to_vec();
        // Queries at 2, 3, 4 over keys 0..5, each seeing itself and 2 before.
        #[rustfmt::skip]
        let want = [
            true,  true,  true,  false, false,
            false, true,  true,  true,  false,
            false, false, true,  true,  true,
        ];
        assert_eq!(got, want);
        let c = RotatingKv::new(8);
        assert!(c.window_mask(4)?.is_none(), "within the window plain causal attention is the same");
        assert!(c.window_mask(9)?.is_some());
        Ok(())
    }
}
