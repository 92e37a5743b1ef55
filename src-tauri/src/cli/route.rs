//! `headroom route`: where one message would run (the local model or the
//! cloud) and every reason why, without sending it anywhere.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use headroom_core::router::{Decision, Force, Target, DEFAULT_LOCAL_THRESHOLD_TOKENS, DEFAULT_REPLY_RESERVE_TOKENS};
use headroom_core::sensitive::ScanCache;
use headroom_engine::tokenizer::Tokenizer;
use headroom_engine::{inspect_model_as, ComputeDtype};

use super::fit::{budget_source, BudgetArgs};
use super::hub::{resolve_model, HubEnv};
use super::CliError;
use crate::turn::route::{decide as decide_route, Choice, Inputs, Local};

#[derive(Debug, Clone, Args)]
pub struct RouteArgs {
    /// The message to route.
    pub text: String,
    /// The request needs tools (function calling).
    #[arg(long)]
    pub needs_tools: bool,
    /// The request needs web search.
    #[arg(long)]
    pub needs_web: bool,
    /// Run this message here or in the cloud; sensitive content still stays
    /// local unless --allow-sensitive is given too.
    #[arg(long, value_enum)]
    pub force: Option<ForceArg>,
    /// Let this one message leave the Mac even though it holds sensitive content.
    #[arg(long)]
    pub allow_sensitive: bool,
    /// The local model (a folder, or a repo id in the HF cache): tokens are
    /// counted with its tokenizer and its fit checked at the needed context.
    /// Without it, tokens are estimated and the fit is not checked.
    #[arg(long)]
    pub model: Option<String>,
    /// The cloud provider's name, as the decision shows it.
    #[arg(long, default_value = "cloud")]
    pub cloud: String,
    /// Route as if no cloud provider were set up.
    #[arg(long, conflicts_with = "cloud")]
    pub no_cloud: bool,
    /// Input up to this many tokens stays local.
    #[arg(long, default_value_t = DEFAULT_LOCAL_THRESHOLD_TOKENS)]
    pub threshold: usize,
    #[command(flatten)]
    pub budget: BudgetArgs,
    /// Print one JSON object (the decision) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `--force local|cloud`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ForceArg {
    Local,
    Cloud,
}

impl From<ForceArg> for Force {
    fn from(f: ForceArg) -> Self {
        match f {
            ForceArg::Local => Force::Local,
            ForceArg::Cloud => Force::Cloud,
        }
    }
}

pub fn run(args: &RouteArgs) -> ExitCode {
    let stdout = std::io::stdout();
    match decide_and_print(args, &HubEnv::from_process(), &mut stdout.lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("headroom: {}", headroom_core::terminal::error_line(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn decide_and_print(args: &RouteArgs, env: &HubEnv, out: &mut dyn Write) -> Result<(), CliError> {
    let decision = decide(args, env)?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&decision)?)?;
    } else {
        write!(out, "{}", describe(&decision, args.model.is_some()))?;
    }
    Ok(())
}

/// The app's decision (`crate::turn::route`) for the model named, or, with
/// none, for a local model taken to fit, its tokens estimated.
fn decide(args: &RouteArgs, env: &HubEnv) -> Result<Decision, CliError> {
    let choice = Choice {
        needs_tools: args.needs_tools,
        needs_web: args.needs_web,
        force: args.force.map(Force::from),
        allow_sensitive: args.allow_sensitive,
    };
    let scans = ScanCache::default();
    let inputs = |local, budget| Inputs {
        local: Some(local),
        cloud: (!args.no_cloud).then(|| args.cloud.clone()),
        local_threshold_tokens: args.threshold,
        reply_reserve_tokens: DEFAULT_REPLY_RESERVE_TOKENS,
        budget,
        scans: &scans,
        // `headroom route` routes one message, outside any chat: no tool has run.
        tool_results: &[],
    };
    let Some(model) = &args.model else {
        // No model named: an estimate, and no fit check (the fit of an
        // unknown model is unknown; the app checks the one it loads).
        let local = Local {
            id: "the local model",
            tokenizer: None,
            footprint: None,
            context_limit: None,
            kv: Default::default(),
            measured: &[],
        };
        return Ok(decide_route(&inputs(local, None), &args.text, &[], choice)?);
    };
    let dir = resolve_model(Some(model), env)?;
    let tokenizer = Tokenizer::for_model(&dir)?;
    // Headers and the OS's memory figures once; the verdict at any context is then arithmetic.
    let footprint = inspect_model_as(&dir, ComputeDtype::default())?;
    let budget = crate::fit::budget_inputs(budget_source(&args.budget))?;
    let kernel = headroom_engine::QuantKernel::choose(Default::default());
    let measured = super::chat::existing_store()
        .map(|store| crate::fit::learned(&store, &dir, ComputeDtype::default(), kernel))
        .unwrap_or_default();
    let local = Local {
        id: model,
        tokenizer: Some(&tokenizer),
        footprint: Some(&footprint),
        context_limit: None,
        kv: Default::default(),
        measured: &measured,
    };
    Ok(decide_route(&inputs(local, Some(budget)), &args.text, &[], choice)?)
}

/// The target on one line, then one line per reason (code, then words).
fn describe(d: &Decision, with_model: bool) -> String {
    let mut s = match &d.target {
        Target::Local { model } => format!("local ({model})\n"),
        Target::Cloud { provider } => format!("cloud ({provider})\n"),
    };
    let width = d.reasons.iter().map(|r| r.code().len()).max().unwrap_or(0);
    for r in &d.reasons {
        s.push_str(&format!("  {:<width$}  {}\n", r.code(), r.explain()));
    }
    if !with_model {
        s.push_str(
            "note: tokens estimated (4 ASCII bytes or 1 other character per token, erring high) and fit not checked; \
             pass --model to count with the model's tokenizer and check its fit\n",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        args: RouteArgs,
    }

    fn args(argv: &[&str]) -> RouteArgs {
        let mut full = vec!["route"];
        full.extend_from_slice(argv);
        Wrap::try_parse_from(full).unwrap().args
    }

    fn text_of(a: &RouteArgs) -> String {
        let mut out = Vec::new();
        decide_and_print(a, &HubEnv::default(), &mut out).unwrap();
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn text_output_names_the_target_and_each_reason() {
        let out = text_of(&args(&["what is a monad?"]));
        assert!(out.starts_with("local (the local model)\n"), "{out}");
        assert!(out.contains("SHORT_INPUT") && out.contains("about 4 tokens"), "{out}");
        assert!(out.contains("note: tokens estimated"), "{out}");

        let out = text_of(&args(&["news", "--needs-web", "--cloud", "openai"]));
        assert!(out.starts_with("cloud (openai)\n") && out.contains("NEEDS_WEB"), "{out}");

        let out = text_of(&args(&["mail j.doe@example.com", "--force", "cloud"]));
        assert!(out.starts_with("local (") && out.contains("CLOUD_REFUSED_SENSITIVE"), "{out}");
        assert!(out.contains("j***@example.com") && !out.contains("j.doe@example.com"), "{out}");
    }

    #[test]
    fn errors_are_specific() {
        let err = decide(&args(&["hi", "--force", "cloud", "--no-cloud"]), &HubEnv::default()).err();
        assert!(
            matches!(
                err.as_ref(),
                Some(CliError::Turn(e))
                    if matches!(**e, crate::turn::TurnError::Route(headroom_core::router::RouteError::NoCloudProvider))
            ),
            "{err:?}"
        );
        let err = decide(&args(&["hi", "--model", "/nonexistent/model/dir"]), &HubEnv::default()).err();
        assert!(err.is_some_and(|e| e.to_string().contains("/nonexistent/model/dir")));
    }
}
