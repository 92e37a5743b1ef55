//! A small GGUF writer for tests (the `test-support` feature): metadata of
//! every type, tensors given as f32 values and stored as F32, F16, BF16,
//! Q8_0, Q4_0 or Q4_1 with ggml's reference quantizers, data aligned as the
//! file says. The engine's and the app's tests make tiny models with it;
//! the hostile corpus starts from its output.

use super::types::{value_type as vt, GgmlType, MetaArray, MetaValue};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC};

/// One tensor to write: GGUF dims (innermost first), its type, its bytes.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    dims: Vec<u64>,
    type_id: u32,
    data: Vec<u8>,
    /// Written at this data offset instead of the next aligned one (hostile files).
    offset: Option<u64>,
}

/// Builds a GGUF file in memory.
#[derive(Debug, Clone)]
pub struct GgufWriter {
    pub version: u32,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<Entry>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self { version: 3, metadata: Vec::new(), tensors: Vec::new() }
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a metadata pair; pairs are written in insertion order.
    pub fn meta(&mut self, key: &str, value: MetaValue) -> &mut Self {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key.to_owned(), value)),
        }
        self
    }

    pub fn remove_meta(&mut self, key: &str) -> &mut Self {
        self.metadata.retain(|(k, _)| k != key);
        self
    }

    pub fn meta_str(&mut self, key: &str, value: &str) -> &mut Self {
        self.meta(key, MetaValue::String(value.to_owned()))
    }

    pub fn meta_u32(&mut self, key: &str, value: u32) -> &mut Self {
        self.meta(key, MetaValue::U32(value))
    }

    pub fn meta_f32(&mut self, key: &str, value: f32) -> &mut Self {
        self.meta(key, MetaValue::F32(value))
    }

    pub fn meta_strings(&mut self, key: &str, values: &[String]) -> &mut Self {
        self.meta(key, MetaValue::Array(MetaArray::String(values.to_vec())))
    }

    fn alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find(|(k, _)| k == ALIGNMENT_KEY)
            .and_then(|(_, v)| v.as_u64())
            .filter(|a| a.is_power_of_two())
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// Adds a tensor of MLX `shape` (outermost first) from row-major `values`,
    /// stored as `ty`: F32, F16, BF16, Q8_0, Q4_0 or Q4_1 (the quantized
    /// types need a last dimension that is a multiple of 32). Returns `None`
    /// (adding nothing) for another type or values that do not fill the shape.
    pub fn tensor(&mut self, name: &str, shape: &[u64], values: &[f32], ty: GgmlType) -> Option<&mut Self> {
        let elements = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        if elements != values.len() as u64 {
            return None;
        }
        if ty.block().is_some_and(|(block, _)| shape.last().is_none_or(|last| !last.is_multiple_of(block))) {
            return None;
        }
        let data = encode(values, ty)?;
        let dims = shape.iter().rev().copied().collect();
        self.tensors.push(Entry { name: name.to_owned(), dims, type_id: ty.id(), data, offset: None });
        Some(self)
    }

    /// Adds a tensor info exactly as given (GGUF dims, any type id, raw
    /// bytes, optionally a fixed data offset): for hostile files.
    pub fn raw_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        type_id: u32,
        data: Vec<u8>,
        offset: Option<u64>,
    ) -> &mut Self {
        self.tensors.push(Entry { name: name.to_owned(), dims: dims.to_vec(), type_id, data, offset });
        self
    }

    pub fn remove_tensor(&mut self, name: &str) -> &mut Self {
        self.tensors.retain(|t| t.name != name);
        self
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut out, key);
            out.extend_from_slice(&type_id(value).to_le_bytes());
            put_value(&mut out, value);
        }
        let align = self.alignment();
        let mut next = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            let offset = t.offset.unwrap_or(next);
            offsets.push(offset);
            next = next.max(offset + t.data.len() as u64).next_multiple_of(align);
            put_string(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.type_id.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
        }
        let data_start = (out.len() as u64).next_multiple_of(align);
        out.resize(data_start as usize, 0);
        for (t, offset) in self.tensors.iter().zip(offsets) {
            if t.data.is_empty() {
                // A hostile info may point far past the end: write nothing there.
                continue;
            }
            let at = (data_start + offset) as usize;
            if out.len() < at + t.data.len() {
                out.resize(at + t.data.len(), 0);
            }
            out[at..at + t.data.len()].copy_from_slice(&t.data);
        }
        let end = (out.len() as u64).next_multiple_of(align);
        out.resize(end as usize, 0);
        out
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn type_id(v: &MetaValue) -> u32 {
    match v {
        MetaValue::U8(_) => vt::U8,
        MetaValue::I8(_) => vt::I8,
        MetaValue::U16(_) => vt::U16,
        MetaValue::I16(_) => vt::I16,
        MetaValue::U32(_) => vt::U32,
        MetaValue::I32(_) => vt::I32,
        MetaValue::F32(_) => vt::F32,
        MetaValue::Bool(_) => vt::BOOL,
        MetaValue::String(_) => vt::STRING,
        MetaValue::Array(_) => vt::ARRAY,
        MetaValue::U64(_) => vt::U64,
        MetaValue::I64(_) => vt::I64,
        MetaValue::F64(_) => vt::F64,
    }
}

fn array_type_id(a: &MetaArray) -> u32 {
    match a {
        MetaArray::U8(_) => vt::U8,
        MetaArray::I8(_) => vt::I8,
        MetaArray::U16(_) => vt::U16,
        MetaArray::I16(_) => vt::I16,
        MetaArray::U32(_) => vt::U32,
        MetaArray::I32(_) => vt::I32,
        MetaArray::F32(_) => vt::F32,
        MetaArray::Bool(_) => vt::BOOL,
        MetaArray::String(_) => vt::STRING,
        MetaArray::Array(_) => vt::ARRAY,
        MetaArray::U64(_) => vt::U64,
        MetaArray::I64(_) => vt::I64,
        MetaArray::F64(_) => vt::F64,
    }
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(u8::from(*x)),
        MetaValue::String(s) => put_string(out, s),
        MetaValue::Array(a) => put_array(out, a),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn put_array(out: &mut Vec<u8>, a: &MetaArray) {
    out.extend_from_slice(&array_type_id(a).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        MetaArray::U8(v) => each!(v),
        MetaArray::I8(v) => each!(v),
        MetaArray::U16(v) => each!(v),
        MetaArray::I16(v) => each!(v),
        MetaArray::U32(v) => each!(v),
        MetaArray::I32(v) => each!(v),
        MetaArray::F32(v) => each!(v),
        MetaArray::U64(v) => each!(v),
        MetaArray::I64(v) => each!(v),
        MetaArray::F64(v) => each!(v),
        MetaArray::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        MetaArray::String(v) => v.iter().for_each(|s| put_string(out, s)),
        MetaArray::Array(v) => v.iter().for_each(|inner| put_array(out, inner)),
    }
}

/// IEEE half precision, rounded to nearest even (as `_cvtss_sh` and numpy do).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x007f_ffff;
    if exp == 0xff {
        // Inf stays inf; NaN stays a quiet NaN.
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        // Subnormal: shift the full mantissa (with its implicit 1) into place.
        let m = man | 0x0080_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1u32 << shift) - 1);
        let mut h = m >> shift;
        if rest > half || (rest == half && (h & 1) == 1) {
            h += 1;
        }
        return sign | h as u16;
    }
    let mut h = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (h & 1) == 1) {
        // A carry into the exponent is the right rounding (up to inf).
        h += 1;
    }
    sign | h as u16
}

pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: value m × 2^-24.
            let v = m as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// The bytes of `values` stored as `ty` (row-major; blocks of 32 run along rows).
fn encode(values: &[f32], ty: GgmlType) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match ty {
        GgmlType::F32 => values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => values.iter().for_each(|v| out.extend_from_slice(&f32_to_f16(*v).to_le_bytes())),
        GgmlType::BF16 => values.iter().for_each(|v| out.extend_from_slice(&f32_to_bf16(*v).to_le_bytes())),
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1 => {
            if !values.len().is_multiple_of(32) {
                return None;
            }
            for block in values.chunks_exact(32) {
                match ty {
                    GgmlType::Q8_0 => q8_0(block, &mut out),
                    GgmlType::Q4_0 => q4_0(block, &mut out),
                    _ => q4_1(block, &mut out),
                }
            }
        }
        _ => return None,
    }
    Some(out)
}

/// ggml's `quantize_row_q8_0_ref`: d = amax / 127, q = round(x / d).
fn q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    out.extend(x.iter().map(|v| ((v * id).round() as i8) as u8));
}

/// Packs 32 nibbles as ggml does: element j in the low half of byte j,
/// element j + 16 in its high half.
fn nibbles(q: &[u8; 32], out: &mut Vec<u8>) {
    out.extend((0..16).map(|j| q[j] | (q[j + 16] << 4)));
}

/// ggml's `quantize_row_q4_0_ref`: d = (the value of largest magnitude) / -8,
/// q = min(15, trunc(x / d + 8.5)); decodes as (q - 8) × d.
fn q4_0(x: &[f32], out: &mut Vec<u8>) {
    let max = x.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; 32];
    for (qi, v) in q.iter_mut().zip(x) {
        *qi = ((v * id + 8.5) as i8).clamp(0, 15) as u8;
    }
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    nibbles(&q, out);
}

/// ggml's `quantize_row_q4_1_ref`: d = (max - min) / 15, m = min,
/// q = min(15, trunc((x - min) / d + 0.5)); decodes as q × d + m.
fn q4_1(x: &[f32], out: &mut Vec<u8>) {
    let min = x.iter().copied().fold(f32::INFINITY, f32::min);
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; 32];
    for (qi, v) in q.iter_mut().zip(x) {
        *qi = (((v - min) * id + 0.5) as i8).clamp(0, 15) as u8;
    }
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    out.extend_from_slice(&f32_to_f16(min).to_le_bytes());
    nibbles(&q, out);
}

/// Decodes `bytes` of a tensor stored as `ty` back to f32 (ggml's
/// `dequantize_row_*`), to check the quantizers and the files tests write.
pub fn decode(bytes: &[u8], ty: GgmlType) -> Option<Vec<f32>> {
    let half = |b: &[u8]| f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    let unpack =
        |qs: &[u8]| -> Vec<u8> { (0..32).map(|i| if i < 16 { qs[i] & 0x0f } else { qs[i - 16] >> 4 }).collect() };
    Some(match ty {
        GgmlType::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        GgmlType::F16 => bytes.chunks_exact(2).map(half).collect(),
        GgmlType::BF16 => {
            bytes.chunks_exact(2).map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)).collect()
        }
        GgmlType::Q8_0 => bytes
            .chunks_exact(34)
            .flat_map(|b| {
                let d = half(&b[..2]);
                b[2..].iter().map(move |&q| f32::from(q as i8) * d)
            })
            .collect(),
        GgmlType::Q4_0 => bytes
            .chunks_exact(18)
            .flat_map(|b| {
                let d = half(&b[..2]);
                unpack(&b[2..]).into_iter().map(move |q| (f32::from(q) - 8.0) * d)
            })
            .collect(),
        GgmlType::Q4_1 => bytes
            .chunks_exact(20)
            .flat_map(|b| {
                let (d, m) = (half(&b[..2]), half(&b[2..4]));
                unpack(&b[4..]).into_iter().map(move |q| f32::from(q) * d + m)
            })
            .collect(),
        _ => return None,
    })
}

/// A tiny model of one architecture, with deterministic weights: the
/// shapes and names llama.cpp writes, at a size tests can make in a moment.
#[derive(Debug, Clone)]
pub struct TinyModel {
    /// "llama", "qwen2" (biased q/k/v) or "qwen3" (q/k norms).
    pub arch: &'static str,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub ff: u64,
    /// Rows of the embedding; the tokenizer has as many tokens.
    pub vocab: u64,
    /// How the projection matrices are stored.
    pub matrix_type: GgmlType,
    pub embed_type: GgmlType,
    /// Without an `output.weight` (the head is the embedding).
    pub tied: bool,
    pub seed: u64,
}

impl Default for TinyModel {
    fn default() -> Self {
        Self {
            arch: "llama",
            hidden: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            ff: 128,
            vocab: 64,
            matrix_type: GgmlType::Q4_0,
            embed_type: GgmlType::Q8_0,
            tied: true,
            seed: 1,
        }
    }
}

/// A tiny ChatML template, as SmolLM2's and Qwen's files carry.
pub const CHATML: &str = "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

impl TinyModel {
    pub fn head_dim(&self) -> u64 {
        self.hidden / self.heads
    }

    /// The file, or `None` if a size does not fit its storage type (a
    /// quantized matrix needs rows that are whole blocks of 32).
    pub fn writer(&self) -> Option<GgufWriter> {
        let mut w = GgufWriter::new();
        let arch = self.arch;
        let key = |k: &str| format!("{arch}.{k}");
        let u32_of = |v: u64| u32::try_from(v).ok();
        w.meta_str("general.architecture", arch).meta_str("general.name", "tiny");
        w.meta_u32(&key("block_count"), u32_of(self.layers)?)
            .meta_u32(&key("context_length"), 256)
            .meta_u32(&key("embedding_length"), u32_of(self.hidden)?)
            .meta_u32(&key("feed_forward_length"), u32_of(self.ff)?)
            .meta_u32(&key("attention.head_count"), u32_of(self.heads)?)
            .meta_u32(&key("attention.head_count_kv"), u32_of(self.kv_heads)?)
            .meta_u32(&key("rope.dimension_count"), u32_of(self.head_dim())?)
            .meta_f32(&key("rope.freq_base"), 10_000.0)
            .meta_f32(&key("attention.layer_norm_rms_epsilon"), 1e-5);
        if arch == "qwen3" {
            w.meta_u32(&key("attention.key_length"), u32_of(self.head_dim())?);
            w.meta_u32(&key("attention.value_length"), u32_of(self.head_dim())?);
        }
        let specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
        // The last token is what the one merge ("t3 t4") makes, so the
        // vocabulary builds as a byte-level BPE model.
        let tokens: Vec<String> = (0..self.vocab)
            .map(|i| match specials.get(i as usize) {
                Some(s) => (*s).to_owned(),
                None if i + 1 == self.vocab => "t3t4".to_owned(),
                None => format!("t{i}"),
            })
            .collect();
        let types: Vec<i32> = (0..self.vocab).map(|i| if i < 3 { 3 } else { 1 }).collect();
        w.meta_str("tokenizer.ggml.model", "gpt2")
            .meta_str("tokenizer.ggml.pre", "smollm")
            .meta_strings("tokenizer.ggml.tokens", &tokens)
            .meta("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::I32(types)))
            .meta_strings("tokenizer.ggml.merges", &["t3 t4".to_owned()])
            .meta_u32("tokenizer.ggml.bos_token_id", 1)
            .meta_u32("tokenizer.ggml.eos_token_id", 2)
            .meta_u32("tokenizer.ggml.padding_token_id", 2)
            .meta("tokenizer.ggml.add_bos_token", MetaValue::Bool(false))
            .meta_str("tokenizer.chat_template", CHATML);

        let mut rng = self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut values = |n: u64, scale: f32| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    // xorshift64*: deterministic, no dependency.
                    rng ^= rng >> 12;
                    rng ^= rng << 25;
                    rng ^= rng >> 27;
                    let r = rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
                    (r as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
                })
                .collect()
        };
        let (h, hd) = (self.hidden, self.head_dim());
        let (q_rows, kv_rows) = (self.heads * hd, self.kv_heads * hd);
        w.tensor("token_embd.weight", &[self.vocab, h], &values(self.vocab * h, 0.5), self.embed_type)?;
        for i in 0..self.layers {
            let mut matrix = |w: &mut GgufWriter, name: &str, rows: u64, cols: u64| {
                let v = values(rows * cols, 0.1);
                w.tensor(&format!("blk.{i}.{name}.weight"), &[rows, cols], &v, self.matrix_type).map(|_| ())
            };
            matrix(&mut w, "attn_q", q_rows, h)?;
            matrix(&mut w, "attn_k", kv_rows, h)?;
            matrix(&mut w, "attn_v", kv_rows, h)?;
            matrix(&mut w, "attn_output", h, q_rows)?;
            matrix(&mut w, "ffn_gate", self.ff, h)?;
            matrix(&mut w, "ffn_up", self.ff, h)?;
            matrix(&mut w, "ffn_down", h, self.ff)?;
            let ones = |n: u64| vec![1.0f32; n as usize];
            w.tensor(&format!("blk.{i}.attn_norm.weight"), &[h], &ones(h), GgmlType::F32)?;
            w.tensor(&format!("blk.{i}.ffn_norm.weight"), &[h], &ones(h), GgmlType::F32)?;
            if arch == "qwen2" {
                for (name, rows) in [("attn_q", q_rows), ("attn_k", kv_rows), ("attn_v", kv_rows)] {
                    w.tensor(&format!("blk.{i}.{name}.bias"), &[rows], &values(rows, 0.1), GgmlType::F32)?;
                }
            }
            if arch == "qwen3" {
                w.tensor(&format!("blk.{i}.attn_q_norm.weight"), &[hd], &ones(hd), GgmlType::F32)?;
                w.tensor(&format!("blk.{i}.attn_k_norm.weight"), &[hd], &ones(hd), GgmlType::F32)?;
            }
        }
        w.tensor("output_norm.weight", &[h], &vec![1.0; h as usize], GgmlType::F32)?;
        if !self.tied {
            w.tensor("output.weight", &[self.vocab, h], &values(self.vocab * h, 0.1), self.matrix_type)?;
        }
        Some(w)
    }
}
