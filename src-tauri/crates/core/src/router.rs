//! The explainable router: decides whether one chat request runs on the
//! local model or goes to the cloud, and says why in named reasons the user
//! sees. Pure: token counting and the local model's fit verdict are injected.
//!
//! The rules, in order:
//!
//! 1. Sensitive content (see [`sensitive`]) stays local. Only the user's
//!    override for that single message (`allow_sensitive`) lets it leave;
//!    forcing the cloud is not such an override. Sensitive content in the
//!    earlier conversation keeps the chat local too when a local model can
//!    take it; when the cloud answers anyway (forced, or no local model),
//!    those exchanges are left out of what is sent, and the decision says
//!    which (the privacy gate, [`crate::gate`], does the leaving out).
//! 2. The user may force local or cloud for one message.
//! 3. Needing web search or tools, or input above the local threshold
//!    (default 8,192 tokens, counted with the local model's tokenizer; up to
//!    and including the threshold stays local), goes to the cloud.
//! 4. Otherwise it stays local, unless the local model would swap at the
//!    needed context (input + reply reserve): then a smaller local model
//!    that fits is preferred (the data stays on the Mac and costs nothing),
//!    else the cloud.
//!
//! Content that must stay local and has no local model to go to is an error
//! ([`RouteError`]), never a quiet trip to the cloud.

use std::fmt;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use crate::chat::Message;
use crate::fit::Verdict;
use crate::sensitive::{self, Finding, ScanCache};

/// Input up to this many tokens stays local.
pub const DEFAULT_LOCAL_THRESHOLD_TOKENS: usize = 8192;

/// Tokens kept for the reply when asking whether the local model fits.
pub const DEFAULT_REPLY_RESERVE_TOKENS: usize = 1024;

/// Counts tokens the way the model that would run the request does.
pub trait TokenCounter {
    fn count(&self, text: &str) -> usize;
    /// False for an estimate made without the model's tokenizer.
    fn exact(&self) -> bool {
        true
    }
}

/// A plain function is an exact counter (e.g. a closure over a tokenizer).
impl<F: Fn(&str) -> usize> TokenCounter for F {
    fn count(&self, text: &str) -> usize {
        self(text)
    }
}

/// The estimate used when no tokenizer is at hand: one token per 4 ASCII
/// bytes (rounded up) plus one per non-ASCII character. BPE vocabularies of
/// current models average about 4 bytes of English per token and at least
/// one token per 1–1.5 CJK characters, so this errs high: an estimate near
/// the threshold sends the request to the cloud rather than overfilling the
/// local model.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproxTokens;

impl TokenCounter for ApproxTokens {
    fn count(&self, text: &str) -> usize {
        let ascii = text.bytes().filter(u8::is_ascii).count();
        let other = text.chars().filter(|c| !c.is_ascii()).count();
        ascii.div_ceil(4) + other
    }

    fn exact(&self) -> bool {
        false
    }
}

/// The user's choice for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum Force {
    Local,
    Cloud,
}

/// One local model the router may pick, with its fit verdict as a function
/// of the context (tokens) it would have to hold.
pub struct LocalModel<'a> {
    pub id: String,
    pub fit_at: &'a dyn Fn(u64) -> Verdict,
}

impl fmt::Debug for LocalModel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalModel").field("id", &self.id).finish_non_exhaustive()
    }
}

/// What the router knows about this machine and the user's settings.
pub struct RouteContext<'a> {
    /// The model the app uses now; `None` when none is loaded or chosen.
    pub local: Option<LocalModel<'a>>,
    /// Smaller local models to fall back on when `local` would swap, most
    /// preferred first.
    pub smaller_local: Vec<LocalModel<'a>>,
    /// The configured cloud provider's name; `None` when none is set up.
    pub cloud: Option<String>,
    pub local_threshold_tokens: usize,
    pub reply_reserve_tokens: usize,
    pub tokens: &'a dyn TokenCounter,
    /// Findings of texts scanned before (the conversation, unchanged since
    /// the last message); `None` scans everything afresh.
    pub scans: Option<&'a ScanCache>,
}

impl fmt::Debug for RouteContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteContext")
            .field("local", &self.local)
            .field("smaller_local", &self.smaller_local)
            .field("cloud", &self.cloud)
            .field("local_threshold_tokens", &self.local_threshold_tokens)
            .field("reply_reserve_tokens", &self.reply_reserve_tokens)
            .field("tokens_exact", &self.tokens.exact())
            .finish()
    }
}

impl<'a> RouteContext<'a> {
    /// Default threshold and reply reserve, no models, no cloud.
    pub fn new(tokens: &'a dyn TokenCounter) -> Self {
        Self {
            local: None,
            smaller_local: Vec::new(),
            cloud: None,
            local_threshold_tokens: DEFAULT_LOCAL_THRESHOLD_TOKENS,
            reply_reserve_tokens: DEFAULT_REPLY_RESERVE_TOKENS,
            tokens,
            scans: None,
        }
    }

    fn scan(&self, text: &str) -> Vec<Finding> {
        match self.scans {
            Some(cache) => cache.scan(text).to_vec(),
            None => sensitive::scan(text),
        }
    }
}

/// One request to route.
#[derive(Debug, Clone, Copy, Default)]
pub struct RouteRequest<'a> {
    /// The new user message.
    pub text: &'a str,
    /// The conversation before it, which travels with it wherever it goes.
    pub history: &'a [Message],
    pub needs_tools: bool,
    pub needs_web: bool,
    pub force: Option<Force>,
    /// The user's override for this single message: sensitive content may
    /// leave the Mac.
    pub allow_sensitive: bool,
    /// The results of the tools this chat called: each is scanned like the
    /// user's text, and a private tool's is sensitive whatever the scan finds.
    pub tool_results: &'a [ToolResult],
}

/// A tool's result in a chat's context, for the privacy rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    pub tool: String,
    pub text: String,
    /// The user marked the tool's results private.
    pub private: bool,
}

impl<'a> RouteRequest<'a> {
    pub fn new(text: &'a str) -> Self {
        Self { text, ..Self::default() }
    }
}

/// Where a request runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Target {
    Local { model: String },
    Cloud { provider: String },
}

/// Why the router decided as it did; each has a stable [`Reason::code`] and
/// a plain-words [`Reason::explain`]ation that never repeats a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Sensitive content, in the new message (`earlier_message: None`) or
    /// in the history message with that index.
    Sensitive {
        finding: Finding,
        earlier_message: Option<usize>,
    },
    /// A tool's result in this chat holds sensitive content (`finding`),
    /// or comes from a tool whose results are private (`finding: None`):
    /// the chat stays on this Mac.
    ToolResultSensitive {
        tool: String,
        finding: Option<Finding>,
    },
    /// The user let this one message leave despite its sensitive content.
    PrivacyOverridden,
    ForcedLocal,
    ForcedCloud,
    /// The user forced the cloud, but the message is sensitive.
    CloudRefusedSensitive,
    /// The cloud would suit the request (long, tools, web), but it is sensitive.
    StaysLocalSensitive,
    ShortInput {
        tokens: usize,
        threshold: usize,
        exact: bool,
    },
    LongInput {
        tokens: usize,
        threshold: usize,
        exact: bool,
    },
    NeedsTools,
    NeedsWeb,
    /// The model would swap (or cannot fit) at the context the request needs.
    LocalWouldSwap {
        model: String,
        context: u64,
        verdict: Verdict,
    },
    SmallerLocalModel {
        model: String,
    },
    /// The cloud would suit the request, but no provider is set up.
    NoCloudProvider,
    /// No local model is loaded, so the cloud answers.
    NoLocalModel,
    /// The cloud answers without these earlier messages (0-based indices):
    /// they hold sensitive content, or answer or ask what does.
    HistoryWithheld {
        messages: Vec<usize>,
    },
    /// The summary made for the cloud held sensitive content and was not sent.
    SummaryWithheld,
}

impl Reason {
    /// A stable identifier: the UI and scripts switch on it.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Sensitive { finding, .. } => finding.kind.code(),
            Self::ToolResultSensitive { .. } => "TOOL_RESULT_SENSITIVE",
            Self::PrivacyOverridden => "PRIVACY_OVERRIDDEN",
            Self::ForcedLocal => "FORCED_LOCAL",
            Self::ForcedCloud => "FORCED_CLOUD",
            Self::CloudRefusedSensitive => "CLOUD_REFUSED_SENSITIVE",
            Self::StaysLocalSensitive => "STAYS_LOCAL_SENSITIVE",
            Self::ShortInput { .. } => "SHORT_INPUT",
            Self::LongInput { .. } => "LONG_INPUT",
            Self::NeedsTools => "NEEDS_TOOLS",
            Self::NeedsWeb => "NEEDS_WEB",
            Self::LocalWouldSwap { .. } => "LOCAL_WOULD_SWAP",
            Self::SmallerLocalModel { .. } => "SMALLER_LOCAL_MODEL",
            Self::NoCloudProvider => "NO_CLOUD_PROVIDER",
            Self::NoLocalModel => "NO_LOCAL_MODEL",
            Self::HistoryWithheld { .. } => "HISTORY_WITHHELD",
            Self::SummaryWithheld => "SUMMARY_WITHHELD",
        }
    }

    pub fn is_sensitive(&self) -> bool {
        matches!(self, Self::Sensitive { .. } | Self::ToolResultSensitive { .. })
    }

    /// One sentence for the user.
    pub fn explain(&self) -> String {
        let count = |n: usize, exact: bool| {
            let about = if exact { "" } else { "about " };
            format!("{about}{n} token{}", if n == 1 { "" } else { "s" })
        };
        match self {
            Self::Sensitive { finding, earlier_message } => {
                let place = match earlier_message {
                    None => "This message contains".to_owned(),
                    Some(i) => format!("Earlier message {} contains", i + 1),
                };
                format!("{place} {} ({}): it stays on this Mac.", finding.kind.noun(), finding.masked)
            }
            Self::ToolResultSensitive { tool, finding: Some(finding) } => {
                format!("Kept local: a tool result holds {} ({}, from {tool}).", finding.kind.noun(), finding.masked)
            }
            Self::ToolResultSensitive { tool, finding: None } => {
                format!("Kept local: a tool result is private ({tool}'s results are set to private).")
            }
            Self::PrivacyOverridden => {
                "You allowed this one message to leave this Mac despite its sensitive content.".to_owned()
            }
            Self::ForcedLocal => "You asked for the local model for this message.".to_owned(),
            Self::ForcedCloud => "You asked for the cloud for this message.".to_owned(),
            Self::CloudRefusedSensitive => "You asked for the cloud, but sensitive content never leaves this Mac \
                 unless you allow it for this message."
                .to_owned(),
            Self::StaysLocalSensitive => {
                "The cloud would suit this request better, but its sensitive content keeps it local.".to_owned()
            }
            Self::ShortInput { tokens, threshold, exact } => {
                format!("The input is {}, within the local limit of {threshold}.", count(*tokens, *exact))
            }
            Self::LongInput { tokens, threshold, exact } => {
                format!("The input is {}, over the local limit of {threshold}.", count(*tokens, *exact))
            }
            Self::NeedsTools => "The request needs tools, which the cloud model provides.".to_owned(),
            Self::NeedsWeb => "The request needs web search, which the cloud model provides.".to_owned(),
            Self::LocalWouldSwap { model, context, verdict } => {
                let what = match verdict {
                    Verdict::CannotFit { .. } => "cannot fit in memory",
                    _ => "would push this Mac into swap",
                };
                format!("{model} {what} at the {context} tokens this request needs.")
            }
            Self::SmallerLocalModel { model } => format!("{model} is smaller and fits, so it runs the request."),
            Self::NoCloudProvider => {
                "The cloud would suit this request better, but no cloud provider is set up.".to_owned()
            }
            Self::NoLocalModel => "No local model is loaded, so the cloud answers.".to_owned(),
            Self::HistoryWithheld { messages } => {
                let n: Vec<String> = messages.iter().map(|i| (i + 1).to_string()).collect();
                let which = match n.as_slice() {
                    [one] => format!("Earlier message {one} stays"),
                    [rest @ .., last] => format!("Earlier messages {} and {last} stay", rest.join(", ")),
                    [] => "No earlier message stays".to_owned(),
                };
                format!(
                    "{which} on this Mac: the cloud gets the conversation without them, because they hold \
                     sensitive content (or are the other half of that exchange)."
                )
            }
            Self::SummaryWithheld => "The summary of the earlier conversation held sensitive content, so the \
                 cloud gets the conversation without it."
                .to_owned(),
        }
    }
}

/// `{ code, message }`, plus the finding (masked) for sensitive reasons.
impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Reason", 4)?;
        st.serialize_field("code", self.code())?;
        st.serialize_field("message", &self.explain())?;
        match self {
            Self::Sensitive { finding, earlier_message } => {
                st.serialize_field("finding", finding)?;
                st.serialize_field("earlierMessage", earlier_message)?;
            }
            Self::ToolResultSensitive { finding: Some(finding), .. } => {
                st.serialize_field("finding", finding)?;
                st.skip_field("earlierMessage")?;
            }
            _ => {
                st.skip_field("finding")?;
                st.skip_field("earlierMessage")?;
            }
        }
        st.end()
    }
}

/// [`Reason`]'s JSON (its `Serialize` is written by hand) as TypeScript
/// sees it: never built, only read by ts-rs for `Decision::reasons`.
#[derive(Debug, ts_rs::TS)]
#[ts(rename = "Reason", rename_all = "camelCase")]
#[allow(dead_code)]
pub struct ReasonJson {
    /// Stable: `SENSITIVE_EMAIL`, `LONG_INPUT`, … ([`Reason::code`]).
    code: String,
    message: String,
    /// Only on `SENSITIVE_*` reasons.
    #[ts(optional)]
    finding: Option<Finding>,
    /// Only on `SENSITIVE_*` reasons: null for the new message, else the history index.
    #[ts(optional = nullable)]
    earlier_message: Option<usize>,
}

/// The router's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub target: Target,
    #[ts(as = "Vec<ReasonJson>")]
    pub reasons: Vec<Reason>,
    /// Tokens of the message and its history.
    pub input_tokens: usize,
    /// False when `input_tokens` is an estimate (no tokenizer).
    pub tokens_exact: bool,
    pub threshold_tokens: usize,
    /// Input plus the reply reserve: the context the model must hold.
    pub needed_context: u64,
}

impl Decision {
    pub fn is_cloud(&self) -> bool {
        matches!(self.target, Target::Cloud { .. })
    }

    /// Whether any sensitive content was found (overridden or not).
    pub fn is_sensitive(&self) -> bool {
        self.reasons.iter().any(Reason::is_sensitive)
    }

    pub fn privacy_overridden(&self) -> bool {
        self.reasons.contains(&Reason::PrivacyOverridden)
    }

    pub fn codes(&self) -> Vec<&'static str> {
        self.reasons.iter().map(Reason::code).collect()
    }
}

/// Why no decision could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The request must run locally, and there is no local model.
    #[error("this message must stay on this Mac ({why}), but no local model is loaded: load one, or {hint}")]
    NoLocalModel { why: &'static str, hint: &'static str },
    /// The user forced the cloud, and no provider is set up.
    #[error("you asked for the cloud, but no cloud provider is set up")]
    NoCloudProvider,
}

/// Decides where `request` runs.
pub fn route(request: &RouteRequest<'_>, ctx: &RouteContext<'_>) -> Result<Decision, RouteError> {
    let now: Vec<Finding> = ctx.scan(request.text);
    let earlier: Vec<Vec<Finding>> = request.history.iter().map(|m| ctx.scan(&m.content)).collect();
    let mut reasons: Vec<Reason> =
        now.iter().map(|finding| Reason::Sensitive { finding: finding.clone(), earlier_message: None }).collect();
    for (i, found) in earlier.iter().enumerate() {
        reasons.extend(
            found.iter().map(|finding| Reason::Sensitive { finding: finding.clone(), earlier_message: Some(i) }),
        );
    }
    // A tool's result holds what the user's own text could: it is scanned
    // the same way, and it keeps the chat here as the new message would.
    let mut tool_sensitive = false;
    for result in request.tool_results {
        let found = ctx.scan(&result.text);
        if result.private && found.is_empty() {
            reasons.push(Reason::ToolResultSensitive { tool: result.tool.clone(), finding: None });
        }
        tool_sensitive |= result.private || !found.is_empty();
        reasons.extend(
            found.into_iter().map(|f| Reason::ToolResultSensitive { tool: result.tool.clone(), finding: Some(f) }),
        );
    }
    let sensitive = !reasons.is_empty();
    if sensitive && request.allow_sensitive {
        reasons.push(Reason::PrivacyOverridden);
    }
    // The new message's own content never leaves without the override; the
    // history's leaves only if the override covers it, else it is left out.
    let private_now = (!now.is_empty() || tool_sensitive) && !request.allow_sensitive;
    let private = sensitive && !request.allow_sensitive;
    let withheld = if private {
        let found: Vec<&[Finding]> = earlier.iter().map(Vec::as_slice).collect();
        crate::gate::history_to_withhold(request.history, &found)
    } else {
        Vec::new()
    };
    let withhold = |reasons: &mut Vec<Reason>| {
        if !withheld.is_empty() {
            reasons.push(Reason::HistoryWithheld { messages: withheld.clone() });
        }
    };

    let tokens =
        ctx.tokens.count(request.text) + request.history.iter().map(|m| ctx.tokens.count(&m.content)).sum::<usize>();
    let exact = ctx.tokens.exact();
    let threshold = ctx.local_threshold_tokens;
    let needed = (tokens + ctx.reply_reserve_tokens) as u64;
    let decide = |target: Target, reasons: Vec<Reason>| Decision {
        target,
        reasons,
        input_tokens: tokens,
        tokens_exact: exact,
        threshold_tokens: threshold,
        needed_context: needed,
    };
    let cloud = |reasons: &mut Vec<Reason>, ctx: &RouteContext<'_>| {
        ctx.cloud.clone().map(|provider| Target::Cloud { provider }).ok_or_else(|| {
            reasons.push(Reason::NoCloudProvider);
        })
    };

    match request.force {
        Some(Force::Local) => {
            reasons.push(Reason::ForcedLocal);
            let Some(local) = &ctx.local else {
                return Err(RouteError::NoLocalModel { why: "you asked for local", hint: "let the router choose" });
            };
            // Forced means this model: warn about a swap, do not switch.
            let verdict = (local.fit_at)(needed);
            if verdict.refuses() {
                reasons.push(Reason::LocalWouldSwap { model: local.id.clone(), context: needed, verdict });
            }
            return Ok(decide(Target::Local { model: local.id.clone() }, reasons));
        }
        Some(Force::Cloud) if !private_now => {
            reasons.push(Reason::ForcedCloud);
            let provider = ctx.cloud.clone().ok_or(RouteError::NoCloudProvider)?;
            withhold(&mut reasons);
            return Ok(decide(Target::Cloud { provider }, reasons));
        }
        Some(Force::Cloud) => reasons.push(Reason::CloudRefusedSensitive),
        None => {}
    }

    let mut wants_cloud = false;
    if request.needs_web {
        reasons.push(Reason::NeedsWeb);
        wants_cloud = true;
    }
    if request.needs_tools {
        reasons.push(Reason::NeedsTools);
        wants_cloud = true;
    }
    if tokens > threshold {
        reasons.push(Reason::LongInput { tokens, threshold, exact });
        wants_cloud = true;
    } else {
        reasons.push(Reason::ShortInput { tokens, threshold, exact });
    }

    if private {
        if wants_cloud {
            reasons.push(Reason::StaysLocalSensitive);
        }
        if let Some(target) = local_choice(ctx, needed, &mut reasons, true) {
            return Ok(decide(target, reasons));
        }
        // Only the history is sensitive and nothing local can take the chat:
        // the cloud answers without those exchanges rather than not at all.
        if let (false, Some(provider)) = (private_now, ctx.cloud.clone()) {
            reasons.push(Reason::NoLocalModel);
            withhold(&mut reasons);
            return Ok(decide(Target::Cloud { provider }, reasons));
        }
        let why = if !now.is_empty() {
            "it contains sensitive content"
        } else if tool_sensitive {
            "a tool result in this chat holds sensitive content"
        } else {
            "an earlier message holds sensitive content"
        };
        let hint = "allow sensitive content for this message";
        return Err(RouteError::NoLocalModel { why, hint });
    }
    if wants_cloud {
        if let Ok(target) = cloud(&mut reasons, ctx) {
            return Ok(decide(target, reasons));
        }
        let target = local_choice(ctx, needed, &mut reasons, true)
            .ok_or(RouteError::NoLocalModel { why: "no cloud provider is set up", hint: "set up a cloud provider" })?;
        return Ok(decide(target, reasons));
    }
    if let Some(target) = local_choice(ctx, needed, &mut reasons, false) {
        return Ok(decide(target, reasons));
    }
    match cloud(&mut reasons, ctx) {
        Ok(target) => {
            if ctx.local.is_none() && ctx.smaller_local.is_empty() {
                reasons.push(Reason::NoLocalModel);
            }
            Ok(decide(target, reasons))
        }
        // Nothing fits and there is no cloud: the local model (if any)
        // anyway, where the fit guard refuses with the numbers.
        Err(()) => local_choice(ctx, needed, &mut reasons, true)
            .map(|target| decide(target, reasons))
            .ok_or(RouteError::NoLocalModel { why: "no cloud provider is set up", hint: "set up a cloud provider" }),
    }
}

/// The local model to use: the current one if it fits at `needed`, else the
/// first smaller one that does; with `must`, the current one even if it
/// would swap (the reason says so). Adds the reasons for what it chose.
fn local_choice(ctx: &RouteContext<'_>, needed: u64, reasons: &mut Vec<Reason>, must: bool) -> Option<Target> {
    let Some(local) = &ctx.local else {
        return ctx
            .smaller_local
            .iter()
            .find(|m| !(m.fit_at)(needed).refuses() || must)
            .map(|m| Target::Local { model: m.id.clone() });
    };
    let verdict = (local.fit_at)(needed);
    if !verdict.refuses() {
        return Some(Target::Local { model: local.id.clone() });
    }
    let swap = Reason::LocalWouldSwap { model: local.id.clone(), context: needed, verdict };
    if !reasons.contains(&swap) {
        reasons.push(swap);
    }
    if let Some(smaller) = ctx.smaller_local.iter().find(|m| !(m.fit_at)(needed).refuses()) {
        reasons.push(Reason::SmallerLocalModel { model: smaller.id.clone() });
        return Some(Target::Local { model: smaller.id.clone() });
    }
    must.then(|| Target::Local { model: local.id.clone() })
}

#[cfg(test)]
mod tests;
