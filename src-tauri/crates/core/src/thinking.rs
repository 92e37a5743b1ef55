//! Whether, and how long, a thinking model thinks: the per-model setting, a
//! turn's own ask (the chat's Think switch, `generate --think`, the API's
//! `reasoning_effort`), and what that asks of the chat template
//! (`enable_thinking`) and of the engine (the think block's tags and its
//! budget). The app, the CLI and the server all decide here.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::chat::Thinking;

/// The tags thinking models write (Qwen3, DeepSeek-R1, QwQ).
pub const THINK_OPEN: &str = "<think>";
pub const THINK_CLOSE: &str = "</think>";

/// The thinking budget (tokens) of each `reasoning_effort` that has one:
/// `minimal`, `low` and `medium`; `high` thinks as long as the model likes
/// and `none` not at all (docs/server.md).
pub const EFFORT_BUDGETS: [(&str, u32); 3] = [("minimal", 256), ("low", 1024), ("medium", 4096)];

/// The largest budget a setting or a request may name.
pub const MAX_THINK_BUDGET: u32 = 1 << 20;

/// How a model thinks. Serialized `"off"`, `"on"` or `{"budget": N}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub enum Think {
    /// No thinking: the template is asked not to (`enable_thinking: false`),
    /// and a block the model opens anyway is closed at once.
    Off,
    /// As long as the model likes.
    On,
    /// At most this many tokens; then the close tag is forced.
    Budget(u32),
}

/// Why a thinking ask was refused; the message names the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThinkError {
    #[error("expected on, off, or budget N (got `{0}`)")]
    Words(String),
    #[error("a thinking budget is a number of tokens from 1 to {MAX_THINK_BUDGET} (got `{0}`)")]
    Budget(String),
    #[error("unknown reasoning_effort `{0}`: supported are none, minimal, low, medium, high")]
    Effort(String),
}

impl Think {
    /// The CLI's words: `on`, `off`, `budget N`.
    pub fn from_words(words: &[&str]) -> Result<Self, ThinkError> {
        match words {
            ["on"] => Ok(Think::On),
            ["off"] => Ok(Think::Off),
            ["budget", n] => match n.parse::<u32>() {
                Ok(n) if (1..=MAX_THINK_BUDGET).contains(&n) => Ok(Think::Budget(n)),
                _ => Err(ThinkError::Budget((*n).to_owned())),
            },
            other => Err(ThinkError::Words(other.join(" "))),
        }
    }

    /// OpenAI's `reasoning_effort`: `none` is off, `high` unbounded, the
    /// others a budget ([`EFFORT_BUDGETS`]).
    pub fn from_effort(effort: &str) -> Result<Self, ThinkError> {
        match effort {
            "none" => Ok(Think::Off),
            "high" => Ok(Think::On),
            other => EFFORT_BUDGETS
                .iter()
                .find(|(name, _)| *name == other)
                .map(|&(_, n)| Think::Budget(n))
                .ok_or_else(|| ThinkError::Effort(other.to_owned())),
        }
    }

    /// A per-chat switch: on (as the model's setting bounds it) or off.
    pub fn switch(on: bool, model_setting: Option<Think>) -> Self {
        match (on, model_setting) {
            (false, _) => Think::Off,
            (true, Some(budget @ Think::Budget(_))) => budget,
            (true, _) => Think::On,
        }
    }

    /// Checks a stored or sent value (a budget of 0 or past the limit).
    pub fn validate(self) -> Result<(), ThinkError> {
        match self {
            Think::Budget(n) if !(1..=MAX_THINK_BUDGET).contains(&n) => Err(ThinkError::Budget(n.to_string())),
            _ => Ok(()),
        }
    }
}

/// What a turn asks of the template and the engine: `asked` (the turn's own
/// ask) over `model_setting` (the model's default); neither: the template's
/// own default, and the block is only read, unbounded. `enable_thinking`
/// goes into `kwargs` unless the caller set it there already (an API
/// client's `chat_template_kwargs` wins for the template; the budget still
/// applies). The engine is given the tags and budget only where the
/// model's template has a think block (`template_thinks`): elsewhere there
/// is nothing to read or bound.
pub fn apply(
    asked: Option<Think>,
    model_setting: Option<Think>,
    template_thinks: bool,
    kwargs: &mut Map<String, Value>,
) -> Option<Thinking> {
    let think = asked.or(model_setting);
    if let Some(t) = think {
        kwargs.entry("enable_thinking").or_insert(Value::Bool(t != Think::Off));
    }
    if !template_thinks {
        return None;
    }
    let budget = match think {
        None | Some(Think::On) => None,
        Some(Think::Off) => Some(0),
        Some(Think::Budget(n)) => Some(n as usize),
    };
    // An explicit enable_thinking: true from the client lifts an Off.
    let budget = match (budget, kwargs.get("enable_thinking")) {
        (Some(0), Some(Value::Bool(true))) => None,
        (b, _) => b,
    };
    Some(Thinking { open: THINK_OPEN.into(), close: THINK_CLOSE.into(), budget, open_in_prompt: false })
}

/// Whether a chat template has a think block to read (the test
/// `chat_format::AnswerFormat::of` makes).
pub fn template_thinks(template: Option<&str>) -> bool {
    template.is_some_and(|t| t.contains(THINK_CLOSE))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn words_and_efforts_map_to_settings() {
        assert_eq!(Think::from_words(&["on"]), Ok(Think::On));
        assert_eq!(Think::from_words(&["off"]), Ok(Think::Off));
        assert_eq!(Think::from_words(&["budget", "64"]), Ok(Think::Budget(64)));
        assert_eq!(Think::from_words(&["budget", "0"]), Err(ThinkError::Budget("0".into())));
        assert_eq!(Think::from_words(&["budget", "x"]), Err(ThinkError::Budget("x".into())));
        assert_eq!(Think::from_words(&["maybe"]), Err(ThinkError::Words("maybe".into())));
        assert_eq!(Think::from_effort("none"), Ok(Think::Off));
        assert_eq!(Think::from_effort("minimal"), Ok(Think::Budget(256)));
        assert_eq!(Think::from_effort("low"), Ok(Think::Budget(1024)));
        assert_eq!(Think::from_effort("medium"), Ok(Think::Budget(4096)));
        assert_eq!(Think::from_effort("high"), Ok(Think::On));
        assert_eq!(Think::from_effort("max"), Err(ThinkError::Effort("max".into())));
        assert!(Think::Budget(0).validate().is_err() && Think::Budget(5).validate().is_ok());
        assert_eq!(serde_json::to_value(Think::Budget(5)).unwrap(), json!({"budget": 5}));
        assert_eq!(serde_json::to_value(Think::Off).unwrap(), json!("off"));
    }

    #[test]
    fn the_turns_ask_wins_over_the_models_setting_and_reaches_template_and_engine() {
        let mut kwargs = Map::new();
        let t = apply(Some(Think::Off), Some(Think::Budget(9)), true, &mut kwargs).unwrap();
        assert_eq!((kwargs["enable_thinking"].clone(), t.budget), (json!(false), Some(0)));

        let mut kwargs = Map::new();
        let t = apply(None, Some(Think::Budget(9)), true, &mut kwargs).unwrap();
        assert_eq!((kwargs["enable_thinking"].clone(), t.budget), (json!(true), Some(9)));
        assert_eq!((t.open.as_str(), t.close.as_str()), (THINK_OPEN, THINK_CLOSE));

        // Nothing asked: the template's default, the block read unbounded.
        let mut kwargs = Map::new();
        assert_eq!(apply(None, None, true, &mut kwargs).map(|t| t.budget), Some(None));
        assert!(kwargs.is_empty());

        // A template without a block still gets the keyword, the engine nothing.
        let mut kwargs = Map::new();
        assert_eq!(apply(Some(Think::On), None, false, &mut kwargs), None);
        assert_eq!(kwargs["enable_thinking"], json!(true));

        // The client's own keyword wins for the template and lifts an Off.
        let mut kwargs = Map::from_iter([("enable_thinking".to_owned(), json!(true))]);
        let t = apply(Some(Think::Off), None, true, &mut kwargs).unwrap();
        assert_eq!((kwargs["enable_thinking"].clone(), t.budget), (json!(true), None));
    }

    #[test]
    fn a_switch_keeps_the_models_budget() {
        assert_eq!(Think::switch(true, Some(Think::Budget(7))), Think::Budget(7));
        assert_eq!(Think::switch(true, Some(Think::Off)), Think::On);
        assert_eq!(Think::switch(false, Some(Think::On)), Think::Off);
        assert!(template_thinks(Some("{{ '</think>' }}")) && !template_thinks(Some("x")) && !template_thinks(None));
    }
}
