//! Strict loading of a model folder in two steps. [`stage`] reads
//! config.json and every header, checks them, and builds the whole model
//! with each tensor's shape and dtype checked against the config; MLX's
//! arrays are lazy, so this reads no tensor data and costs almost no
//! memory. [`materialize`] then evaluates every weight once (one pass over
//! the files). The worker stages a new model before it unloads the old one,
//! so a broken folder is refused while the old model keeps answering.

use std::path::Path;

#[cfg(any(test, feature = "test-support"))]
use crate::backend::backend_info;
use crate::config::read_config;
use crate::error::{EngineError, Result};
use crate::models::Model;
use crate::quant::QuantKernel;
use crate::weights::{ComputeDtype, Weights};

/// Builds the model in `dir` with every tensor checked, without reading
/// any tensor data (see the module docs).
pub(crate) fn stage(dir: &Path, dtype: ComputeDtype, kernel: QuantKernel) -> Result<Model> {
    let config = read_config(dir)?;
    let mut weights = Weights::open(dir, &config, dtype, kernel)?;
    let model = Model::load(config, &mut weights)?;
    weights.finish()?;
    Ok(model)
}

/// Reads every weight of a staged model, once for all shards. A file that
/// is short despite its header (changed under us) fails here.
pub(crate) fn materialize(model: &Model, dir: &Path) -> Result<()> {
    mlx_rs::transforms::eval(model.parameters()).map_err(|e| EngineError::CorruptWeights {
        file: dir.to_owned(),
        reason: format!("reading tensor data failed: {e}"),
    })
}

/// Loads the model in `dir`, strictly, and evaluates its weights once, with
/// the quantized-matmul kernel that suits this process's device.
#[cfg(any(test, feature = "test-support"))]
pub fn load_model(dir: &Path, dtype: ComputeDtype) -> Result<Model> {
    load_model_with(dir, dtype, QuantKernel::for_device(backend_info().device))
}

/// `load_model` with the quantized-matmul kernel chosen by the caller (the
/// benchmark and the parity test compare them).
#[cfg(any(test, feature = "test-support"))]
pub fn load_model_with(dir: &Path, dtype: ComputeDtype, kernel: QuantKernel) -> Result<Model> {
    let model = stage(dir, dtype, kernel)?;
    materialize(&model, dir)?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use headroom_core::format::FormatError;
    use mlx_rs::{Array, Dtype};

    use super::*;
    use crate::cache::KvCache;
    use crate::demo::Arch;
    use crate::error::MlxContext;
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
            |e| matches!(e, EngineError::Weights { file, source: FormatError::Header { reason } } if file.ends_with("model.safetensors") && reason.contains("truncated")),
        );
        expect_failure(
            |d, t, s| {
                write_tensors(d, s, t);
                std::fs::write(d.join("model.safetensors"), b"\xff\xff\xff\xff\x00\x00\x00\x00garbage")
                    .expect("garble");
            },
            |e| matches!(e, EngineError::Weights { .. }),
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
            |e| matches!(e, EngineError::Format { source: FormatError::UnknownModelType { model_type }, .. } if model_type == "phi3"),
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
