//! Tokenizer tests on the demo models' real BPE vocabularies.

use std::fs;
use std::path::PathBuf;

use headroom_core::chat::{Message, Role};

use super::*;
use crate::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
use crate::testutil::temp_dir;

fn demo(arch: Arch) -> PathBuf {
    let dir = temp_dir(&format!("tok-{arch}"));
    write_demo_model(&dir, &DemoSpec::new(arch, Preset::Tiny, Bits::Four)).expect("demo model");
    dir
}

/// A folder with only the tokenizer files of a demo model, to edit freely.
fn tokenizer_only(arch: Arch) -> PathBuf {
    let src = demo(arch);
    let dir = temp_dir(&format!("tok-only-{arch}"));
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        fs::copy(src.join(f), dir.join(f)).expect("copy");
    }
    dir
}

fn chat(system: Option<&str>, user: &str) -> Vec<Message> {
    let mut m: Vec<Message> = system.map(|s| Message::new(Role::System, s)).into_iter().collect();
    m.push(Message::new(Role::User, user));
    m
}

fn load(dir: &Path) -> Tokenizer {
    Tokenizer::from_dir(dir).unwrap()
}

#[test]
fn chatml_renders_as_transformers_does() {
    let tok = load(&demo(Arch::Qwen2));
    let text = tok.apply_chat_template(&chat(Some("Be brief."), "Hi there"), true).expect("render");
    assert_eq!(
        text,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    );
    // Qwen's template adds a default system turn when there is none.
    let text = tok.apply_chat_template(&chat(None, "Hi"), false).expect("render");
    assert_eq!(text, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    // Special tokens are single ids; nothing is added around them.
    let ids = tok.encode_chat(&chat(None, "Hi"), true).expect("encode");
    let im_start = tok.inner.token_to_id("<|im_start|>").expect("special");
    assert_eq!(ids[0], im_start);
    assert_eq!(
        tok.decode(&ids, false).expect("decode"),
        tok.apply_chat_template(&chat(None, "Hi"), true).expect("render")
    );
}

#[test]
fn llama3_template_gets_bos_from_the_context_and_encoding_adds_no_second_one() {
    let tok = load(&demo(Arch::Llama));
    let text = tok.apply_chat_template(&chat(None, "  Hello  "), true).expect("render");
    assert_eq!(
        text,
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    let bos = tok.inner.token_to_id("<|begin_of_text|>").expect("bos");
    let ids = tok.encode_chat(&chat(None, "Hello"), true).expect("encode");
    assert_eq!(ids.iter().filter(|&&t| t == bos).count(), 1);
    assert_eq!(ids[0], bos);
    // Plain encoding with special tokens does add it (the post-processor).
    assert_eq!(tok.encode("Hello", true).expect("encode")[0], bos);
}

#[test]
fn eos_ids_are_the_union_of_all_three_files() {
    let tok = load(&demo(Arch::Llama));
    let want: Vec<u32> = ["<|end_of_text|>", "<|eot_id|>"]
        .iter()
        .map(|t| tok.inner.token_to_id(t).expect("special"))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(tok.eos_ids(), want);

    let dir = tokenizer_only(Arch::Qwen2);
    fs::write(dir.join("config.json"), r#"{"eos_token_id": 5}"#).expect("write");
    fs::write(dir.join("generation_config.json"), r#"{"eos_token_id": [7, 6, 5]}"#).expect("write");
    let tok = load(&dir);
    let im_end = tok.inner.token_to_id("<|im_end|>").expect("special");
    let mut want = vec![5, 6, 7, im_end];
    want.sort_unstable();
    assert_eq!(tok.eos_ids(), want);
}

#[test]
fn template_sources_in_transformers_order() {
    let dir = tokenizer_only(Arch::Qwen2);
    let msgs = chat(None, "x");
    // A list of named templates: "default" is used.
    let mut cfg: Value =
        serde_json::from_str(&fs::read_to_string(dir.join("tokenizer_config.json")).expect("read")).expect("json");
    cfg["chat_template"] = serde_json::json!([
        {"name": "tool_use", "template": "TOOLS"},
        {"name": "default", "template": "{% for m in messages %}[{{ m.role }}]{% endfor %}"}
    ]);
    fs::write(dir.join("tokenizer_config.json"), cfg.to_string()).expect("write");
    assert_eq!(load(&dir).apply_chat_template(&msgs, false).expect("render"), "[user]");
    // chat_template.jinja wins over the JSON.
    fs::write(dir.join("chat_template.jinja"), "J:{{ messages[0].content }}").expect("write");
    assert_eq!(load(&dir).apply_chat_template(&msgs, false).expect("render"), "J:x");
    // A list without "default" is a config error naming the file.
    fs::remove_file(dir.join("chat_template.jinja")).expect("rm");
    cfg["chat_template"] = serde_json::json!([{"name": "tool_use", "template": "T"}]);
    fs::write(dir.join("tokenizer_config.json"), cfg.to_string()).expect("write");
    match Tokenizer::from_dir(&dir) {
        Err(EngineError::InvalidConfig { path, .. }) => assert!(path.ends_with("tokenizer_config.json")),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn hf_dialect_python_methods_tojson_trim_blocks_and_raise_exception() {
    let msgs = chat(Some("  sys  "), "hi");
    let t = "{% for m in messages %}\n  {% if m.role == 'system' %}\n{{ m.content.strip() }}|{% endif %}\n{% endfor %}{{ {'a': [1, 'é<'], 'b': none} | tojson }}|{{ [1] | tojson(indent=2) }}";
    let out = render_template(t, &msgs, TemplateExtras::default(), false, None, None).expect("render");
    assert_eq!(out, "sys|{\"a\": [1, \"é<\"], \"b\": null}|[\n  1\n]");

    let t = "{% if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with the user') }}{% endif %}ok";
    match render_template(t, &msgs, TemplateExtras::default(), false, None, None) {
        Err(e @ EngineError::TemplateRender { .. }) => {
            assert!(e.to_string().contains("Conversations must start with the user"), "{e}")
        }
        other => panic!("expected TemplateRender, got {other:?}"),
    }
    assert!(matches!(
        render_template("{% for %}", &msgs, TemplateExtras::default(), false, None, None),
        Err(EngineError::TemplateRender { .. })
    ));
    assert_eq!(
        render_template(
            "{{ bos_token }}{{ eos_token }}",
            &msgs,
            TemplateExtras::default(),
            false,
            Some("<s>"),
            Some("</s>")
        )
        .expect("render"),
        "<s></s>"
    );
}

#[test]
fn missing_tokenizer_and_missing_template_are_typed_errors() {
    let dir = temp_dir("tok-missing");
    match Tokenizer::from_dir(&dir) {
        Err(e @ EngineError::MissingTokenizer { .. }) => assert!(e.to_string().contains(&dir.display().to_string())),
        other => panic!("expected MissingTokenizer, got {other:?}"),
    }
    // A base model: no template anywhere. Loading works; chatting is refused.
    let dir = tokenizer_only(Arch::Qwen3);
    fs::write(dir.join("tokenizer_config.json"), r#"{"eos_token": "<|im_end|>"}"#).expect("write");
    let tok = load(&dir);
    assert!(!tok.has_chat_template());
    assert!(matches!(tok.encode_chat(&chat(None, "x"), true), Err(EngineError::NoChatTemplate { dir: d }) if d == dir));
    assert!(!tok.encode("plain text works", false).expect("encode").is_empty());
    // A corrupt tokenizer.json names the file.
    fs::write(dir.join("tokenizer.json"), "{ not json").expect("write");
    match Tokenizer::from_dir(&dir) {
        Err(EngineError::Tokenizer { path, .. }) => assert!(path.ends_with("tokenizer.json")),
        other => panic!("expected Tokenizer error, got {other:?}"),
    }
}

#[test]
fn streaming_never_splits_a_character() {
    for arch in [Arch::Qwen2, Arch::Llama] {
        let tok = load(&demo(arch));
        let text = "Tokyo 東京都 😀🎉 naïve café — 你好，世界 🧑‍💻!";
        let ids = tok.encode(text, false).expect("encode");
        let mut det = tok.detokenizer();
        let mut held_back = 0;
        let mut out = String::new();
        for &id in &ids {
            let chunk = det.step(id).expect("step");
            assert!(!chunk.contains('\u{FFFD}'), "{arch}: broken character in chunk {chunk:?}");
            held_back += usize::from(chunk.is_empty());
            out.push_str(&chunk);
        }
        assert!(held_back > 0, "{arch}: the text should have characters split across tokens");
        assert_eq!(det.finish().expect("finish"), "");
        assert_eq!(out, text, "{arch}");
        assert_eq!(det.text(), text);
    }
}

#[test]
fn an_unfinished_character_is_flushed_at_the_end() {
    let tok = load(&demo(Arch::Qwen2));
    let ids = tok.encode("a😀", false).expect("encode");
    // The emoji's 4 bytes are not one token in a 1000-token vocabulary.
    assert!(ids.len() >= 3, "{ids:?}");
    let mut det = tok.detokenizer();
    let mut out = String::new();
    for &id in &ids[..ids.len() - 1] {
        out.push_str(&det.step(id).expect("step"));
    }
    assert_eq!(out, "a");
    assert_eq!(det.finish().expect("finish"), "\u{FFFD}");
}
