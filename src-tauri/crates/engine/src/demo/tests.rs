//! Demo-model tests: layout, dtypes, determinism, tokenizer, templates, shards.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use mlx_rs::{Array, Dtype};
use serde_json::Value;

use super::*;

/// A scratch folder removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("headroom-demo-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).expect("a written file");
    serde_json::from_str(&text).expect("JSON")
}

fn tiny(arch: Arch, bits: Bits) -> DemoSpec {
    DemoSpec::new(arch, Preset::Tiny, bits)
}

/// All tensors of the folder's safetensors files, with each file's metadata.
fn load_all(dir: &Path) -> (BTreeMap<String, Array>, Vec<BTreeMap<String, String>>) {
    let mut tensors = BTreeMap::new();
    let mut metas = Vec::new();
    let mut names: Vec<_> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    names.sort();
    for path in names {
        let (t, m) = Array::load_safetensors_with_metadata(&path).expect("load safetensors");
        for (k, v) in t {
            assert!(tensors.insert(k.clone(), v).is_none(), "{k} is in two files");
        }
        metas.push(m.into_iter().collect());
    }
    (tensors, metas)
}

/// The key → (shape, dtype) a tiny 4-bit (gs 64) qwen2 model must have,
/// written out by hand from mlx-community's Qwen2.5 files.
fn expected_tiny_qwen2_4bit(vocab: i32) -> BTreeMap<String, (Vec<i32>, Dtype)> {
    let mut m = BTreeMap::new();
    let mut q = |p: &str, rows: i32, cols: i32| {
        m.insert(format!("{p}.weight"), (vec![rows, cols / 8], Dtype::Uint32));
        m.insert(format!("{p}.scales"), (vec![rows, cols / 64], Dtype::Bfloat16));
        m.insert(format!("{p}.biases"), (vec![rows, cols / 64], Dtype::Bfloat16));
    };
    q("model.embed_tokens", vocab, 64);
    for i in 0..2 {
        let p = format!("model.layers.{i}");
        q(&format!("{p}.self_attn.q_proj"), 64, 64);
        q(&format!("{p}.self_attn.k_proj"), 32, 64);
        q(&format!("{p}.self_attn.v_proj"), 32, 64);
        q(&format!("{p}.self_attn.o_proj"), 64, 64);
        q(&format!("{p}.mlp.gate_proj"), 128, 64);
        q(&format!("{p}.mlp.up_proj"), 128, 64);
        q(&format!("{p}.mlp.down_proj"), 64, 128);
    }
    for i in 0..2 {
        let p = format!("model.layers.{i}");
        m.insert(format!("{p}.self_attn.q_proj.bias"), (vec![64], Dtype::Bfloat16));
        m.insert(format!("{p}.self_attn.k_proj.bias"), (vec![32], Dtype::Bfloat16));
        m.insert(format!("{p}.self_attn.v_proj.bias"), (vec![32], Dtype::Bfloat16));
        m.insert(format!("{p}.input_layernorm.weight"), (vec![64], Dtype::Bfloat16));
        m.insert(format!("{p}.post_attention_layernorm.weight"), (vec![64], Dtype::Bfloat16));
    }
    m.insert("model.norm.weight".into(), (vec![64], Dtype::Bfloat16));
    m
}

#[test]
fn tiny_qwen2_4bit_has_the_mlx_community_layout() {
    let dir = Scratch::new("layout");
    let summary = write_demo_model(&dir.0, &tiny(Arch::Qwen2, Bits::Four)).expect("write");

    let names: Vec<_> = summary.files.iter().map(|p| p.file_name().and_then(|n| n.to_str()).unwrap_or("")).collect();
    assert_eq!(
        names,
        [
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "model.safetensors.index.json",
            "tokenizer.json",
            "tokenizer_config.json"
        ]
    );
    assert_eq!(summary.shards, 1);
    assert_eq!(summary.vocab_size % 64, 0);
    assert!(summary.tokenizer_vocab_size <= summary.vocab_size as usize);
    assert!(summary.vocab_size as usize - summary.tokenizer_vocab_size < 64);

    let (tensors, metas) = load_all(&dir.0);
    assert_eq!(metas[0].get("format").map(String::as_str), Some("mlx"));
    let got: BTreeMap<_, _> = tensors.iter().map(|(k, a)| (k.clone(), (a.shape().to_vec(), a.dtype()))).collect();
    assert_eq!(got, expected_tiny_qwen2_4bit(summary.vocab_size));
    let bytes: u64 = tensors.values().map(|a| a.nbytes() as u64).sum();
    assert_eq!(bytes, summary.weight_bytes);

    // Norms near 1, matrices at 1/√fan-in: activations stay at unit scale.
    let norm = tensors["model.norm.weight"].as_dtype(Dtype::Float32).expect("cast");
    assert_eq!(norm.size(), 64, "one per hidden dimension");
    assert!(norm.as_slice::<f32>().iter().all(|v| (v - 1.0).abs() < 0.2));
    let w = mlx_rs::ops::dequantize(
        &tensors["model.layers.1.mlp.up_proj.weight"],
        &tensors["model.layers.1.mlp.up_proj.scales"],
        &tensors["model.layers.1.mlp.up_proj.biases"],
        64,
        4,
    )
    .and_then(|a| a.as_dtype(Dtype::Float32))
    .expect("dequantize");
    let vals = w.as_slice::<f32>();
    let std = (vals.iter().map(|v| v * v).sum::<f32>() / vals.len() as f32).sqrt();
    assert!((0.11..0.14).contains(&std), "std {std} (1/√64 = 0.125)");

    // Embedding rows of ids the tokenizer lacks are zero (greedy never picks them).
    let embed = mlx_rs::ops::dequantize(
        &tensors["model.embed_tokens.weight"],
        &tensors["model.embed_tokens.scales"],
        &tensors["model.embed_tokens.biases"],
        64,
        4,
    )
    .and_then(|a| a.as_dtype(Dtype::Float32))
    .expect("dequantize");
    let rows: Vec<bool> = embed.as_slice::<f32>().chunks(64).map(|row| row.iter().any(|v| *v != 0.0)).collect();
    assert_eq!(rows.len(), summary.vocab_size as usize);
    // Both checks below hold on something: the tokenizer's rows, and the padding up to a multiple of 64.
    assert!(0 < summary.tokenizer_vocab_size && summary.tokenizer_vocab_size < rows.len(), "{summary:?}");
    assert!(rows[..summary.tokenizer_vocab_size].iter().all(|&nonzero| nonzero));
    assert!(rows[summary.tokenizer_vocab_size..].iter().all(|&nonzero| !nonzero));

    let config = read_json(&dir.0.join("config.json"));
    assert_eq!(config["model_type"], "qwen2");
    assert_eq!(config["hidden_size"], 64);
    assert_eq!(config["num_hidden_layers"], 2);
    assert_eq!(config["num_attention_heads"], 4);
    assert_eq!(config["num_key_value_heads"], 2);
    assert_eq!(config["intermediate_size"], 128);
    assert_eq!(config["vocab_size"], summary.vocab_size);
    assert_eq!(config["tie_word_embeddings"], true);
    assert_eq!(config["max_position_embeddings"], 4096);
    assert_eq!(config["quantization"], serde_json::json!({"group_size": 64, "bits": 4, "mode": "affine"}));
    assert_eq!(config["quantization_config"], config["quantization"]);

    let index = read_json(&dir.0.join("model.safetensors.index.json"));
    assert_eq!(index["metadata"]["total_size"], summary.weight_bytes);
    assert_eq!(index["metadata"]["total_parameters"], summary.parameters);
    let map = index["weight_map"].as_object().expect("weight_map");
    assert_eq!(map.keys().cloned().collect::<BTreeSet<_>>(), tensors.keys().cloned().collect());
    assert!(map.values().all(|v| v == "model.safetensors"));
}

#[test]
fn each_arch_and_width_writes_the_right_tensors() {
    for arch in Arch::ALL {
        for bits in Bits::ALL {
            let dir = Scratch::new(&format!("{arch}-{bits}"));
            let spec = DemoSpec { max_shard_bytes: None, ..tiny(arch, bits) };
            let summary = write_demo_model(&dir.0, &spec).expect("write");
            assert!(!dir.0.join("model.safetensors.index.json").exists());
            let (t, _) = load_all(&dir.0);
            let config = read_json(&dir.0.join("config.json"));
            assert_eq!(config["model_type"], arch.as_str());
            let ctx = format!("{arch} {bits}-bit");

            let embed = &t["model.embed_tokens.weight"];
            let q = &t["model.layers.0.self_attn.q_proj.weight"];
            match bits.quantized() {
                Some(b) => {
                    assert_eq!(embed.dtype(), Dtype::Uint32, "{ctx}");
                    assert_eq!(q.shape(), &[64, 64 * b / 32], "{ctx}");
                    assert_eq!(t["model.layers.0.self_attn.q_proj.scales"].dtype(), Dtype::Bfloat16, "{ctx}");
                    assert_eq!(config["quantization"]["bits"], b, "{ctx}");
                }
                None => {
                    assert_eq!(embed.dtype(), Dtype::Bfloat16, "{ctx}");
                    assert_eq!(q.shape(), &[64, 64], "{ctx}");
                    assert!(!t.keys().any(|k| k.ends_with(".scales") || k.ends_with(".biases")), "{ctx}");
                    assert!(config.get("quantization").is_none(), "{ctx}");
                }
            }
            assert_eq!(t.contains_key("model.layers.0.self_attn.q_proj.bias"), arch == Arch::Qwen2, "{ctx}");
            assert_eq!(t.contains_key("model.layers.1.self_attn.k_norm.weight"), arch == Arch::Qwen3, "{ctx}");
            if arch == Arch::Qwen3 {
                assert_eq!(t["model.layers.1.self_attn.q_norm.weight"].shape(), &[16]);
                assert_eq!(config["head_dim"], 16);
            }
            let tied = arch != Arch::Mistral;
            assert_eq!(config["tie_word_embeddings"], tied, "{ctx}");
            assert_eq!(t.contains_key("lm_head.weight"), !tied, "{ctx}");
            if arch == Arch::Llama {
                assert_eq!(config["rope_scaling"]["rope_type"], "llama3");
                assert_eq!(config["rope_scaling"]["original_max_position_embeddings"], 1024);
            }
            assert!(t.values().all(|a| matches!(a.dtype(), Dtype::Uint32 | Dtype::Bfloat16)), "{ctx}");
            assert_eq!(summary.shards, 1);
        }
    }
}

#[test]
fn the_same_spec_gives_identical_bytes() {
    let spec = DemoSpec { seed: 7, mixed_precision: true, ..tiny(Arch::Llama, Bits::Four) };
    let (a, b, c) = (Scratch::new("det-a"), Scratch::new("det-b"), Scratch::new("det-c"));
    let sa = write_demo_model(&a.0, &spec).expect("write a");
    write_demo_model(&b.0, &spec).expect("write b");
    for f in &sa.files {
        let name = f.file_name().expect("name");
        assert!(fs::read(f).expect("a") == fs::read(b.0.join(name)).expect("b"), "{name:?} differs");
    }
    // A fresh training run (no per-process cache) learns the same vocabulary.
    let fresh = tokenizer::train(tokenizer::Flavor::Llama3).expect("train");
    assert_eq!(fresh.json, fs::read_to_string(a.0.join("tokenizer.json")).expect("read"));

    // The seed matters.
    write_demo_model(&c.0, &DemoSpec { seed: 8, ..spec }).expect("write c");
    assert!(fs::read(a.0.join("model.safetensors")).ok() != fs::read(c.0.join("model.safetensors")).ok());
}

#[test]
fn tokenizer_round_trips_any_text_and_keeps_specials_whole() {
    let dir = Scratch::new("tok");
    for arch in [Arch::Qwen2, Arch::Llama] {
        let summary = write_demo_model(&dir.0, &tiny(arch, Bits::Four)).expect("write");
        let tok = tokenizers::Tokenizer::from_file(dir.0.join("tokenizer.json")).expect("load tokenizer.json");
        assert_eq!(tok.get_vocab_size(true), summary.tokenizer_vocab_size);

        let text = "Hello, world! 你好，世界。こんにちは 안녕하세요 Привет 👨‍👩‍👧‍👦 🚀 ünïcödé\n\tfn main() {}  ";
        let enc = tok.encode(text, false).expect("encode");
        assert!(!enc.get_ids().is_empty());
        assert!(enc.get_ids().iter().all(|&id| (id as usize) < summary.tokenizer_vocab_size));
        assert_eq!(tok.decode(enc.get_ids(), false).expect("decode"), text, "{arch}");
        // BPE learned multi-byte merges: far fewer tokens than UTF-8 bytes.
        assert!(enc.len() < text.len() * 2 / 3, "{arch}: {} tokens for {} bytes", enc.len(), text.len());
        let cjk = tok.encode("模型在你自己的电脑上运行", false).expect("encode");
        assert!(cjk.len() < "模型在你自己的电脑上运行".len(), "{arch}: no CJK merges");

        let specials = match arch {
            Arch::Qwen2 => ["<|im_start|>", "<|im_end|>"],
            _ => ["<|start_header_id|>", "<|eot_id|>"],
        };
        for s in specials {
            let ids = tok.encode(format!("a{s}b"), false).expect("encode").get_ids().to_vec();
            let id = tok.token_to_id(s).expect("special id");
            assert!(ids.contains(&id), "{s} split: {ids:?}");
            assert!(id as usize >= summary.tokenizer_vocab_size - 5, "specials come after the BPE vocabulary");
        }
        // Llama 3 prepends BOS when asked for special tokens; Qwen never does.
        let with = tok.encode("hi", true).expect("encode").get_ids().to_vec();
        let bos = tok.token_to_id("<|begin_of_text|>");
        assert_eq!(with.first().copied() == bos && bos.is_some(), arch == Arch::Llama);
    }
}

fn render(dir: &Path, messages: &Value) -> String {
    let cfg = read_json(&dir.join("tokenizer_config.json"));
    let template = cfg["chat_template"].as_str().expect("chat_template");
    let mut env = minijinja::Environment::new();
    env.add_template("chat", template).expect("template parses");
    env.get_template("chat")
        .and_then(|t| {
            t.render(minijinja::context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => cfg["bos_token"].clone(),
                eos_token => cfg["eos_token"].clone(),
            })
        })
        .expect("render")
}

#[test]
fn chat_templates_render_chatml_and_llama3() {
    let dir = Scratch::new("tmpl");
    let user = serde_json::json!([{"role": "user", "content": "hi"}]);
    let with_system = serde_json::json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye"},
    ]);

    write_demo_model(&dir.0, &tiny(Arch::Qwen3, Bits::Four)).expect("write");
    assert_eq!(
        render(&dir.0, &user),
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(
        render(&dir.0, &with_system),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
    );
    let cfg = read_json(&dir.0.join("tokenizer_config.json"));
    assert_eq!(cfg["eos_token"], "<|im_end|>");
    assert_eq!(cfg["tokenizer_class"], "PreTrainedTokenizerFast");
    let gen = read_json(&dir.0.join("generation_config.json"));
    let tok = tokenizers::Tokenizer::from_file(dir.0.join("tokenizer.json")).expect("tokenizer");
    let id = |s: &str| tok.token_to_id(s).map(Value::from).unwrap_or(Value::Null);
    assert_eq!(gen["eos_token_id"], serde_json::json!([id("<|im_end|>"), id("<|endoftext|>")]));
    let config = read_json(&dir.0.join("config.json"));
    assert_eq!(config["eos_token_id"], id("<|im_end|>"));

    write_demo_model(&dir.0, &tiny(Arch::Mistral, Bits::Four)).expect("write");
    assert_eq!(
        render(&dir.0, &with_system),
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    let tok = tokenizers::Tokenizer::from_file(dir.0.join("tokenizer.json")).expect("tokenizer");
    let id = |s: &str| tok.token_to_id(s).map(Value::from).unwrap_or(Value::Null);
    let gen = read_json(&dir.0.join("generation_config.json"));
    assert_eq!(gen["eos_token_id"], serde_json::json!([id("<|end_of_text|>"), id("<|eot_id|>")]));
    assert_eq!(read_json(&dir.0.join("config.json"))["bos_token_id"], id("<|begin_of_text|>"));
}

#[test]
fn per_layer_override_is_declared_and_stored() {
    let dir = Scratch::new("mixed");
    let spec = DemoSpec { mixed_precision: true, ..tiny(Arch::Qwen2, Bits::Four) };
    write_demo_model(&dir.0, &spec).expect("write");
    let config = read_json(&dir.0.join("config.json"));
    assert_eq!(
        config["quantization"]["model.layers.0.mlp.down_proj"],
        serde_json::json!({"group_size": 32, "bits": 8})
    );
    assert_eq!(config["quantization"]["bits"], 4);

    let (t, _) = load_all(&dir.0);
    // down_proj is [64, 128]: 8-bit packs 4 per u32, groups of 32.
    assert_eq!(t["model.layers.0.mlp.down_proj.weight"].shape(), &[64, 32]);
    assert_eq!(t["model.layers.0.mlp.down_proj.scales"].shape(), &[64, 4]);
    // Layer 1 keeps the defaults.
    assert_eq!(t["model.layers.1.mlp.down_proj.weight"].shape(), &[64, 16]);
    assert_eq!(t["model.layers.1.mlp.down_proj.scales"].shape(), &[64, 2]);
    // And the stored tensors really are 8-bit / 32: they dequantize to the same scale.
    let w = mlx_rs::ops::dequantize(
        &t["model.layers.0.mlp.down_proj.weight"],
        &t["model.layers.0.mlp.down_proj.scales"],
        &t["model.layers.0.mlp.down_proj.biases"],
        32,
        8,
    )
    .and_then(|a| a.as_dtype(Dtype::Float32))
    .expect("dequantize");
    assert_eq!(w.shape(), &[64, 128]);
    let vals = w.as_slice::<f32>();
    let std = (vals.iter().map(|v| v * v).sum::<f32>() / vals.len() as f32).sqrt();
    assert!((0.08..0.097).contains(&std), "std {std} (1/√128 = 0.088)");

    let bf16 = DemoSpec { mixed_precision: true, ..tiny(Arch::Qwen2, Bits::Sixteen) };
    assert!(matches!(write_demo_model(&dir.0, &bf16), Err(DemoError::InvalidSpec { .. })));
}

#[test]
fn shards_and_index_agree() {
    let dir = Scratch::new("shards");
    let spec = DemoSpec { max_shard_bytes: Some(40_000), ..tiny(Arch::Qwen3, Bits::Eight) };
    let summary = write_demo_model(&dir.0, &spec).expect("write");
    assert!(summary.shards > 2, "{} shards", summary.shards);

    let index = read_json(&dir.0.join("model.safetensors.index.json"));
    let map = index["weight_map"].as_object().expect("weight_map");
    let mut total = 0;
    let mut seen = BTreeSet::new();
    for i in 1..=summary.shards {
        let name = format!("model-{i:05}-of-{:05}.safetensors", summary.shards);
        let (t, meta) = Array::load_safetensors_with_metadata(dir.0.join(&name)).expect("load shard");
        assert_eq!(meta.get("format").map(String::as_str), Some("mlx"));
        let size: u64 = t.values().map(|a| a.nbytes() as u64).sum();
        // mlx-lm's rule: a shard only exceeds the limit if one tensor does.
        assert!(size <= 40_000 || t.len() == 1, "{name}: {size} bytes in {} tensors", t.len());
        for k in t.keys() {
            assert_eq!(map.get(k).and_then(Value::as_str), Some(name.as_str()), "{k}");
            seen.insert(k.clone());
        }
        total += size;
    }
    assert_eq!(seen, map.keys().cloned().collect());
    assert_eq!(index["metadata"]["total_size"], total);
    assert_eq!(total, summary.weight_bytes);

    // Rewriting the folder as a single file leaves no stale shard behind.
    write_demo_model(&dir.0, &DemoSpec { max_shard_bytes: None, ..spec }).expect("rewrite");
    let left: Vec<_> = fs::read_dir(&dir.0)
        .expect("dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("model"))
        .collect();
    assert_eq!(left, ["model.safetensors"]);
}

#[test]
fn real_presets_have_the_published_parameter_counts() {
    // Counts from the Qwen2.5 model cards / safetensors headers.
    for (preset, params) in [
        (Preset::Qwen25_0_5B, 494_032_768u64),
        (Preset::Qwen25_7B, 7_615_616_512),
        (Preset::Qwen25_14B, 14_770_033_664),
    ] {
        let spec = DemoSpec::new(Arch::Qwen2, preset, Bits::Four);
        let plan = weights::Plan::new(&spec, &spec.shape().expect("shape"), 1003).expect("plan");
        assert_eq!(plan.parameters(), params, "{preset}");
        let bytes = plan.total_bytes();
        // 4-bit with bf16 scales+biases per 64 weights: 4.5 bits per weight.
        let bpw = bytes as f64 * 8.0 / params as f64;
        assert!((4.45..4.55).contains(&bpw), "{preset}: {bpw} bits per weight");
    }
}

#[test]
fn bad_options_and_specs_are_named() {
    assert_eq!("qwen2.5-7b".parse::<Preset>().ok(), Some(Preset::Qwen25_7B));
    assert_eq!("Mistral".parse::<Arch>().ok(), Some(Arch::Mistral));
    assert_eq!("bf16".parse::<Bits>().ok(), Some(Bits::Sixteen));
    assert!(matches!("gemma".parse::<Arch>(), Err(DemoError::UnknownOption { what: "architecture", .. })));
    assert!(matches!("3".parse::<Bits>(), Err(DemoError::UnknownOption { .. })));

    let dir = Scratch::new("bad");
    // Tiny layers are 64 wide: groups of 128 cannot tile them.
    let spec = DemoSpec { group_size: 128, ..tiny(Arch::Qwen2, Bits::Four) };
    assert!(matches!(write_demo_model(&dir.0, &spec), Err(DemoError::InvalidSpec { .. })));
    assert!(!dir.0.exists(), "nothing is written for a rejected spec");
}
