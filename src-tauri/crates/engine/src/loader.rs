//! Strict loading of a model folder: config.json + model.safetensors, or the
//! shards listed by model.safetensors.index.json.
//!
//! Every header is read and checked (truncation, dtype, shape) before MLX
//! touches the data, every parameter must be consumed exactly once, and the
//! whole model is evaluated once at the end, so a failure leaves nothing
//! half-loaded and a good folder costs one pass over its bytes.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use mlx_rs::{Array, Dtype};
use serde::Deserialize;

use crate::backend::backend_info;
use crate::config::{Arch, LayerQuant, ModelConfig, Quantization};
use crate::error::{EngineError, MlxContext, Result};
use crate::layers::{Embedding, Linear, LinearWeight, RmsNorm};
use crate::models::{llama, qwen2, qwen3, Model};
use crate::quant::{QuantKernel, QuantizedMatrix, SUPPORTED_BITS, SUPPORTED_GROUP_SIZES};

/// Which float dtype the model computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ComputeDtype {
    /// Keep the checkpoint's dtypes, as mlx-lm does (bf16 scales -> bf16
    /// activations). Needed for logits parity with mlx-lm.
    #[default]
    Native,
    /// Cast every float parameter to f32 once at load: on MLX's CPU backend
    /// bf16 matmuls are several times slower than f32 ones.
    F32,
}

/// A header entry of a safetensors file.
#[derive(Debug, Deserialize)]
struct HeaderEntry {
    dtype: String,
    shape: Vec<i64>,
    data_offsets: [u64; 2],
}

/// Bytes per element of a safetensors dtype; `None` for one we do not know.
pub(crate) fn dtype_size(dtype: &str) -> Option<u64> {
    match dtype {
        "F32" | "U32" | "I32" => Some(4),
        "F16" | "BF16" | "U16" | "I16" => Some(2),
        "U8" | "I8" | "BOOL" => Some(1),
        "F64" | "I64" | "U64" => Some(8),
        _ => None,
    }
}

/// Reads and checks the header of one safetensors file: every tensor's bytes
/// must lie inside the file and match its dtype × shape. Only the header is
/// read, so this costs the same for a 100 KB file and a 100 GB one.
pub(crate) fn read_header(file: &Path) -> Result<BTreeMap<String, (String, Vec<i32>)>> {
    let corrupt = |reason: String| EngineError::CorruptWeights { file: file.to_owned(), reason };
    let io = |source| EngineError::Io { path: file.to_owned(), source };
    let mut f = File::open(file).map_err(io)?;
    let file_len = f.metadata().map_err(io)?.len();
    let mut len_bytes = [0u8; 8];
    f.read_exact(&mut len_bytes).map_err(|_| corrupt("shorter than the 8-byte header length".into()))?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > file_len.saturating_sub(8) || header_len > 100 << 20 {
        return Err(corrupt(format!("header length {header_len} exceeds the file ({file_len} bytes)")));
    }
    let mut header = vec![0u8; usize::try_from(header_len).map_err(|_| corrupt("header too large".into()))?];
    f.read_exact(&mut header).map_err(|_| corrupt("header cut short".into()))?;
    let raw: HashMap<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| corrupt(format!("header is not valid JSON: {e}")))?;
    let data_len = file_len - 8 - header_len;
    let mut out = BTreeMap::new();
    for (name, value) in raw {
        if name == "__metadata__" {
            continue;
        }
        let e: HeaderEntry =
            serde_json::from_value(value).map_err(|err| corrupt(format!("header entry {name}: {err}")))?;
        let [start, end] = e.data_offsets;
        if end > data_len || start > end {
            return Err(corrupt(format!(
                "tensor {name} needs bytes {start}..{end} but the file holds {data_len} bytes of data (truncated?)"
            )));
        }
        let Some(elem) = dtype_size(&e.dtype) else {
            return Err(corrupt(format!("tensor {name} has unknown dtype {}", e.dtype)));
        };
        let numel: i64 = e.shape.iter().product();
        if u64::try_from(numel).ok().map(|n| n * elem) != Some(end - start) {
            return Err(corrupt(format!("tensor {name}: {} bytes for shape {:?} {}", end - start, e.shape, e.dtype)));
        }
        let shape = e.shape.iter().map(|&d| i32::try_from(d).unwrap_or(i32::MAX)).collect();
        out.insert(name, (e.dtype, shape));
    }
    Ok(out)
}

/// The weight files of a folder, in a fixed order.
pub(crate) fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|source| EngineError::Io { path: index.clone(), source })?;
        let invalid = |reason: String| EngineError::InvalidConfig { path: index.clone(), reason };
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        let map = v
            .get("weight_map")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| invalid("no \"weight_map\" object".into()))?;
        let mut files: Vec<PathBuf> = map.values().filter_map(serde_json::Value::as_str).map(|f| dir.join(f)).collect();
        files.sort();
        files.dedup();
        for f in &files {
            if !f.exists() {
                return Err(EngineError::CorruptWeights {
                    file: f.clone(),
                    reason: format!("listed in {} but missing", index.display()),
                });
            }
        }
        return Ok(files);
    }
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    Err(EngineError::MissingWeights { dir: dir.to_owned() })
}

/// mlx-lm's sanitize: precomputed RoPE tables are not parameters, and a
/// tied model ignores a stored lm_head.
pub(crate) fn is_dropped(name: &str, config: &ModelConfig) -> bool {
    name.contains("self_attn.rotary_emb.inv_freq") || (config.tie_word_embeddings && name == "lm_head.weight")
}

#[derive(Debug)]
struct Entry {
    file: PathBuf,
    dtype: String,
    shape: Vec<i32>,
    array: Option<Array>,
}

/// All tensors of a checkpoint; the model takes each one exactly once.
#[derive(Debug)]
pub(crate) struct Weights {
    entries: HashMap<String, Entry>,
    /// Where a missing tensor was looked for (the index, or the single file).
    source: PathBuf,
    dtype: ComputeDtype,
    quant: Option<Quantization>,
    kernel: QuantKernel,
}

impl Weights {
    fn open(dir: &Path, config: &ModelConfig, dtype: ComputeDtype, kernel: QuantKernel) -> Result<Self> {
        let files = weight_files(dir)?;
        let source = if files.len() == 1 { files[0].clone() } else { dir.join("model.safetensors.index.json") };
        let mut entries: HashMap<String, Entry> = HashMap::new();
        // Check every header first: a bad last shard fails before any data is read.
        for file in &files {
            for (name, (dtype, shape)) in read_header(file)? {
                if let Some(prev) = entries.get(&name) {
                    return Err(EngineError::DuplicateTensor {
                        tensor: name,
                        first: prev.file.clone(),
                        second: file.clone(),
                    });
                }
                entries.insert(name, Entry { file: file.clone(), dtype, shape, array: None });
            }
        }
        entries.retain(|name, _| !is_dropped(name, config));
        for file in &files {
            // Lazy in MLX: this maps names to file ranges; data is read at eval.
            let arrays = Array::load_safetensors(file)
                .map_err(|e| EngineError::CorruptWeights { file: file.clone(), reason: e.to_string() })?;
            for (name, array) in arrays {
                if let Some(entry) = entries.get_mut(&name) {
                    entry.array = Some(array);
                }
            }
        }
        Ok(Self { entries, source, dtype, quant: config.quantization.clone(), kernel })
    }

    pub(crate) fn kernel(&self) -> QuantKernel {
        self.kernel
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Takes a tensor, checking its shape and dtype class.
    fn take_raw(&mut self, name: &str, shape: &[i32], float: bool) -> Result<Array> {
        let entry = self
            .entries
            .remove(name)
            .ok_or_else(|| EngineError::MissingTensor { tensor: name.to_owned(), file: self.source.clone() })?;
        let ok_dtype =
            if float { matches!(entry.dtype.as_str(), "F32" | "F16" | "BF16") } else { entry.dtype == "U32" };
        if !ok_dtype {
            return Err(EngineError::WrongDtype {
                tensor: name.to_owned(),
                file: entry.file,
                expected: if float { "F32, F16 or BF16".into() } else { "U32 (packed quantized)".into() },
                found: entry.dtype,
            });
        }
        if entry.shape != shape {
            return Err(EngineError::WrongShape {
                tensor: name.to_owned(),
                file: entry.file,
                expected: shape.to_vec(),
                found: entry.shape,
            });
        }
        let array = entry.array.ok_or_else(|| EngineError::CorruptWeights {
            file: entry.file.clone(),
            reason: format!("MLX did not return tensor {name} listed in the header"),
        })?;
        Ok(array)
    }

    /// A float tensor, in the compute dtype.
    pub(crate) fn float(&mut self, name: &str, shape: &[i32]) -> Result<Array> {
        let a = self.take_raw(name, shape, true)?;
        match self.dtype {
            ComputeDtype::F32 if a.dtype() != Dtype::Float32 => a.as_dtype(Dtype::Float32).op("cast to f32"),
            _ => Ok(a),
        }
    }

    /// How the layer at `prefix` is stored, following mlx-lm: an explicit
    /// per-layer entry decides; otherwise a quantized model quantizes the
    /// layers that have `.scales`.
    fn layer_quant(&self, prefix: &str) -> Option<(i32, i32)> {
        let q = self.quant.as_ref()?;
        match q.overrides.get(prefix) {
            Some(LayerQuant::Dense) => None,
            Some(LayerQuant::Quantized(p)) => Some((p.group_size, p.bits)),
            // A packed (u32) weight without scales is a quantized layer with
            // its scales missing, which is the error worth reporting.
            None => (self.has(&format!("{prefix}.scales"))
                || self.entries.get(&format!("{prefix}.weight")).is_some_and(|e| e.dtype == "U32"))
            .then_some((q.default.group_size, q.default.bits)),
        }
    }

    fn matrix(&mut self, prefix: &str, out: i32, inp: i32) -> Result<Option<QuantizedMatrix>> {
        let Some((group_size, bits)) = self.layer_quant(prefix) else {
            return Ok(None);
        };
        if !SUPPORTED_BITS.contains(&bits) || !SUPPORTED_GROUP_SIZES.contains(&group_size) {
            return Err(EngineError::UnsupportedQuantization { bits, group_size });
        }
        let weight = self.take_raw(&format!("{prefix}.weight"), &[out, inp * bits / 32], false)?;
        let scales = self.float(&format!("{prefix}.scales"), &[out, inp / group_size])?;
        let biases = self.float(&format!("{prefix}.biases"), &[out, inp / group_size])?;
        Ok(Some(QuantizedMatrix { weight, scales, biases, group_size, bits, kernel: self.kernel }))
    }

    pub(crate) fn linear(&mut self, prefix: &str, inp: i32, out: i32, bias: bool) -> Result<Linear> {
        let weight = match self.matrix(prefix, out, inp)? {
            Some(q) => LinearWeight::Quantized(q),
            None => LinearWeight::Dense(self.float(&format!("{prefix}.weight"), &[out, inp])?),
        };
        let bias = if bias { Some(self.float(&format!("{prefix}.bias"), &[out])?) } else { None };
        Ok(Linear { weight, bias })
    }

    pub(crate) fn embedding(&mut self, prefix: &str, vocab: i32, hidden: i32) -> Result<Embedding> {
        Ok(match self.matrix(prefix, vocab, hidden)? {
            Some(q) => Embedding::Quantized(q),
            None => Embedding::Dense(self.float(&format!("{prefix}.weight"), &[vocab, hidden])?),
        })
    }

    pub(crate) fn rms_norm(&mut self, prefix: &str, dim: i32, eps: f32) -> Result<RmsNorm> {
        Ok(RmsNorm { weight: self.float(&format!("{prefix}.weight"), &[dim])?, eps })
    }

    /// Fails on any tensor nobody took.
    fn finish(self) -> Result<()> {
        match self.entries.into_iter().min_by(|a, b| a.0.cmp(&b.0)) {
            Some((tensor, entry)) => Err(EngineError::UnexpectedTensor { tensor, file: entry.file }),
            None => Ok(()),
        }
    }
}

/// Loads the model in `dir`, strictly, and evaluates its weights once, with
/// the quantized-matmul kernel that suits this process's device.
pub fn load_model(dir: &Path, dtype: ComputeDtype) -> Result<Model> {
    load_model_with(dir, dtype, QuantKernel::for_device(backend_info().device))
}

/// `load_model` with the quantized-matmul kernel chosen by the caller (the
/// benchmark compares them).
pub fn load_model_with(dir: &Path, dtype: ComputeDtype, kernel: QuantKernel) -> Result<Model> {
    let config = ModelConfig::from_dir(dir)?;
    let mut weights = Weights::open(dir, &config, dtype, kernel)?;
    let model = match config.arch {
        Arch::Qwen2 => Model::Qwen2(qwen2::Model::load(config, &mut weights)?),
        Arch::Qwen3 => Model::Qwen3(qwen3::Model::load(config, &mut weights)?),
        Arch::Llama => Model::Llama(llama::Model::load(config, &mut weights)?),
    };
    weights.finish()?;
    // One eval for all shards; a file that is short despite its header (changed
    // under us) fails here, and the model is dropped with it.
    mlx_rs::transforms::eval(model.parameters()).map_err(|e| EngineError::CorruptWeights {
        file: dir.to_owned(),
        reason: format!("reading tensor data failed: {e}"),
    })?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::KvCache;
    use crate::testutil::{temp_dir, tensors, tiny_model, write_tensors, TinySpec, HIDDEN, VOCAB};

    fn logits_ok(model: &Model) -> Result<()> {
        let mut cache: KvCache = model.new_cache();
        let logits = model.forward(&Array::from_slice(&[1u32, 5, 9], &[1, 3]), &mut cache)?;
        assert_eq!(logits.shape(), &[1, VOCAB]);
        let v = logits.as_dtype(Dtype::Float32).op("cast")?;
        assert!(v.as_slice::<f32>().iter().all(|x| x.is_finite()));
        Ok(())
    }

    #[test]
    fn loads_every_arch_and_weight_format() -> Result<()> {
        for arch in [Arch::Qwen2, Arch::Qwen3, Arch::Llama] {
            for (quant, float, tied) in [
                (Some((64, 4)), Dtype::Float32, true),
                (Some((32, 8)), Dtype::Bfloat16, false),
                (None, Dtype::Bfloat16, true),
                (None, Dtype::Float16, false),
            ] {
                let spec = TinySpec { quant, float, tied, ..TinySpec::new(arch) };
                let dir = tiny_model("load", &spec);
                for dtype in [ComputeDtype::Native, ComputeDtype::F32] {
                    let model = load_model(&dir, dtype)?;
                    logits_ok(&model)?;
                }
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        Ok(())
    }

    /// A folder made by `edit`, which must fail with `check`; then a good
    /// model still loads (nothing global was left behind).
    fn expect_failure(
        edit: impl FnOnce(&Path, &mut HashMap<String, Array>, &TinySpec),
        check: impl FnOnce(&EngineError) -> bool,
    ) {
        let spec = TinySpec::new(Arch::Qwen2);
        let dir = temp_dir("bad");
        let mut t = tensors(&spec);
        edit(&dir, &mut t, &spec);
        let err = load_model(&dir, ComputeDtype::Native).expect_err("must fail");
        assert!(check(&err), "unexpected error: {err}");
        let _ = std::fs::remove_dir_all(&dir);
        let good = tiny_model("good", &spec);
        let model = load_model(&good, ComputeDtype::Native).expect("good model loads after a failure");
        logits_ok(&model).expect("and runs");
        let _ = std::fs::remove_dir_all(good);
    }

    #[test]
    fn missing_tensor_is_named() {
        expect_failure(
            |d, t, s| {
                t.remove("model.layers.1.mlp.up_proj.scales");
                write_tensors(d, s, t);
            },
            |e| matches!(e, EngineError::MissingTensor { tensor, .. } if tensor == "model.layers.1.mlp.up_proj.scales"),
        );
    }

    #[test]
    fn unexpected_tensor_is_named() {
        expect_failure(
            |d, t, s| {
                t.insert("model.layers.0.extra.weight".into(), Array::from_slice(&[1.0f32], &[1]));
                write_tensors(d, s, t);
            },
            |e| matches!(e, EngineError::UnexpectedTensor { tensor, file } if tensor == "model.layers.0.extra.weight" && file.ends_with("model.safetensors")),
        );
    }

    #[test]
    fn wrong_shape_is_named() {
        expect_failure(
            |d, t, s| {
                t.insert("model.norm.weight".into(), Array::from_slice(&[1.0f32; 32], &[32]));
                write_tensors(d, s, t);
            },
            |e| {
                matches!(e, EngineError::WrongShape { tensor, expected, found, .. }
                if tensor == "model.norm.weight" && expected == &[HIDDEN] && found == &[32])
            },
        );
    }

    #[test]
    fn wrong_dtype_is_named() {
        expect_failure(
            |d, t, s| {
                let w = t["model.layers.0.self_attn.q_proj.weight"].as_dtype(Dtype::Int32).expect("cast");
                t.insert("model.layers.0.self_attn.q_proj.weight".into(), w);
                write_tensors(d, s, t);
            },
            |e| matches!(e, EngineError::WrongDtype { tensor, found, .. } if tensor == "model.layers.0.self_attn.q_proj.weight" && found == "I32"),
        );
    }

    #[test]
    fn truncated_file_is_reported() {
        expect_failure(
            |d, t, s| {
                write_tensors(d, s, t);
                let f = d.join("model.safetensors");
                let bytes = std::fs::read(&f).expect("read");
                std::fs::write(&f, &bytes[..bytes.len() - 100]).expect("truncate");
            },
            |e| matches!(e, EngineError::CorruptWeights { file, reason } if file.ends_with("model.safetensors") && reason.contains("truncated")),
        );
        expect_failure(
            |d, t, s| {
                write_tensors(d, s, t);
                std::fs::write(d.join("model.safetensors"), b"\xff\xff\xff\xff\x00\x00\x00\x00garbage")
                    .expect("garble");
            },
            |e| matches!(e, EngineError::CorruptWeights { .. }),
        );
    }

    #[test]
    fn missing_config_and_weights_and_unknown_arch() {
        expect_failure(
            |d, t, s| {
                write_tensors(d, s, t);
                std::fs::remove_file(d.join("config.json")).expect("rm");
            },
            |e| matches!(e, EngineError::MissingConfig { .. }),
        );
        expect_failure(
            |d, t, s| {
                write_tensors(d, s, t);
                std::fs::remove_file(d.join("model.safetensors")).expect("rm");
            },
            |e| matches!(e, EngineError::MissingWeights { .. }),
        );
        expect_failure(
            |d, t, s| {
                write_tensors(d, s, t);
                let c = std::fs::read_to_string(d.join("config.json")).expect("read").replace("\"qwen2\"", "\"phi3\"");
                std::fs::write(d.join("config.json"), c).expect("write");
            },
            |e| matches!(e, EngineError::UnknownModelType { model_type, .. } if model_type == "phi3"),
        );
    }

    #[test]
    fn sharded_checkpoints_load_and_duplicates_are_refused() -> Result<()> {
        let spec = TinySpec::new(Arch::Llama);
        let dir = temp_dir("shards");
        let t = tensors(&spec);
        std::fs::write(
            dir.join("config.json"),
            std::fs::read_to_string(tiny_model("cfg", &spec).join("config.json")).expect("cfg"),
        )
        .expect("write");
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut map = serde_json::Map::new();
        for (k, v) in &t {
            let shard = if k.contains("layers.1") {
                "model-00002-of-00002.safetensors"
            } else {
                "model-00001-of-00002.safetensors"
            };
            map.insert(k.clone(), shard.into());
            if shard.contains("00001") {
                a.push((k.as_str(), v))
            } else {
                b.push((k.as_str(), v))
            }
        }
        Array::save_safetensors(a.clone(), None, dir.join("model-00001-of-00002.safetensors")).expect("save");
        Array::save_safetensors(b, None, dir.join("model-00002-of-00002.safetensors")).expect("save");
        let index = serde_json::json!({ "metadata": {}, "weight_map": map });
        std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).expect("index");
        logits_ok(&load_model(&dir, ComputeDtype::F32)?)?;

        // The same tensor in both shards: refused, naming both files.
        let mut b2: Vec<_> = a.iter().take(1).cloned().collect();
        let t2 = tensors(&TinySpec { seed: 9, ..spec.clone() });
        b2.extend(t2.iter().filter(|(k, _)| k.contains("layers.1")).map(|(k, v)| (k.as_str(), v)));
        Array::save_safetensors(b2, None, dir.join("model-00002-of-00002.safetensors")).expect("save");
        assert!(matches!(load_model(&dir, ComputeDtype::F32), Err(EngineError::DuplicateTensor { .. })));
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    #[test]
    fn tied_lm_head_and_rotary_tables_are_dropped_like_mlx_lm() -> Result<()> {
        let spec = TinySpec::new(Arch::Qwen2);
        let dir = temp_dir("sanitize");
        let mut t = tensors(&spec);
        t.insert("lm_head.weight".into(), Array::from_slice(&[0.0f32; 4], &[2, 2]));
        t.insert("model.layers.0.self_attn.rotary_emb.inv_freq".into(), Array::from_slice(&[0.0f32; 8], &[8]));
        write_tensors(&dir, &spec, &t);
        logits_ok(&load_model(&dir, ComputeDtype::Native)?)?;
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }
}
