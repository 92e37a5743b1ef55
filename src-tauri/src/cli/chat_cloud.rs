//! `headroom chat --route cloud`: the turn goes to an OpenAI-compatible
//! endpoint and is stored like a local one, with `route = cloud`. The user's
//! message is committed before the request, so a dead endpoint, a refused
//! key or a cut stream loses nothing: the error (and any partial answer) is
//! saved with the turn.

use std::io::Write;
use std::path::Path;

use headroom_cloud::summarize::{self, SummaryPolicy};
use headroom_cloud::{ApiKey, CancellationToken, ChatParams, CloudClient, CloudConfig};
use headroom_core::chat::Message;
use headroom_core::fit::Verdict;
use headroom_core::router::{route, ApproxTokens, LocalModel, Reason, RouteContext, RouteRequest, TokenCounter};
use headroom_core::settings::Settings;
use headroom_engine::worker::{EngineEvent, EngineHandle, GenerateRequest, LoadSettings};
use headroom_engine::ComputeDtype;
use headroom_store::{Route, Store};

use super::chat::ChatArgs;
use super::fit::check_model;
use super::CliError;
use crate::chat::{block_on, ChatEvent, TurnRecorder};
use crate::cloud_turn;

/// Where `headroom chat` sends the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RouteArg {
    /// The local model (MODEL).
    #[default]
    Local,
    /// The cloud endpoint (--cloud-url / --cloud-model, else the settings).
    Cloud,
    /// The router decides (`headroom_core::router`): sensitive text stays
    /// local; long prompts, or a model that would swap, go to the cloud.
    Auto,
}

/// Overrides the stored key (CI, scripts); otherwise the key stored with
/// `headroom cloud-key set --url URL` is used.
pub const API_KEY_ENV: &str = "HEADROOM_CLOUD_API_KEY";

/// The endpoint from the flags, else the stored settings; the key from
/// `$HEADROOM_CLOUD_API_KEY`, else the key store.
pub(super) fn cloud_config(args: &ChatArgs, settings: &Settings) -> Result<CloudConfig, CliError> {
    let url =
        args.cloud_url.clone().or_else(|| settings.cloud_base_url.clone()).ok_or_else(|| CliError::BadArgument {
            name: "--cloud-url",
            reason:
                "no cloud endpoint is set: pass --cloud-url (e.g. https://api.openai.com/v1) or set one in Settings"
                    .into(),
        })?;
    let model =
        args.cloud_model.clone().or_else(|| settings.cloud_model.clone()).ok_or_else(|| CliError::BadArgument {
            name: "--cloud-model",
            reason: "no cloud model is set: pass --cloud-model or set one in Settings".into(),
        })?;
    let api_key = match std::env::var(API_KEY_ENV).ok().filter(|k| !k.trim().is_empty()) {
        Some(key) => Some(ApiKey::new(key.trim())),
        None => super::cloud_key::key_store()?.get(&url)?.map(|(key, _)| key),
    };
    Ok(CloudConfig { api_key, ..CloudConfig::new(url, model) })
}

/// `--route auto`: asks the router whether this message goes to the cloud,
/// and says on stderr where it goes and why. Tokens are estimated (no
/// tokenizer is loaded before the decision); the local model's fit comes
/// from its headers at the context the request needs.
pub(super) fn auto_picks_cloud(
    args: &ChatArgs,
    store: &Store,
    settings: &Settings,
    dir: &Path,
    err: &mut dyn Write,
) -> Result<bool, CliError> {
    let history = block_on(store.history(&args.session))?;
    let cloud = args.cloud_url.clone().or_else(|| settings.cloud_base_url.clone());
    // A model whose fit cannot be read counts as not fitting; the local path
    // would report that error itself.
    let fit_at = |context: u64| {
        let context = usize::try_from(context).unwrap_or(usize::MAX);
        check_model(dir, context, ComputeDtype::Native, &args.budget)
            .map_or(Verdict::CannotFit { by_bytes: 0 }, |r| r.verdict)
    };
    let counter = ApproxTokens;
    let ctx = RouteContext {
        local: Some(LocalModel { id: args.model.clone(), fit_at: &fit_at }),
        cloud,
        local_threshold_tokens: settings.local_threshold_tokens,
        ..RouteContext::new(&counter)
    };
    let request = RouteRequest { history: &history, ..RouteRequest::new(&args.message) };
    let decision =
        route(&request, &ctx).map_err(|e| CliError::BadArgument { name: "--route auto", reason: e.to_string() })?;
    let why: Vec<String> = decision.reasons.iter().map(Reason::explain).collect();
    let target = if decision.is_cloud() { "the cloud" } else { "the local model" };
    writeln!(err, "headroom: --route auto: {target} ({})", why.join("; "))?;
    Ok(decision.is_cloud())
}

/// One cloud turn in `args.session`; the output matches the local route's.
pub(super) fn chat(
    args: &ChatArgs,
    store: &Store,
    settings: &Settings,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CliError> {
    let config = cloud_config(args, settings)?;
    let client = CloudClient::new(config)?;
    if args.ignore_eos {
        writeln!(err, "headroom: --ignore-eos has no effect on the cloud route (the API has no such option)")?;
    }
    let max_tokens = args.max_tokens.unwrap_or(settings.max_tokens);
    let params = ChatParams {
        max_tokens: Some(u32::try_from(max_tokens).map_err(|_| CliError::BadArgument {
            name: "--max-tokens",
            reason: format!("{max_tokens} is too large"),
        })?),
        temperature: Some(args.temp.unwrap_or(settings.temperature)),
        top_p: Some(args.top_p.unwrap_or(settings.top_p)),
        seed: args.seed,
    };
    let model = client.config().model.clone();

    // Committed before the request: from here on nothing is lost.
    let mut recorder =
        TurnRecorder::begin_routed(store, &args.session, &args.message, cloud_turn::labels(&model), Route::Cloud)?;
    let history = if settings.summarise_for_cloud {
        shrink_history(args, settings, recorder.start.history.clone(), err)?
    } else {
        recorder.start.history.clone()
    };
    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    let ctrl_c = tauri::async_runtime::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.cancel();
        }
    });
    let mut write_error = None;
    let end = cloud_turn::run_blocking(
        client,
        0,
        history,
        params,
        cancel,
        |event| {
            if let (false, None, ChatEvent::Token { text }) = (args.json, &write_error, event) {
                // Flushed per token: the point is to watch it arrive.
                if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                    write_error = Some(e);
                }
            }
            true
        },
        |so_far| recorder.on_text(so_far),
    );
    ctrl_c.abort();
    let (user_id, assistant_id) = (recorder.start.user_message_id, recorder.start.assistant_message_id);
    recorder.finish(&end)?;
    if let Some(e) = write_error {
        return Err(e.into());
    }
    if !args.json && !end.text.is_empty() && end.stats.as_ref().is_some_and(|s| s.generated_tokens == 0) {
        writeln!(err, "headroom: {}: no tok/s shown", headroom_cloud::NO_USAGE_NOTE)?;
    }
    super::chat::report_turn(args, store, &end, user_id, assistant_id, out, err)
}

/// The "summarise for cloud" setting: the local MODEL condenses the older
/// turns before they go out, and stderr says how many tokens that saved
/// (estimated: no tokenizer is loaded for the count). The stored history is
/// untouched; any failure sends the whole history, with a warning.
fn shrink_history(
    args: &ChatArgs,
    settings: &Settings,
    history: Vec<Message>,
    err: &mut dyn Write,
) -> Result<Vec<Message>, CliError> {
    let count = |text: &str| ApproxTokens.count(text);
    let policy = SummaryPolicy::default();
    let Some(plan) = summarize::plan(&history, &policy, count) else {
        return Ok(history);
    };
    let local = |prompt: &[Message]| local_generate(args, settings, prompt, policy.max_summary_tokens);
    match summarize::apply(&history, &plan, local, count) {
        Ok(s) if s.tokens_saved > 0 => {
            writeln!(
                err,
                "headroom: summarised {} older messages with the local model: about {} tokens saved",
                s.messages_summarised, s.tokens_saved
            )?;
            Ok(s.messages)
        }
        Ok(_) => Ok(history),
        Err(e) => {
            writeln!(err, "headroom: could not summarise locally ({e}); sending the whole history")?;
            Ok(history)
        }
    }
}

/// One local generation of `prompt` with MODEL, behind the same fit guard
/// as a local turn.
fn local_generate(
    args: &ChatArgs,
    settings: &Settings,
    prompt: &[Message],
    max_tokens: usize,
) -> Result<String, CliError> {
    let dir = super::hub::resolve_model(&args.model, &super::hub::HubEnv::from_process())?;
    let context = args.context.unwrap_or(settings.context_limit);
    let report = check_model(&dir, context, ComputeDtype::Native, &args.budget)?;
    if report.verdict.refuses() {
        return Err(CliError::WouldNotFit { model: args.model.clone(), report: Box::new(report) });
    }
    let engine = EngineHandle::spawn()?;
    engine.load(&dir, LoadSettings { context_limit: context, ..LoadSettings::default() })?;
    let run = engine.generate(GenerateRequest { max_tokens, ..GenerateRequest::new(prompt.to_vec()) })?;
    let mut text = String::new();
    for event in &run.events {
        match event {
            EngineEvent::Token { text: piece, .. } | EngineEvent::Text(piece) => text.push_str(&piece),
            EngineEvent::Finished { .. } => break,
            EngineEvent::Error(e) => return Err(e.into()),
            EngineEvent::Started { .. } | EngineEvent::Stats(_) => {}
        }
    }
    engine.shutdown();
    Ok(text)
}
