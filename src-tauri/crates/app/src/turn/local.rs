//! A turn on the loaded model: the fit guard (the model must not swap at
//! the context this turn needs, unless the user forces it), then the run on
//! the engine thread, whose events the turn's thread drives.

use headroom_core::chat::{Message, Role};
use headroom_core::chat_format::ToolChoice;
use headroom_core::chat_format::{Delta, StreamSplitter, ThinkTags};
use headroom_core::router::{Force, Reason};
use headroom_core::settings::Settings;
use headroom_core::speculative::SpeculativeMode;
use headroom_core::thinking::{self, Think};
use headroom_engine::worker::{EngineEvent, GenerateRequest, OverflowPolicy};
use headroom_engine::SamplingParams;
use headroom_store::Route;

use super::events::{RouteInfo, RouteTarget, RunEvent, Sink};
use super::record::TurnRecorder;
use super::{Plan, Running, TurnError};
use crate::live::LiveRun;
use crate::runs::{RunKind, Stopper};
use crate::state::AppState;

/// What the prompt cache may keep while this turn runs: the load's rule
/// (`fit::prompt_cache_limit`) applied to the fit at the context the turn
/// needs against the memory free when it was routed (the route's own
/// figures), so a cache filled while memory was plentiful shrinks before a
/// turn that needs the room (the check counts the cache's bytes as
/// freeable; this makes that true). `None` without those figures: the
/// load's allowance stands.
fn prompt_cache_room(model: &crate::state::LoadedModel, plan: &Plan) -> Option<usize> {
    let basis = plan.basis.as_ref()?;
    let context = plan.decision.needed_context.min(u64::try_from(model.info.context_limit).unwrap_or(u64::MAX));
    let report =
        headroom_core::fit::check_with(&model.footprint, context, model.info.kv_format, basis.budget, &basis.measured);
    usize::try_from(headroom_core::fit::prompt_cache_limit(&report, u64::MAX)).ok()
}

pub(crate) fn start(state: &AppState, settings: &Settings, plan: Plan, sink: Sink) -> Result<Running, TurnError> {
    // The router routes only to the loaded model; it may have been unloaded since.
    let model = state.loaded_model().ok_or(TurnError::NoModelLoaded)?;
    let forced = plan.options.force == Some(Force::Local) || plan.options.override_fit;
    let swap = plan.decision.reasons.iter().find_map(|r| match r {
        Reason::LocalWouldSwap { model: m, context, .. } if *m == model.id => Some(*context),
        _ => None,
    });
    if let (Some(context), false) = (swap, forced) {
        return Err(TurnError::WouldSwap { model: model.id.clone(), context });
    }
    let mut route = RouteInfo::of(&plan.decision, RouteTarget::Local, &model.id);
    route.reasons.extend(plan.notes.iter().cloned());
    let mut messages = plan.history.clone();
    messages.push(Message::new(Role::User, plan.text.clone()));
    let request = GenerateRequest {
        session: Some(plan.session.clone()),
        prompt_cache_room: prompt_cache_room(&model, &plan),
        max_tokens: plan.max_tokens,
        ignore_eos: plan.options.ignore_eos,
        // A long chat keeps going: the oldest turns make room.
        overflow: OverflowPolicy::TruncateOldest,
        sampling: SamplingParams {
            temperature: plan.options.temperature.unwrap_or(settings.temperature),
            top_p: plan.options.top_p.unwrap_or(settings.top_p),
            seed: plan.options.seed,
            ..SamplingParams::default()
        },
        // On the model this turn is labelled with, or not at all (the local
        // server may load another before the engine gets to it).
        load: Some(model.info.load),
        // With a draft model loaded beside it, speculation drafts.
        speculative: match (settings.speculative, &model.info.draft) {
            (SpeculativeMode::None, _) | (_, None) => settings.speculative,
            (_, Some(_)) => SpeculativeMode::Draft,
        },
        ..GenerateRequest::new(messages)
    };
    // The chat's Think switch over the model's setting, as the server and
    // the CLI decide it (headroom_core::thinking).
    let setting = settings.thinking.get(&model.id).copied();
    let mut request = request;
    let asked = plan.options.think.map(|on| Think::switch(on, setting));
    request.thinking = thinking::apply(asked, setting, model.info.thinks, &mut request.template_kwargs);
    // The enabled tools of the running MCP servers; a turn without any runs as it always did.
    let offered = state.tools.offered();
    let first_choice = match &plan.options.tool {
        Some(name) if !offered.iter().any(|o| &o.tool.name == name) => {
            return Err(
                crate::tools::ToolsError::NoTool { server: "any running server".into(), tool: name.clone() }.into()
            )
        }
        Some(name) => ToolChoice::Named(name.clone()),
        None => ToolChoice::Auto,
    };
    // A new message is committed before its run starts; a regenerated one
    // once its run has started (the engine may still refuse it).
    let recorder =
        TurnRecorder::new(&state.store, &plan.session, &plan.text, model.labels.clone(), Route::Local, plan.replaces)?;
    if !offered.is_empty() {
        return with_tools(
            state,
            settings,
            plan.session.clone(),
            request,
            offered,
            first_choice,
            recorder,
            sink,
            route,
        );
    }
    let run = match state.engine.generate(request) {
        Ok(run) => run,
        Err(e) => {
            let end = super::TurnEnd {
                text: String::new(),
                reason: None,
                stats: None,
                error: Some(e.to_string()),
                started: false,
                slowdown: None,
            };
            if let Err(store) = recorder.finish(&end) {
                tracing::warn!("could not record the refused turn: {store}");
            }
            return Err(e.into());
        }
    };
    let (engine, run_id) = (state.engine.clone(), run.id);
    let registered = state.runs.register(RunKind::Chat, Stopper::Engine { engine: engine.clone(), run: run_id });
    let stop = move || {
        engine.cancel(run_id);
    };
    // The live graph's per-second decode rates, and its verdict on whether
    // memory slowed this answer, which travels with the stats. A run that
    // ends without stats (an error, the engine gone) ends its live run when
    // the iterator is dropped.
    let mut live_run = Some(state.live.begin_run(&model.id));
    // The answer read as it streams: thinking apart from the answer, the
    // think tags in neither (the server's splitter, without tools).
    let mut split = ThinkSplit::default();
    let events = run.events.into_iter().flat_map(move |event| match event {
        EngineEvent::Started { prompt_tokens, reused_tokens, format } => {
            split = ThinkSplit::new(format.think);
            vec![RunEvent::Started { prompt_tokens, reused_tokens }]
        }
        EngineEvent::Token { text, thinking, .. } => {
            if let Some(live) = live_run.as_mut() {
                live.on_token_now();
            }
            split.token(&text, thinking)
        }
        EngineEvent::Text(text) => split.token(&text, false),
        EngineEvent::Stats(stats) => {
            let slowdown = live_run.take().and_then(LiveRun::finish).map(|note| note.sentence);
            let mut out = split.finish();
            out.push(RunEvent::Stats(stats, slowdown));
            out
        }
        other => {
            let mut out = split.finish();
            out.push(RunEvent::from(other));
            out
        }
    });
    // The end of an answer restarts the idle timer, not just its start.
    let away = state.away.clone();
    super::spawn(registered, route, events, sink, recorder, stop, move |_| away.note_use())
}

/// A local answer's text split into thinking and answer as it streams.
/// Each generated token is counted once: as thinking where the engine says
/// so (it reads the block when given the tags) or the splitter is inside
/// the block, else as answer.
#[derive(Default)]
struct ThinkSplit {
    splitter: Option<StreamSplitter>,
}

impl ThinkSplit {
    fn new(think: Option<ThinkTags>) -> Self {
        Self { splitter: think.map(|t| StreamSplitter::new(None, Vec::new(), Some(t))) }
    }

    fn token(&mut self, text: &str, thinking: bool) -> Vec<RunEvent> {
        let Some(splitter) = self.splitter.as_mut() else {
            return vec![RunEvent::Text(text.to_owned())];
        };
        let inside = thinking || splitter.thinking();
        let deltas = splitter.push(text);
        let mut out = events_of(deltas);
        if inside {
            match out.iter_mut().rev().find_map(|e| match e {
                RunEvent::Thinking { tokens, .. } => Some(tokens),
                _ => None,
            }) {
                Some(tokens) => *tokens += 1,
                None => out.push(RunEvent::Thinking { text: String::new(), tokens: 1 }),
            }
        }
        out
    }

    fn finish(&mut self) -> Vec<RunEvent> {
        self.splitter.take().map(|mut s| events_of(s.finish())).unwrap_or_default()
    }
}

fn events_of(deltas: Vec<Delta>) -> Vec<RunEvent> {
    deltas
        .into_iter()
        .filter_map(|d| match d {
            Delta::Content(t) => Some(RunEvent::Text(t)),
            Delta::Reasoning(t) => Some(RunEvent::Thinking { text: t, tokens: 0 }),
            Delta::ToolCall { .. } => None,
        })
        .collect()
}

/// A turn with tools on offer: the call loop (`super::calls`) runs the
/// engine runs and the calls; Stop cancels whichever is under way.
#[allow(clippy::too_many_arguments)]
fn with_tools(
    state: &AppState,
    settings: &Settings,
    session: String,
    request: GenerateRequest,
    offered: Vec<crate::tools::Offered>,
    first_choice: ToolChoice,
    recorder: TurnRecorder,
    sink: Sink,
    route: RouteInfo,
) -> Result<Running, TurnError> {
    let token = headroom_cloud::CancellationToken::new();
    let registered = state.runs.register(RunKind::Chat, Stopper::Token(token.clone()));
    let l = super::calls::Loop {
        engine: state.engine.clone(),
        tools: state.tools.clone(),
        offered,
        session,
        turn: registered.id(),
        max_calls: settings.tool_calls_per_turn,
        first_choice,
        stop: token.clone(),
    };
    let events = super::calls::start(l, request).map_err(TurnError::Thread)?;
    let away = state.away.clone();
    super::spawn(registered, route, events, sink, recorder, move || token.cancel(), move |_| away.note_use())
}
