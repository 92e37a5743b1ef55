//! The prompt cache's bound, by MLX's own counters. A test binary of its
//! own, so this is the only thing in the process allocating MLX memory and
//! the counters say exactly what the cache holds.

use std::time::Duration;

use headroom_core::chat::{Message, Role};
use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
use headroom_engine::mlx_memory;
use headroom_engine::worker::{EngineHandle, GenerateRequest, LoadSettings};

fn turn(e: &EngineHandle, session: &str, text: &str, room: Option<usize>) -> headroom_engine::worker::RunOutput {
    let request = GenerateRequest {
        session: Some(session.into()),
        max_tokens: 4,
        ignore_eos: true,
        prompt_cache_room: room,
        ..GenerateRequest::new(vec![Message::new(Role::User, text)])
    };
    e.generate(request).expect("generate").collect().expect("run")
}

#[test]
fn a_cache_allowed_n_bytes_never_holds_more_and_makes_room_when_a_turn_needs_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_demo_model(dir.path(), &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).expect("demo model");
    // A prompt of a few hundred tokens: each chat's state is two 256-position steps per layer.
    let text = |i: usize| format!("chat {i}: {}", "the cache holds keys and values ".repeat(50));

    let e = EngineHandle::spawn().expect("spawn");
    e.load(dir.path(), LoadSettings::default()).expect("load");
    turn(&e, "probe", &text(99), None);
    let one = e.prompt_cache_stats().expect("stats").latest_bytes;
    assert!(one > 0);

    // Room for two and a half chats besides the one in use.
    let allowance = 2 * one + one / 2;
    e.load(dir.path(), LoadSettings { prompt_cache_bytes: allowance, ..LoadSettings::default() }).expect("load");
    let weights = mlx_memory().expect("mlx memory").active;
    for i in 0..6 {
        turn(&e, &format!("s{i}"), &text(i), None);
        let s = e.prompt_cache_stats().expect("stats");
        let held = mlx_memory().expect("mlx memory").active.saturating_sub(weights);
        assert!(s.bytes - s.latest_bytes <= allowance, "turn {i}: {s:?}");
        // MLX holds what the entries say they hold, and no more.
        assert_eq!(held, s.bytes as u64, "turn {i}: MLX holds {held}, the cache says {s:?}");
        assert!(held <= (allowance + s.latest_bytes) as u64);
    }
    let s = e.prompt_cache_stats().expect("stats");
    assert_eq!((s.entries, s.evictions), (3, 3), "{s:?}");

    // Memory got tighter than at the load: a turn that finds room for one
    // other chat's state only makes that room before it runs.
    turn(&e, "s6", &text(6), Some(one));
    let s = e.prompt_cache_stats().expect("stats");
    assert_eq!(s.entries, 2, "{s:?}");
    assert_eq!(mlx_memory().expect("mlx memory").active.saturating_sub(weights), s.bytes as u64);
    turn(&e, "s7", &text(7), Some(0));
    let s = e.prompt_cache_stats().expect("stats");
    assert_eq!((s.entries, s.bytes), (1, s.latest_bytes), "{s:?}");

    // And under pressure all of it goes, the model stays.
    let dropped = e.drop_sessions().expect("drop");
    assert_eq!(dropped.sessions, 1);
    assert_eq!(mlx_memory().expect("mlx memory").active, weights);
    let _ = e.save_sessions(Duration::ZERO);
}
