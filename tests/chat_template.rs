//! Chat templates with tools and keywords render as transformers'
//! `apply_chat_template` renders them: the same text and the same token ids,
//! on Qwen3's template (tests/templates/qwen3.jinja) over the project's demo
//! BPE tokenizer, with transformers from .deps/venv as the reference.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use headroom_core::chat::{Message, Role, Tool, ToolCall};
use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
use headroom_engine::tokenizer::TemplateExtras;
use headroom_engine::Tokenizer;
use headroom_test_support::scratch;
use serde_json::{json, Map, Value};

const QWEN3: &str = include_str!("templates/qwen3.jinja");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tools() -> Vec<Tool> {
    vec![
        Tool {
            name: "get_weather".into(),
            description: Some("The weather in a city, now.".into()),
            parameters: json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "Name, as on a map: «Zürich»"},
                    "unit": {"type": "string", "enum": ["c", "f"]}
                },
                "required": ["city"]
            }),
        },
        Tool { name: "now".into(), description: None, parameters: json!({"type": "object", "properties": {}}) },
    ]
}

/// The tools as a client hands them to transformers (OpenAI's request
/// shape), as JSON text, the schemas' keys in the order [`tools`] writes
/// them (serde_json keeps insertion order: the workspace's `preserve_order`).
const HF_TOOLS: &str = r#"[
  {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city, now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "Name, as on a map: «Zürich»"},
      "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
]"#;

/// A conversation through one round of tool use, with an earlier answer
/// that thought aloud.
fn conversation() -> (Vec<Message>, &'static str) {
    let call = ToolCall {
        id: "call_1".into(),
        name: "get_weather".into(),
        arguments: r#"{"unit": "c", "city": "Zürich"}"#.into(),
    };
    let ours = vec![
        Message::new(Role::System, "Be brief."),
        Message::new(Role::User, "Hi"),
        Message::new(Role::Assistant, "<think>\nA greeting.\n</think>\n\nHello!"),
        Message::new(Role::User, "Weather in Zürich?"),
        Message { tool_calls: vec![call], ..Message::new(Role::Assistant, "") },
        Message { tool_call_id: Some("call_1".into()), ..Message::new(Role::Tool, r#"{"temp": 21}"#) },
    ];
    // The calls as vLLM hands them to transformers: arguments parsed, in
    // the order the model wrote them.
    let hf = r#"[
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nA greeting.\n</think>\n\nHello!"},
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"unit": "c", "city": "Zürich"}}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}
    ]"#;
    (ours, hf)
}

#[test]
fn qwen3_renders_tools_and_enable_thinking_as_transformers_does() {
    let python = root().join(".deps/venv/bin/python");
    assert!(python.is_file(), "{} is missing: run scripts/setup.sh (it installs transformers)", python.display());
    let dir = scratch("chat-template-qwen3");
    write_demo_model(&dir, &DemoSpec::new(Arch::Qwen3, Preset::Tiny, Bits::Four)).unwrap();
    std::fs::write(dir.join("chat_template.jinja"), QWEN3).unwrap();
    let tok = Tokenizer::from_dir(&dir).unwrap();

    let (messages, hf_messages) = conversation();
    let tools = tools();
    let think = |on: bool| {
        let mut m = Map::new();
        m.insert("enable_thinking".into(), json!(on));
        m
    };
    // (tools, kwargs): with and without tools, thinking off, on and unsaid,
    // and a keyword the template never reads.
    let mut extra = think(false);
    extra.insert("reasoning_budget".into(), json!(12));
    let cases: Vec<(bool, Map<String, Value>)> =
        vec![(true, think(false)), (true, think(true)), (true, Map::new()), (false, think(false)), (false, extra)];

    // Written out by hand so the messages' and tools' key order reaches Python.
    let cases_json: Vec<String> = cases
        .iter()
        .map(|(with_tools, kwargs)| {
            let tools_json = if *with_tools { HF_TOOLS } else { "[]" };
            format!(
                r#"{{"messages": {hf_messages}, "tools": {tools_json}, "kwargs": {}}}"#,
                Value::Object(kwargs.clone())
            )
        })
        .collect();
    let request = format!(
        r#"{{"tokenizer": {}, "template": {}, "cases": [{}]}}"#,
        json!(dir.to_string_lossy()),
        json!(QWEN3),
        cases_json.join(", ")
    );
    let mut child = Command::new(&python)
        .arg(root().join("scripts/parity/chat_template_reference.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(request.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "reference failed: {}", String::from_utf8_lossy(&out.stderr));
    let reference: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reference.len(), cases.len());

    for ((with_tools, kwargs), want) in cases.iter().zip(&reference) {
        let extras = TemplateExtras { tools: if *with_tools { &tools } else { &[] }, kwargs: Some(kwargs) };
        let text = tok.apply_chat_template_with(&messages, extras, true).unwrap();
        assert_eq!(text, want["text"].as_str().unwrap(), "tools {with_tools}, {kwargs:?}");
        let ids = tok.encode_chat_with(&messages, extras, true).unwrap();
        let want_ids: Vec<u32> = serde_json::from_value(want["ids"].clone()).unwrap();
        assert_eq!(ids, want_ids, "tools {with_tools}, {kwargs:?}");
    }
    // The cases differ where they should: tools reach the system turn, and
    // thinking off closes an empty block after the generation prompt.
    let text = |i: usize| reference[i]["text"].as_str().unwrap();
    assert!(text(0).contains("\"name\": \"get_weather\"") && !text(3).contains("<tools>"));
    assert!(text(0).ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    assert!(text(1).ends_with("<|im_start|>assistant\n") && text(2) == text(1));
    assert!(text(0)
        .contains("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\", \"city\": \"Zürich\"}}"));
}
