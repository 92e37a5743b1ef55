//! The values a GGUF header holds: ggml tensor types with their block
//! layouts, and the metadata value types.

/// A ggml tensor type, as a GGUF tensor info gives it. Every type ggml has
/// named is listed so an error can say "Q4_K" rather than a number; a number
/// no ggml release has used is kept as `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    Iq2Xxs,
    Iq2Xs,
    Iq3Xxs,
    Iq1S,
    Iq4Nl,
    Iq3S,
    Iq2S,
    Iq4Xs,
    I8,
    I16,
    I32,
    I64,
    F64,
    Iq1M,
    BF16,
    Tq1_0,
    Tq2_0,
    Mxfp4,
    /// A type id this reader does not know (its block size is unknown too).
    Other(u32),
}

/// (id, type, name, elements per block, bytes per block), from ggml's type
/// traits (gguf-py's `GGML_QUANT_SIZES`). Ids 4, 5 and 31..=33, 36..=38
/// belonged to layouts ggml has removed.
const TABLE: [(u32, GgmlType, &str, u64, u64); 32] = [
    (0, GgmlType::F32, "F32", 1, 4),
    (1, GgmlType::F16, "F16", 1, 2),
    (2, GgmlType::Q4_0, "Q4_0", 32, 18),
    (3, GgmlType::Q4_1, "Q4_1", 32, 20),
    (6, GgmlType::Q5_0, "Q5_0", 32, 22),
    (7, GgmlType::Q5_1, "Q5_1", 32, 24),
    (8, GgmlType::Q8_0, "Q8_0", 32, 34),
    (9, GgmlType::Q8_1, "Q8_1", 32, 36),
    (10, GgmlType::Q2K, "Q2_K", 256, 84),
    (11, GgmlType::Q3K, "Q3_K", 256, 110),
    (12, GgmlType::Q4K, "Q4_K", 256, 144),
    (13, GgmlType::Q5K, "Q5_K", 256, 176),
    (14, GgmlType::Q6K, "Q6_K", 256, 210),
    (15, GgmlType::Q8K, "Q8_K", 256, 292),
    (16, GgmlType::Iq2Xxs, "IQ2_XXS", 256, 66),
    (17, GgmlType::Iq2Xs, "IQ2_XS", 256, 74),
    (18, GgmlType::Iq3Xxs, "IQ3_XXS", 256, 98),
    (19, GgmlType::Iq1S, "IQ1_S", 256, 50),
    (20, GgmlType::Iq4Nl, "IQ4_NL", 32, 18),
    (21, GgmlType::Iq3S, "IQ3_S", 256, 110),
    (22, GgmlType::Iq2S, "IQ2_S", 256, 82),
    (23, GgmlType::Iq4Xs, "IQ4_XS", 256, 136),
    (24, GgmlType::I8, "I8", 1, 1),
    (25, GgmlType::I16, "I16", 1, 2),
    (26, GgmlType::I32, "I32", 1, 4),
    (27, GgmlType::I64, "I64", 1, 8),
    (28, GgmlType::F64, "F64", 1, 8),
    (29, GgmlType::Iq1M, "IQ1_M", 256, 56),
    (30, GgmlType::BF16, "BF16", 1, 2),
    (34, GgmlType::Tq1_0, "TQ1_0", 256, 54),
    (35, GgmlType::Tq2_0, "TQ2_0", 256, 66),
    (39, GgmlType::Mxfp4, "MXFP4", 32, 17),
];

impl GgmlType {
    /// The types MLX's GGUF reader turns into arrays the engine runs:
    /// floats as they are, Q4_0/Q4_1/Q8_0 as MLX's affine quantization.
    pub const LOADABLE: [GgmlType; 6] =
        [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0];

    pub fn from_id(id: u32) -> Self {
        TABLE.iter().find(|row| row.0 == id).map_or(Self::Other(id), |row| row.1)
    }

    pub fn id(self) -> u32 {
        match self {
            Self::Other(id) => id,
            known => TABLE.iter().find(|row| row.1 == known).map_or(u32::MAX, |row| row.0),
        }
    }

    /// ggml's spelling ("Q4_K"); `type 99` for an unknown id.
    pub fn name(self) -> String {
        match TABLE.iter().find(|row| row.1 == self) {
            Some(row) => row.2.to_owned(),
            None => format!("type {}", self.id()),
        }
    }

    /// (elements per block, bytes per block); `None` for an unknown type.
    pub fn block(self) -> Option<(u64, u64)> {
        TABLE.iter().find(|row| row.1 == self).map(|row| (row.3, row.4))
    }

    /// The bits per weight of MLX's affine form, for the quantized types MLX maps.
    pub fn mlx_bits(self) -> Option<i32> {
        match self {
            Self::Q4_0 | Self::Q4_1 => Some(4),
            Self::Q8_0 => Some(8),
            _ => None,
        }
    }

    /// Whether the engine can load a tensor of this type through MLX.
    pub fn is_loadable(self) -> bool {
        Self::LOADABLE.contains(&self)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// One metadata value. Integers keep their width, so a file is described
/// as it is written (MLX and llama.cpp insist on some keys' types).
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// An array value: one element type for the whole array, kept as a typed
/// vector so a vocabulary of 262144 strings costs what the file does.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<MetaArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

/// The GGUF value type ids.
pub mod value_type {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

impl MetaValue {
    /// A non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A number of any type, as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            Self::I8(v) => Some(v.into()),
            Self::I16(v) => Some(v.into()),
            Self::I32(v) => Some(v.into()),
            Self::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The value type's name, for errors ("u32", "array of string").
    pub fn type_name(&self) -> String {
        match self {
            Self::U8(_) => "u8".into(),
            Self::I8(_) => "i8".into(),
            Self::U16(_) => "u16".into(),
            Self::I16(_) => "i16".into(),
            Self::U32(_) => "u32".into(),
            Self::I32(_) => "i32".into(),
            Self::F32(_) => "f32".into(),
            Self::Bool(_) => "bool".into(),
            Self::String(_) => "string".into(),
            Self::Array(a) => format!("array of {}", a.element_name()),
            Self::U64(_) => "u64".into(),
            Self::I64(_) => "i64".into(),
            Self::F64(_) => "f64".into(),
        }
    }
}

impl MetaArray {
    pub fn len(&self) -> usize {
        match self {
            Self::U8(v) => v.len(),
            Self::I8(v) => v.len(),
            Self::U16(v) => v.len(),
            Self::I16(v) => v.len(),
            Self::U32(v) => v.len(),
            Self::I32(v) => v.len(),
            Self::F32(v) => v.len(),
            Self::Bool(v) => v.len(),
            Self::String(v) => v.len(),
            Self::Array(v) => v.len(),
            Self::U64(v) => v.len(),
            Self::I64(v) => v.len(),
            Self::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn element_name(&self) -> &'static str {
        match self {
            Self::U8(_) => "u8",
            Self::I8(_) => "i8",
            Self::U16(_) => "u16",
            Self::I16(_) => "i16",
            Self::U32(_) => "u32",
            Self::I32(_) => "i32",
            Self::F32(_) => "f32",
            Self::Bool(_) => "bool",
            Self::String(_) => "string",
            Self::Array(_) => "array",
            Self::U64(_) => "u64",
            Self::I64(_) => "i64",
            Self::F64(_) => "f64",
        }
    }

    /// The elements as i64, for integer arrays of any width.
    pub fn to_i64s(&self) -> Option<Vec<i64>> {
        Some(match self {
            Self::U8(v) => v.iter().map(|&x| x.into()).collect(),
            Self::I8(v) => v.iter().map(|&x| x.into()).collect(),
            Self::U16(v) => v.iter().map(|&x| x.into()).collect(),
            Self::I16(v) => v.iter().map(|&x| x.into()).collect(),
            Self::U32(v) => v.iter().map(|&x| x.into()).collect(),
            Self::I32(v) => v.iter().map(|&x| x.into()).collect(),
            Self::I64(v) => v.clone(),
            Self::U64(v) => v.iter().map(|&x| i64::try_from(x).unwrap_or(i64::MAX)).collect(),
            _ => return None,
        })
    }
}
