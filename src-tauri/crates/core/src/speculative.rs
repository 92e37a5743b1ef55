//! Speculative decoding's vocabulary, shared by the engine that runs it and
//! every front end that asks for it or shows its figures.
//!
//! Decode reads every weight once per forward pass, so a pass that checks
//! several proposed tokens at once can yield several tokens for about the
//! price of one. *Prompt lookup* proposes the tokens that followed the
//! latest earlier occurrence of the last few tokens (in the prompt or the
//! answer so far): free of memory, and right exactly where an answer
//! copies from its prompt (rewrite this, fix the typos, edit this code).
//!
//! Whatever the mode, decode tok/s stays generated tokens over decode time
//! (`stats`), so a run with lookup compares with a plain one directly.

use serde::{Deserialize, Serialize};

/// How decoding proposes tokens to verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum SpeculativeMode {
    /// One token per forward pass.
    #[default]
    None,
    /// Prompt lookup: n-gram proposals from the conversation so far.
    Lookup,
    /// A draft model (a smaller one of the same vocabulary, loaded beside
    /// the model) proposes greedily.
    Draft,
}

impl SpeculativeMode {
    pub const ALL: [Self; 3] = [Self::None, Self::Lookup, Self::Draft];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Lookup => "lookup",
            Self::Draft => "draft",
        }
    }

    /// Parses the CLI's and the settings' spelling.
    pub fn parse(s: &str) -> Result<Self, UnknownMode> {
        Self::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| UnknownMode(s.to_string()))
    }
}

impl std::fmt::Display for SpeculativeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown speculative mode '{0}': use none, lookup or draft")]
pub struct UnknownMode(pub String);

/// Why a turn asked for speculation but decoded plainly throughout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlainBecause {
    /// A sliding window or a recurrent state cannot step back past a
    /// rejected proposal (mlx-lm cannot trim them either).
    CacheCannotStepBack,
    /// Draft mode with no draft model loaded beside the model.
    NoDraftModel,
}

impl PlainBecause {
    pub fn describe(self) -> &'static str {
        match self {
            Self::CacheCannotStepBack => "this model's sliding-window or recurrent layers cannot step back",
            Self::NoDraftModel => "no draft model is loaded",
        }
    }
}

/// What speculation did in one turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Speculation {
    pub mode: SpeculativeMode,
    /// Tokens proposed and checked by the model.
    pub drafted: u32,
    /// Of those, how many the model accepted.
    pub accepted: u32,
    /// Forward passes of the decode (plain steps and verifications) whose
    /// tokens were read.
    pub forward_passes: u32,
    /// Tokens those passes yielded (the first token, which the prefill
    /// yields, is not among them; an end-of-sequence token is).
    pub decoded: u32,
    /// Forward passes that checked proposals.
    pub verify_passes: u32,
    /// Set when speculation was asked for and could not run at all.
    pub plain_because: Option<PlainBecause>,
}

impl Speculation {
    /// Several turns' (or benchmark runs') figures together: the first one's
    /// mode and reason, the counts summed.
    pub fn total<'a>(all: impl IntoIterator<Item = &'a Speculation>) -> Speculation {
        let mut all = all.into_iter();
        let Some(first) = all.next() else { return Speculation::default() };
        all.fold(*first, |t, s| Speculation {
            drafted: t.drafted + s.drafted,
            accepted: t.accepted + s.accepted,
            forward_passes: t.forward_passes + s.forward_passes,
            decoded: t.decoded + s.decoded,
            verify_passes: t.verify_passes + s.verify_passes,
            ..t
        })
    }

    /// Accepted / drafted; `None` when nothing was proposed.
    pub fn acceptance(&self) -> Option<f64> {
        (self.drafted > 0).then(|| f64::from(self.accepted) / f64::from(self.drafted))
    }

    /// Tokens per decode forward pass (1.0 for plain decoding).
    pub fn tokens_per_pass(&self) -> Option<f64> {
        (self.forward_passes > 0).then(|| f64::from(self.decoded) / f64::from(self.forward_passes))
    }

    /// [`Self::label`] where speculation did something or could not run;
    /// `None` where the turn decoded plainly because it was asked to or
    /// because nothing was ever proposed (what a turn's stored stats and
    /// the chat's stats line keep: a label on every answer would be noise).
    pub fn summary(&self) -> Option<String> {
        let acted = self.drafted > 0 || self.plain_because.is_some();
        (self.mode != SpeculativeMode::None && acted).then(|| self.label())
    }

    /// The stats line's words: "lookup: 62% accepted, 2.4 tok/pass".
    pub fn label(&self) -> String {
        match (self.mode, self.plain_because) {
            (SpeculativeMode::None, _) => "plain".to_string(),
            (_, Some(why)) => format!("{}: off ({})", self.mode, why.describe()),
            _ => {
                let acc =
                    self.acceptance().map_or("nothing proposed".to_string(), |a| format!("{:.0}% accepted", a * 100.0));
                let tpp = self.tokens_per_pass().map_or(String::new(), |t| format!(", {t:.1} tok/pass"));
                format!("{}: {acc}{tpp}", self.mode)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_their_own_spelling_only() {
        for m in SpeculativeMode::ALL {
            assert_eq!(SpeculativeMode::parse(m.as_str()), Ok(m));
        }
        assert_eq!(SpeculativeMode::parse("medusa"), Err(UnknownMode("medusa".into())));
        assert_eq!(SpeculativeMode::parse("Draft"), Err(UnknownMode("Draft".into())));
        assert_eq!(SpeculativeMode::ALL.len(), 3);
    }

    #[test]
    fn the_label_says_mode_acceptance_and_tokens_per_pass() {
        let s = Speculation {
            mode: SpeculativeMode::Lookup,
            drafted: 40,
            accepted: 25,
            forward_passes: 20,
            decoded: 50,
            verify_passes: 10,
            plain_because: None,
        };
        assert_eq!(s.label(), "lookup: 62% accepted, 2.5 tok/pass");
        assert_eq!(s.acceptance(), Some(0.625));
        let none = Speculation { mode: SpeculativeMode::Lookup, forward_passes: 4, decoded: 4, ..Default::default() };
        assert_eq!(none.label(), "lookup: nothing proposed, 1.0 tok/pass");
        let off = Speculation { plain_because: Some(PlainBecause::CacheCannotStepBack), ..none };
        assert!(off.label().starts_with("lookup: off (this model's sliding-window"));
        assert_eq!(Speculation::default().label(), "plain");
        let two = Speculation::total([&s, &s]);
        assert_eq!((two.drafted, two.decoded, two.label()), (80, 100, s.label()));
        assert_eq!(Speculation::total([]), Speculation::default());
        assert_eq!((Speculation::default().summary(), s.summary().as_deref()), (None, Some(s.label().as_str())));
        assert_eq!(none.summary(), None, "nothing proposed: plain decoding, not worth a label");
        assert!(off.summary().is_some(), "a mode that could not run says why");
    }
}
