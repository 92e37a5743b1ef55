//! Tiny random models in the mlx-community layout, written by the tests
//! themselves (until `crate::demo` provides the shared writer).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use mlx_rs::random::RandomState;
use mlx_rs::{Array, Dtype};

use crate::demo::Arch;
use crate::quant::QuantizedMatrix;

/// What to write.
#[derive(Debug, Clone)]
pub struct TinySpec {
    pub arch: Arch,
    /// `None`: dense weights; `Some((group_size, bits))`: affine-quantized.
    pub quant: Option<(i32, i32)>,
    /// Dtype of dense weights, scales/biases and norms.
    pub float: Dtype,
    pub tied: bool,
    pub seed: u64,
}

impl TinySpec {
    pub fn new(arch: Arch) -> Self {
        Self { arch, quant: Some((64, 4)), float: Dtype::Float32, tied: true, seed: 7 }
    }
}

pub const HIDDEN: i32 = 64;
pub const LAYERS: i32 = 2;
pub const HEADS: i32 = 4;
pub const KV_HEADS: i32 = 2;
pub const HEAD_DIM: i32 = 16;
pub const FFN: i32 = 128;
/// Prompts for these models keep their ids below it: `generate` refuses
/// any other (MLX would read past the embedding; see `TokenOutOfVocab`).
pub const VOCAB: i32 = 256;

/// A fresh, empty folder under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    // Under the workspace's target/ rather than /tmp: the folders are small
    // but many, and `cargo clean` is where people expect build litter to go.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../target/test-tmp");
    let dir = root.join(format!("engine-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn config_json(spec: &TinySpec) -> String {
    let model_type = spec.arch.as_str();
    let quant = match spec.quant {
        Some((gs, bits)) => format!(r#","quantization":{{"group_size":{gs},"bits":{bits}}}"#),
        None => String::new(),
    };
    let rope = match spec.arch {
        Arch::Llama | Arch::Mistral => {
            r#","rope_theta":500000.0,"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":64,"rope_type":"llama3"}"#
        }
        _ => r#","rope_theta":1000000.0"#,
    };
    format!(
        r#"{{"model_type":"{model_type}","hidden_size":{HIDDEN},"num_hidden_layers":{LAYERS},"intermediate_size":{FFN},"num_attention_heads":{HEADS},"num_key_value_heads":{KV_HEADS},"head_dim":{HEAD_DIM},"rms_norm_eps":1e-6,"vocab_size":{VOCAB},"max_position_embeddings":4096,"tie_word_embeddings":{tied},"eos_token_id":2{rope}{quant}}}"#,
        tied = spec.tied
    )
}

/// The tensors of a tiny model, keyed as in mlx-community files.
pub fn tensors(spec: &TinySpec) -> HashMap<String, Array> {
    let mut rng = RandomState::with_seed(spec.seed).expect("rng");
    let mut out = HashMap::new();
    let mut normal = |shape: &[i32], scale: f32| -> Array {
        let key = rng.next_key().expect("key");
        mlx_rs::random::normal::<f32>(shape, 0.0, scale, &key).expect("normal")
    };
    let matrix = |out: &mut HashMap<String, Array>, name: &str, w: Array| match spec.quant {
        Some((gs, bits)) => {
            let q = QuantizedMatrix::quantize(&w, gs, bits).expect("quantize");
            out.insert(format!("{name}.weight"), q.weight);
            out.insert(format!("{name}.scales"), q.scales.as_dtype(spec.float).expect("cast"));
            out.insert(format!("{name}.biases"), q.biases.as_dtype(spec.float).expect("cast"));
        }
        None => {
            out.insert(format!("{name}.weight"), w.as_dtype(spec.float).expect("cast"));
        }
    };
    let float = |a: Array| a.as_dtype(spec.float).expect("cast");
    matrix(&mut out, "model.embed_tokens", normal(&[VOCAB, HIDDEN], 1.0));
    let q_out = HEADS * HEAD_DIM;
    let kv_out = KV_HEADS * HEAD_DIM;
    for i in 0..LAYERS {
        let p = format!("model.layers.{i}");
        let a = format!("{p}.self_attn");
        matrix(&mut out, &format!("{a}.q_proj"), normal(&[q_out, HIDDEN], 0.15));
        matrix(&mut out, &format!("{a}.k_proj"), normal(&[kv_out, HIDDEN], 0.15));
        matrix(&mut out, &format!("{a}.v_proj"), normal(&[kv_out, HIDDEN], 0.15));
        matrix(&mut out, &format!("{a}.o_proj"), normal(&[HIDDEN, q_out], 0.15));
        if spec.arch == Arch::Qwen2 {
            for (n, d) in [("q_proj", q_out), ("k_proj", kv_out), ("v_proj", kv_out)] {
                out.insert(format!("{a}.{n}.bias"), float(normal(&[d], 0.1)));
            }
        }
        if spec.arch == Arch::Qwen3 {
            out.insert(
                format!("{a}.q_norm.weight"),
                float(normal(&[HEAD_DIM], 0.1).add(Array::from_f32(1.0)).expect("add")),
            );
            out.insert(
                format!("{a}.k_norm.weight"),
                float(normal(&[HEAD_DIM], 0.1).add(Array::from_f32(1.0)).expect("add")),
            );
        }
        matrix(&mut out, &format!("{p}.mlp.gate_proj"), normal(&[FFN, HIDDEN], 0.15));
        matrix(&mut out, &format!("{p}.mlp.up_proj"), normal(&[FFN, HIDDEN], 0.15));
        matrix(&mut out, &format!("{p}.mlp.down_proj"), normal(&[HIDDEN, FFN], 0.1));
        out.insert(
            format!("{p}.input_layernorm.weight"),
            float(normal(&[HIDDEN], 0.1).add(Array::from_f32(1.0)).expect("add")),
        );
        out.insert(
            format!("{p}.post_attention_layernorm.weight"),
            float(normal(&[HIDDEN], 0.1).add(Array::from_f32(1.0)).expect("add")),
        );
    }
    out.insert("model.norm.weight".into(), float(normal(&[HIDDEN], 0.1).add(Array::from_f32(1.0)).expect("add")));
    if !spec.tied {
        matrix(&mut out, "lm_head", normal(&[VOCAB, HIDDEN], 0.15));
    }
    out
}

/// Writes config.json + model.safetensors into `dir`.
pub fn write_model(dir: &Path, spec: &TinySpec) {
    write_tensors(dir, spec, &tensors(spec));
}

pub fn write_tensors(dir: &Path, spec: &TinySpec, tensors: &HashMap<String, Array>) {
    std::fs::write(dir.join("config.json"), config_json(spec)).expect("config");
    Array::save_safetensors(tensors.iter().map(|(k, v)| (k.as_str(), v)), None, dir.join("model.safetensors"))
        .expect("save");
}

/// A tiny model in a fresh folder.
pub fn tiny_model(tag: &str, spec: &TinySpec) -> PathBuf {
    let dir = temp_dir(tag);
    write_model(&dir, spec);
    dir
}

/// Standard-normal values of `shape` from `seed`, in `dtype`.
pub fn normal(shape: &[i32], seed: u64, dtype: Dtype) -> Array {
    let key = mlx_rs::random::key(seed).expect("key");
    mlx_rs::random::normal::<f32>(shape, None, None, &key).expect("normal").as_dtype(dtype).expect("cast")
}

/// The values as f32, read from a fresh contiguous array (a slice is a strided view).
pub fn f32s(a: &Array) -> Vec<f32> {
    let a = a.as_dtype(Dtype::Float32).expect("cast").add(Array::from_f32(0.0)).expect("copy");
    a.as_slice::<f32>().to_vec()
}

/// Deterministic pseudo-random values in [-1, 1) without MLX, so a
/// reference computed from them shares nothing with the code under test.
pub fn values(n: usize, mut seed: u64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}
