//! The GGUF header reader: magic, version, counts, metadata, tensor infos,
//! stopping where the tensor data starts. Every count and length is checked
//! against the bytes the file still has before anything is allocated, so a
//! lying header costs at most what the file itself holds.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;

use super::limits;
use super::types::{value_type as vt, GgmlType, MetaArray, MetaValue};
use super::{GgufFile, GgufTensor, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC};
use crate::format::error::{FormatError, Result};

fn gguf(reason: impl Into<String>) -> FormatError {
    FormatError::Gguf { reason: reason.into() }
}

/// The reader, the byte it is at and the file's length: `pos <= len` always;
/// and the bytes decoded so far (what the header costs in memory).
struct Src<'r, R> {
    r: &'r mut R,
    pos: u64,
    len: u64,
    decoded: u64,
}

impl<R: Read> Src<'_, R> {
    fn remaining(&self) -> u64 {
        self.len - self.pos
    }

    /// Fails unless `n` more bytes lie in the file and in the header's budget.
    fn need(&self, n: u64, what: &dyn Fn() -> String) -> Result<()> {
        if self.pos.saturating_add(n) > limits::MAX_HEADER_BYTES {
            return Err(gguf(format!(
                "{} runs the header past {} MiB (at byte {}), over the header budget: no real model's header is this large",
                what(),
                limits::MAX_HEADER_BYTES >> 20,
                self.pos
            )));
        }
        if n > self.remaining() {
            return Err(gguf(format!(
                "{} needs {n} bytes at byte {}, but the file ends at byte {} (truncated?)",
                what(),
                self.pos,
                self.len
            )));
        }
        Ok(())
    }

    fn fill(&mut self, buf: &mut [u8], what: &dyn Fn() -> String) -> Result<()> {
        let n = buf.len() as u64;
        self.need(n, what)?;
        self.r.read_exact(buf).map_err(|e| {
            gguf(format!(
                "{}: the file could not be read at byte {} ({e}); it is shorter than it said?",
                what(),
                self.pos
            ))
        })?;
        self.pos += n;
        Ok(())
    }

    /// Counts `bytes` more of decoded header against its budget.
    fn charge(&mut self, bytes: u64, what: &dyn Fn() -> String) -> Result<()> {
        self.decoded = self.decoded.saturating_add(bytes);
        if self.decoded > limits::MAX_DECODED_BYTES {
            return Err(gguf(format!(
                "{} takes the decoded header past {} MiB, over the decoded-bytes budget",
                what(),
                limits::MAX_DECODED_BYTES >> 20
            )));
        }
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.fill(&mut b, what)?;
        Ok(b)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A length-prefixed UTF-8 string of at most `max` bytes.
    fn string(&mut self, max: u64, what: &dyn Fn() -> String) -> Result<String> {
        let n = self.u64(what)?;
        if n > max {
            return Err(gguf(format!("{} is a string of {n} bytes, over the limit of {max}", what())));
        }
        self.need(n, what)?;
        // The text's own bytes; the `String` itself is charged where it is held.
        self.charge(n, what)?;
        // Both bounds were checked: n fits the file and the limit.
        let mut buf = vec![0u8; usize::try_from(n).map_err(|_| gguf(format!("{}: too long", what())))?];
        self.fill(&mut buf, what)?;
        String::from_utf8(buf).map_err(|_| gguf(format!("{} is not UTF-8", what())))
    }
}

/// Smallest bytes one element of `ty` takes in the file (a string is at
/// least its length, an array its type and count), used to bound counts.
fn min_size(ty: u32) -> Option<u64> {
    Some(match ty {
        vt::U8 | vt::I8 | vt::BOOL => 1,
        vt::U16 | vt::I16 => 2,
        vt::U32 | vt::I32 | vt::F32 => 4,
        vt::U64 | vt::I64 | vt::F64 | vt::STRING => 8,
        vt::ARRAY => 12,
        _ => return None,
    })
}

fn unknown_type(ty: u32, what: &dyn Fn() -> String) -> FormatError {
    gguf(format!("{} has value type {ty}, which GGUF does not define (0..=12)", what()))
}

fn value<R: Read>(src: &mut Src<'_, R>, ty: u32, depth: u32, what: &dyn Fn() -> String) -> Result<MetaValue> {
    Ok(match ty {
        vt::U8 => MetaValue::U8(u8::from_le_bytes(src.array(what)?)),
        vt::I8 => MetaValue::I8(i8::from_le_bytes(src.array(what)?)),
        vt::U16 => MetaValue::U16(u16::from_le_bytes(src.array(what)?)),
        vt::I16 => MetaValue::I16(i16::from_le_bytes(src.array(what)?)),
        vt::U32 => MetaValue::U32(u32::from_le_bytes(src.array(what)?)),
        vt::I32 => MetaValue::I32(i32::from_le_bytes(src.array(what)?)),
        vt::F32 => MetaValue::F32(f32::from_le_bytes(src.array(what)?)),
        vt::BOOL => MetaValue::Bool(boolean(src, what)?),
        vt::STRING => MetaValue::String(src.string(limits::MAX_STRING_BYTES, what)?),
        vt::ARRAY => MetaValue::Array(array(src, depth + 1, what)?),
        vt::U64 => MetaValue::U64(u64::from_le_bytes(src.array(what)?)),
        vt::I64 => MetaValue::I64(i64::from_le_bytes(src.array(what)?)),
        vt::F64 => MetaValue::F64(f64::from_le_bytes(src.array(what)?)),
        other => return Err(unknown_type(other, what)),
    })
}

fn boolean<R: Read>(src: &mut Src<'_, R>, what: &dyn Fn() -> String) -> Result<bool> {
    match src.array::<1>(what)?[0] {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(gguf(format!("{} is a bool stored as {b}, not 0 or 1", what()))),
    }
}

/// Reads `count` elements with `one`, growing the vector as the bytes
/// arrive rather than trusting the count with one allocation.
/// Each element is charged to the decoded budget as it is read.
fn elements<R: Read, T>(
    src: &mut Src<'_, R>,
    count: u64,
    what: &dyn Fn() -> String,
    mut one: impl FnMut(&mut Src<'_, R>, u64) -> Result<T>,
) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(usize::try_from(count.min(4096)).unwrap_or(4096));
    let each = std::mem::size_of::<T>() as u64;
    for i in 0..count {
        src.charge(each, what)?;
        out.push(one(src, i)?);
    }
    Ok(out)
}

/// An array value at nesting `depth` (1 for an array directly under a key).
fn array<R: Read>(src: &mut Src<'_, R>, depth: u32, what: &dyn Fn() -> String) -> Result<MetaArray> {
    if depth > limits::MAX_ARRAY_DEPTH {
        return Err(gguf(format!("{} nests arrays deeper than {} levels", what(), limits::MAX_ARRAY_DEPTH)));
    }
    let ty = src.u32(what)?;
    let count = src.u64(what)?;
    let min = min_size(ty).ok_or_else(|| unknown_type(ty, what))?;
    if count > limits::MAX_ARRAY_LEN {
        return Err(gguf(format!(
            "{} is an array of {count} elements, over the limit of {}",
            what(),
            limits::MAX_ARRAY_LEN
        )));
    }
    // Each element takes at least `min` bytes, so a count the file cannot hold is a lie.
    match count.checked_mul(min) {
        Some(bytes) if bytes <= src.remaining() => {}
        _ => {
            return Err(gguf(format!(
                "{} claims {count} elements, more than the {} bytes left in the file can hold (truncated?)",
                what(),
                src.remaining()
            )))
        }
    }
    let at = |i: u64| move || format!("{}[{i}]", what());
    macro_rules! scalars {
        ($variant:ident, $t:ty) => {
            MetaArray::$variant(elements(src, count, what, |s, i| s.array(&at(i)).map(<$t>::from_le_bytes))?)
        };
    }
    Ok(match ty {
        vt::U8 => scalars!(U8, u8),
        vt::I8 => scalars!(I8, i8),
        vt::U16 => scalars!(U16, u16),
        vt::I16 => scalars!(I16, i16),
        vt::U32 => scalars!(U32, u32),
        vt::I32 => scalars!(I32, i32),
        vt::F32 => scalars!(F32, f32),
        vt::U64 => scalars!(U64, u64),
        vt::I64 => scalars!(I64, i64),
        vt::F64 => scalars!(F64, f64),
        vt::BOOL => MetaArray::Bool(elements(src, count, what, |s, i| boolean(s, &at(i)))?),
        vt::STRING => MetaArray::String(elements(src, count, what, |s, i| s.string(limits::MAX_STRING_BYTES, &at(i)))?),
        vt::ARRAY => MetaArray::Array(elements(src, count, what, |s, i| array(s, depth + 1, &at(i)))?),
        other => return Err(unknown_type(other, what)),
    })
}

/// A count from the file, checked against its limit and against the bytes
/// left (each item takes at least `min` bytes).
fn count<R: Read>(src: &mut Src<'_, R>, what: &str, max: u64, min: u64) -> Result<u64> {
    let n = src.u64(&|| what.to_owned())?;
    if n > max {
        return Err(gguf(format!("{what} is {n}, over the limit of {max}")));
    }
    if n.checked_mul(min).is_none_or(|b| b > src.remaining()) {
        return Err(gguf(format!(
            "{what} is {n}, more than the {} bytes left in the file can hold (truncated?)",
            src.remaining()
        )));
    }
    Ok(n)
}

/// A tensor info as the file gives it, before the checks that need the alignment.
struct RawTensor {
    name: String,
    dims: Vec<u64>,
    ggml_type: GgmlType,
    offset: u64,
}

/// Reads a GGUF header; see [`super::read_gguf`].
pub(super) fn read<R: Read>(reader: &mut R, file_len: u64) -> Result<GgufFile> {
    let mut src = Src { r: reader, pos: 0, len: file_len, decoded: 0 };
    let magic: [u8; 4] = src.array(&|| "the magic".to_owned())?;
    if magic != MAGIC {
        return Err(gguf(format!("the file does not start with \"GGUF\" (found {magic:02x?}): not a GGUF file")));
    }
    let version = src.u32(&|| "the version".to_owned())?;
    match version {
        2 | 3 => {}
        1 => return Err(gguf("version 1 (32-bit counts, before 2023-08) is not read; re-convert the model")),
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
            return Err(gguf(format!("version {v} reads as a big-endian GGUF, which is not read")))
        }
        v => return Err(gguf(format!("version {v} is not one this reader knows (2, 3)"))),
    }
    // The smallest tensor info: name length, 1 dim, type, offset.
    let tensor_count = count(&mut src, "the tensor count", limits::MAX_TENSORS, 8 + 4 + 8 + 4 + 8)?;
    // The smallest pair: key length, value type, a one-byte value.
    let kv_count = count(&mut src, "the metadata count", limits::MAX_METADATA, 8 + 4 + 1)?;

    let mut metadata = BTreeMap::new();
    for i in 0..kv_count {
        let key = src.string(limits::MAX_KEY_BYTES, &|| format!("metadata key {i}"))?;
        let what = || format!("metadata \"{key}\"");
        let ty = src.u32(&what)?;
        src.charge(std::mem::size_of::<MetaValue>() as u64, &what)?;
        let v = value(&mut src, ty, 0, &what)?;
        if metadata.contains_key(&key) {
            return Err(gguf(format!("metadata \"{key}\" appears twice")));
        }
        metadata.insert(key, v);
    }

    let mut raw = Vec::with_capacity(usize::try_from(tensor_count.min(4096)).unwrap_or(4096));
    for i in 0..tensor_count {
        let name = src.string(limits::MAX_TENSOR_NAME_BYTES, &|| format!("tensor info {i}'s name"))?;
        let what = || format!("tensor info {i} ({name})");
        let n_dims = src.u32(&what)?;
        if !(1..=limits::MAX_DIMS).contains(&n_dims) {
            return Err(FormatError::GgufTensor {
                tensor: name,
                reason: format!("{n_dims} dimensions (GGUF tensors have 1 to {})", limits::MAX_DIMS),
            });
        }
        src.charge(std::mem::size_of::<RawTensor>() as u64 + 8 * u64::from(n_dims), &what)?;
        let mut dims = Vec::with_capacity(4);
        for _ in 0..n_dims {
            dims.push(src.u64(&what)?);
        }
        let ggml_type = GgmlType::from_id(src.u32(&what)?);
        let offset = src.u64(&what)?;
        raw.push(RawTensor { name, dims, ggml_type, offset });
    }

    // MLX's reader honours the alignment only as a UINT32 and silently uses
    // 32 otherwise: any other type would make it read every tensor from
    // other offsets than the ones checked here, so it is refused by name.
    let alignment = match metadata.get(ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some(MetaValue::U32(a)) if a.is_power_of_two() && u64::from(*a) <= limits::MAX_ALIGNMENT => u64::from(*a),
        Some(MetaValue::U32(a)) => {
            return Err(gguf(format!("{ALIGNMENT_KEY} is {a}, not a power of two from 1 to {}", limits::MAX_ALIGNMENT)))
        }
        Some(v) => {
            return Err(gguf(format!(
            "{ALIGNMENT_KEY} is stored as {v:?}, but MLX honours it only as a UINT32 (it would read the tensors from \
                 other offsets)"
        )))
        }
    };
    let data_offset = src
        .pos
        .checked_next_multiple_of(alignment)
        .filter(|&d| d <= file_len)
        .ok_or_else(|| gguf(format!("the tensor data would start past the end of the file ({file_len} bytes)")))?;

    let mut names = HashSet::with_capacity(raw.len());
    let mut tensors = Vec::with_capacity(raw.len());
    for t in raw {
        if !names.insert(t.name.clone()) {
            return Err(FormatError::GgufTensor { tensor: t.name, reason: "appears twice".into() });
        }
        tensors.push(check_tensor(t, alignment, data_offset, file_len)?);
    }
    check_overlaps(&tensors)?;
    Ok(GgufFile { version, metadata, tensors, alignment, data_offset })
}

fn check_tensor(t: RawTensor, alignment: u64, data_offset: u64, file_len: u64) -> Result<GgufTensor> {
    let bad = |reason: String| FormatError::GgufTensor { tensor: t.name.clone(), reason };
    for (axis, &d) in t.dims.iter().enumerate() {
        if d == 0 {
            return Err(bad(format!("dimension {axis} is 0")));
        }
        if d > i32::MAX as u64 {
            return Err(bad(format!("dimension {axis} is {d}, beyond MLX's limit of {}", i32::MAX)));
        }
    }
    let elements = t
        .dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad(format!("dimensions {:?} hold more than 2^64 elements", t.dims)))?;
    let nbytes = match t.ggml_type.block() {
        Some((block, size)) => {
            if !t.dims[0].is_multiple_of(block) {
                return Err(bad(format!("its rows of {} are not whole {} blocks of {block}", t.dims[0], t.ggml_type)));
            }
            (elements / block)
                .checked_mul(size)
                .ok_or_else(|| bad(format!("dimensions {:?} of {} take more than 2^64 bytes", t.dims, t.ggml_type)))?
        }
        // Its size is unknown; model() refuses the type by name.
        None => 0,
    };
    if !t.offset.is_multiple_of(alignment) {
        return Err(bad(format!("its data offset {} is not a multiple of the alignment {alignment}", t.offset)));
    }
    let start = data_offset.checked_add(t.offset);
    let end = start.and_then(|s| s.checked_add(nbytes));
    match (start, end) {
        (Some(start), Some(end)) if end <= file_len => {
            Ok(GgufTensor { name: t.name, dims: t.dims, ggml_type: t.ggml_type, offset: start, nbytes })
        }
        _ => Err(bad(format!(
            "its {nbytes} bytes at data offset {} run past the end of the file ({file_len} bytes; truncated?)",
            t.offset
        ))),
    }
}

fn check_overlaps(tensors: &[GgufTensor]) -> Result<()> {
    let mut spans: Vec<(u64, u64, &str)> =
        tensors.iter().map(|t| (t.offset, t.offset + t.nbytes, t.name.as_str())).collect();
    spans.sort_unstable();
    for pair in spans.windows(2) {
        let ((_, end, first), (start, _, second)) = (pair[0], pair[1]);
        if start < end {
            return Err(FormatError::GgufTensor {
                tensor: second.to_owned(),
                reason: format!("its data at byte {start} overlaps {first}'s, which ends at byte {end}"),
            });
        }
    }
    Ok(())
}
