//! Charts as SVG strings the UI inlines: a stored session's speed chart
//! (decode tok/s and TTFT per turn against context). The live graph is in
//! `commands/live.rs`.

use headroom_charts::{ChartError, ChartStyle, Theme, TurnPoint};
use headroom_core::chat::Role;
use headroom_store::{Store, StoreError, StoredMessage};
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::state::AppState;

/// What drawing a stored session's chart can fail with.
#[derive(Debug, thiserror::Error)]
pub enum SessionChartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Chart(#[from] ChartError),
}

impl From<ChartError> for CommandError {
    fn from(e: ChartError) -> Self {
        let code = match &e {
            ChartError::UnknownTheme(_) | ChartError::TooSmall { .. } | ChartError::InvalidWindow { .. } => {
                ErrorCode::InvalidInput
            }
            ChartError::InvalidValue { .. } | ChartError::Draw { .. } | ChartError::Tagging { .. } => ErrorCode::Chart,
        };
        Self::new(code, e.to_string())
    }
}

impl From<SessionChartError> for CommandError {
    fn from(e: SessionChartError) -> Self {
        match e {
            SessionChartError::Store(e) => e.into(),
            SessionChartError::Chart(e) => e.into(),
        }
    }
}

/// The session's chart, popover-sized, in `theme` ("light" or "dark").
#[tauri::command]
pub async fn session_chart(
    session_id: String,
    theme: String,
    state: State<'_, AppState>,
) -> Result<String, CommandError> {
    let theme: Theme = theme.parse()?;
    Ok(session_chart_svg(&state.store, &session_id, &ChartStyle::popover(theme)).await?)
}

/// Reads the session's turns and draws them (shared with `headroom chart`).
pub(crate) async fn session_chart_svg(
    store: &Store,
    session_id: &str,
    style: &ChartStyle,
) -> Result<String, SessionChartError> {
    if store.session(session_id).await?.is_none() {
        return Err(StoreError::SessionNotFound(session_id.to_owned()).into());
    }
    let messages = store.messages(session_id).await?;
    Ok(headroom_charts::session_svg(&turn_points(&messages), style)?)
}

/// One point per answer that has stats. Turns are numbered by answer, so an
/// answer without stats (failed before its first token, or from a cloud
/// endpoint that reports none) leaves a gap in the numbers rather than
/// renumbering the turns after it.
pub(crate) fn turn_points(messages: &[StoredMessage]) -> Vec<TurnPoint> {
    messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .zip(1u32..)
        .filter_map(|(m, turn)| {
            let s = m.stats.as_ref()?;
            Some(TurnPoint {
                turn,
                context_tokens: u32::try_from(s.context_tokens.max(0)).unwrap_or(u32::MAX),
                decode_tps: s.decode_tps,
                ttft_ms: s.ttft_ms,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use headroom_core::chat::FinishReason;
    use headroom_core::pressure::PressureLevel;
    use headroom_store::{MessageStatus, Route, TurnOutcome, TurnStatsRecord};

    use super::*;
    use crate::runtime::block_on;
    use headroom_test_support::{fresh_store, FreshStore};

    fn store(tag: &str) -> FreshStore {
        block_on(fresh_store(&format!("charts-{tag}")))
    }

    fn stats(context_tokens: i64, generated_tokens: i64, decode_tps: Option<f64>) -> TurnStatsRecord {
        TurnStatsRecord {
            model_id: "demo".into(),
            quantization: Some("4-bit, group 64".into()),
            kv_dtype: "float16".into(),
            batch: 1,
            context_tokens,
            prompt_tokens: 20,
            reused_tokens: 0,
            generated_tokens,
            ttft_ms: Some(40.0 + context_tokens as f64 * 0.05),
            prefill_tps: Some(900.0),
            decode_tps,
            e2e_tps: Some(20.0),
            prefill_ms: 22.0,
            first_token_ms: Some(40.0),
            last_token_ms: Some(400.0),
            peak_memory_bytes: 1 << 30,
            pressure: PressureLevel::Normal,
            swap_delta_bytes: Some(0),
            finish_reason: FinishReason::Stop,
            quant_kernel: None,
            slowdown: None,
            speculation: None,
            two_macs: None,
        }
    }

    /// Stores a turn; `stats: None` is an answer that failed.
    fn turn(store: &Store, session: &str, stats: Option<TurnStatsRecord>) {
        let t = block_on(store.begin_turn(session, "Tell me more", Some("demo"), Route::Local)).unwrap();
        let status = if stats.is_some() { MessageStatus::Complete } else { MessageStatus::Error };
        let outcome = TurnOutcome { content: "More.".into(), status, error: None, stats };
        block_on(store.finish_turn(t.assistant_message_id, &outcome)).unwrap();
    }

    #[test]
    fn a_stored_session_becomes_one_point_per_answer_with_stats() {
        let s = store("points");
        turn(&s, "talk", Some(stats(0, 30, Some(25.0))));
        turn(&s, "talk", None);
        turn(&s, "talk", Some(stats(120, 1, None)));
        let messages = block_on(s.messages("talk")).unwrap();
        let points = turn_points(&messages);
        assert_eq!(
            points,
            vec![
                TurnPoint { turn: 1, context_tokens: 0, decode_tps: Some(25.0), ttft_ms: Some(40.0) },
                TurnPoint { turn: 3, context_tokens: 120, decode_tps: None, ttft_ms: Some(46.0) },
            ]
        );
        let svg = block_on(session_chart_svg(&s, "talk", &ChartStyle::dark())).unwrap();
        // Two panels, one circle per point in each.
        assert_eq!(svg.matches("<circle").count(), 4, "{svg}");
        assert!(svg.contains("decode (tok/s)") && svg.contains("TTFT (ms)"));
    }

    #[test]
    fn unknown_sessions_and_themes_are_errors_with_codes() {
        let s = store("errors");
        let err = block_on(session_chart_svg(&s, "nope", &ChartStyle::light())).err().map(CommandError::from);
        assert_eq!(err.map(|e| e.code), Some(ErrorCode::SessionNotFound));
        let err = "purple".parse::<Theme>().err().map(CommandError::from);
        assert_eq!(err.as_ref().map(|e| e.code), Some(ErrorCode::InvalidInput));
        assert!(err.map(|e| e.message).unwrap_or_default().contains("\"light\" or \"dark\""));
    }

    #[test]
    fn a_session_without_answers_draws_the_empty_card() {
        let s = store("empty");
        block_on(s.ensure_session("fresh", "Fresh")).unwrap();
        let svg = block_on(session_chart_svg(&s, "fresh", &ChartStyle::light())).unwrap();
        assert!(svg.contains("No turns yet") && !svg.contains("<circle"));
    }
}
