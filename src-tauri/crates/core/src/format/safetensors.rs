//! The safetensors header: the 8-byte little-endian length, the JSON it
//! announces (`{name: {dtype, shape, data_offsets}}` and an optional
//! `__metadata__`), and the shard index `model.safetensors.index.json`.
//!
//! Read from the header bytes alone, so the same code checks a file on disk
//! (the engine, the model list, the fit check) and a file on the hub fetched
//! with two Range requests (the pull check). The `safetensors` crate's reader
//! is not used: `SafeTensors::read_metadata` wants the whole file in one
//! buffer, and its errors do not say which tensor or dimension is wrong. The
//! checks are the format's own (header starts with `{`, at most 100 MB, the
//! tensors tile the data exactly, no overlaps or holes) plus what MLX needs:
//! every dimension a non-negative i32, every product computed with checked
//! arithmetic, so a lying header is an error and never an overflow.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::error::{FormatError, Result};

/// Headers larger than this are refused (the format's own limit).
pub const MAX_HEADER_BYTES: u64 = 100 << 20;

/// The shard index's file name, and the single file's.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
pub const SINGLE_FILE: &str = "model.safetensors";

/// The element types of the safetensors format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Dtype {
    Bool,
    U8,
    I8,
    F8E4M3,
    F8E5M2,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    I64,
    U64,
    F64,
}

impl Dtype {
    /// The header's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "BOOL" => Self::Bool,
            "U8" => Self::U8,
            "I8" => Self::I8,
            "F8_E4M3" => Self::F8E4M3,
            "F8_E5M2" => Self::F8E5M2,
            "I16" => Self::I16,
            "U16" => Self::U16,
            "F16" => Self::F16,
            "BF16" => Self::BF16,
            "I32" => Self::I32,
            "U32" => Self::U32,
            "F32" => Self::F32,
            "I64" => Self::I64,
            "U64" => Self::U64,
            "F64" => Self::F64,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bool => "BOOL",
            Self::U8 => "U8",
            Self::I8 => "I8",
            Self::F8E4M3 => "F8_E4M3",
            Self::F8E5M2 => "F8_E5M2",
            Self::I16 => "I16",
            Self::U16 => "U16",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::I32 => "I32",
            Self::U32 => "U32",
            Self::F32 => "F32",
            Self::I64 => "I64",
            Self::U64 => "U64",
            Self::F64 => "F64",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Self::Bool | Self::U8 | Self::I8 | Self::F8E4M3 | Self::F8E5M2 => 1,
            Self::I16 | Self::U16 | Self::F16 | Self::BF16 => 2,
            Self::I32 | Self::U32 | Self::F32 => 4,
            Self::I64 | Self::U64 | Self::F64 => 8,
        }
    }

    /// The float types a model's dense weights, norms and scales may have.
    pub fn is_model_float(self) -> bool {
        matches!(self, Self::F32 | Self::F16 | Self::BF16)
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One tensor of a header, checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorInfo {
    pub dtype: Dtype,
    /// Each dimension is at most `i32::MAX` (MLX's shapes are i32).
    pub shape: Vec<u64>,
    /// Byte range within the data section (after the 8 bytes and the header).
    pub data_offsets: (u64, u64),
}

impl TensorInfo {
    /// Bytes of data; equal to elements × dtype size (checked on parsing).
    pub fn nbytes(&self) -> u64 {
        self.data_offsets.1 - self.data_offsets.0
    }

    /// The shape as MLX takes it.
    pub fn shape_i32(&self) -> Vec<i32> {
        // Each dimension was checked to fit on parsing.
        self.shape.iter().map(|&d| i32::try_from(d).unwrap_or(i32::MAX)).collect()
    }
}

/// A parsed, checked header: tensors sorted by name.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Header {
    pub tensors: BTreeMap<String, TensorInfo>,
    /// `__metadata__`: string keys to string values (empty when absent).
    pub metadata: BTreeMap<String, String>,
}

fn header_err(reason: impl Into<String>) -> FormatError {
    FormatError::Header { reason: reason.into() }
}

/// The header length a file of `file_size` bytes declares in its first 8
/// bytes (`prefix`; fewer than 8 bytes means the file is too short).
pub fn header_len(prefix: &[u8], file_size: u64) -> Result<u64> {
    let bytes: [u8; 8] = prefix
        .get(..8)
        .and_then(|p| p.try_into().ok())
        .ok_or_else(|| header_err(format!("the file is {file_size} bytes, shorter than the 8-byte header length")))?;
    let len = u64::from_le_bytes(bytes);
    if len > MAX_HEADER_BYTES {
        return Err(header_err(format!(
            "declared header length {len} exceeds the format's limit of {MAX_HEADER_BYTES} bytes"
        )));
    }
    if len > file_size.saturating_sub(8) {
        return Err(header_err(format!(
            "declared header length {len} exceeds the file ({file_size} bytes; truncated?)"
        )));
    }
    if len < 2 {
        return Err(header_err(format!("declared header length {len} is too short for a JSON object")));
    }
    Ok(len)
}

/// Parses and checks the header JSON of a file of `file_size` bytes: every
/// dtype known, every dimension a non-negative integer within i32, every
/// tensor's bytes = elements × dtype size, and the tensors tiling the data
/// section exactly (no overlap, no hole, nothing past the end).
pub fn parse_header(json: &[u8], file_size: u64) -> Result<Header> {
    let text = std::str::from_utf8(json).map_err(|_| header_err("the header is not UTF-8"))?;
    if !text.starts_with('{') {
        return Err(header_err("the header does not start with `{`"));
    }
    let raw: serde_json::Map<String, Value> =
        serde_json::from_str(text).map_err(|e| header_err(format!("the header is not a JSON object: {e}")))?;
    let data_len =
        file_size.checked_sub(8 + json.len() as u64).ok_or_else(|| header_err("the header runs past the file"))?;
    let mut tensors = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    for (name, value) in raw {
        if name == "__metadata__" {
            // MLX writes `null` when there is no metadata.
            match value {
                Value::Null => {}
                Value::Object(entries) => {
                    for (key, v) in entries {
                        let Value::String(v) = v else {
                            return Err(header_err(format!("__metadata__[{key:?}] is not a string")));
                        };
                        metadata.insert(key, v);
                    }
                }
                _ => return Err(header_err("__metadata__ is not an object")),
            }
            continue;
        }
        let info = tensor_info(&name, &value)?;
        tensors.insert(name, info);
    }
    check_tiling(&tensors, data_len)?;
    Ok(Header { tensors, metadata })
}

fn tensor_info(name: &str, value: &Value) -> Result<TensorInfo> {
    let bad = |reason: String| FormatError::Tensor { tensor: name.to_owned(), reason };
    let obj = value.as_object().ok_or_else(|| bad("the entry is not an object".into()))?;
    let dtype_name = obj.get("dtype").and_then(Value::as_str).ok_or_else(|| bad("no \"dtype\" string".into()))?;
    let dtype = Dtype::parse(dtype_name).ok_or_else(|| bad(format!("unknown dtype {dtype_name}")))?;
    let dims = obj.get("shape").and_then(Value::as_array).ok_or_else(|| bad("no \"shape\" list".into()))?;
    let mut shape = Vec::with_capacity(dims.len());
    for (axis, d) in dims.iter().enumerate() {
        let dim = match d.as_u64() {
            Some(n) if n <= i32::MAX as u64 => n,
            Some(n) => return Err(bad(format!("dimension {axis} is {n}, beyond MLX's limit of {}", i32::MAX))),
            None if d.as_i64().is_some() => return Err(bad(format!("dimension {axis} is negative ({d})"))),
            None => return Err(bad(format!("dimension {axis} is not an integer ({d})"))),
        };
        shape.push(dim);
    }
    let offsets =
        obj.get("data_offsets").and_then(Value::as_array).ok_or_else(|| bad("no \"data_offsets\" pair".into()))?;
    let (start, end) = match offsets.as_slice() {
        [a, b] => match (a.as_u64(), b.as_u64()) {
            (Some(a), Some(b)) => (a, b),
            _ => return Err(bad(format!("data_offsets {a}, {b} are not byte offsets"))),
        },
        _ => return Err(bad("data_offsets is not a [start, end] pair".into())),
    };
    if start > end {
        return Err(bad(format!("data_offsets end before they start ({start}..{end})")));
    }
    let elements = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    let bytes = elements.and_then(|n| n.checked_mul(dtype.size()));
    if bytes != Some(end - start) {
        return Err(bad(format!(
            "{} bytes for shape {shape:?} {dtype} (needs {})",
            end - start,
            match bytes {
                Some(b) => b.to_string(),
                None => "more than 2^64".into(),
            }
        )));
    }
    Ok(TensorInfo { dtype, shape, data_offsets: (start, end) })
}

/// The tensors must cover `data_len` bytes exactly, each byte once.
fn check_tiling(tensors: &BTreeMap<String, TensorInfo>, data_len: u64) -> Result<()> {
    let mut spans: Vec<(u64, u64, &str)> =
        tensors.iter().map(|(n, t)| (t.data_offsets.0, t.data_offsets.1, n.as_str())).collect();
    spans.sort_unstable();
    let mut at = 0u64;
    for (start, end, name) in spans {
        if start != at {
            let what = if start < at { "overlaps the tensor before it" } else { "leaves a hole before it" };
            return Err(FormatError::Tensor {
                tensor: name.to_owned(),
                reason: format!("starts at byte {start}, which {what} (expected {at})"),
            });
        }
        at = end;
    }
    if at != data_len {
        return Err(header_err(if at > data_len {
            format!("the tensors need {at} bytes of data but the file holds {data_len} (truncated?)")
        } else {
            format!("the tensors cover {at} bytes but the file holds {data_len} bytes of data")
        }));
    }
    Ok(())
}

/// The weight files `model.safetensors.index.json` names (its `weight_map`
/// values), sorted and deduplicated: the engine's order. Each must be a
/// plain file name inside the model folder.
pub fn parse_index(text: &[u8]) -> Result<Vec<String>> {
    let bad = |reason: String| FormatError::Index { reason };
    let v: Value = serde_json::from_slice(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let map = v.get("weight_map").and_then(Value::as_object).ok_or_else(|| bad("no \"weight_map\" object".into()))?;
    let mut files = Vec::with_capacity(map.len());
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| bad(format!("the file for {tensor} is not a string")))?;
        if file.is_empty()
            || file.contains(['/', '\\'])
            || file == "."
            || file == ".."
            || !file.ends_with(".safetensors")
        {
            return Err(bad(format!("{tensor} names {file:?}, not a .safetensors file in the model folder")));
        }
        files.push(file.to_owned());
    }
    if files.is_empty() {
        return Err(bad("the weight_map is empty".into()));
    }
    files.sort();
    files.dedup();
    Ok(files)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A whole file: 8-byte length, the header, `data` bytes of zeros.
    pub(crate) fn file_with(header: &str, data: u64) -> (Vec<u8>, u64) {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        let size = bytes.len() as u64 + data;
        (bytes, size)
    }

    fn parse(header: &str, data: u64) -> Result<Header> {
        let (bytes, size) = file_with(header, data);
        let len = header_len(&bytes[..8], size)?;
        parse_header(&bytes[8..8 + len as usize], size)
    }

    #[test]
    fn a_good_header_parses_sorted_with_its_sizes() {
        let h = r#"{"__metadata__":{"format":"mlx"},"b":{"dtype":"U32","shape":[4],"data_offsets":[12,28]},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}"#;
        let header = parse(h, 28).unwrap();
        assert_eq!(header.tensors.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(header.tensors["a"], TensorInfo { dtype: Dtype::BF16, shape: vec![2, 3], data_offsets: (0, 12) });
        assert_eq!(header.tensors["b"].nbytes(), 16);
    }

    #[test]
    fn every_lie_in_a_header_is_named() {
        let cases: &[(&str, u64, &str)] = &[
            (r#"{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}"#, 11, "truncated"),
            (r#"{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}}"#, 10, "10 bytes for shape [2, 3] BF16"),
            (r#"{"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}}"#, 1, "unknown dtype Q9"),
            (r#"{"a":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}}"#, 16, "dimension 0 is negative"),
            (r#"{"a":{"dtype":"F32","shape":[4294967296],"data_offsets":[0,16]}}"#, 16, "beyond MLX's limit"),
            (
                r#"{"a":{"dtype":"F32","shape":[2147483647,2147483647,2147483647],"data_offsets":[0,16]}}"#,
                16,
                "more than 2^64",
            ),
            (r#"{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}"#, 4, "not an integer"),
            (r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}"#, 4, "end before they start"),
            (
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}"#,
                6,
                "overlaps",
            ),
            (r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#, 8, "leaves a hole"),
            (r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#, 9, "cover 4 bytes but the file holds 9"),
            (r#"{"a":{"dtype":"F32","shape":[1]}}"#, 4, "no \"data_offsets\""),
            (r#"{"a":[1,2]}"#, 0, "not an object"),
            (r#"[1, 2]"#, 0, "does not start with"),
            (r#"{not json}"#, 0, "not a JSON object"),
        ];
        for (h, data, needle) in cases {
            let err = parse(h, *data).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(needle), "{h}: {err:?} lacks {needle:?}");
        }
        assert!(header_len(&1_000u64.to_le_bytes(), 500)
            .err()
            .is_some_and(|e| e.to_string().contains("exceeds the file (500 bytes")));
        assert!(header_len(&u64::MAX.to_le_bytes(), u64::MAX).err().is_some_and(|e| e.to_string().contains("limit")));
        assert!(header_len(&[1, 2, 3], 3).err().is_some_and(|e| e.to_string().contains("shorter than the 8-byte")));
    }

    #[test]
    fn the_index_names_files_inside_the_folder_only() {
        let ok = br#"{"metadata":{},"weight_map":{"a":"model-00002-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}}"#;
        assert_eq!(
            parse_index(ok).ok(),
            Some(vec!["model-00001-of-00002.safetensors".to_owned(), "model-00002-of-00002.safetensors".to_owned()])
        );
        for bad in [
            &br#"{"weight_map":{"a":"../../etc/passwd.safetensors"}}"#[..],
            br#"{"weight_map":{}}"#,
            br#"{"weight_map":{"a":3}}"#,
            b"{}",
            b"nope",
        ] {
            assert!(parse_index(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
