//! A corpus of broken and hostile model folders, each a tiny demo model with
//! one thing wrong: every size field out of range (zero, negative,
//! overflowing), lying and truncated safetensors headers, wrong dtypes,
//! mismatched shapes, missing shards, a tokenizer whose ids run past the
//! embedding, unsupported quantization modes, and chat templates that fail,
//! loop or explode. The tests run every folder through `fit`, `generate`,
//! the model list and the app's load (see `src-tauri/src/hostile_tests.rs`
//! and `src-tauri/tests/cli.rs`); `headroom demo-model --hostile DIR` writes
//! them for a look by hand.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::{write_demo_model, Arch, Bits, DemoError, DemoSpec, Preset};

/// Where a problem is caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caught {
    /// In config.json, the weight files' headers or (on disk) the
    /// tokenizer's ids against the embedding: the fit check, the model list
    /// and the load all refuse the folder (the pull check too, where it is
    /// in config.json or the headers it reads before a download).
    Headers,
    /// Only by a load (the tokenizer, the chat template, each tensor's shape
    /// and dtype against the config): the fit check and the list, which read
    /// headers only, still give a verdict; the load refuses it while the
    /// previous model stays loaded, and so does `generate`.
    Load,
}

/// One folder of the corpus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostileCase {
    /// The folder's name, also what is wrong in a few words.
    pub name: &'static str,
    pub dir: PathBuf,
    pub caught: Caught,
    /// Text the error must contain: the field, tensor or file at fault.
    pub needle: &'static str,
}

type Edit = fn(&Path) -> std::io::Result<()>;

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

fn read_json(path: &Path) -> std::io::Result<Map<String, Value>> {
    match serde_json::from_slice(&fs::read(path)?).map_err(io_err)? {
        Value::Object(m) => Ok(m),
        _ => Err(io_err("not an object")),
    }
}

fn write_json(path: &Path, v: &Map<String, Value>) -> std::io::Result<()> {
    fs::write(path, Value::Object(v.clone()).to_string())
}

/// Sets (or removes, with `None`) one top-level field of config.json.
fn set(dir: &Path, key: &str, value: Option<Value>) -> std::io::Result<()> {
    let path = dir.join("config.json");
    let mut c = read_json(&path)?;
    match value {
        Some(v) => c.insert(key.to_owned(), v),
        None => c.remove(key),
    };
    write_json(&path, &c)
}

/// Sets one field of config.json's `quantization` block.
fn set_quant(dir: &Path, key: &str, value: Value) -> std::io::Result<()> {
    let path = dir.join("config.json");
    let mut c = read_json(&path)?;
    let q = c.get_mut("quantization").and_then(Value::as_object_mut).ok_or_else(|| io_err("not quantized"))?;
    q.insert(key.to_owned(), value);
    write_json(&path, &c)
}

/// A safetensors file as its header object and its data bytes.
fn read_safetensors(path: &Path) -> std::io::Result<(Map<String, Value>, Vec<u8>)> {
    let bytes = fs::read(path)?;
    let len = usize::try_from(u64::from_le_bytes(bytes[..8].try_into().map_err(io_err)?)).map_err(io_err)?;
    let header = serde_json::from_slice::<Map<String, Value>>(&bytes[8..8 + len]).map_err(io_err)?;
    Ok((header, bytes[8 + len..].to_vec()))
}

fn write_safetensors(path: &Path, header: &Map<String, Value>, data: &[u8]) -> std::io::Result<()> {
    let json = Value::Object(header.clone()).to_string();
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(data);
    fs::write(path, out)
}

const WEIGHTS: &str = "model.safetensors";
const EMBED: &str = "model.embed_tokens.weight";

/// Edits one tensor's header entry in place (data untouched).
fn edit_entry(dir: &Path, tensor: &str, f: impl FnOnce(&mut Map<String, Value>)) -> std::io::Result<()> {
    let path = dir.join(WEIGHTS);
    let (mut header, data) = read_safetensors(&path)?;
    let entry = header.get_mut(tensor).and_then(Value::as_object_mut).ok_or_else(|| io_err(tensor))?;
    f(entry);
    write_safetensors(&path, &header, &data)
}

/// Rewrites the file with `tensor` dropped (its bytes too) or an extra one added.
fn rewrite_tensors(dir: &Path, drop: Option<&str>, add: Option<(&str, &[u8])>) -> std::io::Result<()> {
    let path = dir.join(WEIGHTS);
    let (header, data) = read_safetensors(&path)?;
    let mut entries: Vec<(String, Map<String, Value>)> = header
        .into_iter()
        .filter(|(k, _)| k != "__metadata__" && Some(k.as_str()) != drop)
        .filter_map(|(k, v)| v.as_object().cloned().map(|o| (k, o)))
        .collect();
    let start = |o: &Map<String, Value>| o["data_offsets"][0].as_u64().unwrap_or(0);
    entries.sort_by_key(|(_, o)| start(o));
    let (mut out_header, mut out_data) = (Map::new(), Vec::new());
    for (name, mut o) in entries {
        let (a, b) = (start(&o) as usize, o["data_offsets"][1].as_u64().unwrap_or(0) as usize);
        let at = out_data.len();
        out_data.extend_from_slice(&data[a..b]);
        o.insert("data_offsets".into(), json!([at, out_data.len()]));
        out_header.insert(name, Value::Object(o));
    }
    if let Some((name, bytes)) = add {
        let at = out_data.len();
        out_data.extend_from_slice(bytes);
        out_header.insert(
            name.into(),
            json!({"dtype": "F32", "shape": [bytes.len() / 4], "data_offsets": [at, out_data.len()]}),
        );
    }
    write_safetensors(&path, &out_header, &out_data)
}

/// Sets tokenizer_config.json's chat template.
fn template(dir: &Path, source: &str) -> std::io::Result<()> {
    let path = dir.join("tokenizer_config.json");
    let mut c = read_json(&path)?;
    c.insert("chat_template".into(), Value::from(source));
    write_json(&path, &c)
}

/// Splits the single weight file into two shards with an index.
fn shard(dir: &Path) -> std::io::Result<()> {
    let (header, data) = read_safetensors(&dir.join(WEIGHTS))?;
    fs::remove_file(dir.join(WEIGHTS))?;
    let mut map = Map::new();
    let (mut a, mut b): (Map<String, Value>, Map<String, Value>) = (Map::new(), Map::new());
    for (k, v) in header.into_iter().filter(|(k, _)| k != "__metadata__") {
        if k.contains("layers.1.") {
            b.insert(k, v)
        } else {
            a.insert(k, v)
        };
    }
    for (i, part) in [a, b].into_iter().enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", i + 1);
        for k in part.keys() {
            map.insert(k.clone(), Value::from(file.clone()));
        }
        // Re-pack this shard's tensors from the original data.
        let mut entries: Vec<_> = part.into_iter().collect();
        entries.sort_by_key(|(_, o)| o["data_offsets"][0].as_u64().unwrap_or(0));
        let (mut h, mut d) = (Map::new(), Vec::new());
        for (k, mut o) in entries {
            let (s, e) = (
                o["data_offsets"][0].as_u64().unwrap_or(0) as usize,
                o["data_offsets"][1].as_u64().unwrap_or(0) as usize,
            );
            let at = d.len();
            d.extend_from_slice(&data[s..e]);
            o["data_offsets"] = json!([at, d.len()]);
            h.insert(k, o);
        }
        write_safetensors(&dir.join(&file), &h, &d)?;
    }
    fs::write(dir.join("model.safetensors.index.json"), json!({"metadata": {}, "weight_map": map}).to_string())
}

/// The corpus: (name, base architecture, the edit, where it is caught, what the error names).
fn cases() -> Vec<(&'static str, Arch, Edit, Caught, &'static str)> {
    use Caught::{Headers, Load};
    let q3 = Arch::Qwen3;
    let ll = Arch::Llama;
    vec![
        // config.json: every size out of range, on Qwen3 (which requires each) or Llama.
        ("hidden-size-zero", q3, |d| set(d, "hidden_size", Some(json!(0))), Headers, "hidden_size"),
        ("hidden-size-negative", q3, |d| set(d, "hidden_size", Some(json!(-64))), Headers, "hidden_size"),
        ("hidden-size-overflow", q3, |d| set(d, "hidden_size", Some(json!(1u64 << 40))), Headers, "hidden_size"),
        ("heads-zero", q3, |d| set(d, "num_attention_heads", Some(json!(0))), Headers, "num_attention_heads"),
        ("heads-i32-min", q3, |d| set(d, "num_attention_heads", Some(json!(i32::MIN))), Headers, "num_attention_heads"),
        ("kv-heads-zero", q3, |d| set(d, "num_key_value_heads", Some(json!(0))), Headers, "num_key_value_heads"),
        (
            "kv-heads-not-a-divisor",
            q3,
            |d| set(d, "num_key_value_heads", Some(json!(3))),
            Headers,
            "num_key_value_heads",
        ),
        (
            "kv-heads-overflow",
            ll,
            |d| set(d, "num_key_value_heads", Some(json!(u64::MAX))),
            Headers,
            "num_key_value_heads",
        ),
        // The report: this passed the fit check and overflowed in the loader.
        ("head-dim-i32-min", ll, |d| set(d, "head_dim", Some(json!(i32::MIN))), Headers, "head_dim"),
        ("head-dim-zero", q3, |d| set(d, "head_dim", Some(json!(0))), Headers, "head_dim"),
        ("head-dim-huge", q3, |d| set(d, "head_dim", Some(json!(1u64 << 33))), Headers, "head_dim"),
        ("layers-negative", q3, |d| set(d, "num_hidden_layers", Some(json!(-1))), Headers, "num_hidden_layers"),
        (
            "layers-overflow",
            q3,
            |d| set(d, "num_hidden_layers", Some(json!(4_294_967_297u64))),
            Headers,
            "num_hidden_layers",
        ),
        ("intermediate-zero", q3, |d| set(d, "intermediate_size", Some(json!(0))), Headers, "intermediate_size"),
        ("intermediate-float", q3, |d| set(d, "intermediate_size", Some(json!(127.5))), Headers, "intermediate_size"),
        ("vocab-negative", q3, |d| set(d, "vocab_size", Some(json!(-1))), Headers, "vocab_size"),
        ("vocab-overflow", q3, |d| set(d, "vocab_size", Some(json!(1u64 << 63))), Headers, "vocab_size"),
        (
            "max-positions-zero",
            q3,
            |d| set(d, "max_position_embeddings", Some(json!(0))),
            Headers,
            "max_position_embeddings",
        ),
        (
            "max-positions-string",
            q3,
            |d| set(d, "max_position_embeddings", Some(json!("4096"))),
            Headers,
            "max_position_embeddings",
        ),
        ("rope-theta-negative", q3, |d| set(d, "rope_theta", Some(json!(-10000.0))), Headers, "rope_theta"),
        ("rope-theta-huge", q3, |d| set(d, "rope_theta", Some(json!(1e300))), Headers, "rope_theta"),
        ("rms-eps-zero", q3, |d| set(d, "rms_norm_eps", Some(json!(0))), Headers, "rms_norm_eps"),
        ("hidden-size-missing", q3, |d| set(d, "hidden_size", None), Headers, "hidden_size"),
        ("group-size-zero", q3, |d| set_quant(d, "group_size", json!(0)), Headers, "quantization.group_size"),
        ("group-size-negative", q3, |d| set_quant(d, "group_size", json!(-64)), Headers, "quantization.group_size"),
        (
            "group-size-overflow",
            q3,
            |d| set_quant(d, "group_size", json!(1u64 << 36)),
            Headers,
            "quantization.group_size",
        ),
        ("bits-seven", q3, |d| set_quant(d, "bits", json!(7)), Headers, "quantization.bits"),
        ("bits-negative", q3, |d| set_quant(d, "bits", json!(-4)), Headers, "quantization.bits"),
        ("quant-mode-mxfp4", q3, |d| set_quant(d, "mode", json!("mxfp4")), Headers, "mxfp4"),
        ("quant-mode-nvfp4", q3, |d| set_quant(d, "mode", json!("nvfp4")), Headers, "nvfp4"),
        (
            "quant-method-gptq",
            ll,
            |d| {
                set(d, "quantization", None)?;
                set(d, "quantization_config", Some(json!({"quant_method": "gptq", "bits": 4, "group_size": 128})))
            },
            Headers,
            "gptq",
        ),
        ("model-type-unknown", q3, |d| set(d, "model_type", Some(json!("gpt_oss"))), Headers, "gpt_oss"),
        ("model-type-missing", q3, |d| set(d, "model_type", None), Headers, "model_type"),
        (
            "rope-scaling-yarn",
            ll,
            |d| set(d, "rope_scaling", Some(json!({"rope_type": "yarn", "factor": 4.0}))),
            Headers,
            "yarn",
        ),
        (
            "sliding-window-layers",
            ll,
            |d| set(d, "layer_types", Some(json!(["full_attention", "sliding_attention"]))),
            Headers,
            "sliding_attention",
        ),
        (
            "config-truncated",
            q3,
            |d| {
                let text = fs::read(d.join("config.json"))?;
                fs::write(d.join("config.json"), &text[..text.len() / 2])
            },
            Headers,
            "config.json",
        ),
        ("config-a-list", q3, |d| fs::write(d.join("config.json"), "[1, 2, 3]"), Headers, "config.json"),
        // Weight files: truncated, lying and malformed headers.
        (
            "weights-truncated",
            q3,
            |d| {
                let bytes = fs::read(d.join(WEIGHTS))?;
                fs::write(d.join(WEIGHTS), &bytes[..bytes.len() - 100])
            },
            Headers,
            "truncated",
        ),
        ("weights-under-8-bytes", q3, |d| fs::write(d.join(WEIGHTS), b"\x10\x00"), Headers, "8-byte"),
        (
            "header-length-max",
            q3,
            |d| {
                let mut bytes = fs::read(d.join(WEIGHTS))?;
                bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
                fs::write(d.join(WEIGHTS), bytes)
            },
            Headers,
            "header length",
        ),
        (
            "header-not-json",
            q3,
            |d| {
                let mut bytes = fs::read(d.join(WEIGHTS))?;
                bytes[9..20].copy_from_slice(b"%%%%%%%%%%%");
                fs::write(d.join(WEIGHTS), bytes)
            },
            Headers,
            "safetensors header",
        ),
        (
            "header-negative-dim",
            q3,
            |d| {
                edit_entry(d, EMBED, |e| {
                    e.insert("shape".into(), json!([-1, 64]));
                })
            },
            Headers,
            "negative",
        ),
        (
            "header-dim-past-i32",
            q3,
            |d| {
                edit_entry(d, EMBED, |e| {
                    e.insert("shape".into(), json!([1u64 << 32, 1]));
                })
            },
            Headers,
            "beyond MLX's limit",
        ),
        (
            "header-shape-lies",
            q3,
            |d| {
                edit_entry(d, EMBED, |e| {
                    e.insert("shape".into(), json!([3, 3]));
                })
            },
            Headers,
            EMBED,
        ),
        (
            "header-offsets-overlap",
            q3,
            |d| {
                // The last tensor moved 4 bytes back, over the one before it.
                let path = d.join(WEIGHTS);
                let (mut header, data) = read_safetensors(&path)?;
                let last = header
                    .iter()
                    .filter_map(|(k, v)| Some((v.get("data_offsets")?[0].as_u64()?, k.clone())))
                    .max()
                    .map(|(_, k)| k)
                    .ok_or_else(|| io_err("no tensors"))?;
                let o = &mut header[&last]["data_offsets"];
                let (s, e) = (o[0].as_u64().unwrap_or(4), o[1].as_u64().unwrap_or(4));
                *o = json!([s - 4, e - 4]);
                write_safetensors(&path, &header, &data)
            },
            Headers,
            "overlaps",
        ),
        (
            "header-unknown-dtype",
            q3,
            |d| {
                edit_entry(d, EMBED, |e| {
                    e.insert("dtype".into(), json!("Q4_K"));
                })
            },
            Headers,
            "Q4_K",
        ),
        (
            "shard-missing",
            q3,
            |d| {
                shard(d)?;
                fs::remove_file(d.join("model-00002-of-00002.safetensors"))
            },
            Headers,
            "model-00002-of-00002.safetensors",
        ),
        (
            "index-escapes-folder",
            q3,
            |d| {
                shard(d)?;
                let index = d.join("model.safetensors.index.json");
                let text = fs::read_to_string(&index)?.replace("model-00002-of-00002", "../../model-00002-of-00002");
                fs::write(index, text)
            },
            Headers,
            "model.safetensors.index.json",
        ),
        ("no-weights", q3, |d| fs::remove_file(d.join(WEIGHTS)), Headers, "no weights"),
        // Sound headers whose tensors do not match the config: caught by the load.
        (
            "tensor-wrong-dtype",
            q3,
            |d| {
                edit_entry(d, "model.layers.0.mlp.up_proj.weight", |e| {
                    e.insert("dtype".into(), json!("I32"));
                })
            },
            Load,
            "model.layers.0.mlp.up_proj.weight",
        ),
        (
            "tensor-wrong-shape",
            q3,
            |d| {
                // Transposed: the bytes add up, the layout does not.
                edit_entry(d, "model.layers.1.self_attn.k_norm.weight", |e| {
                    e.insert("shape".into(), json!([2, 8]));
                })
            },
            Load,
            "model.layers.1.self_attn.k_norm.weight",
        ),
        (
            "tensor-missing",
            q3,
            |d| rewrite_tensors(d, Some("model.layers.1.mlp.down_proj.scales"), None),
            Load,
            "model.layers.1.mlp.down_proj.scales",
        ),
        (
            "tensor-unexpected",
            q3,
            |d| rewrite_tensors(d, None, Some(("model.layers.9.extra.weight", &[0u8; 16]))),
            Load,
            "model.layers.9.extra.weight",
        ),
        ("layers-more-than-stored", q3, |d| set(d, "num_hidden_layers", Some(json!(3))), Load, "model.layers.2"),
        // Tokenizer and chat template.
        ("tokenizer-missing", q3, |d| fs::remove_file(d.join("tokenizer.json")), Load, "tokenizer.json"),
        (
            "tokenizer-garbage",
            q3,
            |d| fs::write(d.join("tokenizer.json"), b"{\"model\": 17, \"added_tokens\": \"x\"}"),
            Headers,
            "tokenizer",
        ),
        (
            "tokenizer-past-embedding",
            q3,
            |d| {
                // The tokenizer of a bigger model: its vocabulary has ids far past the embedding's rows.
                let path = d.join("tokenizer.json");
                let mut t = read_json(&path)?;
                let vocab = t
                    .get_mut("model")
                    .and_then(|m| m.get_mut("vocab"))
                    .and_then(Value::as_object_mut)
                    .ok_or_else(|| io_err("model.vocab"))?;
                vocab.insert("far-away".into(), json!(1_000_000));
                write_json(&path, &t)
            },
            Headers,
            "embedding",
        ),
        (
            "template-raises",
            q3,
            |d| template(d, "{{ raise_exception('this model refuses every conversation') }}"),
            Load,
            "refuses every conversation",
        ),
        ("template-syntax", q3, |d| template(d, "{% for m in messages %}{{ m.content "), Load, "chat template"),
        (
            "template-loops",
            q3,
            |d| template(d, "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}"),
            Load,
            "fuel",
        ),
        (
            "template-explodes",
            q3,
            |d| template(d, "{% for i in range(100) %}{{ 'x' * 10000000 }}{% endfor %}"),
            Load,
            "exceeds",
        ),
        (
            "tokenizer-config-garbage",
            q3,
            |d| fs::write(d.join("tokenizer_config.json"), "{"),
            Headers,
            "tokenizer_config.json",
        ),
    ]
}

/// Writes the corpus into `root` (one folder per case) and says what each
/// must fail with. The base models are the tiny 4-bit Qwen3 and Llama demo
/// models, written once and copied.
pub fn write_hostile_corpus(root: &Path) -> Result<Vec<HostileCase>, DemoError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| DemoError::Io { path, source }
    };
    let base = root.join(".base");
    let mut bases = Vec::new();
    for arch in [Arch::Qwen3, Arch::Llama] {
        let dir = base.join(arch.as_str());
        let spec = DemoSpec { max_shard_bytes: None, ..DemoSpec::new(arch, Preset::Tiny, Bits::Four) };
        write_demo_model(&dir, &spec)?;
        bases.push((arch, dir));
    }
    let mut out = Vec::new();
    for (name, arch, edit, caught, needle) in cases() {
        let dir = root.join(name);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let from = bases.iter().find(|(a, _)| *a == arch).map(|(_, d)| d.clone()).unwrap_or_else(|| base.clone());
        for entry in fs::read_dir(&from).map_err(io(&from))? {
            let entry = entry.map_err(io(&from))?;
            fs::copy(entry.path(), dir.join(entry.file_name())).map_err(io(&dir))?;
        }
        edit(&dir).map_err(io(&dir))?;
        out.push(HostileCase { name, dir, caught, needle });
    }
    fs::remove_dir_all(&base).map_err(io(&base))?;
    Ok(out)
}
