//! Formats, parsing and streaming on well-formed and hostile text.

use serde_json::json;

use super::*;
use crate::chat::ToolCall;

fn tools() -> Vec<Tool> {
    vec![
        Tool {
            name: "get_weather".into(),
            description: Some("Weather now".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        },
        Tool { name: "now".into(), description: None, parameters: json!({"type": "object", "properties": {}}) },
    ]
}

fn call(name: &str, arguments: &str) -> ParsedCall {
    ParsedCall { name: name.into(), arguments: arguments.into() }
}

#[test]
fn formats_are_picked_from_the_template() {
    assert_eq!(ToolFormat::for_template(Some("{{ '<tool_call>' }}")), ToolFormat::Hermes);
    assert_eq!(ToolFormat::for_template(Some("[AVAILABLE_TOOLS] [TOOL_CALLS]")), ToolFormat::Mistral);
    let llama = "<|start_header_id|>{% if tools %}{\"name\": function name, \"parameters\": …}{% endif %}";
    assert_eq!(ToolFormat::for_template(Some(llama)), ToolFormat::Llama3Json);
    // Llama 3 without tools in its template, ChatML without tools, none at all.
    assert_eq!(ToolFormat::for_template(Some("<|start_header_id|>{{ m.content }}")), ToolFormat::Fallback);
    assert_eq!(ToolFormat::for_template(Some("<|im_start|>{{ m.content }}")), ToolFormat::Fallback);
    assert_eq!(ToolFormat::for_template(None), ToolFormat::Fallback);
}

#[test]
fn hermes_answers_split_into_content_and_calls() {
    let t = tools();
    let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"a\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\"}\n</tool_call>";
    let a = parse_answer(ToolFormat::Hermes, text, &t);
    assert_eq!(a.content, "Let me check.");
    // Arguments kept as written: key order and spacing.
    assert_eq!(a.calls, [call("get_weather", r#"{"city": "Oslo", "a": 1}"#), call("now", "{}")]);
    // Arguments as a JSON string holding an object are unwrapped.
    let text = r#"<tool_call>{"name": "now", "arguments": "{\"x\": 1}"}</tool_call>"#;
    assert_eq!(parse_answer(ToolFormat::Hermes, text, &t).calls, [call("now", r#"{"x": 1}"#)]);
    // An unfinished last call is read if its JSON is whole.
    let text = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n";
    assert_eq!(parse_answer(ToolFormat::Hermes, text, &t).calls, [call("now", "{}")]);
}

#[test]
fn hostile_hermes_text_stays_content_as_written() {
    let t = tools();
    for text in [
        "<tool_call>not json</tool_call>",
        "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"now\", \"arguments\": [1]}</tool_call>",
        "<tool_call>{\"name\": \"now\", \"arguments\": 5}</tool_call>",
        "<tool_call>{\"name\": 5}</tool_call>",
        "<tool_call></tool_call><tool_call>",
        "</tool_call>{\"name\": \"now\"}",
        "<tool_call>{\"name\": \"now\"",
        "<tool_call>\u{0}\u{ffff}ÿ",
        "plain answer with a < and a <tool_ but no call",
    ] {
        let a = parse_answer(ToolFormat::Hermes, text, &t);
        assert!(a.calls.is_empty(), "{text:?}: {a:?}");
        assert_eq!(a.content, text);
    }
    // A bad block beside a good one: the bad one stays in the content.
    let text = "<tool_call>oops</tool_call><tool_call>{\"name\": \"now\"}</tool_call>";
    let a = parse_answer(ToolFormat::Hermes, text, &t);
    assert_eq!((a.content.as_str(), a.calls.len()), ("<tool_call>oops</tool_call>", 1));
    // No tools offered: nothing is a call.
    let text = "<tool_call>{\"name\": \"now\"}</tool_call>";
    assert_eq!(parse_answer(ToolFormat::Hermes, text, &[]).content, text);
    // Deep nesting neither panics nor overflows.
    let deep = format!(
        "<tool_call>{{\"name\": \"now\", \"arguments\": {}{}}}</tool_call>",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert!(parse_answer(ToolFormat::Hermes, &deep, &t).calls.is_empty());
}

#[test]
fn llama_and_mistral_calls_parse() {
    let t = tools();
    let a = parse_answer(
        ToolFormat::Llama3Json,
        "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}",
        &t,
    );
    assert_eq!((a.content.as_str(), a.calls), ("", vec![call("get_weather", r#"{"city": "Rome"}"#)]));
    let a = parse_answer(
        ToolFormat::Llama3Json,
        "{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"now\", \"parameters\": {}}",
        &t,
    );
    assert_eq!(a.calls.len(), 2);
    for prose in
        ["{not a call}", "{\"name\": \"now\"} and then prose", "The answer is {\"name\": \"now\"}", "{\"a\": 1}"]
    {
        let a = parse_answer(ToolFormat::Llama3Json, prose, &t);
        assert_eq!((a.content.as_str(), a.calls.len()), (prose, 0), "{prose}");
    }
    let a = parse_answer(ToolFormat::Mistral, "Sure.[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\"}}]", &t);
    assert_eq!(a.content, "Sure.");
    assert_eq!(a.calls, [call("now", "{}"), call("get_weather", r#"{"city": "Bern"}"#)]);
    for bad in ["[TOOL_CALLS]", "[TOOL_CALLS][]", "[TOOL_CALLS][{\"name\": \"x\"}]", "[TOOL_CALLS]{\"name\": \"now\"}"]
    {
        let a = parse_answer(ToolFormat::Mistral, bad, &t);
        assert_eq!((a.content.as_str(), a.calls.len()), (bad, 0), "{bad}");
    }
}

#[test]
fn the_fallback_teaches_the_format_and_rewrites_tool_turns() {
    let t = tools();
    let messages = vec![
        Message::new(Role::System, "Be brief."),
        Message::new(Role::User, "Weather?"),
        Message {
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Oslo"}"#.into(),
            }],
            ..Message::new(Role::Assistant, "")
        },
        Message { tool_call_id: Some("c1".into()), ..Message::new(Role::Tool, "12 C") },
    ];
    let (out, tools_left) = ToolFormat::Fallback.prepare(&messages, &t);
    assert!(tools_left.is_empty());
    assert_eq!(out.len(), 4);
    assert!(out[0].content.starts_with("Be brief.\n\n# Tools") && out[0].content.contains("\"name\":\"get_weather\""));
    assert_eq!(
        out[2].content,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}\n</tool_call>"
    );
    assert!(out[2].tool_calls.is_empty());
    assert_eq!((out[3].role, out[3].content.as_str()), (Role::User, "<tool_response>\n12 C\n</tool_response>"));
    // What the fallback teaches, its parser reads.
    let a = parse_answer(ToolFormat::Fallback, &out[2].content, &t);
    assert_eq!(a.calls, [call("get_weather", r#"{"city":"Oslo"}"#)]);
    // Without a system turn one is added; native formats pass through.
    let (out, _) = ToolFormat::Fallback.prepare(&messages[1..], &t);
    assert_eq!(out[0].role, Role::System);
    assert_eq!(ToolFormat::Hermes.prepare(&messages, &t), (messages.clone(), t.clone()));
}

#[test]
fn grammars_are_lazy_under_auto_and_strict_otherwise() {
    let t = tools();
    assert_eq!(call_grammar(ToolFormat::Hermes, &t, &ToolChoice::None, true), None);
    assert_eq!(call_grammar(ToolFormat::Hermes, &t, &ToolChoice::Named("nope".into()), true), None);
    let g = call_grammar(ToolFormat::Hermes, &t, &ToolChoice::Auto, true).expect("grammar");
    assert_eq!(g.trigger.as_deref(), Some("<tool_call>"));
    assert!(g.lark.starts_with("start: \"\\n\" call \"\\n</tool_call>\"\n"), "{}", g.lark);
    assert!(
        g.lark.contains("call_0: \"{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" args_0 \"}\""),
        "{}",
        g.lark
    );
    assert!(g.lark.contains("args_0: %json {\"type\":\"object\",\"properties\""), "{}", g.lark);
    assert!(g.lark.contains("call: call_0 | call_1"));
    let g = call_grammar(ToolFormat::Hermes, &t, &ToolChoice::Required, true).expect("grammar");
    assert_eq!(g.trigger, None);
    assert!(
        g.lark.starts_with("start: (\"<tool_call>\\n\" call \"\\n</tool_call>\") (\"\\n\" (\"<tool_call>"),
        "{}",
        g.lark
    );
    let g = call_grammar(ToolFormat::Hermes, &t, &ToolChoice::Named("now".into()), false).expect("grammar");
    assert!(g.lark.contains("\\\"now\\\"") && !g.lark.contains("get_weather") && !g.lark.contains(")*"), "{}", g.lark);
    let g = call_grammar(ToolFormat::Mistral, &t, &ToolChoice::Required, false).expect("grammar");
    assert!(g.lark.starts_with("start: \"[TOOL_CALLS][\" call \"]\""), "{}", g.lark);
    let g = call_grammar(ToolFormat::Llama3Json, &t, &ToolChoice::Auto, false).expect("grammar");
    assert_eq!(g.trigger.as_deref(), Some("{\"name\""));
    assert!(g.lark.contains("call_0: \": \\\"get_weather\\\", \\\"parameters\\\": \" args_0"), "{}", g.lark);
    // A hostile name cannot break out of its string literal.
    let evil = vec![Tool { name: "a\"\n| x".into(), description: None, parameters: json!({}) }];
    let g = call_grammar(ToolFormat::Hermes, &evil, &ToolChoice::Required, false).expect("grammar");
    // The name is JSON-escaped inside the JSON text, and that text escaped
    // again as the Lark literal: no raw quote or newline reaches the grammar.
    assert!(g.lark.contains(r#"\"a\\\"\\n| x\""#), "{}", g.lark);
    assert_eq!(g.lark.lines().count(), 4, "{}", g.lark);
}

fn split_all(s: &mut StreamSplitter, pieces: &[&str]) -> Vec<Delta> {
    let mut out: Vec<Delta> = pieces.iter().flat_map(|p| s.push(p)).collect();
    out.extend(s.finish());
    out
}

/// Adjacent deltas of the same kind joined, to compare streams split anywhere.
fn joined(deltas: Vec<Delta>) -> Vec<Delta> {
    let mut out: Vec<Delta> = Vec::new();
    for d in deltas {
        match (out.last_mut(), d) {
            (Some(Delta::Content(a)), Delta::Content(b)) => a.push_str(&b),
            (Some(Delta::Reasoning(a)), Delta::Reasoning(b)) => a.push_str(&b),
            (_, d) => out.push(d),
        }
    }
    out
}

fn qwen_think(starts_inside: bool) -> Option<ThinkTags> {
    Some(ThinkTags { open: "<think>".into(), close: "</think>".into(), starts_inside })
}

#[test]
fn streams_split_the_same_wherever_the_pieces_break() {
    let text = "<think>\nHmm, weather.\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\"}\n</tool_call>";
    let want = vec![
        Delta::Reasoning("\nHmm, weather.\n".into()),
        Delta::Content("Checking.".into()),
        Delta::ToolCall { index: 0, call: call("get_weather", r#"{"city": "Oslo"}"#) },
        Delta::ToolCall { index: 1, call: call("now", "{}") },
    ];
    // Every split into two pieces, and one character at a time.
    for cut in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
        let mut s = StreamSplitter::new(Some(ToolFormat::Hermes), tools(), qwen_think(false));
        assert_eq!(joined(split_all(&mut s, &[&text[..cut], &text[cut..]])), want, "cut at {cut}");
    }
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let mut s = StreamSplitter::new(Some(ToolFormat::Hermes), tools(), qwen_think(false));
    let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(joined(split_all(&mut s, &pieces)), want);
    assert_eq!(s.calls(), 2);
}

#[test]
fn thinking_that_starts_in_the_prompt_and_text_without_tools() {
    let mut s = StreamSplitter::new(None, Vec::new(), qwen_think(true));
    let out = joined(split_all(&mut s, &["I should gr", "eet.</th", "ink>\n\nHello <tool_call> there!  "]));
    // No tools: a tag-like text is content; trailing space kept when no call.
    assert_eq!(out, [Delta::Reasoning("I should greet.".into()), Delta::Content("Hello <tool_call> there!  ".into())]);
    // A think block never closed: all of it is reasoning, none content.
    let mut s = StreamSplitter::new(None, Vec::new(), qwen_think(false));
    assert_eq!(joined(split_all(&mut s, &["<think>still thin", "king"])), [Delta::Reasoning("still thinking".into())]);
    // A `<` that turns out not to be a tag is sent when it is known.
    let mut s = StreamSplitter::new(Some(ToolFormat::Hermes), tools(), None);
    assert_eq!(s.push("a <"), [Delta::Content("a".into())]);
    assert_eq!(joined(s.push("b")), [Delta::Content(" <b".into())]);
    // No thinking configured: <think> is plain content.
    let mut s = StreamSplitter::new(None, Vec::new(), None);
    assert_eq!(joined(split_all(&mut s, &["<think>x</think>"])), [Delta::Content("<think>x</think>".into())]);
}

#[test]
fn streamed_hostile_calls_stay_content_and_llama_json_is_read_at_the_end() {
    let mut s = StreamSplitter::new(Some(ToolFormat::Hermes), tools(), None);
    let out = joined(split_all(&mut s, &["<tool_call>{\"name\": \"rm\"}</tool_call>", "<tool_call>{\"na"]));
    assert_eq!(out, [Delta::Content("<tool_call>{\"name\": \"rm\"}</tool_call><tool_call>{\"na".into())]);
    assert_eq!(s.calls(), 0);
    let mut s = StreamSplitter::new(Some(ToolFormat::Llama3Json), tools(), None);
    let out = split_all(&mut s, &["  {\"name\": \"now\", ", "\"parameters\": {}}"]);
    assert_eq!(out, [Delta::ToolCall { index: 0, call: call("now", "{}") }]);
    let mut s = StreamSplitter::new(Some(ToolFormat::Llama3Json), tools(), None);
    assert_eq!(joined(split_all(&mut s, &["Rome ", "is big."])), [Delta::Content("Rome is big.".into())]);
    let mut s = StreamSplitter::new(Some(ToolFormat::Mistral), tools(), None);
    let out = joined(split_all(&mut s, &["ok [TOOL_", "CALLS][{\"name\": \"now\", \"arguments\": {}}]"]));
    assert_eq!(out, [Delta::Content("ok".into()), Delta::ToolCall { index: 0, call: call("now", "{}") }]);
}
