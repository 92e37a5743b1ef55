//! How the KV cache stores keys and values: in the activations' float type,
//! or affine-quantized the way mlx-lm 0.32.2's `QuantizedKVCache` does
//! (`kv_bits`, `kv_group_size`, `quantized_kv_start`). One type for the fit
//! estimate, the engine, the CLI's flags, the server's request fields and
//! the stats labels, so they cannot disagree about what a cache costs.
//!
//! mlx-lm's rule, followed exactly: the cache starts in the float type;
//! after each forward pass whose cache then holds at least `start`
//! positions it is converted once, whole (every position quantized along
//! the head dimension in groups of `group_size`), and stays quantized,
//! trims included. Attention over a quantized cache is mlx-lm's
//! `quantized_scaled_dot_product_attention` (two `quantized_matmul`s with
//! the scores between them materialized), on every backend: MLX has no fused
//! kernel for quantized keys and values.

use serde::{Deserialize, Serialize};

/// mlx-lm's `kv_group_size` default.
pub const DEFAULT_KV_GROUP_SIZE: u32 = 64;
/// mlx-lm's `DEFAULT_QUANTIZED_KV_START` (`mlx_lm/generate.py`): short
/// contexts keep a float cache, whose attention is fused on Metal.
pub const DEFAULT_QUANTIZED_KV_START: u64 = 5000;
/// Bit widths MLX's affine `quantize` supports.
pub const KV_BITS: [u32; 6] = [2, 3, 4, 5, 6, 8];
/// Group sizes MLX's affine `quantize` supports.
pub const KV_GROUP_SIZES: [u32; 3] = [32, 64, 128];
/// The largest `start` accepted: beyond any context a model is loaded at
/// (`settings::MAX_CONTEXT_LIMIT`), so "never" is spelled as no quantization.
pub const MAX_QUANTIZED_KV_START: u64 = 1 << 20;

/// A quantized cache's parameters (mlx-lm's `kv_bits`, `kv_group_size`,
/// `quantized_kv_start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ts_rs::TS)]
pub struct KvQuant {
    pub bits: u32,
    pub group_size: u32,
    /// The cache is converted after the first forward pass that leaves it
    /// holding at least this many positions.
    pub start: u64,
}

/// How a KV cache stores keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KvFormat {
    /// In the activations' float type (bf16 for mlx-community checkpoints).
    #[default]
    Float,
    /// Affine-quantized once the cache reaches `start` positions.
    Quantized(KvQuant),
}

/// Why a KV format was refused; the message names the setting as the CLI spells it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvFormatError {
    #[error("KV bits must be one of 2, 3, 4, 5, 6 or 8 (MLX's affine quantization), got {0}")]
    Bits(u64),
    #[error("KV group size must be 32, 64 or 128 (MLX's affine quantization), got {0}")]
    GroupSize(u64),
    #[error("quantized KV start must be at most {MAX_QUANTIZED_KV_START} tokens, got {0}")]
    Start(u64),
    #[error("a KV group size or quantized KV start was given without KV bits; set the bits (8 or 4) too")]
    WithoutBits,
    #[error("this model has sliding-window layers, whose KV cache mlx-lm 0.32.2 cannot quantize (its RotatingKVCache refuses): use the float KV cache")]
    SlidingWindow,
    #[error("the model's head dimension {head_dim} is not a multiple of the KV group size {group_size}: MLX cannot quantize its keys and values that way (try group size 32)")]
    HeadDim { head_dim: u64, group_size: u32 },
}

impl KvFormat {
    /// A quantized format, checked: what MLX's affine `quantize` supports.
    pub fn quantized(bits: u64, group_size: u64, start: u64) -> Result<Self, KvFormatError> {
        let bits = u32::try_from(bits).ok().filter(|b| KV_BITS.contains(b)).ok_or(KvFormatError::Bits(bits))?;
        let group_size = u32::try_from(group_size)
            .ok()
            .filter(|g| KV_GROUP_SIZES.contains(g))
            .ok_or(KvFormatError::GroupSize(group_size))?;
        if start > MAX_QUANTIZED_KV_START {
            return Err(KvFormatError::Start(start));
        }
        Ok(Self::Quantized(KvQuant { bits, group_size, start }))
    }

    /// The format the optional settings describe (the CLI's `--kv-bits`,
    /// `--kv-group-size`, `--quantized-kv-start`, the server's `kv_bits`,
    /// …): no bits is the float cache, and then neither of the others may be set.
    pub fn from_parts(bits: Option<u64>, group_size: Option<u64>, start: Option<u64>) -> Result<Self, KvFormatError> {
        match bits {
            None if group_size.is_some() || start.is_some() => Err(KvFormatError::WithoutBits),
            None => Ok(Self::Float),
            Some(bits) => Self::quantized(
                bits,
                group_size.unwrap_or(u64::from(DEFAULT_KV_GROUP_SIZE)),
                start.unwrap_or(DEFAULT_QUANTIZED_KV_START),
            ),
        }
    }

    /// 8-bit (or `bits`) with mlx-lm's group size, converted from the first position on.
    pub fn bits_from_start(bits: u32) -> Self {
        Self::Quantized(KvQuant { bits, group_size: DEFAULT_KV_GROUP_SIZE, start: 0 })
    }

    pub fn quant(self) -> Option<KvQuant> {
        match self {
            Self::Float => None,
            Self::Quantized(q) => Some(q),
        }
    }

    /// Whether a model whose heads are `head_dim` wide can use this format.
    pub fn check_head_dim(self, head_dim: u64) -> Result<(), KvFormatError> {
        match self.quant() {
            Some(q) if !head_dim.is_multiple_of(u64::from(q.group_size)) => {
                Err(KvFormatError::HeadDim { head_dim, group_size: q.group_size })
            }
            _ => Ok(()),
        }
    }

    /// Bytes one position of one KV head takes for keys (or values) of
    /// `head_dim` elements, the float type being `float_bytes` wide: packed
    /// `bits`-wide values plus one scale and one bias per group, both in the
    /// float type (mlx-lm's `init_quant`). 8-bit with group 64 is
    /// (1 + 4/64) / 2 = 0.53 of bf16; 4-bit is (0.5 + 4/64) / 2 = 0.28.
    pub fn bytes_per_head_position(self, head_dim: u64, float_bytes: u64) -> u64 {
        match self.quant() {
            None => head_dim.saturating_mul(float_bytes),
            Some(q) => {
                let packed = head_dim.saturating_mul(u64::from(q.bits)) / 8;
                let groups = head_dim / u64::from(q.group_size);
                packed.saturating_add(groups.saturating_mul(2).saturating_mul(float_bytes))
            }
        }
    }

    /// Whether a cache that holds `positions` after a forward pass is quantized from then on.
    pub fn converts_at(self, positions: u64) -> bool {
        self.quant().is_some_and(|q| positions >= q.start)
    }

    /// The stats label: the float type's name (`float`, e.g. "bf16") or
    /// "8-bit (group 64)", with the start when the cache begins in float
    /// ("8-bit (group 64) from 5000 tokens").
    pub fn label(self, float: &str) -> String {
        match self.quant() {
            None => float.to_owned(),
            Some(q) if q.start == 0 => format!("{}-bit (group {})", q.bits, q.group_size),
            Some(q) => format!("{}-bit (group {}) from {} tokens", q.bits, q.group_size, q.start),
        }
    }

    /// What a cache of this format holds now: its float type until it is
    /// converted, then "8-bit (group 64)" (a turn's stats label says what
    /// its cache really was).
    pub fn state_label(self, float: &str, converted: bool) -> String {
        match self.quant() {
            Some(q) if converted => format!("{}-bit (group {})", q.bits, q.group_size),
            Some(q) => format!("{float} ({}-bit from {} tokens)", q.bits, q.start),
            None => float.to_owned(),
        }
    }
}

/// The short name of a float type as the KV labels spell it.
pub fn float_name(bytes: u64) -> &'static str {
    match bytes {
        2 => "16-bit float",
        4 => "f32",
        _ => "float",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_and_four_bits_cost_what_the_issue_says_against_bf16() {
        let bf16 = KvFormat::Float.bytes_per_head_position(128, 2) as f64;
        let at = |bits| KvFormat::bits_from_start(bits).bytes_per_head_position(128, 2) as f64 / bf16;
        assert_eq!(at(8), 0.53125);
        assert_eq!(at(4), 0.28125);
        // The same ratios for any head that is a whole number of groups.
        assert_eq!(KvFormat::bits_from_start(8).bytes_per_head_position(64, 2), 64 + 4);
        // f32 activations widen the scales and biases too.
        assert_eq!(KvFormat::bits_from_start(4).bytes_per_head_position(128, 4), 64 + 2 * 2 * 4);
        let g32 = KvFormat::quantized(8, 32, 0).unwrap_or_default();
        assert_eq!(g32.bytes_per_head_position(128, 2), 128 + 4 * 2 * 2);
    }

    #[test]
    fn parts_are_checked_and_named() {
        assert_eq!(KvFormat::from_parts(None, None, None), Ok(KvFormat::Float));
        assert_eq!(
            KvFormat::from_parts(Some(8), None, None),
            Ok(KvFormat::Quantized(KvQuant { bits: 8, group_size: 64, start: DEFAULT_QUANTIZED_KV_START }))
        );
        assert_eq!(KvFormat::from_parts(Some(7), None, None), Err(KvFormatError::Bits(7)));
        assert_eq!(KvFormat::from_parts(Some(4), Some(48), None), Err(KvFormatError::GroupSize(48)));
        assert_eq!(KvFormat::from_parts(Some(4), Some(64), Some(u64::MAX)), Err(KvFormatError::Start(u64::MAX)));
        assert_eq!(KvFormat::from_parts(None, Some(64), None), Err(KvFormatError::WithoutBits));
        assert_eq!(KvFormat::from_parts(None, None, Some(0)), Err(KvFormatError::WithoutBits));
        assert_eq!(KvFormat::quantized(1 << 40, 64, 0), Err(KvFormatError::Bits(1 << 40)));
        let q = KvFormat::quantized(4, 64, 0).unwrap_or_default();
        assert_eq!(q.check_head_dim(16), Err(KvFormatError::HeadDim { head_dim: 16, group_size: 64 }));
        assert_eq!(q.check_head_dim(128), Ok(()));
        assert_eq!(KvFormat::Float.check_head_dim(16), Ok(()));
        assert!(KvFormatError::HeadDim { head_dim: 16, group_size: 64 }.to_string().contains("group size 32"));
    }

    #[test]
    fn labels_say_the_bits_the_group_and_when_the_cache_converts() {
        assert_eq!(KvFormat::Float.label("bf16"), "bf16");
        assert_eq!(KvFormat::bits_from_start(8).label("bf16"), "8-bit (group 64)");
        let later = KvFormat::quantized(4, 32, 5000).unwrap_or_default();
        assert_eq!(later.label("bf16"), "4-bit (group 32) from 5000 tokens");
        assert_eq!(later.state_label("bf16", false), "bf16 (4-bit from 5000 tokens)");
        assert_eq!(later.state_label("bf16", true), "4-bit (group 32)");
        assert!(!later.converts_at(4999) && later.converts_at(5000));
        assert!(!KvFormat::Float.converts_at(u64::MAX));
    }

    #[test]
    fn serialized_with_a_kind() {
        let v = serde_json::to_value(KvFormat::bits_from_start(8)).unwrap_or_default();
        assert_eq!(v, serde_json::json!({"kind": "quantized", "bits": 8, "group_size": 64, "start": 0}));
        assert_eq!(serde_json::to_value(KvFormat::Float).unwrap_or_default(), serde_json::json!({"kind": "float"}));
        let back: KvFormat = serde_json::from_value(v).unwrap_or_default();
        assert_eq!(back, KvFormat::bits_from_start(8));
    }
}
