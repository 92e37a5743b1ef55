//! Property tests (proptest, a fixed budget of cases per target so `cargo
//! test` takes the same time on every run) of the readers that take bytes
//! from strangers: the safetensors header, config.json and GGUF. For any
//! input they return a value or an error, never panic, and what they accept
//! holds the invariants the engine and the fit check rely on.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::fields::limits;
use super::gguf::write::TinyModel;
use super::gguf::{read_gguf, GgmlType, GgufFile};
use super::safetensors::{header_len, parse_header};
use super::ModelConfig;

/// Cases per target (README: "Hostile model files").
pub const CASES: u32 = 4096;

fn config() -> ProptestConfig {
    ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() }
}

/// A JSON value of the kinds a hostile field might hold.
fn any_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e30f64..1e30).prop_map(Value::from),
        prop_oneof![Just(0i64), Just(1), Just(-1), Just(i64::from(i32::MIN)), Just(i64::from(i32::MAX)), 1i64..5000]
            .prop_map(Value::from),
        "[a-z0-9_]{0,8}".prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
    ]
}

/// One header entry: a dtype (real or not), a shape of any integers, offsets.
fn any_entry() -> impl Strategy<Value = (String, Value)> {
    let dtype = prop_oneof![Just("F32"), Just("BF16"), Just("U32"), Just("I8"), Just("F8_E4M3"), Just("Q4"), Just("")];
    let dim = prop_oneof![0i64..40, Just(-1), Just(i64::from(i32::MAX)), Just(i64::MAX), any::<i64>()];
    let offset = prop_oneof![0u64..2000, any::<u64>()];
    ("[a-z.]{1,12}", dtype, proptest::collection::vec(dim, 0..4), offset.clone(), offset)
        .prop_map(|(name, dtype, shape, a, b)| (name, json!({"dtype": dtype, "shape": shape, "data_offsets": [a, b]})))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_header_reader_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200), extra in 0u64..1 << 40) {
        let size = bytes.len() as u64 + extra;
        if let Ok(len) = header_len(&bytes, size) {
            let end = usize::try_from(8 + len).unwrap_or(usize::MAX).min(bytes.len());
            let _ = parse_header(&bytes[8.min(end)..end], size);
        }
    }

    #[test]
    fn accepted_headers_tile_their_data_exactly(entries in proptest::collection::vec(any_entry(), 0..6), data in 0u64..4000) {
        let header = Value::Object(entries.into_iter().collect::<Map<_, _>>()).to_string();
        let size = 8 + header.len() as u64 + data;
        if let Ok(h) = parse_header(header.as_bytes(), size) {
            let mut total = 0u64;
            for t in h.tensors.values() {
                let elements = t.shape.iter().product::<u64>();
                prop_assert_eq!(elements * t.dtype.size(), t.nbytes());
                prop_assert!(t.shape.iter().all(|&d| d <= i32::MAX as u64));
                total += t.nbytes();
            }
            prop_assert_eq!(total, data);
        }
    }

    #[test]
    fn the_config_reader_never_panics_and_what_it_accepts_is_in_range(
        model_type in prop_oneof![Just("qwen2"), Just("qwen3"), Just("llama"), Just("mistral"), Just("phi3")],
        edits in proptest::collection::vec((0usize..16, any_value()), 0..4),
    ) {
        let keys = [
            "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps", "tie_word_embeddings",
            "rope_scaling", "quantization", "quantization_config", "eos_token_id", "layer_types",
        ];
        let mut c = json!({
            "model_type": model_type, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
            "max_position_embeddings": 4096, "rope_theta": 1e6, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
        });
        for (k, v) in edits {
            c[keys[k]] = v;
        }
        if let Ok(cfg) = ModelConfig::parse(c.to_string().as_bytes()) {
            let t = &cfg.text;
            for (v, max) in [
                (t.hidden_size, limits::HIDDEN_SIZE), (t.num_hidden_layers, limits::LAYERS),
                (t.intermediate_size, limits::INTERMEDIATE_SIZE), (t.num_attention_heads, limits::HEADS),
                (t.num_key_value_heads, limits::HEADS), (t.head_dim, limits::HEAD_DIM), (t.vocab_size, limits::VOCAB_SIZE),
            ] {
                prop_assert!(v >= 1 && v as u64 <= max);
            }
            prop_assert_eq!(t.num_attention_heads % t.num_key_value_heads, 0);
            prop_assert!(t.rope_theta.is_finite() && t.rope_theta > 0.0 && t.rms_norm_eps > 0.0);
            // The widest shape the engine forms stays an i32.
            prop_assert!(i32::checked_mul(t.num_attention_heads, t.head_dim).is_some());
        }
    }

    #[test]
    fn the_config_reader_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = ModelConfig::parse(&bytes);
    }
}

/// A small valid GGUF (one layer, every storage type the engine loads).
fn small_gguf() -> Vec<u8> {
    let tiny = TinyModel {
        hidden: 32,
        layers: 1,
        heads: 2,
        kv_heads: 1,
        ff: 64,
        vocab: 16,
        matrix_type: GgmlType::Q4_1,
        embed_type: GgmlType::Q8_0,
        tied: false,
        ..TinyModel::default()
    };
    tiny.writer().map(|w| w.to_bytes()).unwrap_or_default()
}

/// Reads a GGUF, then its model and tokenizer; what it accepts holds the
/// invariants the loader relies on.
fn gguf_holds(bytes: &[u8], claimed_len: u64) -> Result<(), TestCaseError> {
    let Ok(file) = read_gguf(&mut &bytes[..], claimed_len) else { return Ok(()) };
    check_gguf(&file, claimed_len)?;
    if let Ok(m) = file.model() {
        for t in m.header.tensors.values() {
            prop_assert!(t.shape.iter().all(|&d| d >= 1 && d <= i32::MAX as u64));
        }
        prop_assert_eq!(m.arrays.len(), m.header.tensors.len());
    }
    let _ = file.vocab();
    Ok(())
}

fn check_gguf(file: &GgufFile, len: u64) -> Result<(), TestCaseError> {
    prop_assert!(file.alignment.is_power_of_two() && file.data_offset.is_multiple_of(file.alignment));
    prop_assert!(file.data_offset <= len);
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for t in &file.tensors {
        prop_assert!((1..=4).contains(&t.dims.len()));
        prop_assert!(t.dims.iter().all(|&d| d >= 1 && d <= i32::MAX as u64));
        prop_assert!(t.offset >= file.data_offset && t.offset.is_multiple_of(file.alignment));
        prop_assert!(t.offset + t.nbytes <= len);
        spans.push((t.offset, t.offset + t.nbytes));
    }
    spans.sort_unstable();
    prop_assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES / 4, ..config() })]

    #[test]
    fn the_gguf_reader_never_panics_on_mutations(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        words in proptest::collection::vec((any::<prop::sample::Index>(), prop_oneof![Just(0u64), Just(1), Just(u64::MAX), Just(1 << 32), Just(1 << 62), any::<u64>()]), 0..3),
    ) {
        let mut bytes = small_gguf();
        prop_assert!(!bytes.is_empty());
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        // Counts and lengths are u64s: overwrite whole words too, where they lie.
        for (at, w) in words {
            let i = at.index(bytes.len() - 8);
            bytes[i..i + 8].copy_from_slice(&w.to_le_bytes());
        }
        gguf_holds(&bytes, bytes.len() as u64)?;
    }

    #[test]
    fn the_gguf_reader_never_panics_on_truncations(cut in any::<prop::sample::Index>(), lie in 0u64..4096) {
        let bytes = small_gguf();
        let end = cut.index(bytes.len());
        // The reader is told the true length, or a longer one it then cannot read.
        gguf_holds(&bytes[..end], end as u64)?;
        gguf_holds(&bytes[..end], end as u64 + lie)?;
    }
}
