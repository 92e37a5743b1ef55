//! What a model folder will cost in memory, read from `config.json` and the
//! safetensors headers only: no tensor data is read and MLX is asked only
//! which device it computes on (which decides the matmul kernel), so this is
//! safe to call on a model far too large for the machine.

use std::path::Path;

use headroom_core::fit::ModelFootprint;

use crate::backend::backend_info;
use crate::config::ModelConfig;
use crate::error::{EngineError, Result};
use crate::loader::{dtype_size, is_dropped, read_header, weight_files, ComputeDtype};
use crate::quant::QuantKernel;

/// The footprint of the model in `dir` loaded with the engine's default dtype.
pub fn inspect_model(dir: &Path) -> Result<ModelFootprint> {
    inspect_model_as(dir, ComputeDtype::Native)
}

/// The footprint of the model in `dir` loaded as `dtype`: every header is
/// checked as strictly as the loader does, and the bytes counted are those
/// the loader would keep (tied `lm_head` and RoPE tables dropped, floats
/// widened under [`ComputeDtype::F32`]).
pub fn inspect_model_as(dir: &Path, dtype: ComputeDtype) -> Result<ModelFootprint> {
    let config = ModelConfig::from_dir(dir)?;
    let mut weight_bytes = 0u64;
    // The embedding's float dtype is the activations' (and the KV cache's)
    // under Native: a quantized embedding dequantizes to its scales' dtype.
    let mut embed_float: Option<u64> = None;
    let mut any_float: Option<u64> = None;
    for file in weight_files(dir)? {
        for (name, (dt, shape)) in read_header(&file)? {
            if is_dropped(&name, &config) {
                continue;
            }
            let size = dtype_size(&dt).ok_or_else(|| EngineError::CorruptWeights {
                file: file.clone(),
                reason: format!("tensor {name} has unknown dtype {dt}"),
            })?;
            let is_float = matches!(dt.as_str(), "F32" | "F16" | "BF16");
            let size = if is_float && dtype == ComputeDtype::F32 { 4 } else { size };
            let numel: u64 = shape.iter().map(|&d| u64::try_from(d).unwrap_or(0)).product();
            weight_bytes = weight_bytes.saturating_add(numel.saturating_mul(size));
            if is_float {
                any_float.get_or_insert(size);
                if name.starts_with("model.embed_tokens.") {
                    embed_float = Some(size);
                }
            }
        }
    }
    let act_bytes = match dtype {
        ComputeDtype::F32 => 4,
        ComputeDtype::Native => embed_float.or(any_float).unwrap_or(4),
    };
    let dim = |v: i32| u64::try_from(v).unwrap_or(0);
    Ok(ModelFootprint {
        weight_bytes,
        layers: dim(config.num_hidden_layers),
        attention_heads: dim(config.num_attention_heads),
        kv_heads: dim(config.num_key_value_heads),
        head_dim: dim(config.head_dim),
        hidden_size: dim(config.hidden_size),
        intermediate_size: dim(config.intermediate_size),
        vocab_size: dim(config.vocab_size),
        kv_bytes_per_element: act_bytes,
        max_context: config.max_position_embeddings.and_then(|v| u64::try_from(v).ok()),
        prefill_dequantizes: config.quantization.is_some()
            && QuantKernel::for_device(backend_info().device) != QuantKernel::Fused,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::config::Arch;
    use crate::demo::{write_demo_model, Arch as DemoArch, Bits, DemoSpec, Preset};
    use crate::loader::load_model;
    use crate::testutil::{temp_dir, tiny_model, TinySpec};

    /// Bytes of tensor data in a safetensors file: its length minus the 8-byte
    /// length prefix and the header.
    fn data_bytes(file: &Path) -> u64 {
        let mut f = std::fs::File::open(file).unwrap_or_else(|e| panic!("{e}"));
        let mut len = [0u8; 8];
        f.read_exact(&mut len).unwrap_or_else(|e| panic!("{e}"));
        let len_total = f.metadata().map(|m| m.len()).unwrap_or_default();
        len_total - 8 - u64::from_le_bytes(len)
    }

    #[test]
    fn weight_bytes_equal_the_file_data_and_the_loaded_model() -> Result<()> {
        let dir = temp_dir("inspect-demo");
        write_demo_model(&dir, &DemoSpec::new(DemoArch::Qwen2, Preset::Tiny, Bits::Four))
            .unwrap_or_else(|e| panic!("{e}"));
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
        let config = ModelConfig::from_dir(&dir)?;
        assert_eq!(fp.layers, config.num_hidden_layers as u64);
        assert_eq!(fp.kv_heads, config.num_key_value_heads as u64);
        assert_eq!(fp.head_dim, config.head_dim as u64);
        assert_eq!(fp.vocab_size, config.vocab_size as u64);
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    #[test]
    fn the_estimator_uses_the_engine_chunk_and_cache_step() {
        assert_eq!(headroom_core::fit::PREFILL_CHUNK, crate::generate::PREFILL_CHUNK as u64);
        assert_eq!(headroom_core::fit::KV_STEP, crate::cache::KV_STEP as u64);
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
        write_demo_model(&dir, &DemoSpec::new(DemoArch::Qwen2, Preset::Tiny, Bits::Four))
            .unwrap_or_else(|e| panic!("{e}"));
        let file = weight_files(&dir).unwrap_or_else(|e| panic!("{e}")).remove(0);
        let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{e}"));
        // Cut inside the JSON header: its declared length now exceeds the file.
        std::fs::write(&file, &bytes[..40]).unwrap_or_else(|e| panic!("{e}"));
        let err = inspect_model(&dir).expect_err("truncated header");
        assert!(matches!(&err, EngineError::CorruptWeights { file: f, .. } if *f == file), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
