//! The one routing decision: where a message runs (the loaded model or the
//! cloud) and why. A turn, the app's route preview and `headroom route` all
//! come here, so what the chip shows is what the turn does.
//!
//! Tokens are counted with the local model's tokenizer (the one the engine
//! encodes with); only when there is no local model at all are they
//! estimated, and the decision says so (`tokensExact: false`). The fit at
//! the needed context comes from the sizes the fit check read before the
//! model was loaded, against the memory free now; for a loaded model it is
//! taken at most at its context limit, which the engine enforces.

use std::cell::RefCell;

use headroom_core::calibration::Measured;
use headroom_core::chat::Message;
use headroom_core::fit::{check_with, BudgetInputs, ModelFootprint, Verdict};
use headroom_core::kv::KvFormat;
use headroom_core::router::{
    route, ApproxTokens, Decision, Force, LocalModel, RouteContext, RouteRequest, TokenCounter, ToolResult,
};
use headroom_core::sensitive::ScanCache;
use headroom_core::settings::Settings;
use headroom_engine::tokenizer::Tokenizer;
use headroom_engine::EngineError;

use super::TurnError;
use crate::state::AppState;

/// What the user asked for this one message, beyond its text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Choice {
    pub needs_tools: bool,
    pub needs_web: bool,
    /// Run here or in the cloud instead of where the router would send it.
    /// Forcing the cloud does not let sensitive content out.
    pub force: Option<Force>,
    /// The user lets this one message's sensitive content go to the cloud.
    pub allow_sensitive: bool,
}

/// The local model a decision may pick.
#[derive(Debug, Clone, Copy)]
pub struct Local<'a> {
    pub id: &'a str,
    /// Counts its tokens; `None`: estimated.
    pub tokenizer: Option<&'a Tokenizer>,
    /// Its sizes, for the fit at the needed context; `None`: taken to fit.
    pub footprint: Option<&'a ModelFootprint>,
    /// The context the engine holds it to, if it is loaded.
    pub context_limit: Option<usize>,
    /// How its KV cache stores keys and values (the load's format).
    pub kv: KvFormat,
    /// What this machine measured for it (`crate::fit::learned`).
    pub measured: &'a [Measured],
}

/// Everything a decision depends on besides the message.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    pub local: Option<Local<'a>>,
    /// The cloud's name as the decision shows it; `None`: none is set up.
    pub cloud: Option<String>,
    pub local_threshold_tokens: usize,
    pub reply_reserve_tokens: usize,
    /// The memory budget now (only needed with a local footprint).
    pub budget: Option<BudgetInputs>,
    pub scans: &'a ScanCache,
    /// The results of the tools the chat called (the privacy rule reads them).
    pub tool_results: &'a [ToolResult],
}

/// Counts with the model's tokenizer (raw text, no special tokens: the chat
/// template's few tokens are covered by the reply reserve). An encoding
/// error is kept and reported after routing, never counted as 0.
struct TokenizerCounter<'a> {
    tokenizer: &'a Tokenizer,
    error: RefCell<Option<EngineError>>,
}

impl TokenCounter for TokenizerCounter<'_> {
    fn count(&self, text: &str) -> usize {
        match self.tokenizer.encode(text, false) {
            Ok(ids) => ids.len(),
            Err(e) => {
                self.error.borrow_mut().get_or_insert(e);
                usize::MAX / 2
            }
        }
    }
}

/// The decision for `text` after `history`, given `inputs`.
pub fn decide(inputs: &Inputs<'_>, text: &str, history: &[Message], choice: Choice) -> Result<Decision, TurnError> {
    let request = RouteRequest {
        tool_results: inputs.tool_results,
        text,
        history,
        needs_tools: choice.needs_tools,
        needs_web: choice.needs_web,
        force: choice.force,
        allow_sensitive: choice.allow_sensitive,
    };
    let counter = inputs
        .local
        .and_then(|l| l.tokenizer)
        .map(|tokenizer| TokenizerCounter { tokenizer, error: RefCell::default() });
    let tokens: &dyn TokenCounter = match &counter {
        Some(c) => c,
        None => &ApproxTokens,
    };
    let fit_at = |context: u64| -> Verdict {
        let local = inputs.local.as_ref();
        match (local.and_then(|l| l.footprint), inputs.budget) {
            (Some(footprint), Some(budget)) => {
                let limit = local.and_then(|l| l.context_limit).map_or(u64::MAX, |c| c as u64);
                let (kv, measured) = local.map_or((KvFormat::Float, &[][..]), |l| (l.kv, l.measured));
                check_with(footprint, context.min(limit), kv, budget, measured).verdict
            }
            _ => Verdict::Fits,
        }
    };
    let ctx = RouteContext {
        local: inputs.local.map(|l| LocalModel { id: l.id.to_owned(), fit_at: &fit_at }),
        cloud: inputs.cloud.clone(),
        local_threshold_tokens: inputs.local_threshold_tokens,
        reply_reserve_tokens: inputs.reply_reserve_tokens,
        scans: Some(inputs.scans),
        ..RouteContext::new(tokens)
    };
    let decision = route(&request, &ctx);
    if let Some(e) = counter.and_then(|c| c.error.into_inner()) {
        return Err(e.into());
    }
    Ok(decision?)
}

/// The cloud's name as decisions show it: the model, else the endpoint.
pub fn cloud_name(settings: &Settings) -> Option<String> {
    settings.cloud_base_url.as_ref().map(|url| settings.cloud_model.clone().unwrap_or_else(|| url.clone()))
}

/// What the decision's fit checks of the loaded model read: the memory
/// budget then and what this machine measured for the model. A local turn
/// sizes its prompt cache on these same figures.
#[derive(Debug, Clone)]
pub struct FitBasis {
    pub budget: BudgetInputs,
    pub measured: Vec<Measured>,
}

/// A decision and, with a model loaded, the figures its fit was taken on.
#[derive(Debug, Clone)]
pub struct Routed {
    pub decision: Decision,
    pub basis: Option<FitBasis>,
}

/// The decision with what `state` holds: the loaded model (its tokenizer,
/// its fit now), the cloud its settings name, and the results of the tools
/// `session` called (none without a session).
pub fn for_state(
    state: &AppState,
    session: Option<&str>,
    text: &str,
    history: &[Message],
    choice: Choice,
) -> Result<Routed, TurnError> {
    let tool_results = session.map(|s| state.tools.results_in(s)).unwrap_or_default();
    let settings = &state.settings();
    let loaded = state.loaded_model();
    let tokenizer = loaded.as_ref().map(crate::state::LoadedModel::tokenizer).transpose()?;
    let basis = match &loaded {
        Some(m) => Some(FitBasis {
            budget: crate::models::budget_source(state)
                .and_then(crate::fit::budget_inputs)
                .map_err(TurnError::Memory)?,
            measured: crate::fit::learned_for_loaded(&state.store, &m.info),
        }),
        None => None,
    };
    let inputs = Inputs {
        local: loaded.as_ref().map(|m| Local {
            id: &m.id,
            tokenizer: tokenizer.as_deref(),
            footprint: Some(&m.footprint),
            context_limit: Some(m.info.context_limit),
            kv: m.info.kv_format,
            measured: basis.as_ref().map_or(&[][..], |b| &b.measured),
        }),
        cloud: cloud_name(settings),
        local_threshold_tokens: settings.local_threshold_tokens,
        reply_reserve_tokens: settings.max_tokens,
        budget: basis.as_ref().map(|b| b.budget),
        scans: &state.scans,
        tool_results: &tool_results,
    };
    let decision = decide(&inputs, text, history, choice)?;
    Ok(Routed { decision, basis })
}

#[cfg(test)]
mod tests {
    use crate::codes::{Coded, ErrorCode};
    use headroom_core::chat::Role;
    use headroom_core::router::Target;

    use super::*;

    #[test]
    fn without_a_model_tokens_are_estimated_and_sensitive_text_has_nowhere_to_go() {
        let state = crate::test_state("route-decide");
        let settings = Settings {
            cloud_base_url: Some("https://api.example.com/v1".into()),
            cloud_model: Some("gpt-x".into()),
            ..Settings::default()
        };
        state.apply_settings(&settings);
        let web = Choice { needs_web: true, ..Choice::default() };
        let d = for_state(&state, None, "latest news?", &[], web).unwrap().decision;
        assert!(d.is_cloud());
        assert_eq!(d.target, Target::Cloud { provider: "gpt-x".into() });
        assert!(!d.tokens_exact);

        let code = |r: Result<Routed, TurnError>| r.err().map(|e| e.code());
        let id = "my id is 11010519491231002X";
        assert_eq!(code(for_state(&state, None, id, &[], web)), Some(ErrorCode::RouteNoLocalModel));
        // An earlier sensitive exchange is left out of what the cloud gets.
        let history = [Message::new(Role::User, id), Message::new(Role::Assistant, "noted")];
        let d = for_state(&state, None, "latest news?", &history, web).unwrap().decision;
        assert!(d.is_cloud() && d.codes().contains(&"HISTORY_WITHHELD"), "{:?}", d.codes());

        let force = Choice { force: Some(Force::Cloud), ..Choice::default() };
        state.apply_settings(&Settings::default());
        assert_eq!(code(for_state(&state, None, "hi", &[], force)), Some(ErrorCode::RouteNoCloud));
    }
}
