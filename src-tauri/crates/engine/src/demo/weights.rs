//! The weights of a demo model: which tensors exist (the mlx-community key
//! names, shapes and dtypes), seeded random values, MLX's own affine
//! quantization, and safetensors shards written as mlx-lm writes them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mlx_rs::{ops, random, transforms, Array, Dtype};
use serde_json::{json, Map};

use super::{config, Arch, DemoError, DemoSpec, ModelShape};

pub(super) const INDEX_FILE: &str = "model.safetensors.index.json";

/// Most f32 values generated at once (64 MB): big matrices are made in row
/// blocks, each quantized before the next, so a 14B model's 3 GB embedding
/// never exists in f32.
const CHUNK_ELEMENTS: i64 = 1 << 24;
/// Standard deviation of biases and of norm weights around 1.
const INIT_STD: f32 = 0.02;

/// Standard deviation of a matrix with `cols` inputs: 1/√cols keeps every
/// layer's output at unit scale (pre-norm blocks then keep the residual
/// stream sane at any depth), and tied logits `norm(h)·Eᵀ` at unit scale.
/// HF's 0.02 would not do here: with untrained weights every layer's output
/// would be ~100× smaller than the token's own embedding, so a tied model
/// greedily repeats its last input token forever, which makes a useless
/// parity test.
fn matrix_std(cols: i32) -> f32 {
    1.0 / (cols as f32).sqrt()
}

/// Per-layer overrides written inside `quantization`: `(path, group_size, bits)`.
pub(super) fn overrides(spec: &DemoSpec) -> Vec<(String, i32, i32)> {
    match (spec.mixed_precision, spec.bits.quantized()) {
        (true, Some(bits)) => {
            let other = if bits == 8 { 4 } else { 8 };
            vec![("model.layers.0.mlp.down_proj".to_owned(), 32, other)]
        }
        _ => Vec::new(),
    }
}

pub(super) fn is_shard_name(name: &str) -> bool {
    // model-00001-of-00003.safetensors
    let Some(rest) = name.strip_prefix("model-").and_then(|r| r.strip_suffix(".safetensors")) else {
        return false;
    };
    let mut parts = rest.split("-of-");
    matches!((parts.next(), parts.next(), parts.next()), (Some(a), Some(b), None)
        if !a.is_empty() && !b.is_empty() && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit()))
}

/// How a group of values is initialised.
#[derive(Debug, Clone, Copy)]
enum Init {
    /// N(0, 0.02²): projection biases.
    Small,
    /// N(1, 0.02²): RMS norm weights.
    NearOne,
}

/// One module's tensors.
#[derive(Debug, Clone)]
enum Unit {
    /// A `[rows, cols]` matrix (linear layer or embedding) under `prefix`:
    /// `.weight` in bf16, or `.weight` u32 + `.scales` + `.biases` bf16.
    Matrix {
        prefix: String,
        rows: i32,
        cols: i32,
        quant: Option<(i32, i32)>,
        /// Rows past this are zero: the embedding / lm_head rows of ids the
        /// tokenizer does not have. Their logits are then exactly 0 while a
        /// real token's are ~N(0, 1), so greedy decoding never picks an id
        /// the tokenizer cannot decode (the real presets have ~151k such
        /// rows; random ones would win nearly every argmax). Sampling at a
        /// high temperature still can; real checkpoints have such ids too.
        live_rows: i32,
        /// More than 1: `experts` matrices of `rows / experts` rows stacked
        /// (`[experts, rows / experts, cols]`, a MoE layer's SwitchLinear).
        experts: i32,
    },
    /// A small dense tensor of any shape (a convolution's filters), N(0, 1/last²).
    Tensor { key: String, shape: Vec<i32> },
    /// A vector stored at `key`.
    Vector { key: String, len: i32, init: Init },
}

/// One tensor in the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) key: String,
    pub(super) shape: Vec<i32>,
    pub(super) dtype: Dtype,
}

impl Entry {
    pub(super) fn bytes(&self) -> u64 {
        let elems: u64 = self.shape.iter().map(|&d| d as u64).product();
        let size = match self.dtype {
            Dtype::Uint32 => 4,
            _ => 2, // bf16: everything else this writer makes
        };
        elems * size
    }
}

impl Unit {
    fn entries(&self) -> Vec<Entry> {
        match self {
            Unit::Matrix { prefix, rows, cols, quant, experts, .. } => {
                let shape = |last: i32| {
                    if *experts > 1 {
                        vec![*experts, rows / experts, last]
                    } else {
                        vec![*rows, last]
                    }
                };
                match quant {
                    None => {
                        vec![Entry { key: format!("{prefix}.weight"), shape: shape(*cols), dtype: Dtype::Bfloat16 }]
                    }
                    Some((gs, bits)) => vec![
                        Entry { key: format!("{prefix}.weight"), shape: shape(cols * bits / 32), dtype: Dtype::Uint32 },
                        Entry { key: format!("{prefix}.scales"), shape: shape(cols / gs), dtype: Dtype::Bfloat16 },
                        Entry { key: format!("{prefix}.biases"), shape: shape(cols / gs), dtype: Dtype::Bfloat16 },
                    ],
                }
            }
            Unit::Tensor { key, shape } => {
                vec![Entry { key: key.clone(), shape: shape.clone(), dtype: Dtype::Bfloat16 }]
            }
            Unit::Vector { key, len, .. } => {
                vec![Entry { key: key.clone(), shape: vec![*len], dtype: Dtype::Bfloat16 }]
            }
        }
    }

    /// Parameters as mlx-lm's `get_total_parameters` counts them.
    fn parameters(&self) -> u64 {
        match self {
            Unit::Matrix { rows, cols, .. } => *rows as u64 * *cols as u64,
            Unit::Vector { len, .. } => *len as u64,
            Unit::Tensor { shape, .. } => shape.iter().map(|d| *d as u64).product(),
        }
    }

    fn name(&self) -> &str {
        match self {
            Unit::Matrix { prefix, .. } => prefix,
            Unit::Vector { key, .. } | Unit::Tensor { key, .. } => key,
        }
    }
}

/// Everything that will be written, in file order, with the shard of each tensor.
#[derive(Debug)]
pub(super) struct Plan {
    units: Vec<Unit>,
    /// Shard index of each entry, in the order of `units`' entries.
    shard_of: Vec<usize>,
    shard_count: usize,
    /// `None`: a single `model.safetensors` without an index.
    sharded: bool,
    seed: u64,
}

impl Plan {
    /// `tokens`: how many ids the tokenizer has (see `live_rows`).
    pub(super) fn new(spec: &DemoSpec, s: &ModelShape, tokens: i32) -> Result<Self, DemoError> {
        validate(spec, s)?;
        let overrides = overrides(spec);
        let quant_for = |prefix: &str| -> Option<(i32, i32)> {
            let bits = spec.bits.quantized()?;
            Some(overrides.iter().find(|(p, ..)| p == prefix).map_or((spec.group_size, bits), |&(_, gs, b)| (gs, b)))
        };
        let matrix = |prefix: String, rows: i32, cols: i32| {
            let quant = quant_for(&prefix);
            Unit::Matrix { prefix, rows, cols, quant, live_rows: rows, experts: 1 }
        };
        let experts = |prefix: String, experts: i32, rows: i32, cols: i32| {
            let quant = quant_for(&prefix);
            Unit::Matrix { prefix, rows: experts * rows, cols, quant, live_rows: experts * rows, experts }
        };
        let root = spec.arch.prefix();
        let vocab_matrix = |prefix: &str| match matrix(prefix.to_owned(), s.vocab_size, s.hidden_size) {
            Unit::Matrix { prefix, rows, cols, quant, .. } => {
                Unit::Matrix { prefix, rows, cols, quant, live_rows: tokens.min(rows), experts: 1 }
            }
            other => other,
        };
        let vector = |key: String, len: i32, init: Init| Unit::Vector { key, len, init };

        let (h, q_out, kv_out) =
            (s.hidden_size, s.num_attention_heads * s.head_dim, s.num_key_value_heads * s.head_dim);
        let mut units = vec![vocab_matrix(&format!("{root}model.embed_tokens"))];
        let gemma = spec.arch == Arch::Gemma3Text;
        for i in 0..s.num_hidden_layers {
            let p = format!("{root}model.layers.{i}");
            units.push(vector(format!("{p}.input_layernorm.weight"), h, Init::NearOne));
            if let (Some(l), true) = (s.linear, s.is_linear(i)) {
                // A gated delta net (Qwen3.5).
                let (key_dim, value_dim) = (l.key_heads * l.key_head_dim, l.value_heads * l.value_head_dim);
                let conv_dim = 2 * key_dim + value_dim;
                let a = format!("{p}.linear_attn");
                units.push(matrix(format!("{a}.in_proj_qkv"), conv_dim, h));
                units.push(matrix(format!("{a}.in_proj_z"), value_dim, h));
                units.push(matrix(format!("{a}.in_proj_b"), l.value_heads, h));
                units.push(matrix(format!("{a}.in_proj_a"), l.value_heads, h));
                units.push(Unit::Tensor { key: format!("{a}.conv1d.weight"), shape: vec![conv_dim, l.conv_kernel, 1] });
                units.push(vector(format!("{a}.dt_bias"), l.value_heads, Init::NearOne));
                units.push(vector(format!("{a}.A_log"), l.value_heads, Init::Small));
                units.push(vector(format!("{a}.norm.weight"), l.value_head_dim, Init::NearOne));
                units.push(matrix(format!("{a}.out_proj"), h, value_dim));
            } else {
                // Qwen3.5's full attention computes a gate beside each query.
                let q_rows = if s.linear.is_some() { 2 * q_out } else { q_out };
                for (name, out) in [("q_proj", q_rows), ("k_proj", kv_out), ("v_proj", kv_out)] {
                    units.push(matrix(format!("{p}.self_attn.{name}"), out, h));
                    if spec.arch.has_qkv_bias() {
                        units.push(vector(format!("{p}.self_attn.{name}.bias"), out, Init::Small));
                    }
                }
                units.push(matrix(format!("{p}.self_attn.o_proj"), h, q_out));
                if spec.arch.has_qk_norm() {
                    units.push(vector(format!("{p}.self_attn.q_norm.weight"), s.head_dim, Init::NearOne));
                    units.push(vector(format!("{p}.self_attn.k_norm.weight"), s.head_dim, Init::NearOne));
                }
            }
            units.push(vector(format!("{p}.post_attention_layernorm.weight"), h, Init::NearOne));
            if gemma {
                units.push(vector(format!("{p}.pre_feedforward_layernorm.weight"), h, Init::NearOne));
                units.push(vector(format!("{p}.post_feedforward_layernorm.weight"), h, Init::NearOne));
            }
            match s.moe {
                Some(m) => {
                    let e = format!("{p}.mlp.switch_mlp");
                    units.push(matrix(format!("{p}.mlp.gate"), m.experts, h));
                    units.push(experts(format!("{e}.gate_proj"), m.experts, m.intermediate_size, h));
                    units.push(experts(format!("{e}.up_proj"), m.experts, m.intermediate_size, h));
                    units.push(experts(format!("{e}.down_proj"), m.experts, h, m.intermediate_size));
                    if let Some(shared) = m.shared {
                        units.push(matrix(format!("{p}.mlp.shared_expert.gate_proj"), shared, h));
                        units.push(matrix(format!("{p}.mlp.shared_expert.up_proj"), shared, h));
                        units.push(matrix(format!("{p}.mlp.shared_expert.down_proj"), h, shared));
                        units.push(matrix(format!("{p}.mlp.shared_expert_gate"), 1, h));
                    }
                }
                None => {
                    units.push(matrix(format!("{p}.mlp.gate_proj"), s.intermediate_size, h));
                    units.push(matrix(format!("{p}.mlp.up_proj"), s.intermediate_size, h));
                    units.push(matrix(format!("{p}.mlp.down_proj"), h, s.intermediate_size));
                }
            }
        }
        units.push(vector(format!("{root}model.norm.weight"), h, Init::NearOne));
        if !s.tie_word_embeddings {
            units.push(vocab_matrix(&format!("{root}lm_head")));
        }

        // mlx-lm's make_shards: start a new shard when the next tensor would
        // overflow the current one (a tensor bigger than the limit gets its own).
        let mut shard_of = Vec::new();
        let (mut shard, mut size, mut started) = (0usize, 0u64, false);
        for e in units.iter().flat_map(Unit::entries) {
            let bytes = e.bytes();
            if let Some(max) = spec.max_shard_bytes {
                if started && size + bytes > max {
                    shard += 1;
                    size = 0;
                }
            }
            started = true;
            size += bytes;
            shard_of.push(shard);
        }
        Ok(Self { units, shard_of, shard_count: shard + 1, sharded: spec.max_shard_bytes.is_some(), seed: spec.seed })
    }

    pub(super) fn entries(&self) -> Vec<Entry> {
        self.units.iter().flat_map(Unit::entries).collect()
    }

    pub(super) fn total_bytes(&self) -> u64 {
        self.entries().iter().map(Entry::bytes).sum()
    }

    pub(super) fn parameters(&self) -> u64 {
        self.units.iter().map(Unit::parameters).sum()
    }

    fn shard_name(&self, i: usize) -> String {
        if self.shard_count == 1 {
            "model.safetensors".to_owned()
        } else {
            format!("model-{:05}-of-{:05}.safetensors", i + 1, self.shard_count)
        }
    }

    /// Generates and writes every tensor, one shard at a time; returns the
    /// files written (shards, then the index if sharded).
    pub(super) fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, DemoError> {
        let metadata = HashMap::from([("format".to_owned(), "mlx".to_owned())]);
        let mut files = Vec::new();
        let mut weight_map = Map::new();
        let mut current: Vec<(String, Array)> = Vec::new();
        let mut current_shard = 0;
        let mut flush = |shard: usize, tensors: &mut Vec<(String, Array)>| -> Result<(), DemoError> {
            let name = self.shard_name(shard);
            let path = dir.join(&name);
            for (key, _) in tensors.iter() {
                weight_map.insert(key.clone(), json!(name));
            }
            Array::save_safetensors(tensors.iter().map(|(k, a)| (k.as_str(), a)), &metadata, &path)
                .map_err(|source| DemoError::Save { path: path.clone(), source })?;
            tensors.clear();
            files.push(path);
            Ok(())
        };

        let mut next_entry = 0;
        for unit in &self.units {
            let arrays = self.generate(unit)?;
            for (entry, array) in unit.entries().into_iter().zip(arrays) {
                debug_assert_eq!(array.shape(), entry.shape.as_slice(), "{}", entry.key);
                debug_assert_eq!(array.dtype(), entry.dtype, "{}", entry.key);
                let shard = self.shard_of[next_entry];
                next_entry += 1;
                if shard != current_shard {
                    flush(current_shard, &mut current)?;
                    current_shard = shard;
                }
                current.push((entry.key, array));
            }
        }
        flush(current_shard, &mut current)?;

        if self.sharded {
            let index = json!({
                "metadata": { "total_size": self.total_bytes(), "total_parameters": self.parameters() },
                "weight_map": weight_map,
            });
            let path = dir.join(INDEX_FILE);
            std::fs::write(&path, config::to_pretty(&index, INDEX_FILE)?)
                .map_err(|source| DemoError::Io { path: path.clone(), source })?;
            files.push(path);
        }
        Ok(files)
    }

    /// Writes the same files with every header but no tensor data: each
    /// file is extended to its full length as a hole, so the fit check (which
    /// reads only headers) sees the real model while the disk holds kilobytes.
    pub(super) fn write_sparse(&self, dir: &Path) -> Result<Vec<PathBuf>, DemoError> {
        use std::io::Write;
        let entries = self.entries();
        let mut files = Vec::new();
        let mut weight_map = Map::new();
        for shard in 0..self.shard_count {
            let name = self.shard_name(shard);
            let mut header = Map::new();
            header.insert("__metadata__".into(), json!({ "format": "mlx" }));
            let mut at = 0u64;
            for (e, _) in entries.iter().zip(&self.shard_of).filter(|(_, s)| **s == shard) {
                let bytes = e.bytes();
                let dtype = if e.dtype == Dtype::Uint32 { "U32" } else { "BF16" };
                header.insert(
                    e.key.clone(),
                    json!({ "dtype": dtype, "shape": e.shape, "data_offsets": [at, at + bytes] }),
                );
                weight_map.insert(e.key.clone(), json!(name));
                at += bytes;
            }
            let text = serde_json::to_string(&header)
                .map_err(|source| DemoError::Json { file: "safetensors header", source })?;
            let path = dir.join(&name);
            let io = |source| DemoError::Io { path: path.clone(), source };
            let mut f = std::fs::File::create(&path).map_err(io)?;
            f.write_all(&(text.len() as u64).to_le_bytes()).map_err(io)?;
            f.write_all(text.as_bytes()).map_err(io)?;
            f.set_len(8 + text.len() as u64 + at).map_err(io)?;
            files.push(path);
        }
        if self.sharded {
            let index = json!({
                "metadata": { "total_size": self.total_bytes(), "total_parameters": self.parameters() },
                "weight_map": weight_map,
            });
            let path = dir.join(INDEX_FILE);
            std::fs::write(&path, config::to_pretty(&index, INDEX_FILE)?)
                .map_err(|source| DemoError::Io { path: path.clone(), source })?;
            files.push(path);
        }
        Ok(files)
    }

    /// The unit's arrays, evaluated, in the order of `Unit::entries`.
    fn generate(&self, unit: &Unit) -> Result<Vec<Array>, DemoError> {
        let name = unit.name();
        let mlx = |op: &'static str| move |source| DemoError::Mlx { op, tensor: name.to_owned(), source };
        let base = mix(self.seed, fnv1a(name));
        match unit {
            Unit::Vector { len, init, .. } => {
                let key = random::key(base).map_err(mlx("seeding"))?;
                let loc = match init {
                    Init::Small => 0.0,
                    Init::NearOne => 1.0,
                };
                let v = random::normal::<f32>(&[*len][..], loc, INIT_STD, &key).map_err(mlx("generating"))?;
                let v = v.as_dtype(Dtype::Bfloat16).map_err(mlx("casting"))?;
                transforms::eval([&v]).map_err(mlx("evaluating"))?;
                Ok(vec![v])
            }
            Unit::Tensor { shape, .. } => {
                let key = random::key(base).map_err(mlx("seeding"))?;
                let last = shape.last().copied().unwrap_or(1).max(*shape.get(1).unwrap_or(&1));
                let t = random::normal::<f32>(&shape[..], 0.0, matrix_std(last), &key).map_err(mlx("generating"))?;
                let t = t.as_dtype(Dtype::Bfloat16).map_err(mlx("casting"))?;
                transforms::eval([&t]).map_err(mlx("evaluating"))?;
                Ok(vec![t])
            }
            Unit::Matrix { rows, cols, quant, live_rows, experts, .. } => {
                let block = (CHUNK_ELEMENTS / i64::from(*cols)).clamp(1, i64::from(*rows)) as i32;
                let n_parts = quant.map_or(1, |_| 3);
                let mut parts: Vec<Vec<Array>> = vec![Vec::new(); n_parts];
                let mut start = 0;
                let mut chunk = 0u64;
                while start < *rows {
                    let r = block.min(rows - start);
                    let key = random::key(mix(base, chunk)).map_err(mlx("seeding"))?;
                    let w = random::normal::<f32>(&[r, *cols][..], 0.0, matrix_std(*cols), &key)
                        .map_err(mlx("generating"))?;
                    let w = if start + r > *live_rows {
                        let mask: Vec<f32> =
                            (start..start + r).map(|row| f32::from(u8::from(row < *live_rows))).collect();
                        let mask = Array::from_slice(&mask, &[r, 1]);
                        w.multiply(&mask).map_err(mlx("masking"))?
                    } else {
                        w
                    };
                    let out = match quant {
                        // Quantize from f32, then store scales/biases in bf16 as
                        // mlx-lm does for a bf16 checkpoint.
                        Some((gs, bits)) => {
                            let (q, s, b) = ops::quantize(&w, *gs, *bits).map_err(mlx("quantizing"))?;
                            vec![
                                q,
                                s.as_dtype(Dtype::Bfloat16).map_err(mlx("casting"))?,
                                b.as_dtype(Dtype::Bfloat16).map_err(mlx("casting"))?,
                            ]
                        }
                        None => vec![w.as_dtype(Dtype::Bfloat16).map_err(mlx("casting"))?],
                    };
                    // Evaluate now so the f32 block is freed before the next one.
                    transforms::eval(out.iter()).map_err(mlx("evaluating"))?;
                    for (acc, a) in parts.iter_mut().zip(out) {
                        acc.push(a);
                    }
                    start += r;
                    chunk += 1;
                }
                let mut arrays = Vec::with_capacity(n_parts);
                for mut blocks in parts {
                    let a = if blocks.len() == 1 {
                        blocks.remove(0)
                    } else {
                        let a = ops::concatenate(&blocks, 0).map_err(mlx("concatenating"))?;
                        transforms::eval([&a]).map_err(mlx("evaluating"))?;
                        a
                    };
                    let a = if *experts > 1 {
                        let last = a.dim(-1);
                        let a = a.reshape(&[*experts, rows / experts, last]).map_err(mlx("reshaping"))?;
                        transforms::eval([&a]).map_err(mlx("evaluating"))?;
                        a
                    } else {
                        a
                    };
                    arrays.push(a);
                }
                Ok(arrays)
            }
        }
    }
}

/// Rejects specs the layout cannot hold, before anything is written.
fn validate(spec: &DemoSpec, s: &ModelShape) -> Result<(), DemoError> {
    let invalid = |reason: String| Err(DemoError::InvalidSpec { reason });
    if spec.mixed_precision && spec.bits.quantized().is_none() {
        return invalid("mixed precision needs a quantized model (4 or 8 bits)".into());
    }
    if let Some(arch) = spec.preset.arch().filter(|a| *a != spec.arch) {
        return invalid(format!("the {} preset is a {arch} model: pass --arch {arch}", spec.preset));
    }
    if spec.max_shard_bytes == Some(0) {
        return invalid("max_shard_bytes must be positive".into());
    }
    if spec.bits.quantized().is_none() {
        return Ok(());
    }
    let mut group_sizes = vec![spec.group_size];
    group_sizes.extend(overrides(spec).into_iter().map(|(_, gs, _)| gs));
    for gs in group_sizes {
        if ![32, 64, 128].contains(&gs) {
            return invalid(format!("group size {gs} (MLX supports 32, 64, 128)"));
        }
        let mut widths = vec![s.hidden_size, s.num_attention_heads * s.head_dim, s.intermediate_size];
        widths.extend(s.moe.map(|m| m.intermediate_size));
        widths.extend(s.moe.and_then(|m| m.shared));
        widths.extend(s.linear.map(|l| l.value_heads * l.value_head_dim));
        if let Some(w) = widths.iter().find(|&&w| w % gs != 0) {
            return invalid(format!(
                "group size {gs} does not divide the input width {w} of some layer of the {} preset",
                spec.preset
            ));
        }
    }
    Ok(())
}

/// FNV-1a: a stable hash of a tensor name (std's hasher may change between releases).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// SplitMix64 finaliser over `a` and `b`: a well-spread seed per (tensor, block).
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_add(0x9e37_79b9_7f4a_7c15).wrapping_add(a << 6).wrapping_add(a >> 2);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
