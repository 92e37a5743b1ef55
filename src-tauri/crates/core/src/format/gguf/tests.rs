//! The GGUF reader against files the writer makes, the hostile corpus, and
//! the real SmolLM2-135M-Instruct file when it is there.

use std::io::BufReader;
use std::path::PathBuf;

use super::hostile::hostile_corpus;
use super::write::{decode, f16_to_f32, f32_to_f16, GgufWriter, TinyModel};
use super::*;
use crate::format::footprint::{footprint, LoadShape};
use crate::format::quant::{LayerQuant, QuantParams};
use crate::format::safetensors::{Dtype, Header};
use crate::format::{FormatError, ModelConfig, ModelType};

fn read(bytes: &[u8]) -> Result<GgufFile> {
    read_gguf(&mut &bytes[..], bytes.len() as u64)
}

fn shape_of(header: &Header, name: &str) -> (Dtype, Vec<u64>) {
    let t = header.tensors.get(name).unwrap_or_else(|| panic!("{name} is not in the header"));
    (t.dtype, t.shape.clone())
}

#[test]
fn half_precision_rounds_as_ieee_does() {
    for (x, h) in [
        (0.0f32, 0x0000u16),
        (-0.0, 0x8000),
        (1.0, 0x3c00),
        (-2.0, 0xc000),
        (0.1, 0x2e66),
        (65504.0, 0x7bff),
        (65520.0, 0x7c00),
        (1e-8, 0x0000),
        (5.96e-8, 0x0001),
        (6.1035156e-5, 0x0400),
        (f32::INFINITY, 0x7c00),
    ] {
        assert_eq!(f32_to_f16(x), h, "{x}");
    }
    for h in [0x0001u16, 0x03ff, 0x0400, 0x3c00, 0x2e66, 0x7bff, 0xc000] {
        assert_eq!(f32_to_f16(f16_to_f32(h)), h, "{h:#x} round-trips");
    }
}

#[test]
fn the_quantizers_follow_ggml() {
    let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.05).collect();
    let shape = [2u64, 32];
    for (ty, bytes, worst) in [
        (GgmlType::F32, 256, 0.0),
        (GgmlType::F16, 128, 1e-3),
        (GgmlType::BF16, 128, 1e-2),
        (GgmlType::Q8_0, 68, 0.011),
        (GgmlType::Q4_0, 36, 0.18),
        (GgmlType::Q4_1, 40, 0.07),
    ] {
        let mut w = GgufWriter::new();
        w.tensor("t.weight", &shape, &x, ty).expect("a storable tensor");
        let file_bytes = w.to_bytes();
        let file = read(&file_bytes).expect("reads");
        let t = &file.tensors[0];
        assert_eq!((t.nbytes, t.dims.clone()), (bytes, vec![32, 2]), "{ty}");
        let data = &file_bytes[t.offset as usize..(t.offset + t.nbytes) as usize];
        let back = decode(data, ty).expect("decodes");
        let err = x.iter().zip(&back).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(err <= worst, "{ty}: worst error {err} > {worst}");
    }
    // Q4_0: the largest magnitude (-1.0) is code 0 exactly, and zero is code 8.
    let block: Vec<f32> = (0..32).map(|i| if i == 5 { -1.0 } else { 0.0 }).collect();
    let mut w = GgufWriter::new();
    w.tensor("t.weight", &[32], &block, GgmlType::Q4_0).expect("a storable tensor");
    let bytes = w.to_bytes();
    let t = read(&bytes).expect("reads").tensors[0].clone();
    let data = &bytes[t.offset as usize..];
    assert_eq!(f16_to_f32(u16::from_le_bytes([data[0], data[1]])), 0.125, "d = max / -8");
    assert_eq!(data[2 + 5] & 0x0f, 0);
    assert_eq!(data[2] & 0x0f, 8);
    // Shapes that do not fit the storage are refused, not written wrong.
    assert!(GgufWriter::new().tensor("t", &[2, 16], &[0.0; 32], GgmlType::Q4_0).is_none());
    assert!(GgufWriter::new().tensor("t", &[3], &[0.0; 2], GgmlType::F32).is_none());
    assert!(GgufWriter::new().tensor("t", &[256], &[0.0; 256], GgmlType::Q4K).is_none());
}

#[test]
fn every_metadata_type_round_trips_and_alignment_is_honoured() {
    let values = [
        MetaValue::U8(200),
        MetaValue::I8(-100),
        MetaValue::U16(60000),
        MetaValue::I16(-30000),
        MetaValue::U32(4_000_000_000),
        MetaValue::I32(-2_000_000_000),
        MetaValue::F32(1.5),
        MetaValue::Bool(true),
        MetaValue::String("héllo".into()),
        MetaValue::U64(u64::MAX),
        MetaValue::I64(i64::MIN),
        MetaValue::F64(-2.25),
        MetaValue::Array(MetaArray::Bool(vec![true, false])),
        MetaValue::Array(MetaArray::String(vec![String::new(), "x".into()])),
        MetaValue::Array(MetaArray::Array(vec![MetaArray::I16(vec![-1, 2]), MetaArray::F64(vec![])])),
        MetaValue::Array(MetaArray::U64(vec![])),
    ];
    let mut w = GgufWriter::new();
    for (i, v) in values.iter().enumerate() {
        w.meta(&format!("k{i:02}"), v.clone());
    }
    w.meta_u32(ALIGNMENT_KEY, 64);
    w.tensor("a", &[3], &[1.0, 2.0, 3.0], GgmlType::F32).expect("f32");
    w.tensor("b", &[5], &[1.0; 5], GgmlType::F16).expect("f16");
    let bytes = w.to_bytes();
    let file = read(&bytes).expect("reads");
    assert_eq!(file.version, 3);
    for (i, v) in values.iter().enumerate() {
        assert_eq!(file.get(&format!("k{i:02}")), Some(v), "k{i:02}");
    }
    assert_eq!(file.alignment, 64);
    assert_eq!(file.data_offset % 64, 0);
    assert_eq!(
        file.tensors.iter().map(|t| (t.offset - file.data_offset, t.nbytes)).collect::<Vec<_>>(),
        [(0, 12), (64, 10)]
    );
    // Version 2 has the same layout.
    w.version = 2;
    assert_eq!(read(&w.to_bytes()).expect("v2 reads").version, 2);
}

#[test]
fn a_tiny_llama_becomes_the_mlx_community_layout() {
    let tiny = TinyModel::default();
    let file = read(&tiny.writer().expect("tiny").to_bytes()).expect("reads");
    let m = file.model().expect("runs");
    let t = &m.config.text;
    assert!(matches!(m.config.model_type, ModelType::Llama(_)));
    assert_eq!(
        (t.hidden_size, t.num_hidden_layers, t.num_attention_heads, t.num_key_value_heads, t.head_dim),
        (64, 2, 4, 2, 16)
    );
    assert_eq!((t.intermediate_size, t.vocab_size, t.max_position_embeddings), (128, 64, Some(256)));
    assert_eq!((t.rope_theta, t.rms_norm_eps), (10_000.0, 1e-5));
    assert!(t.tie_word_embeddings && !t.qkv_bias && !t.rope_traditional);
    assert_eq!(m.config.eos_token_ids, [2]);

    // Q4_0 matrices are the default; the Q8_0 embedding is an override.
    let q = m.config.quantization.as_ref().expect("quantized");
    assert_eq!(q.default, QuantParams { group_size: 32, bits: 4 });
    assert_eq!(q.for_layer("model.embed_tokens"), LayerQuant::Quantized(QuantParams { group_size: 32, bits: 8 }));
    assert_eq!(q.for_layer("model.layers.1.mlp.down_proj"), LayerQuant::Quantized(q.default));

    let h = &m.header;
    assert_eq!(shape_of(h, "model.embed_tokens.weight"), (Dtype::U32, vec![64, 16]));
    assert_eq!(shape_of(h, "model.embed_tokens.scales"), (Dtype::F16, vec![64, 2]));
    assert_eq!(shape_of(h, "model.layers.0.self_attn.k_proj.weight"), (Dtype::U32, vec![32, 8]));
    assert_eq!(shape_of(h, "model.layers.0.mlp.down_proj.biases"), (Dtype::F16, vec![64, 4]));
    assert_eq!(shape_of(h, "model.layers.1.post_attention_layernorm.weight"), (Dtype::F32, vec![64]));
    assert_eq!(shape_of(h, "model.norm.weight"), (Dtype::F32, vec![64]));
    assert!(!h.tensors.contains_key("lm_head.weight"));
    // 1 embedding + 7 matrices per layer, each a triple; 2 norms per layer and the final one.
    assert_eq!(h.tensors.len(), 3 + 2 * (7 * 3 + 2) + 1);
    assert_eq!(m.arrays.len(), h.tensors.len());
    let name = |mlx: &str| m.arrays.iter().find(|a| a.mlx == mlx).map(|a| a.hf.as_str());
    assert_eq!(name("blk.1.attn_q.scales"), Some("model.layers.1.self_attn.q_proj.scales"));
    assert_eq!(name("blk.0.ffn_norm.weight"), Some("model.layers.0.post_attention_layernorm.weight"));
    assert_eq!(name("token_embd.biases"), Some("model.embed_tokens.biases"));

    // llama.cpp permuted q by the heads and k by the key/value heads; whole rows moved.
    assert_eq!(m.unpermute.len(), 2 * 2 * 3);
    assert!(m.unpermute.contains(&("model.layers.0.self_attn.q_proj.biases".into(), 4)));
    assert!(m.unpermute.contains(&("model.layers.1.self_attn.k_proj.weight".into(), 2)));
    assert!(m.unpermute.iter().all(|(n, _)| n.contains("q_proj") || n.contains("k_proj")));
}

#[test]
fn qwen2_and_qwen3_keep_their_layout_and_floats_are_dense() {
    let qwen2 = TinyModel {
        arch: "qwen2",
        matrix_type: GgmlType::BF16,
        embed_type: GgmlType::F16,
        tied: false,
        ..TinyModel::default()
    };
    let m = read(&qwen2.writer().expect("qwen2").to_bytes()).expect("reads").model().expect("runs");
    assert!(matches!(m.config.model_type, ModelType::Qwen2(_)));
    assert!(m.config.text.qkv_bias && !m.config.text.tie_word_embeddings);
    assert!(m.config.quantization.is_none(), "nothing is quantized");
    assert!(m.unpermute.is_empty(), "llama.cpp does not permute qwen2");
    // MLX widens BF16 to F16 when it reads a GGUF.
    assert_eq!(shape_of(&m.header, "model.layers.0.self_attn.q_proj.weight"), (Dtype::F16, vec![64, 64]));
    assert_eq!(shape_of(&m.header, "model.layers.0.self_attn.k_proj.bias"), (Dtype::F32, vec![32]));
    assert_eq!(shape_of(&m.header, "lm_head.weight"), (Dtype::F16, vec![64, 64]));

    let qwen3 =
        TinyModel { arch: "qwen3", matrix_type: GgmlType::Q4_1, embed_type: GgmlType::F32, ..TinyModel::default() };
    let m = read(&qwen3.writer().expect("qwen3").to_bytes()).expect("reads").model().expect("runs");
    assert!(matches!(m.config.model_type, ModelType::Qwen3(_)));
    assert_eq!(shape_of(&m.header, "model.layers.1.self_attn.k_norm.weight"), (Dtype::F32, vec![16]));
    assert!(m.unpermute.is_empty(), "llama.cpp does not permute qwen3");
    let q = m.config.quantization.expect("quantized");
    assert_eq!(q.default.bits, 4);
    // A float matrix in a quantized model is named dense, as mlx-lm's per-layer `false`.
    assert_eq!(q.for_layer("model.embed_tokens"), LayerQuant::Dense);
}

/// The footprint of a GGUF equals the footprint of the same model as an
/// mlx-community folder (config.json + the same tensors in a safetensors header).
#[test]
fn the_footprint_is_the_mlx_community_folder_s() {
    let m = read(&TinyModel::default().writer().expect("tiny").to_bytes()).expect("reads").model().expect("runs");
    let config = ModelConfig::parse(
        br#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"intermediate_size":128,
        "num_attention_heads":4,"num_key_value_heads":2,"rms_norm_eps":1e-5,"vocab_size":64,
        "max_position_embeddings":256,"tie_word_embeddings":true,
        "quantization":{"group_size":32,"bits":4,"model.embed_tokens":{"group_size":32,"bits":8}}}"#,
    )
    .expect("config.json");
    let mut json = serde_json::Map::new();
    for (name, t) in &m.header.tensors {
        json.insert(
            name.clone(),
            serde_json::json!({"dtype": t.dtype.as_str(), "shape": t.shape, "data_offsets": [t.data_offsets.0, t.data_offsets.1]}),
        );
    }
    let text = serde_json::Value::Object(json).to_string();
    let data = m.header.tensors.values().map(|t| t.nbytes()).sum::<u64>();
    let folder = crate::format::safetensors::parse_header(text.as_bytes(), 8 + text.len() as u64 + data)
        .expect("the header is a valid safetensors header");
    assert_eq!(folder, m.header);
    for shape in [LoadShape::default(), LoadShape { widen_floats_to_f32: true, ..LoadShape::default() }] {
        let ours = footprint(&m.config, std::slice::from_ref(&m.header), shape);
        let theirs = footprint(&config, std::slice::from_ref(&folder), shape);
        assert_eq!(ours, theirs);
    }
}

#[test]
fn the_vocabulary_is_read_and_checked() {
    let file = read(&TinyModel::default().writer().expect("tiny").to_bytes()).expect("reads");
    let v = file.vocab().expect("vocab");
    assert_eq!((v.model.as_str(), v.pre.as_deref()), ("gpt2", Some("smollm")));
    assert_eq!((v.tokens.len(), v.token_types.len(), v.tokens[1].as_str()), (64, 64, "<|im_start|>"));
    assert_eq!((v.bos_id, v.eos_id, v.padding_id, v.eot_id, v.add_bos), (Some(1), Some(2), Some(2), None, Some(false)));
    assert_eq!(v.merges, ["t3 t4"]);
    assert!(v.chat_template.as_deref().is_some_and(|t| t.contains("<|im_start|>")));
    let mut w = TinyModel::default().writer().expect("tiny");
    w.meta("tokenizer.ggml.scores", MetaValue::Array(MetaArray::F32(vec![0.0; 3])));
    let err = read(&w.to_bytes()).expect("reads").vocab().expect_err("3 scores for 64 tokens");
    assert!(
        matches!(&err, FormatError::GgufTokenizer { reason } if reason.contains("3 entries for 64 tokens")),
        "{err}"
    );
}

#[test]
fn every_hostile_file_is_refused_with_its_typed_error() {
    let corpus = hostile_corpus();
    assert!(corpus.len() >= 20, "only {} hostile files", corpus.len());
    for h in &corpus {
        let err = h.first_error().unwrap_or_else(|| panic!("{}: accepted", h.name));
        assert!((h.expect)(&err), "{}: unexpected error {err:?}", h.name);
        // A message a person can act on, never a bare type dump.
        assert!(!err.to_string().is_empty());
    }
    // The base the corpus starts from is itself fine: each file fails for its one lie.
    let base = TinyModel::default().writer().expect("tiny").to_bytes();
    let file = read(&base).expect("reads");
    file.model().expect("runs");
    file.vocab().expect("vocab");
}

/// docs/gguf.md names every case of the corpus and its count, so the page
/// cannot drift from what the tests run.
#[test]
fn the_docs_list_every_hostile_case_and_their_count() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../docs/gguf.md")).unwrap();
    let corpus = hostile_corpus();
    let missing: Vec<&str> = corpus.iter().map(|h| h.name).filter(|n| !page.contains(&format!("`{n}`"))).collect();
    let names: Vec<String> = corpus.iter().map(|h| format!("`{}`", h.name)).collect();
    assert!(missing.is_empty(), "docs/gguf.md does not name {missing:?}; the corpus: {}", names.join(", "));
    let count = format!("{} hostile files", corpus.len());
    assert!(page.contains(&count), "docs/gguf.md does not say {count:?}");
}

/// Expected MLX arrays of a SmolLM2-shaped file: (hf name, dtype, shape).
fn smollm_expectations(layers: u64, vocab: u64) -> Vec<(String, Dtype, Vec<u64>)> {
    let q = |name: &str, rows: u64, cols: u64, bits: u64| {
        vec![
            (format!("{name}.weight"), Dtype::U32, vec![rows, cols * bits / 32]),
            (format!("{name}.scales"), Dtype::F16, vec![rows, cols / 32]),
            (format!("{name}.biases"), Dtype::F16, vec![rows, cols / 32]),
        ]
    };
    // The file stores its embedding as Q8_0 (MLX: uint32 (49152, 144)), the rest as Q4_1.
    let mut out = q("model.embed_tokens", vocab, 576, 8);
    out.push(("model.norm.weight".into(), Dtype::F32, vec![576]));
    let last = layers - 1;
    for i in [0, last] {
        let p = format!("model.layers.{i}");
        out.extend(q(&format!("{p}.self_attn.q_proj"), 576, 576, 4));
        out.extend(q(&format!("{p}.self_attn.k_proj"), 192, 576, 4));
        out.extend(q(&format!("{p}.self_attn.v_proj"), 192, 576, 4));
        out.extend(q(&format!("{p}.self_attn.o_proj"), 576, 576, 4));
        out.extend(q(&format!("{p}.mlp.gate_proj"), 1536, 576, 4));
        out.extend(q(&format!("{p}.mlp.up_proj"), 1536, 576, 4));
        out.extend(q(&format!("{p}.mlp.down_proj"), 576, 1536, 4));
        out.push((format!("{p}.input_layernorm.weight"), Dtype::F32, vec![576]));
        out.push((format!("{p}.post_attention_layernorm.weight"), Dtype::F32, vec![576]));
    }
    out
}

/// What the real file must give, checked on it or on a file of its shape.
fn check_smollm_like(file: &GgufFile, layers: i32, vocab: u64) {
    let m = file.model().expect("the engine runs it");
    let t = &m.config.text;
    assert!(matches!(m.config.model_type, ModelType::Llama(_)));
    assert_eq!((t.num_hidden_layers, t.hidden_size, t.num_attention_heads, t.num_key_value_heads), (layers, 576, 9, 3));
    assert_eq!((t.intermediate_size, t.head_dim, t.rope_dims, t.vocab_size as u64), (1536, 64, 64, vocab));
    assert_eq!((t.rope_theta, t.rms_norm_eps, t.max_position_embeddings), (100_000.0, 1e-5, Some(8192)));
    assert!(t.tie_word_embeddings && t.rope_scaling.is_none());
    let q = m.config.quantization.as_ref().expect("Q4_1 with a Q8_0 embedding");
    assert_eq!(q.default, QuantParams { group_size: 32, bits: 4 });
    let embed = LayerQuant::Quantized(QuantParams { group_size: 32, bits: 8 });
    assert_eq!(q.overrides.iter().collect::<Vec<_>>(), [(&"model.embed_tokens".to_owned(), &embed)]);
    for (name, dtype, shape) in smollm_expectations(layers as u64, vocab) {
        assert_eq!(shape_of(&m.header, &name), (dtype, shape), "{name}");
    }
    // 7 quantized matrices (triples) and 2 norms per layer, the embedding's triple, the final norm.
    let arrays = layers as usize * 23 + 4;
    assert_eq!((m.header.tensors.len(), m.arrays.len()), (arrays, arrays));
    assert_eq!(m.unpermute.len(), layers as usize * 6);
    assert!(m.unpermute.contains(&(format!("model.layers.{}.self_attn.k_proj.scales", layers - 1), 3)));
    assert!(m.unpermute.contains(&("model.layers.0.self_attn.q_proj.weight".into(), 9)));

    let v = file.vocab().expect("its tokenizer");
    assert_eq!((v.tokens.len() as u64, v.model.as_str(), v.pre.as_deref()), (vocab, "gpt2", Some("smollm")));
    assert_eq!((v.bos_id, v.eos_id), (Some(1), Some(2)));
    assert_eq!((v.tokens[1].as_str(), v.tokens[2].as_str()), ("<|im_start|>", "<|im_end|>"));
    assert!(!v.merges.is_empty());
    assert!(v
        .chat_template
        .as_deref()
        .is_some_and(|c| c.contains("<|im_start|>") && c.contains("add_generation_prompt")));
}

fn real_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../.deps/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf")
}

#[test]
fn smollm2_as_mlx_reads_it() {
    let path = real_model();
    match std::fs::File::open(&path) {
        Ok(f) => {
            let len = f.metadata().expect("metadata").len();
            let file = read_gguf(&mut BufReader::new(f), len).expect("the real file reads");
            assert_eq!((file.version, file.tensors.len(), file.alignment), (3, 272, 32));
            check_smollm_like(&file, 30, 49152);
            let v = file.vocab().expect("vocab");
            assert_eq!(
                (v.merges.len(), v.token_types.iter().filter(|&&t| t == vocab::token_type::CONTROL).count()),
                (48900, 17)
            );
            assert!(v
                .chat_template
                .as_deref()
                .is_some_and(|c| c.contains("You are a helpful AI assistant named SmolLM")));
            let m = file.model().expect("runs");
            // `mx.load` on the file: 694 arrays holding 98,346,240 bytes (MLX 0.32.2).
            assert_eq!(m.arrays.len(), 694);
            let fp = footprint(&m.config, std::slice::from_ref(&m.header), LoadShape::default());
            assert_eq!(fp.weight_bytes, 98_346_240);
            // F16 scales, F32 norms: the activations and the KV cache are f32
            // (the engine's, measured: tests/gguf.rs).
            assert_eq!(fp.kv_bytes_per_element, 4);
        }
        Err(e) => {
            println!(
                "\n*** {} is missing ({e}): the real SmolLM2 checks run on a small file of its shape instead. Run `make setup`. ***\n",
                path.display()
            );
        }
    }
    // The same rules on a file of SmolLM2's shape (2 layers, 128 tokens), always.
    let small = TinyModel {
        hidden: 576,
        layers: 2,
        heads: 9,
        kv_heads: 3,
        ff: 1536,
        vocab: 128,
        matrix_type: GgmlType::Q4_1,
        embed_type: GgmlType::Q8_0,
        ..TinyModel::default()
    };
    let mut w = small.writer().expect("smollm-shaped");
    w.meta_f32("llama.rope.freq_base", 100_000.0).meta_u32("llama.context_length", 8192);
    check_smollm_like(&read(&w.to_bytes()).expect("reads"), 2, 128);
}

#[test]
fn oversized_headers_are_refused_by_their_budget_before_they_cost_memory() {
    let dir = tempfile::tempdir().unwrap();
    let files = super::hostile::write_oversized_headers(dir.path()).unwrap();
    assert_eq!(files.len(), 2);
    for (path, says) in files {
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len > super::limits::MAX_HEADER_BYTES, "{}: {len} bytes", path.display());
        let f = std::fs::File::open(&path).unwrap();
        let err = read_gguf(&mut std::io::BufReader::new(f), len).expect_err("refused");
        assert!(says(&err), "{}: {err}", path.display());
    }
}
