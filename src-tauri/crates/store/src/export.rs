//! A session out of the database and back: JSON (everything, stats
//! included; importing it back is lossless) and Markdown (for reading).

use headroom_core::chat::Role;
use serde::{Deserialize, Serialize};

use crate::error::{Context, Result, StoreError};
use crate::sessions::{role_str, MessageStatus, Route, Session, StoredMessage, TurnStatsRecord};
use crate::Store;

/// The `format` field of every export, so a wrong file is refused by name.
pub const EXPORT_FORMAT: &str = "headroom-session";
/// Bumped when the export's shape changes; import refuses newer versions.
pub const EXPORT_VERSION: u32 = 1;

/// A whole session as exported to JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionExport {
    pub format: String,
    pub version: u32,
    pub session: Session,
    pub messages: Vec<ExportedMessage>,
}

/// A message without its row ids (a new database gives new ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportedMessage {
    pub role: Role,
    pub content: String,
    pub model: Option<String>,
    pub route: Route,
    pub status: MessageStatus,
    pub error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub stats: Option<TurnStatsRecord>,
}

impl From<StoredMessage> for ExportedMessage {
    fn from(m: StoredMessage) -> Self {
        Self {
            role: m.role,
            content: m.content,
            model: m.model,
            route: m.route,
            status: m.status,
            error: m.error,
            created_at: m.created_at,
            updated_at: m.updated_at,
            stats: m.stats,
        }
    }
}

impl SessionExport {
    /// Parses an export, refusing other files and newer versions by name.
    pub fn from_json(text: &str) -> Result<Self> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| StoreError::ImportFormat(format!("not JSON ({e})")))?;
        match value.get("format").and_then(|f| f.as_str()) {
            Some(EXPORT_FORMAT) => {}
            Some(other) => {
                return Err(StoreError::ImportFormat(format!("its format is `{other}`, expected `{EXPORT_FORMAT}`")))
            }
            None => return Err(StoreError::ImportFormat(format!("it has no \"format\": \"{EXPORT_FORMAT}\" field"))),
        }
        match value.get("version").and_then(serde_json::Value::as_u64) {
            Some(v) if v <= u64::from(EXPORT_VERSION) => {}
            Some(v) => {
                return Err(StoreError::ImportFormat(format!(
                    "it is version {v}, newer than this app reads ({EXPORT_VERSION})"
                )))
            }
            None => return Err(StoreError::ImportFormat("it has no numeric \"version\"".into())),
        }
        serde_json::from_value(value).map_err(|e| StoreError::ImportFormat(e.to_string()))
    }
}

impl Store {
    pub async fn export_session(&self, session_id: &str) -> Result<SessionExport> {
        let session =
            self.session(session_id).await?.ok_or_else(|| StoreError::SessionNotFound(session_id.to_owned()))?;
        let messages = self.messages(session_id).await?.into_iter().map(ExportedMessage::from).collect();
        Ok(SessionExport { format: EXPORT_FORMAT.into(), version: EXPORT_VERSION, session, messages })
    }

    pub async fn export_json(&self, session_id: &str) -> Result<String> {
        Ok(serde_json::to_string_pretty(&self.export_session(session_id).await?)?)
    }

    pub async fn export_markdown(&self, session_id: &str) -> Result<String> {
        Ok(markdown(&self.export_session(session_id).await?))
    }

    /// Adds an exported session, all in one transaction. It keeps its id
    /// unless that is taken, then gets `id-2`, `id-3`, …; the session as
    /// stored is returned.
    pub async fn import_session(&self, export: &SessionExport) -> Result<Session> {
        let mut tx = self.pool.begin().await.ctx("begin transaction")?;
        let mut id = export.session.id.clone();
        for n in 2.. {
            let taken: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)")
                .bind(&id)
                .fetch_one(&mut *tx)
                .await
                .ctx("check session id")?;
            if !taken {
                break;
            }
            id = format!("{}-{n}", export.session.id);
        }
        let s = &export.session;
        if s.title.trim().is_empty() {
            return Err(StoreError::EmptyTitle);
        }
        sqlx::query("INSERT INTO sessions (id, title, created_at, updated_at) VALUES (?1, ?2, ?3, ?4)")
            .bind(&id)
            .bind(&s.title)
            .bind(s.created_at)
            .bind(s.updated_at)
            .execute(&mut *tx)
            .await
            .ctx("import session")?;
        for m in &export.messages {
            // Nothing is writing it any more.
            let status = if m.status == MessageStatus::Streaming { MessageStatus::Interrupted } else { m.status };
            let message_id = sqlx::query(
                "INSERT INTO messages (session_id, role, content, model, route, status, error, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .bind(&id)
            .bind(role_str(m.role))
            .bind(&m.content)
            .bind(&m.model)
            .bind(m.route.as_str())
            .bind(status.as_str())
            .bind(&m.error)
            .bind(m.created_at)
            .bind(m.updated_at)
            .execute(&mut *tx)
            .await
            .ctx("import message")?
            .last_insert_rowid();
            if let Some(stats) = &m.stats {
                crate::sessions::insert_stats(&mut tx, message_id, stats).await?;
            }
        }
        tx.commit().await.ctx("commit import")?;
        Ok(Session { id, ..s.clone() })
    }
}

/// `YYYY-MM-DD HH:MM UTC` from Unix milliseconds (civil-from-days, no time crate).
pub fn utc_minute(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}

fn rate(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.1} {unit}"))
}

/// One line with every stat and its labels.
fn stats_line(s: &TurnStatsRecord) -> String {
    let swap = s.swap_delta_bytes.map_or_else(|| "n/a".to_owned(), |b| format!("{:+.1} MB", b as f64 / 1e6));
    let mut line = format!(
        "{} · {} · KV {} · context {} tokens, prompt {} ({} reused), generated {}, batch {} · TTFT {} · prefill {} · decode {} · end-to-end {} · peak memory {:.1} MB · pressure {} · swap {} · {}",
        s.model_id,
        s.quantization.as_deref().unwrap_or("unquantized"),
        s.kv_dtype,
        s.context_tokens,
        s.prompt_tokens,
        s.reused_tokens,
        s.generated_tokens,
        s.batch,
        rate(s.ttft_ms, "ms"),
        rate(s.prefill_tps, "tok/s"),
        rate(s.decode_tps, "tok/s"),
        rate(s.e2e_tps, "tok/s"),
        s.peak_memory_bytes as f64 / 1e6,
        s.pressure,
        swap,
        crate::sessions::finish_str(s.finish_reason),
    );
    if let Some(kernel) = &s.quant_kernel {
        line.push_str(&format!(" · kernel {kernel}"));
    }
    if let Some(slowdown) = &s.slowdown {
        line.push_str(&format!(" · {slowdown}"));
    }
    if let Some(two_macs) = &s.two_macs {
        line.push_str(&format!(" · {two_macs}"));
    }
    if let Some(speculation) = &s.speculation {
        line.push_str(&format!(" · {speculation}"));
    }
    line
}

/// The conversation for people: a heading per message, the answer's stats
/// under it as a quote.
pub fn markdown(export: &SessionExport) -> String {
    let s = &export.session;
    let mut out = format!(
        "# {}\n\nSession `{}` · started {} · {} messages\n",
        s.title,
        s.id,
        utc_minute(s.created_at),
        export.messages.len()
    );
    for m in &export.messages {
        let who = match m.role {
            Role::System => "System",
            Role::User => "You",
            Role::Assistant => "Assistant",
            Role::Tool => "Tool",
        };
        let mut heading = format!("\n## {who} · {}", utc_minute(m.created_at));
        if m.role == Role::Assistant {
            if let Some(model) = &m.model {
                heading.push_str(&format!(" · {model} ({})", m.route.as_str()));
            }
            if m.status != MessageStatus::Complete {
                heading.push_str(&format!(" · {}", m.status.as_str()));
            }
        }
        out.push_str(&heading);
        out.push_str("\n\n");
        out.push_str(m.content.trim_end());
        out.push('\n');
        if let Some(e) = &m.error {
            out.push_str(&format!("\n> Error: {e}\n"));
        }
        if let Some(st) = &m.stats {
            out.push_str(&format!("\n> {}\n", stats_line(st)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use headroom_core::chat::FinishReason;

    use super::*;
    use crate::sessions::TurnOutcome;
    use crate::testutil::{store, TestStore};

    async fn filled(tag: &str) -> (TestStore, String) {
        let store = store(tag).await;
        let t =
            store.begin_turn("talk", "Hi | there\n\n# not a heading", Some("qwen-demo"), Route::Local).await.unwrap();
        let mut st = crate::sessions::tests::stats("qwen-demo", 7);
        st.finish_reason = FinishReason::Stop;
        let done = TurnOutcome {
            content: "Héllo 👋 \"quoted\"".into(),
            status: MessageStatus::Complete,
            error: None,
            stats: Some(st),
        };
        store.finish_turn(t.assistant_message_id, &done).await.unwrap();
        let t = store.begin_turn("talk", "again", Some("qwen-demo"), Route::Cloud).await.unwrap();
        let mut st = crate::sessions::tests::stats("qwen-demo", 2);
        st.finish_reason = FinishReason::Cancelled;
        st.quantization = None;
        st.swap_delta_bytes = None;
        let stopped =
            TurnOutcome { content: "Par".into(), status: MessageStatus::Interrupted, error: None, stats: Some(st) };
        store.finish_turn(t.assistant_message_id, &stopped).await.unwrap();
        let t = store.begin_turn("talk", "third", None, Route::Local).await.unwrap();
        let failed = TurnOutcome {
            content: String::new(),
            status: MessageStatus::Error,
            error: Some("no model".into()),
            stats: None,
        };
        store.finish_turn(t.assistant_message_id, &failed).await.unwrap();
        (store, "talk".into())
    }

    #[tokio::test]
    async fn json_export_then_import_is_lossless_stats_included() {
        let (a, id) = filled("export-a").await;
        let json = a.export_json(&id).await.unwrap();
        let export = SessionExport::from_json(&json).unwrap();
        assert_eq!(export.messages.len(), 6);
        assert_eq!(export.messages.iter().filter(|m| m.stats.is_some()).count(), 2);

        // Into another database: the same session, byte for byte.
        let b = store("export-b").await;
        let imported = b.import_session(&export).await.unwrap();
        assert_eq!(imported, export.session);
        assert_eq!(b.export_json(&id).await.unwrap_or_default(), json);
        assert_eq!(b.messages(&id).await.unwrap_or_default(), a.messages(&id).await.unwrap_or_default());

        // Into the same one: a new id, the same content.
        let again = a.import_session(&export).await.unwrap();
        assert_eq!(again.id, "talk-2");
        let back = a.export_session(&again.id).await.unwrap();
        assert_eq!(back.messages, export.messages);
        assert_eq!(a.import_session(&export).await.map(|s| s.id).ok(), Some("talk-3".into()));
    }

    #[tokio::test]
    async fn markdown_export_reads_as_a_conversation_with_labelled_stats() {
        let (a, id) = filled("export-md").await;
        let md = a.export_markdown(&id).await.unwrap();
        assert!(md.starts_with("# Hi | there\n\nSession `talk` · started "), "{md}");
        assert!(md.contains("· 6 messages\n"), "{md}");
        assert!(md.contains("## You · ") && md.contains("\n\nHi | there\n\n# not a heading\n"), "{md}");
        assert!(md.contains(" · qwen-demo (local)\n\nHéllo 👋 \"quoted\"\n"), "{md}");
        assert!(md.contains(" · qwen-demo (cloud) · interrupted\n\nPar\n"), "{md}");
        assert!(md.contains("· error\n") && md.contains("> Error: no model"), "{md}");
        for needle in ["> qwen-demo · 4-bit, group 64 · KV 16-bit float · context 31 tokens, prompt 31 (3 reused), generated 7, batch 1",
            "TTFT 12.3 ms", "prefill 2511.1 tok/s", "decode n/a", "peak memory 123.5 MB", "pressure warning", "swap -0.0 MB", "· stop",
            "unquantized", "swap n/a · cancelled"] {
            assert!(md.contains(needle), "{needle:?} in\n{md}");
        }
        assert!(matches!(a.export_markdown("none").await, Err(StoreError::SessionNotFound(_))));
    }

    #[test]
    fn imports_refuse_other_files_by_name() {
        let msg = |text: &str| SessionExport::from_json(text).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg("{").contains("not JSON"));
        assert!(msg(r#"{"version":1}"#).contains("no \"format\": \"headroom-session\""));
        assert!(msg(r#"{"format":"chatgpt","version":1}"#).contains("its format is `chatgpt`"));
        assert!(msg(r#"{"format":"headroom-session","version":9}"#).contains("version 9, newer"));
        assert!(msg(r#"{"format":"headroom-session","version":1}"#).contains("missing field `session`"));
    }

    #[test]
    fn utc_minutes_match_known_dates() {
        assert_eq!(utc_minute(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_minute(951_782_400_000), "2000-02-29 00:00 UTC");
        assert_eq!(utc_minute(1_795_900_271_000), "2026-11-28 21:11 UTC");
    }
}
