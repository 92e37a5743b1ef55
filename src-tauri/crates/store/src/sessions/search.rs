//! Searching sessions by title and message text.

use sqlx::Row;

use super::rows::session_from;
use super::SearchHit;
use crate::error::{Context, Result};
use crate::Store;

/// Escapes LIKE's wildcards so a search for `50%` finds "50%".
fn like_pattern(text: &str) -> String {
    let mut p = String::with_capacity(text.len() + 2);
    p.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// About 40 characters either side of the first case-insensitive match.
pub(super) fn snippet(content: &str, needle: &str) -> String {
    let lower = content.to_lowercase();
    let chars: Vec<char> = content.chars().collect();
    // Char index of the match; lowercasing may change byte lengths, so count chars.
    let at = lower.find(&needle.to_lowercase()).map_or(0, |b| lower[..b].chars().count());
    let start = at.saturating_sub(40);
    let end = (at + needle.chars().count() + 40).min(chars.len());
    let mut s: String = chars[start.min(chars.len())..end].iter().collect();
    if start > 0 {
        s.insert(0, '…');
    }
    if end < chars.len() {
        s.push('…');
    }
    s
}

impl Store {
    /// Sessions whose title or messages contain `text` (case-insensitive for
    /// ASCII), the most recent first; at most 100.
    pub async fn search_sessions(&self, text: &str) -> Result<Vec<SearchHit>> {
        let needle = text.trim();
        if needle.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT s.id, s.title, s.created_at, s.updated_at, hit.id AS message_id, hit.content
             FROM sessions s
             LEFT JOIN messages hit ON hit.id = (
                 SELECT m.id FROM messages m WHERE m.session_id = s.id AND m.content LIKE ?1 ESCAPE '\\'
                 ORDER BY m.id LIMIT 1)
             WHERE s.title LIKE ?1 ESCAPE '\\' OR hit.id IS NOT NULL
             ORDER BY s.updated_at DESC, s.id LIMIT 100",
        )
        .bind(like_pattern(needle))
        .fetch_all(&self.pool)
        .await
        .ctx("search sessions")?;
        rows.iter()
            .map(|row| {
                let content: Option<String> = row.try_get("content").ctx("search sessions")?;
                Ok(SearchHit {
                    session: session_from(row)?,
                    message_id: row.try_get("message_id").ctx("search sessions")?,
                    snippet: content.map(|c| snippet(&c, needle)),
                })
            })
            .collect()
    }
}
