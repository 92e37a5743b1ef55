//! What a model folder will cost in memory, read from `config.json` and the
//! safetensors headers only (through `headroom_core::format`, the same
//! reader the hub uses for a repo it has not downloaded): no tensor data is
//! read, and MLX is asked only which device it computes on (which decides
//! the default matmul kernel), so this is safe to call on a model far too
//! large for the machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use headroom_core::fit::ModelFootprint;
use headroom_core::format::{footprint, Header, LoadShape, ModelConfig};

use crate::backend::backend_info;
use crate::config::read_config;
use crate::error::{EngineError, Result};
use crate::quant::QuantKernel;
use crate::source::ModelFiles;
use crate::tokenizer::Tokenizer;
use crate::weights::{read_headers, ComputeDtype};

/// The footprint of the model in `dir` loaded with the engine's default dtype and kernel.
pub fn inspect_model(dir: &Path) -> Result<ModelFootprint> {
    inspect_model_as(dir, ComputeDtype::Native)
}

/// The footprint of the model in `dir` loaded as `dtype` with the device's default kernel.
pub fn inspect_model_as(dir: &Path, dtype: ComputeDtype) -> Result<ModelFootprint> {
    inspect_model_with(dir, dtype, QuantKernel::for_device(backend_info().device))
}

/// The footprint of the model in `dir` loaded as `dtype` with `kernel`:
/// every header is checked as strictly as the loader checks it, and the
/// bytes counted are those the loader would keep.
pub fn inspect_model_with(dir: &Path, dtype: ComputeDtype, kernel: QuantKernel) -> Result<ModelFootprint> {
    inspect(dir, dtype, kernel).map(|i| i.footprint)
}

/// A model folder's config and footprint, from its files' headers.
#[derive(Debug, Clone, PartialEq)]
pub struct Inspection {
    pub config: ModelConfig,
    pub footprint: ModelFootprint,
}

/// Reads and checks config.json and every weight header of `dir`, and that
/// the tokenizer's ids have rows in the embedding (as the loader checks it,
/// so the fit, the model list and a load agree on what cannot load).
pub fn inspect(dir: &Path, dtype: ComputeDtype, kernel: QuantKernel) -> Result<Inspection> {
    let config = read_config(dir)?;
    let headers: Vec<Header> = read_headers(dir)?.into_iter().map(|(_, h)| h).collect();
    check_tokenizer_fits(dir, &config)?;
    let footprint = footprint(&config, &headers, load_shape(dtype, kernel));
    Ok(Inspection { config, footprint })
}

/// A tokenizer that can produce an id past the embedding's rows cannot run
/// with this model (an out-of-bounds read in MLX's `take`).
pub(crate) fn check_vocab_rows(dir: &Path, max_token_id: u32, rows: i32) -> Result<()> {
    if i64::from(max_token_id) >= i64::from(rows) {
        return Err(EngineError::VocabMismatch { dir: dir.to_owned(), max_token_id, embedding_rows: rows });
    }
    Ok(())
}

/// [`check_vocab_rows`] for a folder's tokenizer.json, when it has one (a
/// missing one is the loader's to report). A GGUF file's vocabulary was
/// checked against its embedding by the format reader. The largest id is
/// kept per file (path, length and modification time), so the model list
/// parses a large tokenizer.json once, not every time it opens.
fn check_tokenizer_fits(dir: &Path, config: &ModelConfig) -> Result<()> {
    /// tokenizer.json's path, length and modification time.
    type FileId = (PathBuf, u64, Option<SystemTime>);
    static MAX_IDS: Mutex<BTreeMap<FileId, u32>> = Mutex::new(BTreeMap::new());
    let ModelFiles::Folder(folder) = ModelFiles::locate(dir) else { return Ok(()) };
    let file = folder.join("tokenizer.json");
    let Ok(meta) = std::fs::metadata(&file) else { return Ok(()) };
    let key = (file, meta.len(), meta.modified().ok());
    let known = MAX_IDS.lock().unwrap_or_else(PoisonError::into_inner).get(&key).copied();
    let max_token_id = match known {
        Some(id) => id,
        None => {
            let id = Tokenizer::from_dir(&folder)?.max_token_id();
            MAX_IDS.lock().unwrap_or_else(PoisonError::into_inner).insert(key, id);
            id
        }
    };
    check_vocab_rows(dir, max_token_id, config.text.vocab_size)
}

/// What the footprint needs to know about a load: for callers that read a
/// model's files elsewhere (the hub, over HTTP) and want the engine's answer.
pub fn load_shape(dtype: ComputeDtype, kernel: QuantKernel) -> LoadShape {
    LoadShape {
        widen_floats_to_f32: dtype == ComputeDtype::F32,
        dequantizing_kernel: kernel != QuantKernel::Fused,
        backend: backend_info().device.backend(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
    use crate::error::EngineError;
    use crate::loader::load_model;
    use crate::testutil::{temp_dir, tiny_model, TinySpec};
    use crate::weights::weight_files;

    /// Bytes of tensor data in a safetensors file: its length minus the 8-byte
    /// length prefix and the header.
    fn data_bytes(file: &Path) -> u64 {
        let mut f = std::fs::File::open(file).unwrap();
        let mut len = [0u8; 8];
        f.read_exact(&mut len).unwrap();
        let len_total = f.metadata().map(|m| m.len()).unwrap_or_default();
        len_total - 8 - u64::from_le_bytes(len)
    }

    #[test]
    fn weight_bytes_equal_the_file_data_and_the_loaded_model() -> Result<()> {
        let dir = temp_dir("inspect-demo");
        write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).unwrap();
        let fp = inspect_model(&dir)?;
        let files = weight_files(&dir)?;
        let on_disk: u64 = files.iter().map(|f| data_bytes(f)).sum();
        assert_eq!(fp.weight_bytes, on_disk);
        // And what MLX actually holds once loaded, in both dtypes.
        assert_eq!(fp.weight_bytes, load_model(&dir, ComputeDtype::Native)?.nbytes() as u64);
        let f32_fp = inspect_model_as(&dir, ComputeDtype::F32)?;
        assert_eq!(f32_fp.weight_bytes, load_model(&dir, ComputeDtype::F32)?.nbytes() as u64);
        assert!(f32_fp.weight_bytes > fp.weight_bytes);
        assert_eq!((fp.kv_bytes_per_element, f32_fp.kv_bytes_per_element), (2, 4));
        let config = read_config(&dir)?.text;
        assert_eq!(fp.layers, config.num_hidden_layers as u64);
        assert_eq!(fp.kv_heads, config.num_key_value_heads as u64);
        assert_eq!(fp.head_dim, config.head_dim as u64);
        assert_eq!(fp.vocab_size, config.vocab_size as u64);
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    #[test]
    fn untied_checkpoints_count_their_lm_head_like_the_loader() -> Result<()> {
        let spec = TinySpec { tied: false, ..TinySpec::new(Arch::Llama) };
        let dir = tiny_model("inspect-untied", &spec);
        let fp = inspect_model(&dir)?;
        assert_eq!(fp.weight_bytes, load_model(&dir, ComputeDtype::Native)?.nbytes() as u64);
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    #[test]
    fn a_truncated_header_is_a_corrupt_weights_error() {
        let dir = temp_dir("inspect-trunc");
        write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).unwrap();
        let file = weight_files(&dir).unwrap().remove(0);
        let bytes = std::fs::read(&file).unwrap();
        // Cut inside the JSON header: its declared length now exceeds the file.
        std::fs::write(&file, &bytes[..40]).unwrap();
        let err = inspect_model(&dir).expect_err("truncated header");
        assert!(matches!(&err, EngineError::Weights { file: f, .. } if *f == file), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
