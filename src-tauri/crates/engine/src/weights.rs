//! The tensors of a checkpoint on disk: the weight files of a folder (the
//! single file, or the shards the index names), every header read and
//! checked by `headroom_core::format::safetensors` before MLX opens a file,
//! and [`Weights`], from which each architecture takes each tensor exactly
//! once with its shape and dtype checked.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use headroom_core::format::safetensors::{header_len, parse_header, parse_index, INDEX_FILE, SINGLE_FILE};
use headroom_core::format::{Dtype, Header, LayerQuant, ModelConfig, Quantization};
use mlx_rs::{Array, Dtype as MlxDtype};

use crate::error::{EngineError, MlxContext, Result};
use crate::layers::{Embedding, Linear, LinearWeight, RmsNorm, SwitchLinear};
use crate::quant::{QuantKernel, QuantizedMatrix};
use crate::source::{read_gguf_model, ModelFiles};

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

/// Reads and checks the header of one safetensors file. Only the header is
/// read, so this costs the same for a 100 KB file and a 100 GB one.
pub(crate) fn read_header(file: &Path) -> Result<Header> {
    let corrupt = |source| EngineError::Weights { file: file.to_owned(), source };
    let io = |source| EngineError::Io { path: file.to_owned(), source };
    let mut f = File::open(file).map_err(io)?;
    let file_len = f.metadata().map_err(io)?.len();
    let mut prefix = Vec::with_capacity(8);
    (&mut f).take(8).read_to_end(&mut prefix).map_err(io)?;
    let len = header_len(&prefix, file_len).map_err(corrupt)?;
    // header_len bounds it by the format's 100 MB limit and the file's size.
    let mut json = vec![0u8; usize::try_from(len).unwrap_or(0)];
    f.read_exact(&mut json).map_err(io)?;
    parse_header(&json, file_len).map_err(corrupt)
}

/// The weight files of a model, in a fixed order (file names sorted): the
/// GGUF file itself for a GGUF model.
pub(crate) fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    if let ModelFiles::Gguf(file) = ModelFiles::locate(dir) {
        return Ok(vec![file]);
    }
    let index = dir.join(INDEX_FILE);
    if index.is_file() {
        let text = std::fs::read(&index).map_err(|source| EngineError::Io { path: index.clone(), source })?;
        let names = parse_index(&text).map_err(|source| EngineError::Format { path: index.clone(), source })?;
        let files: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).collect();
        if let Some(missing) = files.iter().find(|f| !f.is_file()) {
            return Err(EngineError::MissingShard { file: missing.clone(), index });
        }
        return Ok(files);
    }
    let single = dir.join(SINGLE_FILE);
    if single.is_file() {
        return Ok(vec![single]);
    }
    Err(EngineError::MissingWeights { dir: dir.to_owned() })
}

/// Every weight file's checked header, in the engine's order. A GGUF
/// file's is its tensor table as MLX will hold it, under Hugging Face names.
pub(crate) fn read_headers(dir: &Path) -> Result<Vec<(PathBuf, Header)>> {
    if let ModelFiles::Gguf(file) = ModelFiles::locate(dir) {
        let (_, model) = read_gguf_model(&file)?;
        return Ok(vec![(file, model.header)]);
    }
    weight_files(dir)?.into_iter().map(|f| read_header(&f).map(|h| (f, h))).collect()
}

#[derive(Debug)]
struct Entry {
    file: PathBuf,
    dtype: Dtype,
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
    /// Opens every weight file of `dir` lazily: the headers are checked
    /// first (a bad last shard fails before MLX opens any), then MLX maps
    /// names to file ranges. No tensor data is read until the model is evaluated.
    pub(crate) fn open(dir: &Path, config: &ModelConfig, dtype: ComputeDtype, kernel: QuantKernel) -> Result<Self> {
        let headers = read_headers(dir)?;
        let source = match headers.as_slice() {
            [(single, _)] => single.clone(),
            _ => dir.join(INDEX_FILE),
        };
        let mut entries: HashMap<String, Entry> = HashMap::new();
        for (file, header) in &headers {
            for (name, t) in &header.tensors {
                if let Some(prev) = entries.get(name) {
                    return Err(EngineError::DuplicateTensor {
                        tensor: name.clone(),
                        first: prev.file.clone(),
                        second: file.clone(),
                    });
                }
                let entry = Entry { file: file.clone(), dtype: t.dtype, shape: t.shape_i32(), array: None };
                entries.insert(name.clone(), entry);
            }
        }
        entries.retain(|name, _| !config.is_dropped(name));
        for (file, _) in &headers {
            let arrays = if ModelFiles::locate(dir).gguf().is_some() {
                gguf_arrays(file)?
            } else {
                Array::load_safetensors(file)
                    .map_err(|e| EngineError::CorruptWeights { file: file.clone(), reason: e.to_string() })?
            };
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
        let ok_dtype = if float { entry.dtype.is_model_float() } else { entry.dtype == Dtype::U32 };
        if !ok_dtype {
            return Err(EngineError::WrongDtype {
                tensor: name.to_owned(),
                file: entry.file,
                expected: if float { "F32, F16 or BF16".into() } else { "U32 (packed quantized)".into() },
                found: entry.dtype.as_str().to_owned(),
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
            ComputeDtype::F32 if a.dtype() != MlxDtype::Float32 => a.as_dtype(MlxDtype::Float32).op("cast to f32"),
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
                || self.entries.get(&format!("{prefix}.weight")).is_some_and(|e| e.dtype == Dtype::U32))
            .then_some((q.default.group_size, q.default.bits)),
        }
    }

    fn matrix(&mut self, prefix: &str, out: i32, inp: i32) -> Result<Option<QuantizedMatrix>> {
        self.matrix_nd(prefix, &[], out, inp)
    }

    /// A quantized `[..lead, out, in]` stack of matrices (the experts of a
    /// mixture-of-experts layer have `lead = [experts]`), or `None` if dense.
    fn matrix_nd(&mut self, prefix: &str, lead: &[i32], out: i32, inp: i32) -> Result<Option<QuantizedMatrix>> {
        let Some((group_size, bits)) = self.layer_quant(prefix) else {
            return Ok(None);
        };
        // The format reader allowed only MLX's bit widths and group sizes;
        // a matrix whose width is not a whole number of groups cannot be one.
        if inp % group_size != 0 || (inp * bits) % 32 != 0 {
            return Err(EngineError::Shape {
                what: "quantized matrix",
                expected: format!(
                    "an input width divisible by the group size {group_size} and packing into u32 at {bits} bits"
                ),
                found: vec![out, inp],
            });
        }
        let shape = |last: i32| [lead, &[out, last]].concat();
        let weight = self.take_raw(&format!("{prefix}.weight"), &shape(inp * bits / 32), false)?;
        let scales = self.float(&format!("{prefix}.scales"), &shape(inp / group_size))?;
        let biases = self.float(&format!("{prefix}.biases"), &shape(inp / group_size))?;
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

    /// The `[experts, out, in]` weights of a mixture-of-experts layer's
    /// projection (mlx-lm's `SwitchLinear`, all experts stacked).
    pub(crate) fn switch_linear(&mut self, prefix: &str, experts: i32, inp: i32, out: i32) -> Result<SwitchLinear> {
        Ok(match self.matrix_nd(prefix, &[experts], out, inp)? {
            Some(q) => SwitchLinear::Quantized(q),
            None => SwitchLinear::Dense(self.float(&format!("{prefix}.weight"), &[experts, out, inp])?),
        })
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
    pub(crate) fn finish(self) -> Result<()> {
        match self.entries.into_iter().min_by(|a, b| a.0.cmp(&b.0)) {
            Some((tensor, entry)) => Err(EngineError::UnexpectedTensor { tensor, file: entry.file }),
            None => Ok(()),
        }
    }
}

/// Every tensor of a GGUF file, read by MLX (all at once: its GGUF reader is
/// not lazy) after the header was checked, under Hugging Face names, with
/// llama.cpp's rotary row permutation of q and k undone.
fn gguf_arrays(file: &Path) -> Result<HashMap<String, Array>> {
    let corrupt = |reason: String| EngineError::CorruptWeights { file: file.to_owned(), reason };
    let (_, model) = read_gguf_model(file)?;
    let gguf = mlx_rs::io::GgufFile::load(file).map_err(|e| corrupt(e.to_string()))?;
    let mut out = HashMap::with_capacity(model.arrays.len());
    for name in &model.arrays {
        let array = gguf
            .get_array(&name.mlx)
            .map_err(|e| corrupt(e.to_string()))?
            .ok_or_else(|| corrupt(format!("MLX did not return tensor {} listed in the header", name.mlx)))?;
        out.insert(name.hf.clone(), array);
    }
    for (hf, heads) in &model.unpermute {
        if let Some(a) = out.remove(hf) {
            out.insert(hf.clone(), unpermute_rows(&a, *heads)?);
        }
    }
    Ok(out)
}

/// Undoes llama.cpp's permutation of a q or k projection's rows: its
/// converter regroups each head's rows from (2, head_dim/2) to
/// (head_dim/2, 2) order so rope can run on interleaved pairs. Whole rows
/// move (a packed weight's, its scales' and biases' alike), so nothing is
/// requantized and the result is exactly the Hugging Face layout.
fn unpermute_rows(a: &Array, heads: i32) -> Result<Array> {
    let shape = a.shape().to_vec();
    let bad = || EngineError::Shape {
        what: "GGUF q/k projection",
        expected: format!("rows divisible into {heads} heads of an even width"),
        found: shape.clone(),
    };
    let [rows, cols] = shape[..] else { return Err(bad()) };
    if heads <= 0 || rows % (2 * heads) != 0 {
        return Err(bad());
    }
    let half = rows / heads / 2;
    a.reshape(&[heads, half, 2, cols])
        .op("reshape")?
        .transpose_axes(&[0, 2, 1, 3])
        .op("transpose")?
        .reshape(&[rows, cols])
        .op("reshape")
}
