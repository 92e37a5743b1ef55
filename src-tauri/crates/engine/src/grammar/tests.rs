//! The grammar module on a tiny byte-level tokenizer made here (every byte
//! a token, plus `<|end|>`, `<think>`, `</think>`), and on the real default
//! model (SmolLM2-135M-Instruct, the GGUF `make setup` unpacks), where
//! constrained JSON must parse and validate against its schema.

use std::path::PathBuf;

use headroom_core::chat::{FinishReason, Message, Role, Thinking};
use headroom_core::speculative::SpeculativeMode;
use serde_json::{json, Value};

use super::*;
use crate::worker::{EngineEvent, EngineHandle, GenerateRequest, LoadSettings};

const END: u32 = 256;
const OPEN: u32 = 257;
const CLOSE: u32 = 258;

/// GPT-2's byte -> printable character map (what ByteLevel vocabularies spell).
fn byte_char(b: u8) -> char {
    let shown = |c: u32| (33..=126).contains(&c) || (161..=172).contains(&c) || (174..=255).contains(&c);
    if shown(u32::from(b)) {
        return char::from(b);
    }
    let skipped = (0..u32::from(b)).filter(|&c| !shown(c)).count() as u32;
    char::from_u32(256 + skipped).expect("a char")
}

fn tiny_tokenizer() -> tokenizers::Tokenizer {
    let vocab: serde_json::Map<String, Value> =
        (0..=255u8).map(|b| (byte_char(b).to_string(), Value::from(u32::from(b)))).collect();
    let added = |id: u32, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
               "normalized": false, "special": true})
    };
    let spec = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [added(END, "<|end|>"), added(OPEN, "<think>"), added(CLOSE, "</think>")],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "vocab": vocab, "merges": []}
    });
    spec.to_string().parse().expect("tiny tokenizer")
}

fn tiny() -> Vocabulary {
    Vocabulary::new(&tiny_tokenizer(), &[END], 260).expect("vocabulary")
}

/// Writes `text` through the guide one byte-token at a time, each one
/// checked against the mask first; the steps, or the byte the mask refused.
fn write(guide: &mut Guide, text: &str) -> Result<Vec<Step>, u8> {
    let mut steps = Vec::new();
    for b in text.bytes() {
        if let Some(mask) = guide.mask().expect("mask") {
            if !mask.is_allowed(u32::from(b)) {
                return Err(b);
            }
        }
        steps.push(guide.accept(u32::from(b)).expect("accept"));
    }
    Ok(steps)
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 8}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["name", "n"],
        "additionalProperties": false
    })
}

#[test]
fn the_table_spells_each_token_as_the_tokenizer_does() {
    let v = tiny();
    assert_eq!(v.len(), 260, "padded to the model's width");
    assert_eq!(v.bytes(u32::from(b'a')), b"a");
    assert_eq!(v.bytes(u32::from(b' ')), b" ", "a byte-level space");
    assert_eq!(v.bytes(OPEN), b"<think>", "a special token's name, without its marker");
    assert_eq!(v.bytes(259), b"", "a padding row is no text");
    assert_eq!(v.tokenize("</think>"), [CLOSE]);
}

#[test]
fn a_schema_allows_only_its_json_and_ends() {
    let v = tiny();
    let mut g = Guide::new(&v, Some(&Constraint::whole(Grammar::JsonSchema(schema()))), None).expect("guide");
    // Free whitespace is refused (it is what kept peers' JSON from ending).
    assert_eq!(write(&mut g.clone(), "{ "), Err(b' '));
    // Only the schema's keys, in a valid order; a bound number.
    assert_eq!(write(&mut g.clone(), "{\"x"), Err(b'x'));
    assert_eq!(write(&mut g.clone(), "{\"name\": \"ab\", \"n\": 12"), Err(b'2'));
    let steps = write(&mut g, "{\"name\": \"ab\", \"n\": 7}").expect("valid JSON");
    assert!(steps[..steps.len() - 1].iter().all(|s| !s.finished && !s.thinking));
    assert!(steps.last().expect("steps").finished, "the closing brace completes it");
}

#[test]
fn bad_grammars_are_named_errors_without_a_model() {
    assert_eq!(validate(&Grammar::JsonSchema(schema())), Ok(()));
    assert_eq!(validate(&Grammar::Regex("[a-z]+".into())), Ok(()));
    assert_eq!(validate(&Grammar::Lark("start: \"yes\" | \"no\"".into())), Ok(()));
    for (bad, what) in [
        (Grammar::JsonSchema(json!({"type": "nonsense"})), "JSON schema"),
        (Grammar::JsonSchema(json!({"type": "integer", "minimum": 5, "maximum": 1})), "JSON schema"),
        (Grammar::JsonSchema(json!(42)), "JSON schema"),
        (Grammar::Regex("(unclosed".into()), "regular expression"),
        (Grammar::Lark("start: undefined_rule".into()), "Lark grammar"),
    ] {
        let e = validate(&bad).expect_err(&format!("{bad:?}"));
        let text = e.to_string();
        assert!(text.contains(what), "{text}");
        assert!(matches!(e, GrammarError::Invalid { .. } | GrammarError::Unsupported { .. }), "{e:?}");
    }
    // A keyword llguidance does not implement is named as unsupported.
    let e = validate(&Grammar::JsonSchema(json!({"type": "array", "uniqueItems": true})));
    assert!(matches!(&e, Err(GrammarError::Unsupported { feature, .. }) if feature.contains("uniqueItems")), "{e:?}");
    let e = validate(&Grammar::JsonSchema(json!({"not": {"type": "integer"}})));
    assert!(matches!(&e, Err(GrammarError::Unsupported { feature, .. }) if feature.contains("not")), "{e:?}");
}

#[test]
fn hostile_schemas_are_errors_or_work_and_never_panic() {
    // Deep nesting, a huge enum, an enormous bound: each is refused or compiles.
    let mut deep = json!({"type": "integer"});
    for _ in 0..100 {
        deep = json!({"type": "array", "items": deep});
    }
    let big_enum = json!({"enum": (0..5000).map(|i| format!("v{i}")).collect::<Vec<_>>()});
    let huge = json!({"type": "string", "minLength": 1_000_000_000u64});
    for schema in [deep, big_enum, huge, json!({"$ref": "https://example.com/x.json"})] {
        let _ = validate(&Grammar::JsonSchema(schema.clone()));
        let _ = Guide::new(&tiny(), Some(&Constraint::whole(Grammar::JsonSchema(schema))), None);
    }
}

fn qwen_thinking(budget: Option<usize>, open_in_prompt: bool) -> Thinking {
    Thinking { open: "<think>".into(), close: "</think>".into(), budget, open_in_prompt }
}

#[test]
fn the_budget_forces_the_close_tag_and_the_grammar_starts_after_it() {
    let v = tiny();
    let c = Constraint::whole(Grammar::Regex("[0-9]{2}".into()));
    let mut g = Guide::new(&v, Some(&c), Some(&qwen_thinking(Some(3), true))).expect("guide");
    // Thinking is free: letters the grammar would refuse.
    let steps = write(&mut g, "abc").expect("free thinking");
    assert!(steps.iter().all(|s| s.thinking));
    let mask = g.mask().expect("mask").expect("forced");
    assert_eq!(mask.num_set(), 1, "only the close tag");
    assert!(mask.is_allowed(CLOSE));
    assert_eq!(g.accept(CLOSE).expect("close"), Step { thinking: true, finished: false });
    assert!(g.constrained());
    assert_eq!(write(&mut g.clone(), "x"), Err(b'x'));
    let steps = write(&mut g, "42").expect("the answer");
    assert_eq!(steps, [Step::default(), Step { thinking: false, finished: true }]);
}

#[test]
fn a_thinking_model_may_open_its_block_before_the_grammar_and_closes_it_itself() {
    let v = tiny();
    let c = Constraint::whole(Grammar::Regex("[0-9]+".into()));
    let mut g = Guide::new(&v, Some(&c), Some(&qwen_thinking(None, false))).expect("guide");
    let first = g.mask().expect("mask").expect("a mask");
    assert!(first.is_allowed(OPEN) && first.is_allowed(u32::from(b'7')) && !first.is_allowed(u32::from(b'x')));
    assert!(g.accept(OPEN).expect("open").thinking);
    assert!(write(&mut g, "hmm").expect("thinking").iter().all(|s| s.thinking));
    assert!(g.accept(CLOSE).expect("close").thinking);
    assert!(g.constrained());
    assert_eq!(write(&mut g, "x"), Err(b'x'));
    // Without thinking, the same grammar refuses the open tag.
    let mut plain = Guide::new(&v, Some(&c), None).expect("guide");
    assert!(!plain.mask().expect("mask").expect("a mask").is_allowed(OPEN));
    // Budget 0 with the block opened by the prompt: the close tag at once.
    let mut none = Guide::new(&v, None, Some(&qwen_thinking(Some(0), true))).expect("guide");
    assert!(none.mask().expect("mask").expect("forced").is_allowed(CLOSE));
}

#[test]
fn a_trigger_arms_the_grammar_which_then_lets_go() {
    let v = tiny();
    let c = Constraint { grammar: Grammar::Regex("[0-9]{2}".into()), trigger: Some("CALL:".into()), stop_after: false };
    let mut g = Guide::new(&v, Some(&c), None).expect("guide");
    write(&mut g, "free text, any bytes CALL").expect("free until the trigger");
    assert!(!g.constrained());
    write(&mut g, ":").expect("the trigger's last byte");
    assert!(g.constrained());
    assert_eq!(write(&mut g.clone(), "a"), Err(b'a'));
    write(&mut g, "12").expect("the grammar");
    assert!(!g.constrained(), "complete: free again");
    write(&mut g, " more CALL:3").expect("re-armed");
    assert_eq!(write(&mut g, "x"), Err(b'x'));
}

/// The real default model, or a failure that says how to get it.
fn smollm2() -> PathBuf {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../.deps/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(file.is_file(), "the real model is missing: {} (run `make setup`)", file.display());
    file
}

/// Nested object, array, enum, bounded numbers, required fields.
fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 40},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "role": {"enum": ["admin", "user", "guest"]},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 40}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"],
                "additionalProperties": false
            },
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "minItems": 1, "maxItems": 3},
            "score": {"type": "number", "minimum": 0, "maximum": 1}
        },
        "required": ["name", "age", "role", "address", "tags", "score"],
        "additionalProperties": false
    })
}

fn ask(text: &str) -> Vec<Message> {
    vec![Message::new(Role::User, text)]
}

#[test]
fn the_real_model_writes_json_that_validates_with_and_without_prompt_lookup() {
    let engine = EngineHandle::spawn().expect("engine");
    engine.load(&smollm2(), LoadSettings::default()).expect("load the real model");
    let schema = person_schema();
    let validator = jsonschema::validator_for(&schema).expect("the test's schema compiles");
    let prompt = "Describe a fictional person as JSON with name, age, role, address (city, zip), tags and score.";
    let mut texts = Vec::new();
    for speculative in [SpeculativeMode::None, SpeculativeMode::Lookup] {
        let request = GenerateRequest {
            max_tokens: 160,
            speculative,
            constraint: Some(Constraint::whole(Grammar::JsonSchema(schema.clone()))),
            ..GenerateRequest::new(ask(prompt))
        };
        let out = engine.generate(request).and_then(|r| r.collect()).expect("generate");
        assert_eq!(out.finish_reason, FinishReason::Stop, "{speculative:?}: the grammar ended it: {}", out.text);
        let value: Value = serde_json::from_str(&out.text).unwrap_or_else(|e| panic!("{e}: {}", out.text));
        let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{speculative:?}: {errors:?} in {}", out.text);
        texts.push(out.text);
    }
    // Greedy: lookup changes the speed, not the answer.
    assert_eq!(texts[0], texts[1]);

    // A stop string ends the answer before it, across tokens, never sent.
    let free = GenerateRequest { max_tokens: 40, ..GenerateRequest::new(ask("What is the capital of France?")) };
    let whole = engine.generate(free.clone()).and_then(|r| r.collect()).expect("generate").text;
    let cut = whole.find(' ').expect("several words") + 1;
    let stop = whole[cut..].chars().take(4).collect::<String>();
    let mut streamed = String::new();
    let out = engine
        .generate(GenerateRequest { stop: vec![stop.clone()], ..free })
        .and_then(|r| {
            r.collect_with(|e| {
                if let EngineEvent::Token { text, .. } | EngineEvent::Text(text) = e {
                    streamed.push_str(text);
                }
            })
        })
        .expect("generate");
    assert_eq!(out.finish_reason, FinishReason::Stop);
    assert_eq!(out.text, whole[..whole.find(&stop).expect("the stop is in the text")], "stop {stop:?}");
    assert_eq!(streamed, out.text);

    // A grammar that cannot finish within max_tokens: Length, with what it wrote.
    let short = GenerateRequest {
        max_tokens: 5,
        constraint: Some(Constraint::whole(Grammar::JsonSchema(schema.clone()))),
        ..GenerateRequest::new(ask(prompt))
    };
    let out = engine.generate(short).and_then(|r| r.collect()).expect("generate");
    assert_eq!(out.finish_reason, FinishReason::Length);
    assert!(out.text.starts_with('{') && out.token_ids.len() == 5, "{}", out.text);

    // A bad grammar is an error of that run; the engine answers the next one.
    let bad = GenerateRequest {
        constraint: Some(Constraint::whole(Grammar::Regex("(".into()))),
        ..GenerateRequest::new(ask(prompt))
    };
    let e = engine.generate(bad).and_then(|r| r.collect()).expect_err("refused");
    assert!(matches!(e, crate::EngineError::Grammar(GrammarError::Invalid { .. })), "{e}");
    let again = GenerateRequest { max_tokens: 3, ..GenerateRequest::new(ask("Hi")) };
    assert_eq!(engine.generate(again).and_then(|r| r.collect()).expect("still up").token_ids.len(), 3);
}

#[test]
fn the_real_model_thinks_within_its_budget_then_answers_in_the_grammar() {
    let engine = EngineHandle::spawn().expect("engine");
    engine.load(&smollm2(), LoadSettings::default()).expect("load the real model");
    // SmolLM2 has no thinking tokens: its tags are plain text here, several
    // tokens each, which the forced close must spell out token by token.
    let thinking = Thinking { open: "<think>".into(), close: "</think>".into(), budget: Some(6), open_in_prompt: true };
    let request = GenerateRequest {
        max_tokens: 60,
        thinking: Some(thinking),
        constraint: Some(Constraint::whole(Grammar::JsonSchema(
            json!({"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"]}),
        ))),
        ..GenerateRequest::new(ask("Is Paris in France? Think, then answer in JSON."))
    };
    let (mut thought, mut answer) = (String::new(), String::new());
    let mut thinking_tokens = 0;
    let out = engine
        .generate(request)
        .and_then(|r| {
            r.collect_with(|e| match e {
                EngineEvent::Token { text, thinking: true, .. } => {
                    thinking_tokens += 1;
                    thought.push_str(text);
                }
                EngineEvent::Token { text, .. } | EngineEvent::Text(text) => answer.push_str(text),
                _ => {}
            })
        })
        .expect("generate");
    assert!(thought.ends_with("</think>"), "the budget closed the block: {thought:?}");
    let close_tokens = thinking_tokens - 6;
    assert!((1..=4).contains(&close_tokens), "6 thinking tokens, then the close tag: {thinking_tokens}");
    let value: Value = serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"));
    assert!(value["answer"] == "yes" || value["answer"] == "no", "{value}");
    assert_eq!(out.finish_reason, FinishReason::Stop);
}

/// Per-token cost of [`Guide::mask`] + [`Guide::accept`] while `tokens` are
/// written: (mean, p50, p99, max) in microseconds.
fn mask_cost(vocab: &Vocabulary, schema: &Value, tokens: &[u32], rounds: usize) -> (f64, f64, f64, f64) {
    let mut micros = Vec::new();
    for _ in 0..rounds {
        let mut g =
            Guide::new(vocab, Some(&Constraint::whole(Grammar::JsonSchema(schema.clone()))), None).expect("guide");
        for &t in tokens {
            let started = std::time::Instant::now();
            let mask = g.mask().expect("mask").expect("constrained");
            assert!(mask.is_allowed(t), "the sample JSON is valid: token {t}");
            g.accept(t).expect("accept");
            micros.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q) as usize];
    (micros.iter().sum::<f64>() / micros.len() as f64, at(0.5), at(0.99), micros[micros.len() - 1])
}

/// A JSON instance of [`person_schema`], as a model would write it.
const PERSON: &str = r#"{"name": "Ada Lovelace", "age": 36, "role": "admin", "address": {"city": "London", "zip": "12345"}, "tags": ["math", "poetry"], "score": 0.97}"#;

/// A byte-level vocabulary of `n` tokens shaped like a large BPE one
/// (Qwen's 151k): the 256 bytes, then words and fragments of 2–12 bytes,
/// many with a leading space, drawn from a fixed seed.
fn synthetic_vocabulary(n: usize) -> Vocabulary {
    let mut bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    let alphabet: &[u8] = b"etaoinshrdlucmfwypvbgkjqxzETAOINSHRDLU0123456789 _-.,:;\"'{}[]()";
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut seen = std::collections::HashSet::new();
    while bytes.len() < n - 1 {
        let len = 2 + (next() % 11) as usize;
        let mut word: Vec<u8> = (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
        if next() % 2 == 0 {
            word[0] = b' ';
        }
        if seen.insert(word.clone()) {
            bytes.push(word);
        }
    }
    let eos = u32::try_from(bytes.len()).expect("fits");
    bytes.push(b"\xFF<|endoftext|>".to_vec());
    // No tokenizer: forced text is split by the table itself (the tiny
    // tokenizer's ids name other bytes in this table).
    Vocabulary::from_token_bytes(&mut bytes, None, &[eos], n).expect("synthetic vocabulary")
}

/// The measurements in docs/constrained-decoding.md: the mask's cost per
/// token on the default model's vocabulary and on a 151,646-token one, and
/// decode speed with a schema against without on the default model (the
/// same engine, alternating runs), with prompt lookup's acceptance under
/// the schema. A measurement, not a test:
/// `cargo test -p headroom-engine grammar::tests::measure -- --ignored --nocapture`
#[test]
#[ignore = "a measurement: run it by name with --ignored --nocapture"]
fn measure() {
    let schema = person_schema();
    let smol = crate::tokenizer::Tokenizer::for_model(&smollm2()).expect("tokenizer");
    let started = std::time::Instant::now();
    let vocab = smol.grammar_vocabulary(49_152).expect("vocabulary");
    let built = started.elapsed();
    let tokens = smol.encode(PERSON, false).expect("encode");
    let (mean, p50, p99, max) = mask_cost(&vocab, &schema, &tokens, 20);
    println!(
        "mask, SmolLM2 ({} tokens, table built in {:.0} ms): mean {mean:.1} us, p50 {p50:.1}, p99 {p99:.1}, max {max:.1} ({} tokens x 20)",
        vocab.len(),
        built.as_secs_f64() * 1e3,
        tokens.len()
    );
    let started = std::time::Instant::now();
    let big = synthetic_vocabulary(151_646);
    let built = started.elapsed();
    let tokens = big.greedy(PERSON);
    let (mean, p50, p99, max) = mask_cost(&big, &schema, &tokens, 20);
    println!(
        "mask, synthetic ({} tokens, table built in {:.0} ms): mean {mean:.1} us, p50 {p50:.1}, p99 {p99:.1}, max {max:.1} ({} tokens x 20)",
        big.len(),
        built.as_secs_f64() * 1e3,
        tokens.len()
    );

    let engine = EngineHandle::spawn().expect("engine");
    engine.load(&smollm2(), LoadSettings::default()).expect("load the real model");
    let prompt = "Describe a fictional person as JSON with name, age, role, address (city, zip), tags and score.";
    let run = |constraint: Option<Constraint>, speculative: SpeculativeMode, max_tokens: usize| {
        let request = GenerateRequest {
            max_tokens,
            speculative,
            constraint,
            ignore_eos: true,
            ..GenerateRequest::new(ask(prompt))
        };
        engine.generate(request).and_then(|r| r.collect()).expect("generate")
    };
    let constrained = || Some(Constraint::whole(Grammar::JsonSchema(schema.clone())));
    // Warm-up, and the constrained answer's length: the free runs generate as many.
    let n = run(constrained(), SpeculativeMode::None, 200).token_ids.len();
    run(None, SpeculativeMode::None, n);
    let (mut free, mut masked) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        free.push(run(None, SpeculativeMode::None, n).stats.rates.decode_tps.unwrap_or(0.0));
        masked.push(run(constrained(), SpeculativeMode::None, 200).stats.rates.decode_tps.unwrap_or(0.0));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (f, m) = (median(&mut free), median(&mut masked));
    println!("decode, SmolLM2, {n} tokens, median of 5: free {f:.1} tok/s, schema {m:.1} tok/s, ratio {:.3}", m / f);
    let look = run(constrained(), SpeculativeMode::Lookup, 200);
    let s = &look.stats.speculation;
    println!(
        "prompt lookup under the schema: {} of {} proposals accepted ({:.0} %), {} passes for {} tokens, {:.1} tok/s",
        s.accepted,
        s.drafted,
        100.0 * f64::from(s.accepted) / f64::from(s.drafted.max(1)),
        s.forward_passes,
        look.token_ids.len(),
        look.stats.rates.decode_tps.unwrap_or(0.0)
    );
}
