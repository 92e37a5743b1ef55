//! The turn protocol, reopening, listing, search and snippets against a real database.

use headroom_core::chat::{FinishReason, Role};
use headroom_core::pressure::PressureLevel;

use super::search::snippet;
use super::*;
use crate::testutil::store;

pub(crate) fn stats(model: &str, generated: i64) -> TurnStatsRecord {
    TurnStatsRecord {
        model_id: model.into(),
        quantization: Some("4-bit, group 64".into()),
        kv_dtype: "16-bit float".into(),
        batch: 1,
        context_tokens: 31,
        prompt_tokens: 31,
        reused_tokens: 3,
        generated_tokens: generated,
        ttft_ms: Some(12.345_678_9),
        prefill_tps: Some(2511.1),
        decode_tps: None,
        e2e_tps: Some(0.1 + 0.2),
        prefill_ms: 12.0,
        first_token_ms: Some(12.3),
        last_token_ms: None,
        peak_memory_bytes: 123_456_789,
        pressure: PressureLevel::Warning,
        swap_delta_bytes: Some(-4096),
        finish_reason: FinishReason::Length,
        quant_kernel: None,
        slowdown: None,
        speculation: Some("lookup: 62% accepted, 2.5 tok/pass".into()),
        two_macs: Some("across two Macs: layers 15–29 on 10.0.0.2:7070, hand-off 1.2 ms a pass".into()),
    }
}

#[tokio::test]
async fn a_turn_commits_the_user_message_first_then_streams_then_finishes_with_stats() {
    let store = store("turn").await;
    let t = store.begin_turn("cli-1", "What is MLX?\nsecond line", Some("demo"), Route::Local).await.unwrap();
    assert_eq!(t.session.title, "What is MLX?");
    assert_eq!(t.history, vec![Message::new(Role::User, "What is MLX?\nsecond line")]);
    let msgs = store.messages("cli-1").await.unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!((msgs[0].role, msgs[0].status), (Role::User, MessageStatus::Complete));
    assert_eq!(
        (msgs[1].role, msgs[1].status, msgs[1].content.as_str()),
        (Role::Assistant, MessageStatus::Streaming, "")
    );
    // An empty streaming answer is not context.
    assert_eq!(store.history("cli-1").await.unwrap_or_default().len(), 1);

    store.save_partial(t.assistant_message_id, "An array").await.unwrap();
    let m = store.message(t.assistant_message_id).await.unwrap();
    assert_eq!((m.content.as_str(), m.status), ("An array", MessageStatus::Streaming));

    let outcome = TurnOutcome {
        content: "An array framework.".into(),
        status: MessageStatus::Complete,
        error: None,
        stats: Some(stats("demo", 4)),
    };
    store.finish_turn(t.assistant_message_id, &outcome).await.unwrap();
    let m = store.message(t.assistant_message_id).await.unwrap();
    assert_eq!((m.content.as_str(), m.status), ("An array framework.", MessageStatus::Complete));
    assert_eq!(m.stats, Some(stats("demo", 4)), "every stat and label comes back as written");

    // The next turn's context is the stored conversation.
    let t2 = store.begin_turn("cli-1", "And tokens?", Some("demo"), Route::Local).await.unwrap();
    assert_eq!(t2.session.title, "What is MLX?", "an existing session keeps its title");
    let roles: Vec<Role> = t2.history.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
    assert_eq!(t2.history[1].content, "An array framework.");

    // A failed answer is kept (with why) but is not context; a finished row cannot be re-streamed.
    let failed = TurnOutcome {
        content: String::new(),
        status: MessageStatus::Error,
        error: Some("engine stopped".into()),
        stats: None,
    };
    store.finish_turn(t2.assistant_message_id, &failed).await.unwrap();
    assert!(matches!(store.save_partial(t2.assistant_message_id, "x").await, Err(StoreError::MessageNotFound(_))));
    let m = store.message(t2.assistant_message_id).await.unwrap();
    assert_eq!((m.status, m.error.as_deref(), m.stats), (MessageStatus::Error, Some("engine stopped"), None));
    assert_eq!(store.history("cli-1").await.unwrap_or_default().len(), 3);
    assert!(matches!(store.finish_turn(999, &failed).await, Err(StoreError::MessageNotFound(999))));
    assert!(matches!(store.begin_turn("", "x", None, Route::Local).await, Err(StoreError::InvalidSessionId(_))));
}

#[tokio::test]
async fn a_regenerated_turn_replaces_the_last_one_in_one_transaction() {
    let store = store("take-back").await;
    assert_eq!(LastTurn::of(&store.messages("none").await.unwrap_or_default()), None);
    for (q, a) in [("first?", "one"), ("second?", "two")] {
        let t = store.begin_turn("s", q, None, Route::Local).await.unwrap();
        let done =
            TurnOutcome { content: a.into(), status: MessageStatus::Complete, error: None, stats: Some(stats("m", 2)) };
        store.finish_turn(t.assistant_message_id, &done).await.unwrap();
    }
    let last = LastTurn::of(&store.messages("s").await.unwrap_or_default()).expect("no turn");
    assert_eq!(last.question, "second?");
    let t = store.begin_turn_replacing("s", "second?", Some("m2"), Route::Cloud, &last).await.unwrap();
    let msgs = store.messages("s").await.unwrap_or_default();
    let left: Vec<(&str, MessageStatus)> = msgs.iter().map(|m| (m.content.as_str(), m.status)).collect();
    assert_eq!(
        left,
        [
            ("first?", MessageStatus::Complete),
            ("one", MessageStatus::Complete),
            ("second?", MessageStatus::Complete),
            ("", MessageStatus::Streaming)
        ]
    );
    assert_eq!((msgs[2].id, msgs[3].id), (t.user_message_id, t.assistant_message_id));
    assert_eq!(t.history.last().map(|m| m.content.as_str()), Some("second?"));
    let stats_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM turn_stats").fetch_one(store.pool()).await.unwrap();
    assert_eq!(stats_rows, 1, "the replaced answer's stats went with it");

    // The old exchange is gone now: replacing it again changes nothing.
    let before = store.messages("s").await.unwrap_or_default();
    let again = store.begin_turn_replacing("s", "second?", None, Route::Local, &last).await;
    assert!(matches!(again, Err(StoreError::TurnChanged { .. })), "{again:?}");
    assert_eq!(store.messages("s").await.unwrap_or_default(), before);

    // A session ending in a question with no answer yet has no turn to replace.
    store.begin_turn("t", "pending?", None, Route::Local).await.unwrap();
    sqlx::query("DELETE FROM messages WHERE session_id = 't' AND role = 'assistant'")
        .execute(store.pool())
        .await
        .unwrap();
    assert_eq!(LastTurn::of(&store.messages("t").await.unwrap_or_default()), None);
}

#[tokio::test]
async fn reopening_marks_answers_left_streaming_as_interrupted_and_keeps_their_text() {
    let store = store("recover").await;
    let t = store.begin_turn("s", "hi", None, Route::Local).await.unwrap();
    store.save_partial(t.assistant_message_id, "Hel").await.unwrap();
    let dir = store.path().parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let again = Store::open(&dir).await.unwrap();
    let m = again.message(t.assistant_message_id).await.unwrap();
    assert_eq!((m.status, m.content.as_str()), (MessageStatus::Interrupted, "Hel"));
    assert_eq!(again.history("s").await.unwrap_or_default().len(), 2, "an interrupted answer is context");
    // The writer, still alive, takes its row back at its next save.
    store.save_partial(t.assistant_message_id, "Hello").await.unwrap();
    let m = again.message(t.assistant_message_id).await.unwrap();
    assert_eq!((m.status, m.content.as_str()), (MessageStatus::Streaming, "Hello"));
}

#[tokio::test]
async fn sessions_list_rename_search_and_delete_with_cascades() {
    let store = store("list").await;
    let a = store.create_session("  Plans  ").await.unwrap();
    assert_eq!(a.title, "Plans");
    assert!(matches!(store.create_session(" ").await, Err(StoreError::EmptyTitle)));
    let t = store.begin_turn(&a.id, "Budget is 50% of 1_000", None, Route::Local).await.unwrap();
    let done = TurnOutcome {
        content: "Noted.".into(),
        status: MessageStatus::Complete,
        error: None,
        stats: Some(stats("m", 2)),
    };
    store.finish_turn(t.assistant_message_id, &done).await.unwrap();
    std::thread::sleep(std::time::Duration::from_millis(3));
    let b = store.ensure_session("b", "Other").await.unwrap();
    assert_eq!(store.ensure_session("b", "ignored").await.ok(), Some(b.clone()));

    let list = store.list_sessions().await.unwrap();
    assert_eq!(list.iter().map(|s| s.session.id.as_str()).collect::<Vec<_>>(), ["b", a.id.as_str()]);
    assert_eq!((list[1].message_count, list[1].preview.as_deref()), (2, Some("Noted.")));
    assert_eq!((list[0].message_count, list[0].preview.as_deref()), (0, None));

    let renamed = store.rename_session("b", "Renamed").await.unwrap();
    assert_eq!(renamed.title, "Renamed");
    assert!(matches!(store.rename_session("nope", "x").await, Err(StoreError::SessionNotFound(_))));

    // Wildcards are literal; case does not matter; titles match too.
    let hits = store.search_sessions("50%").await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!((hits[0].session.id.as_str(), hits[0].message_id), (a.id.as_str(), Some(t.user_message_id)));
    assert_eq!(hits[0].snippet.as_deref(), Some("Budget is 50% of 1_000"));
    assert!(store.search_sessions("5_%").await.unwrap_or_default().is_empty());
    assert_eq!(store.search_sessions("NOTED").await.unwrap_or_default().len(), 1);
    let by_title = store.search_sessions("renamed").await.unwrap_or_default();
    assert_eq!((by_title.len(), by_title[0].message_id), (1, None));
    assert!(store.search_sessions("  ").await.unwrap_or_default().is_empty());

    assert!(store.delete_session(&a.id).await.unwrap_or(false));
    assert!(!store.delete_session(&a.id).await.unwrap_or(true));
    let left: i64 = sqlx::query_scalar("SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM turn_stats)")
        .fetch_one(store.pool())
        .await
        .unwrap_or(-1);
    assert_eq!(left, 0, "messages and stats went with their session");
}

#[test]
fn snippets_and_titles_cut_on_characters() {
    let long = format!("{}needle{}", "é".repeat(50), "ü".repeat(50));
    let s = snippet(&long, "NEEDLE");
    assert!(s.starts_with('…') && s.ends_with('…') && s.contains("needle"), "{s}");
    assert_eq!(s.chars().count(), 40 + 6 + 40 + 2);
    assert_eq!(title_from("\n  \n  Hi there \nmore"), "Hi there");
    assert_eq!(title_from(&"x".repeat(70)).chars().count(), 61);
    assert_eq!(title_from(""), "New chat");
}
