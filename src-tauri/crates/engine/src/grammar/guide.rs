//! One turn's guide: which tokens may come next, and what each token that
//! came means (inside a thinking block, the grammar finished). It owns the
//! llguidance matcher while a grammar applies, waits for a lazy trigger,
//! watches the thinking block and forces its close tag at the budget.

use std::collections::VecDeque;

use headroom_core::chat::Thinking;
use llguidance::toktrie::SimpleVob;
use llguidance::Matcher;

use super::{Constraint, GrammarError, Vocabulary};

/// Bytes of recent text kept to find a tag or trigger that spans tokens.
const WINDOW_KEEP: usize = 256;

/// What one accepted token meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Step {
    /// The token is part of the thinking block (its tags included).
    pub thinking: bool,
    /// The grammar is complete and the constraint asked to stop there.
    pub finished: bool,
}

#[derive(Clone)]
enum Phase {
    /// Inside the thinking block: free text, counted against the budget.
    Thinking,
    /// No grammar applies: before a trigger, or with no constraint.
    Free,
    /// The grammar applies.
    Constrained(Box<Matcher>),
    /// The grammar finished and the turn ends.
    Done,
}

/// The per-turn state that masks and reads tokens; cheap to clone (a
/// speculative pass checks its proposals on a clone).
#[derive(Clone)]
pub struct Guide {
    vocab: Vocabulary,
    constraint: Option<Constraint>,
    /// A matcher for the grammar that has seen no token, cloned at each start.
    fresh: Option<Matcher>,
    thinking: Option<Thinking>,
    phase: Phase,
    /// Recent text of the current phase (trigger, open and close tags are
    /// searched in it).
    window: Vec<u8>,
    /// Tokens the guide forces next (the close tag at the budget, the rest
    /// of a multi-token open tag).
    forced: VecDeque<u32>,
    /// Tokens inside the thinking block so far.
    thought: usize,
    /// Whether the thinking block is over (or never opened): it is not reopened.
    thought_done: bool,
    /// The close tag has been forced: not again.
    closing: bool,
    /// No answer token yet: a thinking model may still open its block.
    at_start: bool,
}

impl std::fmt::Debug for Guide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let phase = match self.phase {
            Phase::Thinking => "thinking",
            Phase::Free => "free",
            Phase::Constrained(_) => "constrained",
            Phase::Done => "done",
        };
        f.debug_struct("Guide").field("phase", &phase).field("thought", &self.thought).finish()
    }
}

impl Guide {
    /// The guide of a turn with `constraint` and `thinking` over `vocab`;
    /// a grammar the vocabulary cannot compile is refused here, before the
    /// turn produces anything.
    pub fn new(
        vocab: &Vocabulary,
        constraint: Option<&Constraint>,
        thinking: Option<&Thinking>,
    ) -> Result<Self, GrammarError> {
        let fresh = constraint.map(|c| vocab.matcher(&c.grammar)).transpose()?;
        let mut guide = Self {
            vocab: vocab.clone(),
            constraint: constraint.cloned(),
            fresh,
            thinking: thinking.cloned(),
            phase: Phase::Free,
            window: Vec::new(),
            forced: VecDeque::new(),
            thought: 0,
            thought_done: thinking.is_none(),
            closing: false,
            at_start: true,
        };
        if thinking.is_some_and(|t| t.open_in_prompt) {
            guide.enter_thinking();
        } else {
            guide.phase = guide.answer_phase();
        }
        Ok(guide)
    }

    /// Whether a grammar is being matched now.
    pub fn constrained(&self) -> bool {
        matches!(self.phase, Phase::Constrained(_))
    }

    /// The tokens allowed next (`None`: any). Its length is the vocabulary's.
    pub fn mask(&mut self) -> Result<Option<SimpleVob>, GrammarError> {
        if let Some(&t) = self.forced.front() {
            let mut only = SimpleVob::alloc(self.vocab.len());
            only.allow_token(t);
            return Ok(Some(only));
        }
        let open_first = self.open_first();
        let Phase::Constrained(m) = &mut self.phase else { return Ok(None) };
        let mut mask = m.compute_mask_or_eos().map_err(runtime)?;
        if let Some(t) = open_first {
            // A thinking model may open its block before the grammar applies.
            mask.allow_token(t);
        }
        if mask.is_zero() {
            return Err(GrammarError::Runtime { reason: "the grammar allows no next token".into() });
        }
        Ok(Some(mask))
    }

    /// Reads the token that came.
    pub fn accept(&mut self, token: u32) -> Result<Step, GrammarError> {
        if self.forced.front() == Some(&token) {
            self.forced.pop_front();
        } else {
            self.forced.clear();
        }
        let opening = self.open_first() == Some(token);
        self.at_start = false;
        let bytes = self.vocab.bytes(token);
        match &mut self.phase {
            Phase::Thinking => {
                self.thought += 1;
                self.window.extend_from_slice(&bytes);
                let close = self.thinking.as_ref().map(|t| t.close.clone()).unwrap_or_default();
                if !close.is_empty() && contains(&self.window, close.as_bytes()) {
                    self.thought_done = true;
                    self.window.clear();
                    self.phase = self.answer_phase();
                } else if self.thinking.as_ref().and_then(|t| t.budget).is_some_and(|b| self.thought >= b)
                    && !self.closing
                    && self.forced.is_empty()
                {
                    self.closing = true;
                    self.forced.extend(self.vocab.tokenize(&close));
                }
                self.trim_window();
                Ok(Step { thinking: true, finished: false })
            }
            Phase::Constrained(_) if opening => Ok(self.opened()),
            Phase::Constrained(m) => {
                m.consume_token(token).map_err(runtime)?;
                if let Some(e) = m.get_error() {
                    return Err(GrammarError::Runtime { reason: e });
                }
                if !m.is_stopped() {
                    return Ok(Step::default());
                }
                if self.constraint.as_ref().is_some_and(|c| c.stop_after) {
                    self.phase = Phase::Done;
                    return Ok(Step { thinking: false, finished: true });
                }
                // Complete: free again until a trigger re-arms it.
                self.window.clear();
                self.phase = Phase::Free;
                Ok(Step::default())
            }
            Phase::Free => {
                self.window.extend_from_slice(&bytes);
                if !self.thought_done {
                    let open = self.thinking.as_ref().map(|t| t.open.clone()).unwrap_or_default();
                    if !open.is_empty() && contains(&self.window, open.as_bytes()) {
                        self.enter_thinking();
                        return Ok(Step { thinking: true, finished: false });
                    }
                }
                let trigger = self.constraint.as_ref().and_then(|c| c.trigger.clone());
                if trigger.is_some_and(|t| contains(&self.window, t.as_bytes())) {
                    self.window.clear();
                    self.phase = self.matching();
                }
                self.trim_window();
                Ok(Step::default())
            }
            Phase::Done => Ok(Step { thinking: false, finished: true }),
        }
    }

    /// The open tag's first token, while a thinking model may still open
    /// its block under a grammar that applies from the first token.
    fn open_first(&self) -> Option<u32> {
        if !self.at_start || self.thought_done || !matches!(self.phase, Phase::Constrained(_)) {
            return None;
        }
        let open = &self.thinking.as_ref()?.open;
        self.vocab.tokenize(open).first().copied()
    }

    /// The open tag's first token came under a grammar: the rest of the tag
    /// is forced and the block begins.
    fn opened(&mut self) -> Step {
        let open = self.thinking.as_ref().map(|t| t.open.clone()).unwrap_or_default();
        let tokens = self.vocab.tokenize(&open);
        self.enter_thinking();
        self.forced.extend(tokens.into_iter().skip(1));
        Step { thinking: true, finished: false }
    }

    fn enter_thinking(&mut self) {
        self.window.clear();
        self.phase = Phase::Thinking;
        if self.thinking.as_ref().and_then(|t| t.budget) == Some(0) {
            // No thinking at all: the close tag comes at once.
            self.closing = true;
            let close = self.thinking.as_ref().map(|t| t.close.clone()).unwrap_or_default();
            self.forced.extend(self.vocab.tokenize(&close));
        }
    }

    /// Where the answer starts: under the grammar unless it waits for a trigger.
    fn answer_phase(&self) -> Phase {
        match &self.constraint {
            Some(c) if c.trigger.is_none() => self.matching(),
            _ => Phase::Free,
        }
    }

    fn matching(&self) -> Phase {
        match &self.fresh {
            Some(m) => Phase::Constrained(Box::new(m.clone())),
            None => Phase::Free,
        }
    }

    fn trim_window(&mut self) {
        if self.window.len() > 4 * WINDOW_KEEP {
            self.window.drain(..self.window.len() - WINDOW_KEEP);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// A matcher failure (llguidance reports them as `anyhow` errors) as the run's error.
fn runtime(e: impl std::fmt::Display) -> GrammarError {
    GrammarError::Runtime { reason: format!("{e:#}") }
}
