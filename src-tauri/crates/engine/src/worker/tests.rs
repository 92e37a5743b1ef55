//! Worker tests on demo models: events, sessions, limits, cancel, bad input.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::Duration;

use headroom_core::chat::{FinishReason, Message, Role};
use headroom_core::kv::KvFormat;

use super::*;
use crate::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
use crate::error::EngineError;
use crate::meter::MeasuredKind;
use crate::mlx_memory::{mlx_memory, MlxMemory};
use crate::prompt_cache::disk::{model_fingerprint, DiskTier};
use crate::prompt_cache::Reuse;
use crate::quant::QuantKernel;
use crate::sampler::SamplingParams;
use crate::testutil::temp_dir;
use crate::tokenizer::Tokenizer;
use crate::weights::ComputeDtype;

/// One demo model per test process (writing it trains the tokenizer).
fn demo_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = temp_dir("worker-demo");
        write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).expect("demo model");
        dir
    })
}

/// Held by the test that loads a big model and by the timing-sensitive
/// one: the big load's CPU load would let a run race past a cancel.
fn heavy_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn engine() -> EngineHandle {
    let e = EngineHandle::spawn().expect("spawn");
    e.load(demo_dir(), LoadSettings::default()).expect("load");
    e
}

/// An engine whose prompt cache may keep other conversations (64 MB: many
/// of the demo model's), as a load with room to spare gets.
fn engine_with_room() -> EngineHandle {
    let e = EngineHandle::spawn().expect("spawn");
    e.load(demo_dir(), LoadSettings { prompt_cache_bytes: 64 << 20, ..LoadSettings::default() }).expect("load");
    e
}

fn user(text: &str) -> Vec<Message> {
    vec![Message::new(Role::User, text)]
}

fn request(messages: Vec<Message>, max_tokens: usize) -> GenerateRequest {
    GenerateRequest { max_tokens, ignore_eos: true, ..GenerateRequest::new(messages) }
}

#[test]
fn events_come_in_order_and_the_text_is_the_decoded_tokens() {
    let e = engine();
    let run = e.generate(request(user("Hello there"), 12)).expect("generate");
    let mut kinds = Vec::new();
    let out = run
        .collect_with(|ev| {
            kinds.push(match ev {
                EngineEvent::Started { .. } => 'S',
                EngineEvent::Token { .. } => 'T',
                EngineEvent::Text(_) => 'X',
                EngineEvent::Stats(_) => 'M',
                EngineEvent::Finished { .. } => 'F',
                EngineEvent::Error(_) => 'E',
            })
        })
        .expect("run");
    let kinds: String = kinds.into_iter().collect();
    assert!(kinds.starts_with("STTTTTTTTTTTT"), "{kinds}");
    assert!(kinds.ends_with("MF"), "{kinds}");
    assert_eq!(out.token_ids.len(), 12);
    assert_eq!(out.finish_reason, FinishReason::Length);
    let tok = Tokenizer::from_dir(demo_dir()).expect("tokenizer");
    assert_eq!(out.text, tok.decode(&out.token_ids, false).expect("decode"));
    let s = &out.stats;
    assert_eq!((s.generated_tokens, s.batch, s.reused_tokens), (12, 1, 0));
    assert_eq!(s.prompt_tokens, tok.encode_chat(&user("Hello there"), true).expect("encode").len());
    assert_eq!(s.context_tokens, s.prompt_tokens);
    assert!(s.peak_memory_bytes > 0);
    assert!(s.rates.ttft_ms.is_some() && s.rates.decode_tps.is_some());
}

/// What a request gives with nothing cached: on an engine of its own.
fn cold(req: GenerateRequest) -> RunOutput {
    let out = engine().generate(GenerateRequest { session: None, ..req }).expect("generate").collect().expect("run");
    assert_eq!(out.stats.reused_tokens, 0);
    out
}

fn in_session(session: &str, messages: Vec<Message>, max_tokens: usize) -> GenerateRequest {
    GenerateRequest { session: Some(session.into()), ..request(messages, max_tokens) }
}

/// `history` with `answer` and then `next` from the user.
fn continued(history: &[Message], answer: &str, next: &str) -> Vec<Message> {
    let mut h = history.to_vec();
    h.push(Message::new(Role::Assistant, answer));
    h.push(Message::new(Role::User, next));
    h
}

#[test]
fn a_session_reuses_its_cache_and_matches_a_fresh_run() {
    let e = engine_with_room();
    let history = user("What is a cache?");
    let turn = |history: &[Message]| {
        e.generate(in_session("s1", history.to_vec(), 8)).expect("generate").collect().expect("run")
    };
    let first = turn(&history);
    assert_eq!(first.stats.reused_tokens, 0);
    let history = continued(&history, &first.text, "And a second question?");
    let second = turn(&history);
    // Turn 2 prefilled only what turn 1 had not already put in the cache.
    assert!(second.stats.reused_tokens >= first.stats.prompt_tokens, "{:?}", second.stats);
    assert_eq!(second.stats.reused_from, Reuse::Memory);
    assert_eq!(second.stats.timings.prompt_tokens as usize, second.stats.prompt_tokens - second.stats.reused_tokens);
    assert_eq!(second.token_ids, cold(request(history.clone(), 8)).token_ids);

    // Dropping the session starts the next turn from scratch.
    e.drop_session("s1").expect("drop");
    assert_eq!(turn(&history).stats.reused_tokens, 0);

    // Dropping every session (memory is tight) keeps the model and frees the caches.
    e.generate(in_session("s2", user("Another chat"), 4)).expect("generate").collect().expect("run");
    let dropped = e.drop_sessions().expect("drop all");
    assert_eq!(dropped.sessions, 2, "{dropped:?}");
    assert!(dropped.cache_bytes > 0, "{dropped:?}");
    assert_eq!(turn(&history).stats.reused_tokens, 0, "s1 starts from scratch");
    let again = e.drop_sessions().expect("drop all again");
    assert!(again.sessions == 1 && again.cache_bytes > 0, "s1's new turn filled one cache: {again:?}");
    assert_eq!(e.drop_sessions().expect("nothing left").sessions, 0);
}

/// What an OpenAI client does: resend the whole conversation each time,
/// with no session. The prompt cache finds it anyway, and the answer is the
/// one a cold run gives.
#[test]
fn a_conversation_resent_whole_without_a_session_prefills_only_its_new_tokens() {
    let e = engine_with_room();
    let history = user("What is a cache?");
    let first = e.generate(request(history.clone(), 8)).expect("generate").collect().expect("run");
    let history = continued(&history, &first.text, "Why is it fast?");
    let second = e.generate(request(history.clone(), 8)).expect("generate").collect().expect("run");
    assert!(second.stats.reused_tokens >= first.stats.prompt_tokens, "{:?}", second.stats);
    assert_eq!(second.token_ids, cold(request(history.clone(), 8)).token_ids);
    // Another conversation shares only the template's opening; the first
    // one's state stays for it (a copy served the other).
    let other = e.generate(request(user("Something else entirely"), 8)).expect("generate").collect().expect("run");
    assert_eq!(other.token_ids, cold(request(user("Something else entirely"), 8)).token_ids);
    let history = continued(&history, &second.text, "And then?");
    let third = e.generate(request(history.clone(), 8)).expect("generate").collect().expect("run");
    assert!(third.stats.reused_tokens >= second.stats.prompt_tokens, "{:?}", third.stats);
    assert_eq!(third.token_ids, cold(request(history, 8)).token_ids);
    // Every lookup after the first reused something (the other one, the template's opening).
    let stats = e.prompt_cache_stats().expect("stats");
    assert_eq!((stats.lookups, stats.hits), (4, 3), "{stats:?}");
    assert!(stats.reused_tokens >= (second.stats.reused_tokens + third.stats.reused_tokens) as u64);
}

#[test]
fn a_chats_state_on_disk_continues_it_after_a_restart_exactly_and_never_for_another_model() {
    let tier = DiskTier { dir: temp_dir("kv-disk"), limit_bytes: 1 << 30 };
    let with_disk = |settings: LoadSettings| {
        let e = EngineHandle::spawn().expect("spawn");
        e.load(demo_dir(), settings).expect("load");
        e.set_disk_tier(Some(tier.clone())).expect("disk tier");
        e
    };
    let history = user("What is a cache?");
    let e = with_disk(LoadSettings::default());
    let first = e.generate(in_session("s", history.clone(), 8)).expect("generate").collect().expect("run");
    // Not idle long enough yet: nothing written; then at "quit", written.
    assert_eq!(e.save_sessions(Duration::from_secs(3600)).expect("save").saved, 0);
    let saved = e.save_sessions(Duration::ZERO).expect("save");
    assert!(saved.saved == 1 && saved.bytes > 0, "{saved:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(tier.path("s")).expect("saved").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "a state holds the chat's token ids: this user's only");
    }
    assert_eq!(e.save_sessions(Duration::ZERO).expect("save").saved, 0, "written once until it changes");
    drop(e);

    // The restart: a new engine, the same model, the chat continues from disk.
    let history = continued(&history, &first.text, "Why is it fast?");
    let e = with_disk(LoadSettings::default());
    let second = e.generate(in_session("s", history.clone(), 8)).expect("generate").collect().expect("run");
    assert_eq!(second.stats.reused_from, Reuse::Disk, "{:?}", second.stats);
    assert!(second.stats.reused_tokens >= first.stats.prompt_tokens, "{:?}", second.stats);
    assert_eq!(second.token_ids, cold(request(history.clone(), 8)).token_ids);
    assert_eq!(e.prompt_cache_stats().expect("stats").disk_hits, 1);
    e.save_sessions(Duration::ZERO).expect("save");
    drop(e);

    // The same files computed another way (f32): the state is never used,
    // and is kept for the computation that made it (the folder's limit bounds it).
    let f32 = with_disk(LoadSettings { dtype: ComputeDtype::F32, ..LoadSettings::default() });
    let other = f32.generate(in_session("s", history.clone(), 8)).expect("generate").collect().expect("run");
    assert_eq!((other.stats.reused_tokens, other.stats.reused_from), (0, Reuse::None));
    assert_eq!(tier.usage().files, 1, "a state for another computation is kept, not used");

    // Deleting a chat deletes its state.
    f32.save_sessions(Duration::ZERO).expect("save");
    assert!(tier.path("s").exists());
    f32.drop_session("s").expect("drop");
    assert_eq!(f32.prompt_cache_stats().expect("stats").disk_files, 0);

    // Turned off (0 bytes): the states saved while it was on are deleted,
    // nothing is written or read back, and deleting a chat still works.
    f32.generate(in_session("s", history.clone(), 8)).expect("generate").collect().expect("run");
    f32.save_sessions(Duration::ZERO).expect("save");
    assert!(tier.path("s").exists());
    let off = DiskTier { limit_bytes: 0, ..tier.clone() };
    f32.set_disk_tier(Some(off)).expect("off");
    f32.generate(in_session("u", user("Kept in memory only"), 4)).expect("generate").collect().expect("run");
    // Jobs run in order: the run above came after the switch.
    assert!(!tier.path("s").exists(), "turning the tier off deleted the state saved while it was on");
    assert_eq!(f32.save_sessions(Duration::ZERO).expect("save").saved, 0, "off: nothing written");
    assert!(!tier.path("u").exists());
    f32.drop_session("s").expect("drop");
    // Jobs run in order: once this answers, the drop has run.
    f32.prompt_cache_stats().expect("stats");
    assert!(!tier.path("s").exists(), "the deleted chat's state is gone with the tier off");
    let _ = std::fs::remove_dir_all(&tier.dir);
}

#[test]
fn a_saved_state_restores_only_onto_the_weights_it_was_computed_on() {
    let tier = DiskTier { dir: temp_dir("kv-weights"), limit_bytes: 1 << 30 };
    let spec = |seed| DemoSpec { seed, ..DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four) };
    let (one, two) = (temp_dir("seed-1"), temp_dir("seed-2"));
    write_demo_model(&one, &spec(1)).expect("seed 1");
    write_demo_model(&two, &spec(2)).expect("seed 2");
    // The same layout (config, tokenizer, headers): only the weights differ,
    // as with a fine-tune or another quantization of the same model.
    let layout =
        |dir| model_fingerprint(dir, ComputeDtype::Native, QuantKernel::choose(Default::default())).expect("fp");
    assert_eq!(layout(&one), layout(&two));
    let loaded = |dir: &PathBuf| {
        let e = EngineHandle::spawn().expect("spawn");
        e.load(dir, LoadSettings::default()).expect("load");
        e.set_disk_tier(Some(tier.clone())).expect("disk tier");
        e
    };
    let history = user("What is a cache?");
    let e = loaded(&one);
    let first = e.generate(in_session("s", history.clone(), 8)).expect("generate").collect().expect("run");
    assert_eq!(e.save_sessions(Duration::ZERO).expect("save").saved, 1);
    drop(e);

    // The chat continued on the other weights: nothing reused, the answer a cold run's.
    let history = continued(&history, &first.text, "Why is it fast?");
    let e = loaded(&two);
    let out = e.generate(in_session("s", history.clone(), 8)).expect("generate").collect().expect("run");
    assert_eq!((out.stats.reused_tokens, out.stats.reused_from), (0, Reuse::None), "{:?}", out.stats);
    let cold_two = {
        let c = EngineHandle::spawn().expect("spawn");
        c.load(&two, LoadSettings::default()).expect("load");
        c.generate(request(history.clone(), 8)).expect("generate").collect().expect("run")
    };
    assert_eq!(out.token_ids, cold_two.token_ids);
    drop(e);
    // Each file was hashed once and kept, so the next load reads no weights to file its states.
    let digests: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tier.dir.join(crate::prompt_cache::disk::DIGESTS_FILE)).expect("kept"))
            .expect("json");
    assert_eq!(digests.as_object().map(|o| o.len()), Some(2), "{digests}");
    for dir in [&tier.dir, &one, &two] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn a_damaged_or_foreign_state_file_is_a_miss_never_an_error() {
    let tier = DiskTier { dir: temp_dir("kv-damaged"), limit_bytes: 1 << 30 };
    let e = engine();
    e.set_disk_tier(Some(tier.clone())).expect("disk tier");
    let history = user("What is a cache?");
    let first = e.generate(in_session("s", history.clone(), 8)).expect("generate").collect().expect("run");
    e.save_sessions(Duration::ZERO).expect("save");
    let bytes = std::fs::read(tier.path("s")).expect("read");
    let history = continued(&history, &first.text, "Why?");
    let want = cold(request(history.clone(), 4)).token_ids;
    // Truncated, garbage, another chat's file under this chat's name.
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", bytes[..bytes.len() / 2].to_vec()),
        ("garbage", b"not a safetensors file at all".to_vec()),
        ("empty", Vec::new()),
    ];
    for (what, content) in cases {
        let e = engine();
        e.set_disk_tier(Some(tier.clone())).expect("disk tier");
        std::fs::write(tier.path("s"), &content).expect("write");
        let out = e.generate(in_session("s", history.clone(), 4)).expect("generate").collect();
        let out = out.map_err(|err| format!("{what}: {err}")).unwrap();
        assert_eq!((out.stats.reused_tokens, &out.token_ids), (0, &want), "{what}");
        assert!(!tier.path("s").exists(), "{what}: the unusable file is gone");
    }
    std::fs::write(tier.path("t"), &bytes).expect("write");
    let e = engine();
    e.set_disk_tier(Some(tier.clone())).expect("disk tier");
    let out = e.generate(in_session("t", history, 4)).expect("generate").collect().expect("run");
    assert_eq!(out.stats.reused_tokens, 0, "s's state is not t's");
    let _ = std::fs::remove_dir_all(&tier.dir);
}

#[test]
fn the_disk_tier_keeps_to_its_limit_least_recently_used_first() {
    let probe = DiskTier { dir: temp_dir("kv-limit-probe"), limit_bytes: 1 << 30 };
    let e = engine();
    e.set_disk_tier(Some(probe.clone())).expect("disk tier");
    e.generate(in_session("a", user("one"), 4)).expect("generate").collect().expect("run");
    let one = e.save_sessions(Duration::ZERO).expect("save").bytes;
    // Room for two states.
    let tier = DiskTier { dir: temp_dir("kv-limit"), limit_bytes: 2 * one + one / 2 };
    let e = engine();
    e.set_disk_tier(Some(tier.clone())).expect("disk tier");
    for s in ["a", "b", "c"] {
        e.generate(in_session(s, user("one"), 4)).expect("generate").collect().expect("run");
        e.save_sessions(Duration::ZERO).expect("save");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = e.prompt_cache_stats().expect("stats");
    assert_eq!(stats.disk_files, 2, "{stats:?}");
    assert!(stats.disk_bytes <= tier.limit_bytes);
    assert!(!tier.path("a").exists() && tier.path("b").exists() && tier.path("c").exists());
    for d in [probe.dir, tier.dir] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_prompt_over_the_context_limit_is_refused_or_truncated() {
    let e = EngineHandle::spawn().expect("spawn");
    e.load(demo_dir(), LoadSettings { context_limit: 48, ..LoadSettings::default() }).expect("load");
    let long = "word ".repeat(200);
    match e.generate(request(user(&long), 4)).expect("generate").collect() {
        Err(EngineError::ContextOverflow { prompt_tokens, limit: 48 }) => assert!(prompt_tokens > 48),
        other => panic!("expected ContextOverflow, got {other:?}"),
    }
    // Truncation drops the oldest turns after the system prompt.
    let mut msgs = vec![Message::new(Role::System, "Be brief.")];
    for i in 0..6 {
        msgs.push(Message::new(Role::User, format!("question number {i} about things")));
        msgs.push(Message::new(Role::Assistant, format!("answer number {i}")));
    }
    msgs.push(Message::new(Role::User, "last"));
    let req = GenerateRequest { overflow: OverflowPolicy::TruncateOldest, ..request(msgs.clone(), 100) };
    let out = e.generate(req).expect("generate").collect().expect("truncated run");
    assert!(out.stats.prompt_tokens <= 48);
    // The limit also bounds generation: prompt + generated stays within it (+1 unfed).
    assert!(out.stats.prompt_tokens + out.token_ids.len() <= 49, "{:?}", out.stats);
    assert_eq!(out.finish_reason, FinishReason::Length);
    // The last message alone too long: still an error with truncation.
    let req = GenerateRequest { overflow: OverflowPolicy::TruncateOldest, ..request(user(&long), 4) };
    assert!(matches!(e.generate(req).expect("generate").collect(), Err(EngineError::ContextOverflow { .. })));
    // And the engine still works.
    assert_eq!(e.generate(request(user("hi"), 3)).expect("generate").collect().expect("run").token_ids.len(), 3);
}

#[test]
fn truncation_drops_the_fewest_oldest_messages_the_one_at_a_time_way_would() {
    let tok = Tokenizer::for_model(demo_dir()).expect("tokenizer");
    let mut msgs = vec![Message::new(Role::System, "Be brief.")];
    for i in 0..20 {
        msgs.push(Message::new(Role::User, format!("question number {i} about {}", "things ".repeat(i % 5))));
        msgs.push(Message::new(Role::Assistant, format!("answer number {i}")));
    }
    msgs.push(Message::new(Role::User, "last"));
    // The rule as it was first written: drop the oldest one at a time, encoding each time.
    let one_at_a_time = |limit: usize| {
        let mut m = msgs.clone();
        loop {
            let ids = tok.encode_chat(&m, true).expect("encode");
            if ids.len() <= limit {
                return Some(ids);
            }
            if m.len() <= 2 {
                return None;
            }
            m.remove(1);
        }
    };
    let mut checked = 0;
    for limit in (10..700).step_by(23) {
        let searched =
            super::thread::encode_within(&tok, &msgs, Default::default(), limit, OverflowPolicy::TruncateOldest).ok();
        assert_eq!(searched, one_at_a_time(limit), "limit {limit}");
        checked += 1;
    }
    assert!(checked >= 30, "{checked}");
}

#[test]
fn cancel_takes_effect_within_one_token() {
    let _heavy = heavy_lock();
    let e = engine();
    let run = e.generate(request(user("Count"), 200)).expect("generate");
    let id = run.id;
    let mut seen = 0;
    let out = run
        .collect_with(|ev| {
            if let EngineEvent::Token { .. } = ev {
                seen += 1;
                if seen == 3 {
                    assert!(e.cancel(id));
                }
            }
        })
        .expect("run");
    assert_eq!(out.finish_reason, FinishReason::Cancelled);
    // The flag is read after every token (generate's tests pin that exactly,
    // with the cancel raised inside the token callback). Here it is raised
    // from another thread, which may be descheduled while the worker decodes
    // at hundreds of tokens a second; so this checks that the run stopped
    // early and as cancelled, not the exact count.
    assert!((3..200).contains(&out.token_ids.len()), "{}", out.token_ids.len());
    assert!(!e.cancel(id), "a finished run is forgotten");
    assert!(!e.cancel(RunId(9_999)));
}

#[test]
fn bad_input_gives_typed_errors_and_the_engine_keeps_working() {
    let e = EngineHandle::spawn().expect("spawn");
    assert!(matches!(e.generate(request(user("x"), 2)).expect("generate").collect(), Err(EngineError::NoModelLoaded)));
    let empty = temp_dir("worker-empty");
    assert!(matches!(e.load(&empty, LoadSettings::default()), Err(EngineError::MissingConfig { .. })));
    // Bad sampling settings.
    e.load(demo_dir(), LoadSettings::default()).expect("load");
    let bad = GenerateRequest {
        sampling: SamplingParams { temperature: -1.0, ..SamplingParams::default() },
        ..request(user("x"), 2)
    };
    assert!(matches!(e.generate(bad).expect("generate").collect(), Err(EngineError::InvalidSetting { .. })));
    // A folder that fails its checks leaves the loaded model answering.
    assert!(matches!(e.load(&empty, LoadSettings::default()), Err(EngineError::MissingConfig { .. })));
    assert_eq!(e.generate(request(user("x"), 2)).expect("generate").collect().expect("run").token_ids.len(), 2);
    e.unload().expect("unload");
    // Loading again works, from another clone of the handle on another thread.
    let e2 = e.clone();
    std::thread::spawn(move || e2.load(demo_dir(), LoadSettings::default()).expect("reload")).join().expect("thread");
    let out = e.generate(request(user("x"), 2)).expect("generate").collect().expect("run");
    assert_eq!(out.token_ids.len(), 2);
    e.unload().expect("unload");
    assert!(matches!(e.generate(request(user("x"), 2)).expect("generate").collect(), Err(EngineError::NoModelLoaded)));
}

#[test]
fn greedy_runs_are_repeatable_and_seeded_sampling_too() {
    let e = engine();
    let a = e.generate(request(user("Tell me"), 10)).expect("generate").collect().expect("run");
    let b = e.generate(request(user("Tell me"), 10)).expect("generate").collect().expect("run");
    assert_eq!(a.token_ids, b.token_ids);
    let sampled = |seed| {
        let req = GenerateRequest {
            sampling: SamplingParams { temperature: 1.0, top_p: 0.9, seed: Some(seed), ..SamplingParams::default() },
            ..request(user("Tell me"), 10)
        };
        e.generate(req).expect("generate").collect().expect("run").token_ids
    };
    assert_eq!(sampled(7), sampled(7));
}

#[test]
fn unload_and_switching_give_the_weights_back_and_say_how_long_they_took() {
    // bf16 `small`: tens of MB of weights, far above what the other tests
    // of this binary allocate at the same time on MLX's process-wide counters.
    let _heavy = heavy_lock();
    let small = temp_dir("worker-small");
    write_demo_model(&small, &DemoSpec::new(Arch::Qwen2, Preset::Small, Bits::Sixteen)).expect("demo model");
    let e = EngineHandle::spawn().expect("spawn");
    let first = e.load(&small, LoadSettings::default()).expect("load");
    assert!(!first.replaced.had_model, "{:?}", first.replaced);
    let weights = u64::try_from(first.weight_bytes).expect("bytes");
    assert!(weights > 16 << 20, "{weights}");
    let at_least = weights / 10 * 9;

    // A load that replaces a model reports the old one's unload.
    let tiny = e.load(demo_dir(), LoadSettings::default()).expect("switch");
    assert!(tiny.replaced.had_model);
    assert!(tiny.replaced.freed_bytes >= at_least, "{} of {weights}: {:?}", tiny.replaced.freed_bytes, tiny.replaced);

    e.load(&small, LoadSettings::default()).expect("load again");
    let report = e.unload().expect("unload");
    assert!(report.had_model);
    assert!(report.freed_bytes >= at_least, "{} of {weights}: {report:?}", report.freed_bytes);
    assert!(report.before.active >= report.after.active + at_least, "{report:?}");
    assert!(report.unload_time < Duration::from_secs(30), "{report:?}");
    assert!(matches!(e.generate(request(user("x"), 2)).expect("generate").collect(), Err(EngineError::NoModelLoaded)));

    let nothing = e.unload().expect("unload nothing");
    assert!(!nothing.had_model);
    let _ = std::fs::remove_dir_all(small);
}

#[test]
fn a_load_sets_the_cache_limit_it_was_given_and_the_next_one_restores_the_default() {
    let e = EngineHandle::spawn().expect("spawn");
    let limit = 256 << 20;
    let info =
        e.load(demo_dir(), LoadSettings { cache_limit_bytes: Some(limit), ..LoadSettings::default() }).expect("load");
    assert_eq!(info.cache_limit_bytes, Some(limit));
    // Setting the limit returns the one in force: MLX has ours.
    assert_eq!(mlx_rs::memory::set_cache_limit(limit).expect("set"), limit);

    let info = e.load(demo_dir(), LoadSettings::default()).expect("load without a limit");
    assert_eq!(info.cache_limit_bytes, None);
    let in_force = mlx_rs::memory::set_cache_limit(limit).expect("set");
    assert_ne!(in_force, limit, "the default is back");
    mlx_rs::memory::set_cache_limit(in_force).expect("restore");
    let out = e.generate(request(user("x"), 2)).expect("generate").collect().expect("run");
    assert_eq!(out.token_ids.len(), 2);
}

#[test]
fn unloading_gives_back_the_weights_and_the_session_caches_before_the_next_load() {
    let _heavy = heavy_lock();
    let small = temp_dir("worker-return");
    write_demo_model(&small, &DemoSpec::new(Arch::Qwen2, Preset::Small, Bits::Sixteen)).expect("demo model");
    let e = EngineHandle::spawn().expect("spawn");
    let pre_load = mlx_memory().expect("mlx memory").active;
    let info = e.load(&small, LoadSettings::default()).expect("load");
    // A session keeps its KV cache after the turn: that must come back too.
    let turn = GenerateRequest { session: Some("s".into()), ..request(user("hello there"), 4) };
    e.generate(turn).expect("generate").collect().expect("run");

    let report = e.unload().expect("unload");
    let weights = u64::try_from(info.weight_bytes).expect("bytes");
    assert!(report.expected_bytes > weights, "weights + the session's cache: {report:?}");
    assert!(report.memory_returned, "{report:?}");
    report.confirm().expect("confirmed");
    // MLX's active memory is back to about where it was before the load.
    assert!(report.after.active <= pre_load + RETURN_TOLERANCE_BYTES, "before the load {pre_load}: {report:?}");

    // A switch confirms the same way, and reports it in the new model's info.
    e.load(&small, LoadSettings::default()).expect("load");
    let switched = e.load(demo_dir(), LoadSettings::default()).expect("switch");
    assert!(switched.replaced.had_model && switched.replaced.memory_returned, "{:?}", switched.replaced);
    assert_eq!(switched.replaced.expected_bytes, weights, "no session this time: the weights alone");
    let _ = std::fs::remove_dir_all(small);
}

#[test]
fn the_return_check_allows_only_its_tolerance_and_names_the_shortfall() {
    const MB: u64 = 1 << 20;
    assert!(memory_returned(600 * MB, 100 * MB, 500 * MB));
    // 10 MB short of 500: within the 16 MiB slack (another thread allocating).
    assert!(memory_returned(600 * MB, 110 * MB, 500 * MB));
    // 300 MB short: something still holds the model.
    assert!(!memory_returned(600 * MB, 400 * MB, 500 * MB));
    // Active memory that grew is not an underflow.
    assert!(!memory_returned(100 * MB, 900 * MB, 500 * MB));

    let before = MlxMemory { active: 600 * MB, cache: 0, peak: 600 * MB };
    let after = MlxMemory { active: 400 * MB, cache: 0, peak: 600 * MB };
    let stuck = UnloadReport {
        had_model: true,
        expected_bytes: 500 * MB,
        memory_returned: memory_returned(before.active, after.active, 500 * MB),
        before,
        after,
        ..UnloadReport::default()
    };
    let err = stuck.confirm().expect_err("not returned");
    assert!(
        matches!(err, EngineError::MemoryNotReturned { expected_bytes, returned_bytes } if expected_bytes == 500 * MB && returned_bytes == 200 * MB),
        "{err}"
    );
    assert!(err.to_string().contains("209.7 MB of the 524.3 MB"), "{err}");
    // Nothing was loaded: nothing to confirm.
    assert!(UnloadReport::default().confirm().is_ok());
}

/// Reuse with a quantized KV cache (8 and 4 bits from the start, 8 bits
/// converted after the first turn) and, beside it, the float one. A float
/// cache reused gives the cold run's answer token for token. A quantized
/// one cannot: attention over a prefix quantized before the new tokens came
/// rounds differently from attention over the same prefix still in float
/// (a cold prompt of one chunk is converted only after that pass; mlx-lm
/// converts at the same points, so its reuse should differ from its cold
/// runs in the same way). There the reference is the conversation run without a
/// restart: the state read back from disk gives exactly the tokens the
/// state kept in memory gives.
#[test]
fn a_quantized_kv_cache_is_reused_from_memory_and_from_disk_exactly() {
    let dir = temp_dir("kv-quant-reuse");
    write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::TinyKv, Bits::Four)).expect("demo model");
    let tier = DiskTier { dir: dir.join("states"), limit_bytes: 1 << 30 };
    let formats = [
        KvFormat::Float,
        KvFormat::bits_from_start(8),
        KvFormat::bits_from_start(4),
        KvFormat::Quantized(headroom_core::kv::KvQuant { bits: 8, group_size: 64, start: 40 }),
    ];
    for format in formats {
        let load = || {
            let e = EngineHandle::spawn().expect("spawn");
            let settings = LoadSettings { kv: format, prompt_cache_bytes: 64 << 20, ..LoadSettings::default() };
            e.load(&dir, settings).expect("load");
            e.set_disk_tier(Some(tier.clone())).expect("disk tier");
            e
        };
        let e = load();
        let history = user("What is a cache?");
        let run = |e: &EngineHandle, session: Option<&str>, h: &[Message]| {
            let req = GenerateRequest { session: session.map(str::to_owned), ..request(h.to_vec(), 8) };
            e.generate(req).expect("generate").collect().expect("run")
        };
        let first = run(&e, Some("m"), &history);
        let next = continued(&history, &first.text, "Why is it fast?");
        let from_memory = run(&e, Some("m"), &next);
        run(&e, Some("d"), &history);
        e.save_sessions(Duration::ZERO).expect("save");
        drop(e);
        let e = load();
        let from_disk = run(&e, Some("d"), &next);
        let cold = run(&load(), None, &next);
        assert_eq!(cold.stats.reused_tokens, 0);
        for (how, out, from) in [("memory", &from_memory, Reuse::Memory), ("disk", &from_disk, Reuse::Disk)] {
            assert!(out.stats.reused_tokens >= first.stats.prompt_tokens, "{format:?} {how}: {:?}", out.stats);
            assert_eq!(out.stats.reused_from, from, "{format:?} {how}");
            assert_eq!(out.stats.kv_label.contains("-bit"), format != KvFormat::Float, "{}", out.stats.kv_label);
        }
        assert_eq!(from_disk.token_ids, from_memory.token_ids, "{format:?}: from disk vs from memory");
        if format == KvFormat::Float {
            assert_eq!(from_memory.token_ids, cold.token_ids, "a float cache reused vs a cold run");
        }
        drop(e);
        let _ = std::fs::remove_dir_all(&tier.dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The state key covers the compute dtype and the kernel, the header the
/// KV format: a state saved under one never continues a chat under another.
#[test]
fn a_state_restores_only_under_the_kv_format_dtype_and_kernel_it_was_saved_with() {
    let dir = temp_dir("kv-settings");
    write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::TinyKv, Bits::Four)).expect("demo model");
    let tier = DiskTier { dir: dir.join("states"), limit_bytes: 1 << 30 };
    let load = |settings: &LoadSettings| {
        let e = EngineHandle::spawn().expect("spawn");
        e.load(&dir, settings.clone()).expect("load");
        e.set_disk_tier(Some(tier.clone())).expect("disk tier");
        e
    };
    let saved_with = LoadSettings { kv: KvFormat::Float, kernel: QuantKernel::CPU, ..LoadSettings::default() };
    let history = user("What is a cache?");
    let e = load(&saved_with);
    let first = e.generate(in_session("s", history.clone(), 8)).expect("generate").collect().expect("run");
    assert_eq!(e.save_sessions(Duration::ZERO).expect("save").saved, 1);
    drop(e);
    // Kept aside: each case starts from the state as it was saved.
    let state = std::fs::read(tier.path("s")).expect("saved");
    let next = continued(&history, &first.text, "Why is it fast?");
    let others = [
        ("KV format", LoadSettings { kv: KvFormat::bits_from_start(8), ..saved_with.clone() }),
        ("kernel", LoadSettings { kernel: QuantKernel::Fused, ..saved_with.clone() }),
        ("dtype", LoadSettings { dtype: ComputeDtype::F32, ..saved_with.clone() }),
    ];
    for (what, settings) in &others {
        std::fs::write(tier.path("s"), &state).expect("write");
        let out = load(settings).generate(in_session("s", next.clone(), 8)).expect("generate").collect().expect("run");
        assert_eq!((out.stats.reused_tokens, out.stats.reused_from), (0, Reuse::None), "{what}: {:?}", out.stats);
        let cold = load(settings).generate(request(next.clone(), 8)).expect("generate").collect().expect("run");
        assert_eq!(out.token_ids, cold.token_ids, "{what}: the answer a cold run gives");
        // Another setting is a miss, not damage: the state stays for the
        // settings that made it (the user may switch back).
        assert_eq!(std::fs::read(tier.path("s")).ok().as_ref(), Some(&state), "{what}: the state is kept as saved");
    }
    // The settings it was saved with do restore it.
    std::fs::write(tier.path("s"), &state).expect("write");
    let out = load(&saved_with).generate(in_session("s", next, 8)).expect("generate").collect().expect("run");
    assert_eq!(out.stats.reused_from, Reuse::Disk, "{:?}", out.stats);
    assert!(out.stats.reused_tokens >= first.stats.prompt_tokens, "{:?}", out.stats);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sliding windows (Gemma 3) and recurrent states (Qwen3.5) pass the
/// header's checks of their shapes and come back as they were kept: the
/// chat continued from disk gives the tokens it gives from memory.
#[test]
fn windowed_and_recurrent_states_come_back_from_disk_as_they_were_kept() {
    let arches = [Arch::Gemma3Text, Arch::Qwen3_5];
    for arch in arches {
        let dir = temp_dir("kv-kinds");
        write_demo_model(&dir, &DemoSpec::new(arch, Preset::Tiny, Bits::Four)).expect("demo model");
        let tier = DiskTier { dir: dir.join("states"), limit_bytes: 1 << 30 };
        let load = || {
            let e = EngineHandle::spawn().expect("spawn");
            e.load(&dir, LoadSettings { prompt_cache_bytes: 64 << 20, ..LoadSettings::default() }).expect("load");
            e.set_disk_tier(Some(tier.clone())).expect("disk tier");
            e
        };
        let run = |e: &EngineHandle, session: &str, h: &[Message]| {
            e.generate(in_session(session, h.to_vec(), 8)).expect("generate").collect().expect("run")
        };
        let history = user("What is a cache?");
        let e = load();
        let first = run(&e, "m", &history);
        let next = continued(&history, &first.text, "Why is it fast?");
        let from_memory = run(&e, "m", &next);
        run(&e, "d", &history);
        e.save_sessions(Duration::ZERO).expect("save");
        drop(e);
        let from_disk = run(&load(), "d", &next);
        for (how, out, from) in [("memory", &from_memory, Reuse::Memory), ("disk", &from_disk, Reuse::Disk)] {
            assert_eq!(out.stats.reused_from, from, "{arch:?} {how}: {:?}", out.stats);
            assert!(out.stats.reused_tokens > 0, "{arch:?} {how}: {:?}", out.stats);
        }
        assert_eq!(from_disk.token_ids, from_memory.token_ids, "{arch:?}: from disk vs from memory");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn every_load_and_turn_is_measured_for_the_model_as_loaded() {
    let meter = Arc::new(crate::meter::TestMeter::default());
    let e = EngineHandle::spawn().expect("spawn");
    e.set_meter(Some(meter.clone())).expect("meter");
    let settings = LoadSettings { prompt_cache_bytes: 64 << 20, ..LoadSettings::default() };
    let info = e.load(demo_dir(), settings).expect("load");
    let history = user("Measure me, please.");
    let first = e.generate(in_session("m", history.clone(), 5)).expect("generate").collect().expect("run");
    let history = continued(&history, &first.text, "Again?");
    let second = e.generate(in_session("m", history, 3)).expect("generate").collect().expect("run");

    let kept = meter.kept.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(
        kept.iter().map(|m| m.kind).collect::<Vec<_>>(),
        [MeasuredKind::Load, MeasuredKind::Turn, MeasuredKind::Turn]
    );
    assert_eq!(meter.resets.load(Ordering::Relaxed), 3, "one reset per measurement");
    assert!(kept.iter().all(|m| m.fingerprint == info.fingerprint && m.kv == info.kv_format));
    // The load holds the weights; its resident growth is over the reading before them.
    assert!(kept[0].mlx_peak_bytes >= info.weight_bytes as u64, "{:?}", kept[0]);
    assert!(kept[0].mlx_active_bytes >= info.weight_bytes as u64 && kept[0].mlx_active_bytes <= kept[0].mlx_peak_bytes);
    assert_eq!(kept[0].resident_peak_bytes, Some(30 << 20));
    assert_eq!(kept[0].calibration_point(), None, "a load is no point of the context curve");
    // A turn: its positions, its prompt, what it reused, and MLX's peak as its stats say.
    let (t1, t2) = (&kept[1], &kept[2]);
    let positions = |s: &TurnStats| (s.prompt_tokens + s.generated_tokens) as u64;
    assert_eq!(
        (t1.context_tokens, t1.prompt_tokens, t1.reused_tokens),
        (positions(&first.stats), first.stats.prompt_tokens as u64, 0)
    );
    assert_eq!(t1.mlx_peak_bytes, first.stats.peak_memory_bytes as u64);
    assert!(t1.calibration_point().is_some(), "a whole prefill calibrates");
    assert_eq!(t2.reused_tokens, second.stats.reused_tokens as u64);
    assert!(t2.reused_tokens > 0 && t2.calibration_point().is_none(), "a reused prefix does not: {t2:?}");
    assert_eq!((t1.cached_bytes, t2.cached_bytes), (0, 0), "nothing else was kept");
    // Another chat's turn while the first chat's state is kept: that state
    // is in MLX's peak, and said apart. The chats share the template's first
    // tokens, but a chat never reuses another's state (the prompt cache is
    // partitioned), so this is a whole prefill: a calibration point whose
    // peak leaves the other chat's state out.
    e.generate(in_session("n", user("Another chat entirely"), 2)).expect("generate").collect().expect("run");
    let t3 = meter.kept.lock().unwrap_or_else(PoisonError::into_inner)[3].clone();
    assert_eq!(t3.reused_tokens, 0, "{t3:?}");
    assert!(t3.cached_bytes > 0, "{t3:?}");
    let point = t3.calibration_point().expect("a whole prefill calibrates");
    assert_eq!(point.peak_bytes, t3.mlx_peak_bytes.max(t3.resident_peak_bytes.unwrap_or(0)) - t3.cached_bytes);

    // A cancelled turn is never a measurement: it may have stopped in its prefill.
    let run = e.generate(in_session("c", user("Stop me"), 50)).expect("generate");
    let id = run.id;
    let out = run
        .collect_with(|ev| {
            if let EngineEvent::Started { .. } = ev {
                e.cancel(id);
            }
        })
        .expect("run");
    assert_eq!(out.finish_reason, FinishReason::Cancelled);
    assert_eq!(meter.kept.lock().unwrap_or_else(PoisonError::into_inner).len(), 4, "nothing recorded");

    // Without a meter nothing is measured, and turns still run.
    e.set_meter(None).expect("no meter");
    e.generate(request(user("Quietly"), 2)).expect("generate").collect().expect("run");
    assert_eq!(meter.kept.lock().unwrap_or_else(PoisonError::into_inner).len(), 4);
}

/// A request admitted for one load of a model that finds another
/// loaded when its turn comes fails, and says so, instead of answering
/// with the other model under the first one's name.
#[test]
fn a_request_admitted_for_one_model_never_runs_on_another() {
    let e = EngineHandle::spawn().expect("spawn");
    let first = e.load(demo_dir(), LoadSettings::default()).expect("load");
    let admitted = GenerateRequest { load: Some(first.load), ..request(user("Hello"), 3) };
    let out = e.generate(admitted.clone()).expect("generate").collect().expect("its own model answers");
    assert_eq!(out.token_ids.len(), 3);
    // The same shape with other weights.
    let other = temp_dir("worker-other-weights");
    let spec = DemoSpec { seed: 2, ..DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four) };
    write_demo_model(&other, &spec).expect("demo model");
    let second = e.load(&other, LoadSettings::default()).expect("load");
    assert_ne!(second.load, first.load);
    let err = e.generate(admitted).expect("queued").collect().err();
    assert!(matches!(err, Some(EngineError::ModelChanged)), "{err:?}");
    // Admitted for the model loaded now, or for none: it runs.
    let now = GenerateRequest { load: Some(second.load), ..request(user("Hello"), 3) };
    assert_eq!(e.generate(now).expect("generate").collect().expect("run").token_ids.len(), 3);
    assert!(e.generate(request(user("Hello"), 3)).expect("generate").collect().is_ok());
}
