//! A [`KvCache`] as named arrays plus a description, and back: what the
//! prompt cache's disk tier writes into a safetensors file (like mlx-lm's
//! `save_prompt_cache`: each layer's state arrays, the cache classes and
//! their scalars in the metadata) and reads again after a restart.
//!
//! Each layer's buffers are saved whole (a full layer's unused tail too), so
//! a restored cache is the same cache, bit for bit, as the one saved: the
//! next turn computes exactly what it would have computed without the
//! restart. Reading back checks everything the file claims against the
//! model it is for in two steps: [`check_header`] compares the header alone
//! (layer count and kinds, windows, the KV format, every tensor's dtype and
//! exact shape: key/value heads, head width, positions within the context)
//! with a [`StateShape`] of the loaded model, before a byte of data is read;
//! then [`KvCache::from_saved`] checks the arrays themselves. A state that
//! does not match is refused, and the caller treats that as a miss.

use std::collections::{BTreeMap, HashMap};

use headroom_core::format::{Dtype as FileDtype, LinearAttention, TensorInfo};
use headroom_core::kv::KvFormat;
use mlx_rs::{Array, Dtype};
use serde::{Deserialize, Serialize};

use super::{full::LayerKv, recurrent::RecurrentState, rotating::RotatingKv, KvCache, LayerCache, LayerKind};
use crate::dtype::dtype_name;
use crate::kv_quant::QuantizedKv;
use crate::sizes::KV_STEP;

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

/// What a saved state must be to continue on the loaded model with a
/// request's KV format: what [`check_header`] holds a file's header to.
#[derive(Debug, Clone, PartialEq)]
pub struct StateShape {
    /// One per layer, windows included.
    pub kinds: Vec<LayerKind>,
    /// Key/value heads of every attention layer, and each head's width.
    pub kv_heads: i32,
    pub head_dim: i32,
    /// The linear-attention layers' sizes (their convolution and state).
    pub linear: Option<LinearAttention>,
    pub format: KvFormat,
    /// The float types its keys and values (and scales, and convolution
    /// inputs) may be in: the activations' (the embedding's, widened by the
    /// norms and biases: `Model::activation_dtype`) or the embedding's own.
    /// Qwen3.5 has both: its f32 gate parameters widen the first to f32
    /// while its keys stay in the embedding's bf16. A state holds one of
    /// them throughout, the one its description names.
    pub dtypes: Vec<Dtype>,
    /// Most positions one of this load's caches may hold.
    pub context_limit: usize,
}

impl StateShape {
    /// Most positions a layer's buffers may have room for. A buffer grows by
    /// whole steps past what it holds, and after a step back it keeps the
    /// stale tail of an earlier, longer turn (as mlx-lm's caches do); a
    /// window's buffer holds its last `window - 1` positions plus a prompt
    /// chunk. None of these passes twice the context plus a step.
    fn max_capacity(&self) -> u64 {
        let limit = u64::try_from(self.context_limit).unwrap_or(u64::MAX);
        limit.saturating_mul(2).saturating_add(u64::from(KV_STEP.unsigned_abs()))
    }
}

/// The safetensors dtype MLX writes for `d`.
fn file_dtype(d: Dtype) -> Option<FileDtype> {
    match d {
        Dtype::Float32 => Some(FileDtype::F32),
        Dtype::Float16 => Some(FileDtype::F16),
        Dtype::Bfloat16 => Some(FileDtype::BF16),
        Dtype::Uint32 => Some(FileDtype::U32),
        _ => None,
    }
}

/// A float type by MLX's name ("bfloat16"), as a state's description gives it.
fn parse_float(name: &str) -> Option<Dtype> {
    [Dtype::Float32, Dtype::Float16, Dtype::Bfloat16].into_iter().find(|&d| dtype_name(d) == name)
}

/// The float type of a state's keys and values, as its description `meta` names it.
pub(crate) fn state_dtype(meta: &StateMeta) -> Result<Dtype, Refused> {
    parse_float(&meta.dtype).ok_or_else(|| refused(format!("keys in {:?}, not a float type", meta.dtype)))
}

/// The MLX dtype of a tensor a state may hold (those [`check_header`] lets through).
pub(crate) fn mlx_dtype(d: FileDtype) -> Option<Dtype> {
    match d {
        FileDtype::F32 => Some(Dtype::Float32),
        FileDtype::F16 => Some(Dtype::Float16),
        FileDtype::BF16 => Some(Dtype::Bfloat16),
        FileDtype::U32 => Some(Dtype::Uint32),
        _ => None,
    }
}

/// Checks a saved state's header (its description `meta` and its
/// `tensors`' dtypes and shapes) against the loaded model: every claim
/// that decides how many bytes its data holds and where they would go.
/// Nothing of the file's data is needed, so a state for another model, or
/// one larger than the context allows, is refused before its data is read.
pub fn check_header(
    tensors: &BTreeMap<String, TensorInfo>,
    meta: &StateMeta,
    want: &StateShape,
) -> Result<(), Refused> {
    if meta.version != STATE_VERSION {
        return Err(refused(format!("saved by layout {}, this build reads {STATE_VERSION}", meta.version)));
    }
    if meta.format != want.format {
        return Err(refused(format!("its KV cache is {:?}, this model's is {:?}", meta.format, want.format)));
    }
    let kv_dtype = state_dtype(meta)?;
    if !want.dtypes.contains(&kv_dtype) {
        return Err(refused(format!("its keys are {}, this model's are {:?}", meta.dtype, want.dtypes)));
    }
    let saved_kinds: Vec<LayerKind> = meta.layers.iter().map(LayerMeta::kind).collect();
    if saved_kinds != want.kinds {
        return Err(refused(format!(
            "its {} layers are not this model's {} (kinds or windows differ)",
            saved_kinds.len(),
            want.kinds.len()
        )));
    }
    let float = file_dtype(kv_dtype).ok_or_else(|| refused(format!("no saved state is in {kv_dtype:?}")))?;
    let limit = u64::try_from(want.context_limit).unwrap_or(u64::MAX);
    let tokens = tensors.get(TOKENS).ok_or_else(|| refused("no token ids"))?;
    let positions = match tokens.shape.as_slice() {
        [n] if tokens.dtype == FileDtype::U32 => *n,
        _ => return Err(refused(format!("the token ids are {} {:?}, not a list of u32", tokens.dtype, tokens.shape))),
    };
    if positions > limit {
        return Err(refused(format!("{positions} positions, beyond this load's context of {limit}")));
    }
    let mut expected = vec![TOKENS.to_owned()];
    for (i, m) in meta.layers.iter().enumerate() {
        if u64::try_from(m.offset()).ok() != Some(positions) {
            return Err(refused(format!("layer {i} holds {} positions, not {positions}", m.offset())));
        }
        let layer = LayerTensors { tensors, layer: i, want, float, positions };
        let names = match *m {
            LayerMeta::Full { quant: None, .. } => layer.float_pair(positions),
            LayerMeta::Full { quant: Some((group_size, bits)), .. } => layer.quantized(group_size, bits),
            LayerMeta::Rotating { window, idx, .. } => layer.window(window, idx),
            LayerMeta::Recurrent { .. } => layer.recurrent(),
        }
        .map_err(|r| refused(format!("layer {i}: {r}")))?;
        expected.extend(names.into_iter().map(|n| key(i, n)));
    }
    if let Some(extra) = tensors.keys().find(|k| !expected.contains(k)) {
        return Err(refused(format!("an array this layout does not have: {extra}")));
    }
    Ok(())
}

/// One layer's tensors in a header, and what they must be.
struct LayerTensors<'a> {
    tensors: &'a BTreeMap<String, TensorInfo>,
    layer: usize,
    want: &'a StateShape,
    /// The activations' type as the file spells it.
    float: FileDtype,
    /// Positions the state holds.
    positions: u64,
}

impl LayerTensors<'_> {
    fn get(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.get(&key(self.layer, name))
    }

    /// Whether `names` are all present (`Some(true)`), all absent (`Some(false)`), or some of each.
    fn present(&self, names: &[&str]) -> Result<bool, String> {
        let found = names.iter().filter(|n| self.get(n).is_some()).count();
        match found {
            0 => Ok(false),
            n if n == names.len() => Ok(true),
            _ => Err(format!("some of {names:?} and not the others")),
        }
    }

    /// `name` must be `dtype` and `shape` exactly.
    fn exact(&self, name: &str, dtype: FileDtype, shape: &[u64]) -> Result<(), String> {
        match self.get(name) {
            Some(t) if t.dtype == dtype && t.shape == shape => Ok(()),
            Some(t) => Err(format!("{name} is {} {:?}, this model's is {dtype} {shape:?}", t.dtype, t.shape)),
            None => Err(format!("no {name}")),
        }
    }

    /// The positions axis of `name` (`[1, heads, positions, width]`), if it
    /// holds at least `least` and no more than the context allows.
    fn capacity(&self, name: &str, least: u64) -> Result<u64, String> {
        let cap = self.get(name).and_then(|t| t.shape.get(2).copied()).ok_or_else(|| format!("no {name}"))?;
        if cap < least {
            return Err(format!("{name} has room for {cap} positions, it holds {least}"));
        }
        if cap > self.want.max_capacity() {
            return Err(format!("{name} has room for {cap} positions, beyond this load's context"));
        }
        Ok(cap)
    }

    fn heads(&self) -> Result<(u64, u64), String> {
        let n = |v: i32| u64::try_from(v).map_err(|_| format!("a model of {v} heads or head width"));
        Ok((n(self.want.kv_heads)?, n(self.want.head_dim)?))
    }

    /// Float `keys` and `values` holding at least `least` positions (or
    /// none, for a layer that holds none).
    fn float_pair(&self, least: u64) -> Result<Vec<&'static str>, String> {
        let names = ["keys", "values"];
        if !self.present(&names)? {
            return if self.positions == 0 {
                Ok(Vec::new())
            } else {
                Err(format!("{} positions and no keys", self.positions))
            };
        }
        let (heads, width) = self.heads()?;
        let cap = self.capacity("keys", least)?;
        for name in names {
            self.exact(name, self.float, &[1, heads, cap, width])?;
        }
        Ok(names.to_vec())
    }

    /// The six buffers of a layer quantized as this request's format says.
    fn quantized(&self, group_size: i32, bits: i32) -> Result<Vec<&'static str>, String> {
        let wanted = self.want.format.quant().map(|q| (i64::from(q.group_size), i64::from(q.bits)));
        if wanted != Some((i64::from(group_size), i64::from(bits))) {
            return Err(format!("quantized as (group {group_size}, {bits} bits), not as this cache's format"));
        }
        let names = ["keys.packed", "keys.scales", "keys.biases", "values.packed", "values.scales", "values.biases"];
        if self.get("keys").is_some() || self.get("values").is_some() {
            return Err("float keys beside quantized ones".into());
        }
        if !self.present(&names)? {
            return if self.positions == 0 {
                Ok(Vec::new())
            } else {
                Err(format!("{} quantized positions and not all six buffers", self.positions))
            };
        }
        let (heads, width) = self.heads()?;
        let (group, bits) = (group_size.unsigned_abs(), bits.unsigned_abs());
        if group == 0 || bits == 0 || 32 % bits != 0 || width % u64::from(group) != 0 {
            return Err(format!("heads {width} wide cannot be quantized by {group} at {bits} bits"));
        }
        let cap = self.capacity("keys.packed", self.positions)?;
        for name in names {
            let (dtype, last) = if name.ends_with("packed") {
                (FileDtype::U32, width / u64::from(32 / bits))
            } else {
                (self.float, width / u64::from(group))
            };
            self.exact(name, dtype, &[1, heads, cap, last])?;
        }
        Ok(names.to_vec())
    }

    /// A window's keys and values, holding its last positions, and where its next write goes.
    fn window(&self, window: i32, idx: i32) -> Result<Vec<&'static str>, String> {
        let kept = self.positions.min(u64::from(window.unsigned_abs()));
        let names = self.float_pair(kept)?;
        let cap = self.get("keys").map_or(0, |t| t.shape.get(2).copied().unwrap_or(0));
        if !u64::try_from(idx).is_ok_and(|i| i <= cap) {
            return Err(format!("{cap} positions buffered and the next write at {idx}"));
        }
        Ok(names)
    }

    /// A linear-attention layer's convolution inputs and state matrix.
    fn recurrent(&self) -> Result<Vec<&'static str>, String> {
        let names = ["conv", "state"];
        if !self.present(&names)? {
            return if self.positions == 0 {
                Ok(Vec::new())
            } else {
                Err(format!("a state of {} positions has no arrays", self.positions))
            };
        }
        let lin = self.want.linear.ok_or("a linear-attention layer in a model without one")?;
        let n = |v: i64| u64::try_from(v).map_err(|_| format!("a linear-attention size of {v}"));
        let conv_inputs = n(i64::from(lin.conv_kernel) - 1)?;
        self.exact("conv", self.float, &[1, conv_inputs, n(lin.conv_dim())?])?;
        let state = [1, n(lin.num_value_heads.into())?, n(lin.value_head_dim.into())?, n(lin.key_head_dim.into())?];
        // mlx-lm keeps the state matrix in f32 whatever the activations.
        self.exact("state", FileDtype::F32, &state)?;
        Ok(names.to_vec())
    }
}

impl KvCache {
    /// The cache as named arrays (`tokens`, `layers.{i}.{buffer}`) and its
    /// description; `dtype` is the activations' float type, by MLX's name,
    /// named as the keys' when no layer holds any yet.
    pub fn to_saved(&self, dtype: &str) -> (Vec<(String, Array)>, StateMeta) {
        let dtype: &str = match self.dtype() {
            Some(d) => dtype_name(d),
            None => dtype,
        };
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
    /// its KV cache stored as `format` and its keys in `dtype`. Every
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
