//! Model dimensions per preset and the JSON files that describe a model
//! (`config.json`, `generation_config.json`), with HF field names.

use serde_json::{json, Map, Value};

use super::tokenizer::{Flavor, TrainedTokenizer};
use super::{Arch, DemoError, DemoSpec, Preset};

/// The dimensions of a demo model, as written to config.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelShape {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    pub intermediate_size: i32,
    /// Embedding rows (≥ the tokenizer's size; extra rows are never used).
    pub vocab_size: i32,
    pub max_position_embeddings: i32,
    pub tie_word_embeddings: bool,
    /// Experts (qwen3_moe, qwen3_5_moe).
    pub moe: Option<MoeShape>,
    /// Sliding-window attention (gemma3_text).
    pub window: Option<WindowShape>,
    /// Linear attention (qwen3_5).
    pub linear: Option<LinearShape>,
}

/// The experts of every MLP (all layers sparse).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MoeShape {
    pub experts: i32,
    pub per_token: i32,
    pub intermediate_size: i32,
    /// The shared expert's width (Qwen3.5), if any.
    pub shared: Option<i32>,
}

/// Sliding layers: `window` positions; every `pattern`-th layer is global.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowShape {
    pub window: i32,
    pub pattern: i32,
}

/// Gated delta nets: every `interval`-th layer is full attention, the rest linear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinearShape {
    pub interval: i32,
    pub key_heads: i32,
    pub value_heads: i32,
    pub key_head_dim: i32,
    pub value_head_dim: i32,
    pub conv_kernel: i32,
}

impl ModelShape {
    /// Whether layer `i` is linear attention.
    pub fn is_linear(&self, i: i32) -> bool {
        self.linear.is_some_and(|l| (i + 1) % l.interval != 0)
    }
}

/// The architecture's own parts at the small sizes: for `tiny` (tests) a
/// window of 16 that a prompt overflows, for the bigger demos (the fit
/// measurements) Gemma-3-1B's proportions: a window of 256, five sliding
/// layers to one global, three linear layers to one full.
fn small_parts(arch: Arch, preset: Preset) -> (Option<MoeShape>, Option<WindowShape>, Option<LinearShape>) {
    let tiny = preset == Preset::Tiny;
    let (experts, per_token, width) = if tiny { (8, 2, 64) } else { (16, 4, 128) };
    let moe = |shared: Option<i32>| {
        Some(MoeShape { experts, per_token, intermediate_size: width, shared: shared.map(|_| width) })
    };
    let linear = Some(LinearShape {
        interval: if tiny { 2 } else { 4 },
        key_heads: 2,
        value_heads: 4,
        key_head_dim: 16,
        value_head_dim: 16,
        conv_kernel: 4,
    });
    match arch {
        Arch::Qwen3Moe => (moe(None), None, None),
        // A window of 16: a prompt overflows it and decoding wraps round it.
        Arch::Gemma3Text if tiny => (None, Some(WindowShape { window: 16, pattern: 2 }), None),
        Arch::Gemma3Text => (None, Some(WindowShape { window: 256, pattern: 6 }), None),
        Arch::Qwen3_5 => (None, None, linear),
        Arch::Qwen3_5Moe => (moe(Some(64)), None, linear),
        _ => (None, None, None),
    }
}

/// The preset's dimensions; `vocab_size` 0 means "the demo tokenizer's size".
pub(super) fn preset_shape(preset: Preset, arch: Arch) -> ModelShape {
    match preset {
        Preset::Qwen3_30bA3b | Preset::Gemma3_12b | Preset::Qwen3_5_35bA3b => dense_shape(preset, arch),
        // The small presets take the architecture's own parts at their tiny size.
        _ => {
            let (moe, window, linear) = small_parts(arch, preset);
            ModelShape { moe, window, linear, ..dense_shape(preset, arch) }
        }
    }
}

fn dense_shape(preset: Preset, arch: Arch) -> ModelShape {
    let (moe, window, linear) = (None, None, None);
    match preset {
        // Tied like Qwen2.5-0.5B and Llama-3.2-1B; Mistral is never tied,
        // so the tiny models cover both layouts.
        Preset::Tiny => ModelShape {
            hidden_size: 64,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 16,
            intermediate_size: 128,
            vocab_size: 0,
            max_position_embeddings: 4096,
            tie_word_embeddings: arch != Arch::Mistral,
            moe,
            window,
            linear,
        },
        Preset::TinyKv => ModelShape {
            hidden_size: 256,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 64,
            intermediate_size: 256,
            vocab_size: 0,
            max_position_embeddings: 4096,
            tie_word_embeddings: arch != Arch::Mistral,
            moe,
            window,
            linear,
        },
        Preset::KvHeavy => ModelShape {
            hidden_size: 512,
            num_hidden_layers: 32,
            num_attention_heads: 8,
            num_key_value_heads: 8,
            head_dim: 64,
            intermediate_size: 1024,
            vocab_size: 0,
            max_position_embeddings: 65536,
            tie_word_embeddings: false,
            moe,
            window,
            linear,
        },
        Preset::Small => ModelShape {
            hidden_size: 256,
            num_hidden_layers: 12,
            num_attention_heads: 8,
            num_key_value_heads: 2,
            head_dim: 32,
            intermediate_size: 768,
            vocab_size: 0,
            max_position_embeddings: 4096,
            tie_word_embeddings: false,
            moe,
            window,
            linear,
        },
        // About 100 M parameters with the demo vocabulary: big enough that
        // the KV cache and activations of a 2048-token prefill are hundreds
        // of MB (the fit estimator's calibration), small enough for a CPU.
        Preset::Medium => ModelShape {
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            num_key_value_heads: 4,
            head_dim: 64,
            intermediate_size: 3072,
            vocab_size: 0,
            max_position_embeddings: 4096,
            tie_word_embeddings: false,
            moe,
            window,
            linear,
        },
        // The three below are the published Qwen2.5 configs.
        Preset::Qwen25_0_5B => ModelShape {
            hidden_size: 896,
            num_hidden_layers: 24,
            num_attention_heads: 14,
            num_key_value_heads: 2,
            head_dim: 64,
            intermediate_size: 4864,
            vocab_size: 151_936,
            max_position_embeddings: 32_768,
            tie_word_embeddings: true,
            moe,
            window,
            linear,
        },
        Preset::Qwen25_7B => ModelShape {
            hidden_size: 3584,
            num_hidden_layers: 28,
            num_attention_heads: 28,
            num_key_value_heads: 4,
            head_dim: 128,
            intermediate_size: 18_944,
            vocab_size: 152_064,
            max_position_embeddings: 32_768,
            tie_word_embeddings: false,
            moe,
            window,
            linear,
        },
        Preset::Qwen25_14B => ModelShape {
            hidden_size: 5120,
            num_hidden_layers: 48,
            num_attention_heads: 40,
            num_key_value_heads: 8,
            head_dim: 128,
            intermediate_size: 13_824,
            vocab_size: 152_064,
            max_position_embeddings: 32_768,
            tie_word_embeddings: false,
            moe,
            window,
            linear,
        },
        // Qwen3-30B-A3B's published config.
        Preset::Qwen3_30bA3b => ModelShape {
            hidden_size: 2048,
            num_hidden_layers: 48,
            num_attention_heads: 32,
            num_key_value_heads: 4,
            head_dim: 128,
            intermediate_size: 6144,
            vocab_size: 151_936,
            max_position_embeddings: 40_960,
            tie_word_embeddings: false,
            moe: Some(MoeShape { experts: 128, per_token: 8, intermediate_size: 768, shared: None }),
            window,
            linear,
        },
        // Gemma-3-12B's published text config.
        Preset::Gemma3_12b => ModelShape {
            hidden_size: 3840,
            num_hidden_layers: 48,
            num_attention_heads: 16,
            num_key_value_heads: 8,
            head_dim: 256,
            intermediate_size: 15_360,
            vocab_size: 262_208,
            max_position_embeddings: 131_072,
            tie_word_embeddings: true,
            moe,
            window: Some(WindowShape { window: 1024, pattern: 6 }),
            linear,
        },
        // A Qwen3.5 MoE shape: the dimensions of Qwen3.5-35B-A3B as its
        // model card gives them (not checked against the file here).
        Preset::Qwen3_5_35bA3b => ModelShape {
            hidden_size: 2048,
            num_hidden_layers: 40,
            num_attention_heads: 16,
            num_key_value_heads: 2,
            head_dim: 256,
            intermediate_size: 512,
            vocab_size: 248_320,
            max_position_embeddings: 262_144,
            tie_word_embeddings: false,
            moe: Some(MoeShape { experts: 256, per_token: 8, intermediate_size: 512, shared: Some(512) }),
            window,
            linear: Some(LinearShape {
                interval: 4,
                key_heads: 16,
                value_heads: 32,
                key_head_dim: 128,
                value_head_dim: 128,
                conv_kernel: 4,
            }),
        },
    }
}

/// The `quantization` object: defaults, plus per-layer entries.
pub(super) fn quantization_json(spec: &DemoSpec) -> Option<Value> {
    let bits = spec.bits.quantized()?;
    let mut q = Map::new();
    q.insert("group_size".into(), json!(spec.group_size));
    q.insert("bits".into(), json!(bits));
    q.insert("mode".into(), json!("affine"));
    for (path, gs, b) in super::weights::overrides(spec) {
        q.insert(path, json!({ "group_size": gs, "bits": b }));
    }
    Some(Value::Object(q))
}

pub(super) fn config_json(spec: &DemoSpec, shape: &ModelShape, tok: &TrainedTokenizer) -> Result<String, DemoError> {
    let s = shape;
    let mut c = json!({
        "model_type": spec.arch.as_str(),
        "hidden_size": s.hidden_size,
        "num_hidden_layers": s.num_hidden_layers,
        "num_attention_heads": s.num_attention_heads,
        "num_key_value_heads": s.num_key_value_heads,
        "intermediate_size": s.intermediate_size,
        "vocab_size": s.vocab_size,
        "max_position_embeddings": s.max_position_embeddings,
        "tie_word_embeddings": s.tie_word_embeddings,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "torch_dtype": "bfloat16",
        "use_cache": true,
    });
    let extra = match spec.arch {
        Arch::Qwen2 => json!({
            "architectures": ["Qwen2ForCausalLM"],
            "rms_norm_eps": 1e-6,
            "rope_theta": 1_000_000.0,
            "use_sliding_window": false,
            "bos_token_id": tok.special_id("<|endoftext|>"),
            "eos_token_id": tok.special_id("<|im_end|>"),
        }),
        Arch::Qwen3 => json!({
            "architectures": ["Qwen3ForCausalLM"],
            "head_dim": s.head_dim,
            "attention_bias": false,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1_000_000.0,
            "rope_scaling": null,
            "bos_token_id": tok.special_id("<|endoftext|>"),
            "eos_token_id": tok.special_id("<|im_end|>"),
        }),
        Arch::Llama => json!({
            "architectures": ["LlamaForCausalLM"],
            "head_dim": s.head_dim,
            "attention_bias": false,
            "mlp_bias": false,
            "rms_norm_eps": 1e-5,
            "rope_theta": 500_000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                // Below max_position_embeddings (HF checks), so the tiny
                // models' frequencies are really rescaled (wavelengths of
                // 256..1024 positions are blended, longer ones divided).
                "original_max_position_embeddings": (s.max_position_embeddings / 4).min(8192),
            },
            "bos_token_id": tok.special_id("<|begin_of_text|>"),
            "eos_token_id": [tok.special_id("<|end_of_text|>"), tok.special_id("<|eot_id|>")],
        }),
        Arch::Qwen3Moe => json!({
            "architectures": ["Qwen3MoeForCausalLM"],
            "head_dim": s.head_dim,
            "attention_bias": false,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1_000_000.0,
            "rope_scaling": null,
            "num_experts": s.moe.map_or(0, |m| m.experts),
            "num_experts_per_tok": s.moe.map_or(0, |m| m.per_token),
            "moe_intermediate_size": s.moe.map_or(0, |m| m.intermediate_size),
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "norm_topk_prob": true,
            "bos_token_id": tok.special_id("<|endoftext|>"),
            "eos_token_id": tok.special_id("<|im_end|>"),
        }),
        Arch::Gemma3Text => json!({
            "architectures": ["Gemma3ForCausalLM"],
            "head_dim": s.head_dim,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1_000_000.0,
            "rope_local_base_freq": 10_000.0,
            "query_pre_attn_scalar": s.head_dim,
            "sliding_window": s.window.map_or(0, |w| w.window),
            "sliding_window_pattern": s.window.map_or(1, |w| w.pattern),
            "hidden_activation": "gelu_pytorch_tanh",
            "bos_token_id": tok.special_id("<|endoftext|>"),
            "eos_token_id": tok.special_id("<|im_end|>"),
        }),
        Arch::Qwen3_5 | Arch::Qwen3_5Moe => {
            let l = s.linear.unwrap_or(LinearShape {
                interval: 1,
                key_heads: 1,
                value_heads: 1,
                key_head_dim: 1,
                value_head_dim: 1,
                conv_kernel: 1,
            });
            let mut c = json!({
                "architectures": ["Qwen3_5ForConditionalGeneration"],
                "head_dim": s.head_dim,
                "attention_bias": false,
                "rms_norm_eps": 1e-6,
                "full_attention_interval": l.interval,
                "linear_num_key_heads": l.key_heads,
                "linear_num_value_heads": l.value_heads,
                "linear_key_head_dim": l.key_head_dim,
                "linear_value_head_dim": l.value_head_dim,
                "linear_conv_kernel_dim": l.conv_kernel,
                "rope_parameters": { "rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25 },
                "bos_token_id": tok.special_id("<|endoftext|>"),
                "eos_token_id": tok.special_id("<|im_end|>"),
            });
            if let Some(m) = s.moe {
                merge(
                    &mut c,
                    json!({
                        "num_experts": m.experts,
                        "num_experts_per_tok": m.per_token,
                        "moe_intermediate_size": m.intermediate_size,
                        "shared_expert_intermediate_size": m.shared.unwrap_or(m.intermediate_size),
                        "norm_topk_prob": true,
                    }),
                );
            }
            c
        }
        Arch::Mistral => json!({
            "architectures": ["MistralForCausalLM"],
            "head_dim": s.head_dim,
            "rms_norm_eps": 1e-5,
            "rope_theta": 1_000_000.0,
            "sliding_window": null,
            "bos_token_id": tok.special_id("<|begin_of_text|>"),
            "eos_token_id": [tok.special_id("<|end_of_text|>"), tok.special_id("<|eot_id|>")],
        }),
    };
    merge(&mut c, extra);
    if let Some(q) = quantization_json(spec) {
        // mlx-lm writes both; HF tooling reads the second.
        merge(&mut c, json!({ "quantization": q.clone(), "quantization_config": q }));
    }
    to_pretty(&c, "config.json")
}

pub(super) fn generation_config_json(flavor: Flavor, tok: &TrainedTokenizer) -> Result<String, DemoError> {
    let c = match flavor {
        // Like Qwen2.5-Instruct: stop at the end of the turn or of the text.
        Flavor::ChatMl => json!({
            "bos_token_id": tok.special_id("<|endoftext|>"),
            "pad_token_id": tok.special_id("<|endoftext|>"),
            "eos_token_id": [tok.special_id("<|im_end|>"), tok.special_id("<|endoftext|>")],
        }),
        Flavor::Llama3 => json!({
            "bos_token_id": tok.special_id("<|begin_of_text|>"),
            "eos_token_id": [tok.special_id("<|end_of_text|>"), tok.special_id("<|eot_id|>")],
        }),
    };
    to_pretty(&c, "generation_config.json")
}

fn merge(into: &mut Value, from: Value) {
    if let (Value::Object(a), Value::Object(b)) = (into, from) {
        a.extend(b);
    }
}

/// Pretty JSON with keys sorted at every level (as mlx-lm sorts config.json),
/// so the bytes do not depend on whether some other crate in the build turns
/// on serde_json's `preserve_order`.
pub(super) fn to_pretty(v: &Value, file: &'static str) -> Result<String, DemoError> {
    let mut s = serde_json::to_string_pretty(&sorted(v)).map_err(|source| DemoError::Json { file, source })?;
    s.push('\n');
    Ok(s)
}

fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&m[k]))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}
