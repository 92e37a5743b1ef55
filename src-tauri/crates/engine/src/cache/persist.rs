//! A [`KvCache`] as named arrays plus a description, and back: what the
//! prompt cache's disk tier writes into a safetensors file (like mlx-lm's
//! `save_prompt_cache`: each layer's state arrays, the cache classes and
//! their scalars in the metadata) and reads again after a restart.
//!
//! Each layer's buffers are saved whole (a full layer's unused tail too), so
//! a restored cache is the same cache, bit for bit, as the one saved: the
//! next turn computes exactly what it would have computed without the
//! restart. Reading back checks everything the file claims against the
//! model it is for (layer kinds, windows, the KV format, the float type,
//! ranks, offsets within the buffers) before any array reaches MLX; a state
//! that does not match is refused, and the caller treats that as a miss.

use std::collections::HashMap;

use headroom_core::kv::KvFormat;
use mlx_rs::{Array, Dtype};
use serde::{Deserialize, Serialize};

use super::{full::LayerKv, recurrent::RecurrentState, rotating::RotatingKv, KvCache, LayerCache, LayerKind};
use crate::kv_quant::QuantizedKv;

/// Bumped when the layout below changes: an older file is then a miss.
pub const STATE_VERSION: u32 = 1;

/// What a saved state says about itself (stored as JSON in the metadata).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateMeta {
    pub version: u32,
    pub format: KvFormat,
    /// The float type of keys and values ("bfloat16"): the activations'.
    pub dtype: String,
    pub layers: Vec<LayerMeta>,
}

/// One layer's scalars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LayerMeta {
    Full { offset: i32, quant: Option<(i32, i32)> },
    Rotating { offset: i32, window: i32, idx: i32 },
    Recurrent { offset: i32 },
}

impl LayerMeta {
    fn kind(&self) -> LayerKind {
        match *self {
            Self::Full { .. } => LayerKind::Full,
            Self::Rotating { window, .. } => LayerKind::Rotating { window },
            Self::Recurrent { .. } => LayerKind::Recurrent,
        }
    }

    fn offset(&self) -> i32 {
        match *self {
            Self::Full { offset, .. } | Self::Rotating { offset, .. } | Self::Recurrent { offset } => offset,
        }
    }
}

/// Why a saved state cannot be used for this model and request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

fn refused(reason: impl Into<String>) -> Refused {
    Refused(reason.into())
}

/// The key of the token ids array.
const TOKENS: &str = "tokens";

fn key(layer: usize, name: &str) -> String {
    format!("layers.{layer}.{name}")
}

impl KvCache {
    /// The cache as named arrays (`tokens`, `layers.{i}.{buffer}`) and its
    /// description; `dtype` is the activations' float type, by MLX's name.
    pub fn to_saved(&self, dtype: &str) -> (Vec<(String, Array)>, StateMeta) {
        let ids = i32::try_from(self.tokens.len()).unwrap_or(i32::MAX);
        let mut arrays = vec![(TOKENS.to_owned(), Array::from_slice(&self.tokens, &[ids]))];
        let mut layers = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.iter().enumerate() {
            let (named, meta) = match layer {
                LayerCache::Full(c) => (c.named(), LayerMeta::Full { offset: c.offset(), quant: c.quantization() }),
                LayerCache::Rotating(c) => {
                    (c.named(), LayerMeta::Rotating { offset: c.offset(), window: c.window(), idx: c.idx() })
                }
                LayerCache::Recurrent(c) => (c.named(), LayerMeta::Recurrent { offset: c.offset() }),
            };
            arrays.extend(named.into_iter().map(|(name, a)| (key(i, name), a.clone())));
            layers.push(meta);
        }
        let meta = StateMeta { version: STATE_VERSION, format: self.format, dtype: dtype.to_owned(), layers };
        (arrays, meta)
    }

    /// The cache `to_saved` described, for a model whose layers are `kinds`,
    /// its KV cache stored as `format` and its activations `dtype`. Every
    /// claim of the file is checked first; `arrays` must be evaluated.
    pub fn from_saved(
        mut arrays: HashMap<String, Array>,
        meta: &StateMeta,
        kinds: &[LayerKind],
        format: KvFormat,
        dtype: Dtype,
    ) -> Result<Self, Refused> {
        if meta.version != STATE_VERSION {
            return Err(refused(format!("saved by layout {}, this build reads {STATE_VERSION}", meta.version)));
        }
        if meta.format != format {
            return Err(refused(format!("its KV cache is {:?}, this model's is {format:?}", meta.format)));
        }
        let saved_kinds: Vec<LayerKind> = meta.layers.iter().map(LayerMeta::kind).collect();
        if saved_kinds != kinds {
            return Err(refused(format!(
                "its {} layers are not this model's {} (kinds or windows differ)",
                saved_kinds.len(),
                kinds.len()
            )));
        }
        let tokens = arrays.remove(TOKENS).ok_or_else(|| refused("no token ids"))?;
        if tokens.dtype() != Dtype::Uint32 || tokens.ndim() != 1 {
            return Err(refused("the token ids are not a list of u32"));
        }
        let tokens = tokens.as_slice::<u32>().to_vec();
        let positions = i32::try_from(tokens.len()).map_err(|_| refused("too many token ids"))?;
        let mut layers = Vec::with_capacity(kinds.len());
        for (i, m) in meta.layers.iter().enumerate() {
            if m.offset() != positions {
                return Err(refused(format!("layer {i} holds {} positions, not {positions}", m.offset())));
            }
            let mut take = |name: &str| arrays.remove(&key(i, name));
            let layer = match *m {
                LayerMeta::Full { offset, quant } => LayerCache::Full(
                    full_layer(&mut take, offset, quant, format, dtype)
                        .map_err(|r| refused(format!("layer {i}: {r}")))?,
                ),
                LayerMeta::Rotating { offset, window, idx } => LayerCache::Rotating(
                    rotating_layer(&mut take, offset, window, idx, dtype)
                        .map_err(|r| refused(format!("layer {i}: {r}")))?,
                ),
                LayerMeta::Recurrent { offset } => {
                    let (conv, state) = (take("conv"), take("state"));
                    for (a, rank) in [(&conv, 3), (&state, 4)] {
                        if let Some(a) = a {
                            check_rank(a, rank).map_err(|r| refused(format!("layer {i}: {r}")))?;
                        }
                    }
                    if offset > 0 && (conv.is_none() || state.is_none()) {
                        return Err(refused(format!("layer {i}: a state of {offset} positions has no arrays")));
                    }
                    LayerCache::Recurrent(RecurrentState::from_saved(conv, state, offset))
                }
            };
            layers.push(layer);
        }
        if let Some(extra) = arrays.keys().next() {
            return Err(refused(format!("an array this layout does not have: {extra}")));
        }
        Ok(Self { layers, tokens, format })
    }
}

/// `[1, heads, positions, width]`-like: the rank asked, one sequence.
fn check_rank(a: &Array, rank: usize) -> Result<(), String> {
    if a.ndim() != rank || a.dim(0) != 1 {
        return Err(format!("an array of shape {:?} (expected rank {rank}, one sequence)", a.shape()));
    }
    Ok(())
}

/// Keys and values of the same shape, rank 4, in `dtype`, holding at least `positions`.
fn check_pair(k: &Array, v: &Array, dtype: Dtype, positions: i32) -> Result<(), String> {
    check_rank(k, 4)?;
    if k.shape() != v.shape() {
        return Err(format!("keys {:?} and values {:?} differ", k.shape(), v.shape()));
    }
    if k.dtype() != dtype || v.dtype() != dtype {
        return Err(format!("keys in {:?}, the model computes in {dtype:?}", k.dtype()));
    }
    if k.dim(2) < positions {
        return Err(format!("buffers of {} positions for {positions}", k.dim(2)));
    }
    Ok(())
}

fn full_layer(
    take: &mut impl FnMut(&str) -> Option<Array>,
    offset: i32,
    quant: Option<(i32, i32)>,
    format: KvFormat,
    dtype: Dtype,
) -> Result<LayerKv, String> {
    let float = take("keys").zip(take("values"));
    let Some((group_size, bits)) = quant else {
        if let Some((k, v)) = &float {
            check_pair(k, v, dtype, offset)?;
        } else if offset > 0 {
            return Err(format!("{offset} positions and no keys"));
        }
        return Ok(LayerKv::from_saved(float, None, offset, None));
    };
    let wanted = format.quant().map(|q| (i32::try_from(q.group_size).unwrap_or(0), i32::try_from(q.bits).unwrap_or(0)));
    if wanted != Some((group_size, bits)) || float.is_some() {
        return Err(format!("quantized as (group {group_size}, {bits} bits), not as this cache's format"));
    }
    let q = QuantizedKv::from_named(take, group_size, bits);
    if let Some(q) = &q {
        for (name, a) in q.named() {
            check_rank(a, 4).map_err(|r| format!("{name}: {r}"))?;
            let want = if name.ends_with("packed") { Dtype::Uint32 } else { dtype };
            if a.dtype() != want || a.dim(2) != q.capacity() {
                return Err(format!("{name} is {:?} {:?}", a.dtype(), a.shape()));
            }
        }
        if q.capacity() < offset {
            return Err(format!("buffers of {} positions for {offset}", q.capacity()));
        }
    } else if offset > 0 {
        return Err(format!("{offset} quantized positions and not all six buffers"));
    }
    Ok(LayerKv::from_saved(None, q, offset, quant))
}

fn rotating_layer(
    take: &mut impl FnMut(&str) -> Option<Array>,
    offset: i32,
    window: i32,
    idx: i32,
    dtype: Dtype,
) -> Result<RotatingKv, String> {
    let buffers = take("keys").zip(take("values"));
    match &buffers {
        Some((k, v)) => {
            // A prompt chunk leaves more than the window buffered (the
            // window's last positions and the whole chunk) until the next write.
            check_pair(k, v, dtype, offset.min(window))?;
            if !(0..=k.dim(2)).contains(&idx) {
                return Err(format!("{} positions buffered and the next write at {idx}", k.dim(2)));
            }
        }
        None if offset > 0 => return Err(format!("{offset} positions and no keys")),
        None => {}
    }
    Ok(RotatingKv::from_saved(buffers, window, offset, idx))
}
