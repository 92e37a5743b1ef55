//! The cache a model keeps between forward passes, one entry per layer,
//! owned by a session and reused across its turns.
//!
//! Each layer's entry is of the kind its layer needs ([`LayerKind`]):
//! - full attention ([`full::LayerKv`]): every position's keys and values;
//! - sliding-window attention ([`rotating::RotatingKv`]): the last `window`
//!   positions, in a ring;
//! - linear attention ([`recurrent::RecurrentState`]): a fixed-size state.
//!
//! [`KvCache`] also remembers the token ids it holds, so a later turn can
//! reuse the common prefix and prefill only the rest. Stepping back to a
//! shorter prefix is exact for full layers, for a window that has not yet
//! dropped a position, and for nothing else: a window that has rotated no
//! longer holds the positions a shorter prefix would need, and a recurrent
//! state has mixed every position into itself. Where any layer cannot step
//! back exactly, the whole cache is emptied and the prompt recomputed
//! (`reuse_prefix`), so a reused turn gives the tokens a fresh run gives.
//!
//! A quantized KV format (`headroom_core::kv`) applies to the full-attention
//! layers only, as in mlx-lm 0.32.2, whose `maybe_quantize_kv_cache` converts
//! every layer cache that has a `to_quantized`: `KVCache` has one, the
//! recurrent `ArraysCache` has none (left as it is), and `RotatingKVCache`'s
//! raises "Quantization NYI". So a model with sliding-window layers is
//! refused a quantized format up front ([`KvCache::with_format`]) rather than
//! failing at the conversion in the middle of a turn.

pub mod full;
pub mod persist;
pub mod recurrent;
pub mod rotating;

use headroom_core::kv::{KvFormat, KvFormatError};
use mlx_rs::Array;

use crate::error::{EngineError, Result};
use crate::kv_quant::Quantized;
pub use full::LayerKv;
pub use recurrent::RecurrentState;
pub use rotating::RotatingKv;

/// What a layer keeps between forward passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// Full attention: every position.
    Full,
    /// Sliding-window attention over the last `window` positions.
    Rotating { window: i32 },
    /// Linear attention: a state of fixed size.
    Recurrent,
}

impl LayerKind {
    /// What each layer of the model `text` describes keeps, from its config
    /// alone (what the architectures build: see their `layer_kinds`).
    pub fn for_config(text: &headroom_core::format::TextConfig) -> Vec<Self> {
        use headroom_core::format::LayerAttention;
        text.layer_types
            .iter()
            .map(|t| match t {
                LayerAttention::Full => Self::Full,
                LayerAttention::Sliding => Self::Rotating { window: text.sliding_window.unwrap_or(0) },
                LayerAttention::Linear => Self::Recurrent,
            })
            .collect()
    }
}

/// One layer's cache.
#[derive(Debug, Clone)]
pub enum LayerCache {
    Full(LayerKv),
    Rotating(RotatingKv),
    Recurrent(RecurrentState),
}

/// The mask attention over a layer's cache needs for the new queries.
#[derive(Debug)]
pub enum AttentionMask {
    /// One query: it sees every key the cache returns.
    None,
    /// Causal, aligned to the end of the keys.
    Causal,
    /// An explicit boolean mask `[queries, keys]` (a window narrower than the keys).
    Array(Array),
}

impl LayerCache {
    pub fn new(kind: LayerKind) -> Self {
        match kind {
            LayerKind::Full => Self::Full(LayerKv::default()),
            LayerKind::Rotating { window } => Self::Rotating(RotatingKv::new(window)),
            LayerKind::Recurrent => Self::Recurrent(RecurrentState::default()),
        }
    }

    pub fn kind(&self) -> LayerKind {
        match self {
            Self::Full(_) => LayerKind::Full,
            Self::Rotating(r) => LayerKind::Rotating { window: r.window() },
            Self::Recurrent(_) => LayerKind::Recurrent,
        }
    }

    /// Positions fed so far (the RoPE offset of the next token).
    pub fn offset(&self) -> i32 {
        match self {
            Self::Full(c) => c.offset(),
            Self::Rotating(c) => c.offset(),
            Self::Recurrent(c) => c.offset(),
        }
    }

    /// Appends `[B, kv_heads, L, D]` keys/values and returns those attention sees.
    pub fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<(Array, Array)> {
        match self {
            Self::Full(c) => c.update_and_fetch(keys, values),
            Self::Rotating(c) => c.update_and_fetch(keys, values),
            Self::Recurrent(_) => Err(wrong_kind("keys and values", "a recurrent state")),
        }
    }

    /// `(group_size, bits)` when this is a full-attention layer whose keys and values are quantized.
    pub fn quantization(&self) -> Option<(i32, i32)> {
        match self {
            Self::Full(c) => c.quantization(),
            _ => None,
        }
    }

    /// [`Self::update_and_fetch`] for a quantized full-attention layer.
    pub fn update_and_fetch_quantized(&mut self, keys: &Array, values: &Array) -> Result<(Quantized, Quantized)> {
        match self {
            Self::Full(c) => c.update_and_fetch_quantized(keys, values),
            Self::Rotating(_) => Err(wrong_kind("a quantized cache", "a sliding-window cache")),
            Self::Recurrent(_) => Err(wrong_kind("a quantized cache", "a recurrent state")),
        }
    }

    /// The mask for `n` new queries, taken before they are appended (as mlx-lm does).
    pub fn attention_mask(&self, n: i32) -> Result<AttentionMask> {
        let window = match self {
            Self::Rotating(c) => c.window_mask(n)?,
            _ => None,
        };
        Ok(match window {
            Some(m) => AttentionMask::Array(m),
            None if n > 1 => AttentionMask::Causal,
            None => AttentionMask::None,
        })
    }

    /// The quantized keys and values of a full-attention layer, once converted.
    #[cfg(test)]
    pub fn quantized_kv(&self) -> Option<&crate::kv_quant::QuantizedKv> {
        self.full().and_then(LayerKv::quantized_kv)
    }

    /// The full-attention cache, if this is one.
    #[cfg(test)]
    pub fn full(&self) -> Option<&LayerKv> {
        match self {
            Self::Full(c) => Some(c),
            _ => None,
        }
    }

    /// The full-attention cache, if this is one.
    #[cfg(test)]
    pub fn full_mut(&mut self) -> Option<&mut LayerKv> {
        match self {
            Self::Full(c) => Some(c),
            _ => None,
        }
    }

    /// The recurrent state, if this is one.
    pub fn recurrent_mut(&mut self) -> Result<&mut RecurrentState> {
        match self {
            Self::Recurrent(c) => Ok(c),
            Self::Full(_) => Err(wrong_kind("a recurrent state", "a full-attention cache")),
            Self::Rotating(_) => Err(wrong_kind("a recurrent state", "a sliding-window cache")),
        }
    }

    fn can_trim(&self, n: i32) -> bool {
        match self {
            Self::Full(_) => true,
            Self::Rotating(c) => c.can_trim(n),
            Self::Recurrent(c) => c.can_trim(n),
        }
    }

    fn trim(&mut self, n: i32) -> i32 {
        match self {
            Self::Full(c) => c.trim(n),
            Self::Rotating(c) => c.trim(n),
            Self::Recurrent(_) if n == 0 => 0,
            // Never asked: `KvCache` checks `can_trim` first and recomputes instead.
            Self::Recurrent(c) => {
                *c = RecurrentState::default();
                0
            }
        }
    }

    pub fn nbytes(&self) -> usize {
        match self {
            Self::Full(c) => c.nbytes(),
            Self::Rotating(c) => c.nbytes(),
            Self::Recurrent(c) => c.nbytes(),
        }
    }

    fn dtype(&self) -> Option<mlx_rs::Dtype> {
        match self {
            Self::Full(c) => c.dtype(),
            Self::Rotating(c) => c.dtype(),
            Self::Recurrent(_) => None,
        }
    }

    fn arrays(&self) -> Vec<&Array> {
        match self {
            Self::Full(c) => c.arrays().collect(),
            Self::Rotating(c) => c.arrays().collect(),
            Self::Recurrent(c) => c.arrays().collect(),
        }
    }
}

/// The buffers of `pairs` that exist, by name: what a layer saves (persist.rs).
fn present<'a, const N: usize>(pairs: [(&'static str, Option<&'a Array>); N]) -> Vec<(&'static str, &'a Array)> {
    pairs.into_iter().filter_map(|(name, a)| Some((name, a?))).collect()
}

fn wrong_kind(wanted: &str, found: &str) -> EngineError {
    EngineError::Shape { what: "layer cache", expected: format!("{wanted}, found {found}"), found: Vec::new() }
}

/// The cache of a whole model, plus the token ids whose keys/values (or
/// state) it holds, so a later turn can reuse the common prefix.
/// Cloning it is cheap (MLX arrays are shared until written) and gives a
/// snapshot: later writes to one do not reach the other.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<LayerCache>,
    tokens: Vec<u32>,
    /// How the full-attention layers store keys and values; a quantized
    /// format converts them once (see [`Self::maybe_quantize`]).
    format: KvFormat,
}

impl KvCache {
    /// An empty float cache with one entry of each kind given, in layer order.
    pub fn new(kinds: &[LayerKind]) -> Self {
        Self {
            layers: kinds.iter().map(|k| LayerCache::new(*k)).collect(),
            tokens: Vec::new(),
            format: KvFormat::Float,
        }
    }

    /// An empty cache whose full-attention layers store keys and values as
    /// `format`; a quantized format is refused for a model with
    /// sliding-window layers (mlx-lm cannot quantize those; module docs).
    pub fn with_format(kinds: &[LayerKind], format: KvFormat) -> std::result::Result<Self, KvFormatError> {
        if format.quant().is_some() && kinds.iter().any(|k| matches!(k, LayerKind::Rotating { .. })) {
            return Err(KvFormatError::SlidingWindow);
        }
        Ok(Self { format, ..Self::new(kinds) })
    }

    pub fn format(&self) -> KvFormat {
        self.format
    }

    /// Whether the keys and values are quantized now (a quantized format
    /// starts in the float type until the cache reaches its start).
    pub fn is_quantized(&self) -> bool {
        self.layers.iter().any(|l| l.quantization().is_some())
    }

    /// What the cache holds now, for a turn's stats: `float` (the
    /// activations' type, e.g. "bf16") or "8-bit (group 64)".
    pub fn label(&self, float: &str) -> String {
        self.format.state_label(float, self.is_quantized())
    }

    /// mlx-lm's `maybe_quantize_kv_cache`, run after every forward pass:
    /// a quantized format converts every full-attention layer once the
    /// cache holds at least its `start` positions, and they stay quantized
    /// (trims included). Recurrent layers are left as they are.
    pub fn maybe_quantize(&mut self) -> Result<()> {
        let Some(q) = self.format.quant() else { return Ok(()) };
        if self.is_quantized() || !self.format.converts_at(u64::try_from(self.offset()).unwrap_or(0)) {
            return Ok(());
        }
        // Checked when the format was accepted (KV_BITS, KV_GROUP_SIZES).
        let (group_size, bits) = (i32::try_from(q.group_size).unwrap_or(64), i32::try_from(q.bits).unwrap_or(8));
        for layer in &mut self.layers {
            if let LayerCache::Full(c) = layer {
                c.quantize(group_size, bits)?;
            }
        }
        Ok(())
    }

    /// Positions fed (the same in every layer).
    pub fn offset(&self) -> usize {
        self.layers.first().map_or(0, |l| usize::try_from(l.offset()).unwrap_or(0))
    }

    /// The keys' element type (of the first attention layer); `None` before the first write.
    pub fn dtype(&self) -> Option<mlx_rs::Dtype> {
        self.layers.iter().find_map(LayerCache::dtype)
    }

    /// Bytes held by the buffers (allocated capacity, not just the filled part).
    pub fn nbytes(&self) -> usize {
        self.layers.iter().map(LayerCache::nbytes).sum()
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Each layer's kind, in order.
    #[cfg(test)]
    pub fn kinds(&self) -> Vec<LayerKind> {
        self.layers.iter().map(LayerCache::kind).collect()
    }

    /// The token ids whose keys/values are cached, in order.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Whether every layer can always step back (full attention only): a
    /// cache with a window or a recurrent state may not, so the prompt
    /// cache keeps a checkpoint of it at the end of each prompt.
    pub fn always_steps_back(&self) -> bool {
        self.layers.iter().all(|l| matches!(l, LayerCache::Full(_)))
    }

    /// Whether forgetting the last `n` positions is exact in every layer.
    pub fn can_trim(&self, n: usize) -> bool {
        let n = i32::try_from(n).unwrap_or(i32::MAX);
        self.layers.iter().all(|l| l.can_trim(n))
    }

    /// Forgets the last `n` positions (the buffers stay allocated) where
    /// that is exact ([`Self::can_trim`]); otherwise empties the cache.
    /// Returns how many positions were dropped.
    pub fn trim(&mut self, n: usize) -> usize {
        if !self.can_trim(n) {
            let dropped = self.offset();
            self.clear();
            return dropped;
        }
        let n = i32::try_from(n).unwrap_or(i32::MAX);
        let mut dropped = 0;
        for layer in &mut self.layers {
            dropped = layer.trim(n);
        }
        self.tokens.truncate(self.offset());
        usize::try_from(dropped).unwrap_or(0)
    }

    /// Empties the cache and frees its buffers (a quantized format starts over in float).
    pub fn clear(&mut self) {
        for layer in &mut self.layers {
            *layer = LayerCache::new(layer.kind());
        }
        self.tokens.clear();
    }

    /// Trims the cache to the longest prefix it shares with `prompt`, keeping
    /// at least one prompt token to feed (its logits give the next token).
    /// Where some layer cannot step back exactly, starts over from empty.
    /// Returns how many prompt tokens are already cached.
    pub fn reuse_prefix(&mut self, prompt: &[u32]) -> usize {
        // `reusable` is 0 where no step back is exact; then the cache
        // starts over unless dropping everything is itself a trim.
        let keep = self.reusable(prompt);
        let drop = self.offset() - keep;
        if self.can_trim(drop) {
            self.trim(drop);
        } else {
            self.clear();
        }
        keep
    }

    /// How many of `prompt`'s tokens [`Self::reuse_prefix`] would keep,
    /// changing nothing: the common prefix (less the one token that must be
    /// fed), where every layer can step back to it exactly; else 0.
    pub fn reusable(&self, prompt: &[u32]) -> usize {
        let common = self.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        let keep = common.min(prompt.len().saturating_sub(1));
        let drop = self.offset() - keep.min(self.offset());
        if self.can_trim(drop) {
            keep
        } else {
            0
        }
    }

    #[cfg(test)]
    pub(crate) fn layers(&self) -> &[LayerCache] {
        &self.layers
    }

    pub(crate) fn layers_mut(&mut self) -> &mut [LayerCache] {
        &mut self.layers
    }

    /// Records ids whose keys/values the last forward pass appended.
    pub(crate) fn push_tokens(&mut self, ids: &[u32]) {
        self.tokens.extend_from_slice(ids);
    }

    /// Every buffer, for `eval` after a prefill chunk.
    pub(crate) fn arrays(&self) -> Vec<&Array> {
        self.layers.iter().flat_map(LayerCache::arrays).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(len: i32) -> Array {
        Array::from_slice(&vec![1.0f32; len as usize], &[1, 1, len, 1])
    }

    #[test]
    fn prefix_reuse_steps_back_only_where_it_is_exact() -> Result<()> {
        let kinds = [LayerKind::Full, LayerKind::Rotating { window: 4 }, LayerKind::Recurrent];
        let feed = |c: &mut KvCache, ids: &[u32]| -> Result<()> {
            let n = ids.len() as i32;
            for layer in c.layers_mut() {
                match layer {
                    LayerCache::Recurrent(r) => r.advance(n),
                    other => {
                        other.update_and_fetch(&kv(n), &kv(n))?;
                    }
                }
            }
            c.push_tokens(ids);
            Ok(())
        };
        let mut c = KvCache::new(&kinds);
        feed(&mut c, &[1, 2, 3])?;
        // The next turn extends what is cached: nothing to undo, everything reused.
        assert_eq!(c.reuse_prefix(&[1, 2, 3, 4, 5]), 3);
        assert_eq!(c.offset(), 3);
        // A turn that parts after two tokens: the recurrent state cannot step back.
        assert_eq!(c.reuse_prefix(&[1, 2, 9]), 0);
        assert_eq!((c.offset(), c.tokens().len(), c.nbytes()), (0, 0, 0));
        assert_eq!(c.kinds(), kinds);

        // Without the recurrent layer, a window that has not rotated steps back…
        let mut c = KvCache::new(&kinds[..2]);
        feed(&mut c, &[1, 2, 3])?;
        assert_eq!(c.reuse_prefix(&[1, 2, 9]), 2);
        assert_eq!(c.offset(), 2);
        // …and one that has dropped positions does not.
        feed(&mut c, &[9, 4, 5])?;
        assert_eq!(c.offset(), 5);
        assert!(!c.can_trim(1));
        assert_eq!(c.reuse_prefix(&[1, 2, 9, 4, 7]), 0);
        Ok(())
    }

    /// mlx-lm 0.32.2 quantizes full-attention caches, leaves recurrent
    /// states alone and cannot quantize a rotating window: the same here,
    /// refused when the cache is made rather than at the conversion.
    #[test]
    fn a_quantized_format_converts_full_layers_leaves_states_and_refuses_windows() -> Result<()> {
        let q8 = KvFormat::bits_from_start(8);
        let windowed = [LayerKind::Full, LayerKind::Rotating { window: 4 }];
        assert_eq!(KvCache::with_format(&windowed, q8).err(), Some(KvFormatError::SlidingWindow));
        assert!(KvCache::with_format(&windowed, KvFormat::Float).is_ok());
        let mut c = KvCache::with_format(&[LayerKind::Recurrent, LayerKind::Full], q8)
            .map_err(|source| EngineError::KvFormat { source })?;
        let x = Array::from_slice(&vec![1.0f32; 2 * 64], &[1, 1, 2, 64]);
        for layer in c.layers_mut() {
            match layer {
                LayerCache::Recurrent(r) => r.advance(2),
                other => {
                    other.update_and_fetch(&x, &x)?;
                }
            }
        }
        c.maybe_quantize()?;
        assert!(c.is_quantized());
        assert_eq!(c.layers()[1].quantization(), Some((64, 8)));
        assert_eq!((c.layers()[0].quantization(), c.layers()[0].kind()), (None, LayerKind::Recurrent));
        assert_eq!(c.label("bf16"), "8-bit (group 64)");
        Ok(())
    }

    #[test]
    fn a_layer_of_one_kind_refuses_the_other_kinds_use() {
        let mut r = LayerCache::new(LayerKind::Recurrent);
        assert!(r.update_and_fetch(&kv(1), &kv(1)).is_err());
        let mut f = LayerCache::new(LayerKind::Full);
        assert!(f.recurrent_mut().is_err());
    }
}
