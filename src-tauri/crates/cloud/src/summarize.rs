//! Shrinking a long history before it goes to the cloud: which older turns
//! the local model summarises, the prompt it gets, and the tokens saved.
//! Pure: the local generation and the token counter are passed in.

use headroom_core::chat::{Message, Role};

/// When and how much to summarise. Off unless the user turns it on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryPolicy {
    /// Messages at the end that always go verbatim (the recent exchange the
    /// next answer depends on most).
    pub keep_recent: usize,
    /// Summarise only when the older part holds at least this many tokens:
    /// below that the local generation costs more time than it saves.
    pub min_tokens_to_summarise: usize,
    /// Longest summary asked of the local model, in tokens.
    pub max_summary_tokens: usize,
}

impl Default for SummaryPolicy {
    fn default() -> Self {
        Self { keep_recent: 4, min_tokens_to_summarise: 512, max_summary_tokens: 256 }
    }
}

/// What to summarise: `history[range]` becomes one system message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryPlan {
    /// Leading system messages, kept as they are.
    pub keep_head: usize,
    /// Index of the first message kept verbatim after the summarised part.
    pub keep_from: usize,
    /// Tokens of the summarised messages, by the injected counter.
    pub tokens_before: usize,
    /// The messages for the local model.
    pub prompt: Vec<Message>,
}

/// What the history became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summarised {
    pub messages: Vec<Message>,
    /// Summarised messages' tokens minus the summary message's tokens
    /// (never negative: a summary longer than the text is not used).
    pub tokens_saved: usize,
    pub messages_summarised: usize,
}

/// The label the summary message starts with, so the cloud model (and the
/// user reading the request) knows what it is.
pub const SUMMARY_PREFIX: &str = "Summary of the earlier conversation:";

/// Decides what to summarise, or `None` when it is not worth it. System
/// messages at the start are kept; the last `keep_recent` messages are kept;
/// the cut never leaves an assistant message first in the kept tail (it
/// moves back to the user message that prompted it).
pub fn plan(history: &[Message], policy: &SummaryPolicy, count_tokens: impl Fn(&str) -> usize) -> Option<SummaryPlan> {
    let keep_head = history.iter().take_while(|m| m.role == Role::System).count();
    let mut keep_from = history.len().saturating_sub(policy.keep_recent).max(keep_head);
    while keep_from > keep_head && history.get(keep_from).is_some_and(|m| m.role == Role::Assistant) {
        keep_from -= 1;
    }
    let older = history.get(keep_head..keep_from)?;
    // One message is not a "history"; a summary of it saves nothing.
    if older.len() < 2 {
        return None;
    }
    let tokens_before: usize = older.iter().map(|m| count_tokens(&m.content)).sum();
    if tokens_before < policy.min_tokens_to_summarise {
        return None;
    }
    Some(SummaryPlan { keep_head, keep_from, tokens_before, prompt: summary_prompt(older, policy.max_summary_tokens) })
}

/// The local model's instructions and the transcript to condense.
pub fn summary_prompt(older: &[Message], max_tokens: usize) -> Vec<Message> {
    let mut transcript = String::new();
    for m in older {
        let who = match m.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::System => "System",
            Role::Tool => "Tool",
        };
        transcript.push_str(who);
        transcript.push_str(": ");
        transcript.push_str(m.content.trim());
        transcript.push_str("\n\n");
    }
    vec![
        Message::new(
            Role::System,
            format!(
                "You condense conversations. Write a summary of at most {max_tokens} tokens that keeps every \
                 fact, name, number, decision and open question the conversation needs to continue. \
                 Write only the summary."
            ),
        ),
        Message::new(Role::User, format!("Summarise this conversation:\n\n{}", transcript.trim_end())),
    ]
}

/// Runs the plan with `generate` (the local model) and rebuilds the history.
/// A failed, empty or longer-than-the-original summary leaves the history
/// untouched (0 tokens saved): summarising must never lose the user's text.
pub fn apply<E>(
    history: &[Message],
    plan: &SummaryPlan,
    generate: impl FnOnce(&[Message]) -> Result<String, E>,
    count_tokens: impl Fn(&str) -> usize,
) -> Result<Summarised, E> {
    let unchanged = || Summarised { messages: history.to_vec(), tokens_saved: 0, messages_summarised: 0 };
    let summary = generate(&plan.prompt)?;
    let summary = summary.trim();
    if summary.is_empty() || plan.keep_from > history.len() || plan.keep_head > plan.keep_from {
        return Ok(unchanged());
    }
    let content = format!("{SUMMARY_PREFIX}\n{summary}");
    let tokens_after = count_tokens(&content);
    if tokens_after >= plan.tokens_before {
        return Ok(unchanged());
    }
    let mut messages = history[..plan.keep_head].to_vec();
    messages.push(Message::new(Role::System, content));
    messages.extend_from_slice(&history[plan.keep_from..]);
    Ok(Summarised {
        messages,
        tokens_saved: plan.tokens_before - tokens_after,
        messages_summarised: plan.keep_from - plan.keep_head,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whitespace words: a stand-in tokenizer with countable results.
    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    fn chat(n: usize, words_each: usize) -> Vec<Message> {
        let mut h = vec![Message::new(Role::System, "be brief")];
        for i in 0..n {
            let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
            h.push(Message::new(role, vec![format!("w{i}"); words_each].join(" ")));
        }
        h
    }

    fn policy(keep_recent: usize, min: usize) -> SummaryPolicy {
        SummaryPolicy { keep_recent, min_tokens_to_summarise: min, max_summary_tokens: 50 }
    }

    #[test]
    fn plans_the_older_turns_and_keeps_system_and_recent_ones() {
        let h = chat(8, 10); // system + 8 messages of 10 words
        let p = plan(&h, &policy(3, 20), words).expect("expected a plan");
        assert_eq!(p.keep_head, 1);
        // The last 3 start with an assistant message (index 6): the cut moves
        // back to the user message before it.
        assert_eq!(p.keep_from, 5);
        assert_eq!(h[p.keep_from].role, Role::User);
        assert_eq!(p.tokens_before, 40);
        assert_eq!(p.prompt.len(), 2);
        assert!(p.prompt[1].content.contains("User: w0") && p.prompt[1].content.contains("Assistant: w3"));
        assert!(!p.prompt[1].content.contains("w4"), "kept turns must not be summarised");
    }

    #[test]
    fn short_histories_are_not_worth_summarising() {
        assert_eq!(plan(&chat(4, 10), &policy(4, 1), words), None);
        assert_eq!(plan(&chat(8, 2), &policy(2, 100), words), None);
        assert_eq!(plan(&[], &policy(0, 0), words), None);
    }

    #[test]
    fn apply_replaces_the_older_turns_and_reports_tokens_saved() {
        let h = chat(8, 10);
        let p = plan(&h, &policy(3, 20), words).expect("expected a plan");
        let mut seen = Vec::new();
        let out = apply(
            &h,
            &p,
            |prompt| {
                seen = prompt.to_vec();
                Ok::<_, std::convert::Infallible>("they greeted".to_owned())
            },
            words,
        )
        .unwrap_or_else(|e| match e {});
        assert_eq!(seen, p.prompt);
        assert_eq!(out.messages.len(), 1 + 1 + 4);
        assert_eq!(out.messages[0], h[0]);
        assert_eq!(out.messages[1].content, format!("{SUMMARY_PREFIX}\nthey greeted"));
        assert_eq!(&out.messages[2..], &h[5..]);
        // 40 words became "Summary of the earlier conversation: they greeted" = 7.
        assert_eq!(out.tokens_saved, 33);
        assert_eq!(out.messages_summarised, 4);
    }

    #[test]
    fn a_useless_or_failed_summary_loses_nothing() {
        let h = chat(8, 10);
        let p = plan(&h, &policy(3, 20), words).expect("expected a plan");
        let long = vec!["x"; 100].join(" ");
        let out = apply(&h, &p, |_| Ok::<_, ()>(long.clone()), words).unwrap();
        assert_eq!((out.messages.as_slice(), out.tokens_saved), (h.as_slice(), 0));
        let out = apply(&h, &p, |_| Ok::<_, ()>("  ".into()), words).unwrap();
        assert_eq!(out.messages, h);
        assert_eq!(apply(&h, &p, |_| Err("engine stopped"), words), Err("engine stopped"));
    }
}
