//! `headroom chat`: one stored turn in a named session, through the same
//! turn service as the app (`crate::turn`): this builds the app's state
//! (store, engine with MODEL loaded behind the fit guard, locations,
//! settings, the run registry), hands the turn to `turn::start`, streams
//! the answer to stdout and says on stderr where it ran and why. Ctrl-C
//! stops it; what arrived is stored as `interrupted`.

use std::io::{IsTerminal, Write};

use clap::{Args, ValueEnum};
use headroom_core::chat::FinishReason;
use headroom_core::router::Force;
use headroom_core::settings::Settings;
use headroom_engine::worker::EngineHandle;
use headroom_engine::ComputeDtype;
use headroom_store::Store;
use serde_json::json;

use super::fit::{guard, BudgetArgs, GuardRequest};
use super::hub::{model_label, resolve_model};
use super::kernel::KernelArgs;
use super::kv::KvArgs;
use super::speculative::SpeculativeArgs;
use super::CliError;
use crate::models::Beside;
use crate::runtime::block_on;
use crate::state::{AppState, Locations};
use crate::turn::{self, Ask, ChatEvent, Done, RouteInfo, RouteTarget, TurnOptions, TurnRequest};

#[derive(Debug, Clone, Args)]
pub struct ChatArgs {
    /// A model folder, a .gguf file, or a repo id (org/name) already in the
    /// local Hugging Face cache; the default model (SmolLM2-135M-Instruct) when omitted.
    pub model: Option<String>,
    /// The session to continue, or to create with this id if there is none.
    #[arg(long)]
    pub session: String,
    /// The user message.
    #[arg(long)]
    pub message: String,
    /// Max new tokens (default: the stored setting, 512 unless changed).
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// Sampling temperature; 0 is greedy (default: the stored setting).
    #[arg(long)]
    pub temp: Option<f32>,
    /// Nucleus sampling (default: the stored setting).
    #[arg(long)]
    pub top_p: Option<f32>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Context limit in tokens, history + reply (default: the stored setting).
    #[arg(long)]
    pub context: Option<usize>,
    /// Generate exactly --max-tokens tokens, through any EOS (benchmarks, tests).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print one JSON object (ids, text, status, route, stats) instead of streaming.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub budget: BudgetArgs,
    #[command(flatten)]
    pub peer: super::lend::PeerArgs,
    /// Load even if the fit check says the model would swap or cannot fit.
    #[arg(long)]
    pub override_fit: bool,
    #[command(flatten)]
    pub kernel: KernelArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub speculative: SpeculativeArgs,
    /// Where the answer comes from: the local MODEL, the cloud endpoint, or
    /// `auto` (the router decides). Sensitive content never goes to the
    /// cloud by forcing it: only --allow-sensitive lets it.
    #[arg(long, value_enum, default_value_t)]
    pub route: RouteArg,
    /// Let this message's sensitive content (and that of the earlier turns
    /// sent with it) go to the cloud; stderr names what goes, masked.
    #[arg(long)]
    pub allow_sensitive: bool,
    /// The cloud endpoint's base URL, e.g. https://api.openai.com/v1
    /// (default: the stored setting). The key comes from
    /// $HEADROOM_CLOUD_API_KEY when $HEADROOM_CLOUD_API_KEY_URL is this URL
    /// (it is sent nowhere else), else `headroom cloud-key set`.
    #[arg(long)]
    pub cloud_url: Option<String>,
    /// The model to ask at the cloud endpoint (default: the stored setting).
    #[arg(long)]
    pub cloud_model: Option<String>,
}

/// Where `headroom chat` sends the turn: the app's route chip, as a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum RouteArg {
    /// The local model (MODEL).
    #[default]
    Local,
    /// The cloud endpoint (--cloud-url / --cloud-model, else the settings).
    Cloud,
    /// The router decides: sensitive text stays local; long prompts, or a
    /// model that would swap, go to the cloud.
    Auto,
}

impl RouteArg {
    fn force(self) -> Option<Force> {
        match self {
            Self::Local => Some(Force::Local),
            Self::Cloud => Some(Force::Cloud),
            Self::Auto => None,
        }
    }
}

/// The app's data folder (`$HEADROOM_DATA_DIR` first).
pub(crate) fn locations() -> Result<Locations, CliError> {
    Locations::from_env(|| crate::platform_app_data_dir().ok_or(CliError::NoDataDir))
}

/// The database in the app's data folder.
pub(crate) fn open_store() -> Result<Store, CliError> {
    Ok(block_on(Store::open(&locations()?.data_dir))?)
}

/// The database in the app's data folder if there is one (read-only
/// commands never create the folder): what this machine measured for the
/// fit. `None` also when it cannot be opened, said in the log.
pub(crate) fn existing_store() -> Option<Store> {
    existing_store_in(&locations().ok()?.data_dir)
}

/// Where a run that got past its fit guard keeps what it measured: the
/// database the guard read (`learned`), else the data folder's, created
/// now. A database that cannot be opened costs only the measurement.
pub(crate) fn store_to_measure_in(learned: Option<Store>) -> Option<Store> {
    learned.or_else(|| open_store().map_err(|e| tracing::warn!("this run will not be measured: {e}")).ok())
}

/// [`existing_store`] in the data folder `dir`.
pub(crate) fn existing_store_in(dir: &std::path::Path) -> Option<Store> {
    if !dir.join(headroom_store::DB_FILE).is_file() {
        return None;
    }
    block_on(Store::open(dir)).map_err(|e| tracing::warn!("what this Mac measured is not used: {e}")).ok()
}

pub fn run(args: &ChatArgs) -> Result<(), CliError> {
    let locations = locations()?;
    let store = block_on(Store::open(&locations.data_dir))?;
    let stdout = std::io::stdout();
    // On a terminal, the model's control characters are dropped (super::terminal).
    let mut out: Box<dyn Write> = if stdout.is_terminal() {
        Box::new(super::terminal::TerminalText(stdout.lock()))
    } else {
        Box::new(stdout.lock())
    };
    chat(args, locations, store, &mut out, &mut std::io::stderr())
}

/// The command with its store and outputs injected, so tests can read them.
pub(crate) fn chat(
    args: &ChatArgs,
    locations: Locations,
    store: Store,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CliError> {
    if args.message.trim().is_empty() {
        return Err(CliError::EmptyMessage);
    }
    let mut settings = block_on(store.settings())?;
    settings.cloud_base_url = args.cloud_url.clone().or(settings.cloud_base_url);
    settings.cloud_model = args.cloud_model.clone().or(settings.cloud_model);
    settings.context_limit = args.context.unwrap_or(settings.context_limit);
    settings.speculative = args.speculative.or(settings.speculative);
    // `--kernel` (its default too) is the kernel this run loads with, as
    // the setting is the app's.
    settings.kernel = args.kernel.kernel;
    let state = AppState::new(EngineHandle::spawn()?, locations, store);
    state.apply_settings(&settings);
    let result = load_and_chat(args, &state, &settings, out, err);
    // The chat's KV state to disk, as the app does at quit: the next
    // `headroom chat` of this session prefills only its new message.
    state.save_chat_states(std::time::Duration::ZERO, "at the end of `headroom chat`");
    state.engine.shutdown();
    result
}

fn load_and_chat(
    args: &ChatArgs,
    state: &AppState,
    settings: &Settings,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CliError> {
    // The model is the local side of the route: the turn must run on it,
    // so its load failing is the answer; otherwise the turn routes without it.
    match load(args, state, settings.context_limit, err) {
        Ok(()) => {}
        Err(e) if args.route == RouteArg::Local => return Err(e),
        Err(e) => writeln!(err, "headroom: no local model for this turn ({e}); routing without one")?,
    }
    let request = TurnRequest {
        session: args.session.clone(),
        ask: Ask::New(args.message.clone()),
        options: TurnOptions {
            max_tokens: args.max_tokens,
            force: args.route.force(),
            allow_sensitive: args.allow_sensitive,
            temperature: args.temp,
            top_p: args.top_p,
            seed: args.seed,
            ignore_eos: args.ignore_eos,
            override_fit: args.override_fit,
            // The model's thinking setting, as the app's chats start.
            think: None,
            // Only the popover runs MCP tools (the CLI starts no server).
            tool: None,
        },
    };
    let (tx, events) = std::sync::mpsc::channel();
    let running = turn::start(state, request, move |e| tx.send(e).is_ok())?;
    // Ctrl-C stops the run after the current token; the answer is then
    // committed as interrupted like any other end.
    let (runs, id) = (state.runs.clone(), running.run_id);
    let ctrl_c = crate::runtime::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            runs.cancel(id);
        }
    });
    let mut write_error = None;
    for event in events {
        match (&event, args.json) {
            (ChatEvent::Started { route, .. }, false) => say_route(args, route, err)?,
            (ChatEvent::Token { text }, false) if write_error.is_none() => {
                // Flushed per token: the point is to watch it arrive.
                if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                    write_error = Some(e);
                }
            }
            _ => {}
        }
    }
    ctrl_c.abort();
    let done = running.done.recv().map_err(|_| CliError::TurnFailed("the turn's thread went away".into()))?;
    if let Some(e) = write_error {
        return Err(e.into());
    }
    report(args, &state.store, &done, out, err)
}

/// MODEL into the state's engine, as the app loads its model: resolved,
/// checked against this Mac's memory from its headers before anything is
/// allocated (refused unless --override-fit), loaded, and its load's report
/// kept with it for the turn's labels.
fn load(args: &ChatArgs, state: &AppState, context: usize, err: &mut dyn Write) -> Result<(), CliError> {
    let dir = resolve_model(args.model.as_deref(), &state.locations.hub)?;
    let draft = args.speculative.draft_dir(Some(&dir), &state.locations.hub)?;
    let kv = args.kv.format()?;
    let learned = Some(&state.store);
    let request = GuardRequest {
        dir: &dir,
        model: args.model.as_deref(),
        context,
        dtype: ComputeDtype::Native,
        kernel: args.kernel,
        kv,
        budget: &args.budget,
        peer: &args.peer,
        draft: draft.as_deref(),
        override_fit: args.override_fit,
        learned,
    };
    let (report, peer) = guard(&request, err)?;
    // The app's switch: the same load settings from the report, and the
    // state told what is loaded.
    let id = model_label(args.model.as_deref());
    crate::models::switch_to(state, &id, &dir, context, kv, &report, Beside { peer, draft })?;
    Ok(())
}

/// Where the turn runs and why, one line on stderr (the app's route note);
/// with --allow-sensitive, what sensitive content goes out, masked.
fn say_route(args: &ChatArgs, route: &RouteInfo, err: &mut dyn Write) -> Result<(), CliError> {
    let target = match route.target {
        RouteTarget::Local => "the local model",
        RouteTarget::Cloud => "the cloud",
        RouteTarget::Cached => "the cache of cloud answers",
    };
    let why: Vec<&str> = route.reasons.iter().map(|r| r.message.as_str()).collect();
    writeln!(
        err,
        "headroom: --route {}: {target} ({}): {}",
        route_name(args.route),
        route.model_or_provider,
        why.join(" ")
    )?;
    if args.allow_sensitive && route.target == RouteTarget::Cloud {
        let sent: Vec<&str> =
            route.reasons.iter().filter(|r| r.code.starts_with("SENSITIVE_")).map(|r| r.message.as_str()).collect();
        if !sent.is_empty() {
            writeln!(
                err,
                "headroom: --allow-sensitive: sent to {} although: {}",
                route.model_or_provider,
                sent.join(" ")
            )?;
        }
    }
    Ok(())
}

fn route_name(r: RouteArg) -> &'static str {
    match r {
        RouteArg::Local => "local",
        RouteArg::Cloud => "cloud",
        RouteArg::Auto => "auto",
    }
}

fn report(
    args: &ChatArgs,
    store: &Store,
    done: &Done,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CliError> {
    let end = &done.end;
    let stored = done.ids.map(|ids| block_on(store.message(ids.assistant))).transpose()?;
    if args.json {
        let v = json!({
            "session": args.session,
            "user_message_id": done.ids.map(|i| i.user),
            "assistant_message_id": done.ids.map(|i| i.assistant),
            "text": stored.as_ref().map_or(end.text.as_str(), |m| m.content.as_str()),
            "status": stored.as_ref().map(|m| m.status),
            "error": end.error,
            "finish_reason": end.reason,
            "route": done.route,
            "stats": stored.as_ref().and_then(|m| m.stats.clone()),
        });
        writeln!(out, "{}", serde_json::to_string(&v)?)?;
    } else {
        writeln!(out)?;
        if let (Some(stats), Some(reason)) = (&end.stats, end.reason) {
            writeln!(err, "{}", super::generate::stats_line(stats, reason))?;
        }
        if let Some(slowdown) = &end.slowdown {
            writeln!(err, "headroom: {slowdown}")?;
        }
        if done.route.target == RouteTarget::Cloud
            && !end.text.is_empty()
            && end.stats.as_ref().is_some_and(|s| s.generated_tokens == 0)
        {
            writeln!(err, "headroom: {}: no tok/s shown", headroom_cloud::NO_USAGE_NOTE)?;
        }
        if end.reason == Some(FinishReason::Cancelled) {
            writeln!(err, "headroom: stopped; the answer so far is saved as interrupted")?;
        }
    }
    match &end.error {
        Some(message) => Err(CliError::TurnFailed(message.clone())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    use clap::Parser;
    use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
    use headroom_store::MessageStatus;

    use headroom_test_support::{fresh_store, FreshStore};

    use super::*;
    use crate::cli::{Cli, Command};
    use crate::models::HubEnv;

    fn demo_dir() -> &'static PathBuf {
        static DIR: OnceLock<PathBuf> = OnceLock::new();
        DIR.get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("headroom-cli-chat-demo-{}", std::process::id()));
            write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).unwrap();
            dir
        })
    }

    fn place(tag: &str) -> (Locations, FreshStore) {
        let store = block_on(fresh_store(&format!("cli-chat-{tag}")));
        (Locations { data_dir: store.dir().to_path_buf(), hub: HubEnv::default(), default_model: None }, store)
    }

    fn parse(extra: &[&str]) -> ChatArgs {
        let dir = demo_dir().to_string_lossy().into_owned();
        let argv = [&["headroom", "chat", dir.as_str(), "--session", "t"], extra].concat();
        match Cli::try_parse_from(argv).unwrap().command {
            Some(Command::Chat(args)) => args,
            other => panic!("{other:?}"),
        }
    }

    fn call(args: &ChatArgs, place: &(Locations, FreshStore)) -> (Result<(), CliError>, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let r = chat(args, place.0.clone(), Store::clone(&place.1), &mut out, &mut err);
        (r, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
    }

    #[test]
    fn two_turns_continue_one_stored_session() {
        let place = place("turns");
        let store = &place.1;
        let (r, out, _) =
            call(&parse(&["--message", "Hello", "--max-tokens", "4", "--ignore-eos", "--temp", "0", "--json"]), &place);
        r.unwrap();
        let first: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
        assert_eq!((first["status"].as_str(), first["finish_reason"].as_str()), (Some("complete"), Some("length")));
        assert_eq!(first["stats"]["generatedTokens"], 4);
        assert_eq!(first["stats"]["batch"], 1);
        assert_eq!(first["stats"]["quantization"], "4-bit, group 64");
        assert_eq!(first["route"]["target"], "local");
        assert_eq!(first["route"]["reasons"][0]["code"], "FORCED_LOCAL");

        let (r, out, err) = call(
            &parse(&[
                "--message",
                "And then?",
                "--max-tokens",
                "3",
                "--ignore-eos",
                "--temp",
                "0",
                "--kernel",
                "fused",
            ]),
            &place,
        );
        r.unwrap();
        assert!(err.contains("decode: 3 tokens") && err.contains("| length"), "{err}");
        assert!(err.contains("--route local: the local model"), "{err}");
        // The first process saved the chat's KV state, but for the CPU
        // kernel: computed another way, it is not used.
        assert!(err.contains(" (0 reused), "), "{err}");

        let msgs = block_on(store.messages("t")).unwrap();
        assert_eq!(msgs.len(), 4);
        assert_eq!(format!("{}\n", msgs[3].content), out, "what streamed is what was stored");
        assert_eq!(msgs[1].content, first["text"].as_str().unwrap_or_default());
        let prompts: Vec<i64> = msgs.iter().filter_map(|m| m.stats.as_ref().map(|s| s.prompt_tokens)).collect();
        assert!(prompts.len() == 2 && prompts[1] > prompts[0], "the second prompt holds the first turn: {prompts:?}");
        assert!(msgs.iter().all(|m| m.status == MessageStatus::Complete));
        assert!(Cli::try_parse_from(["headroom", "chat", "m", "--session", "s", "--message", "x", "--kernel", "fast"])
            .is_err());

        // A third process with the second's kernel continues from its state on disk.
        let (r, out, _) = call(
            &parse(&[
                "--message",
                "Go on.",
                "--max-tokens",
                "3",
                "--ignore-eos",
                "--temp",
                "0",
                "--kernel",
                "fused",
                "--json",
            ]),
            &place,
        );
        r.unwrap();
        let third: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
        let msgs = block_on(store.messages("t")).unwrap();
        let second_prompt = msgs[3].stats.as_ref().map_or(0, |s| s.prompt_tokens);
        assert!(third["stats"]["reusedTokens"].as_i64() >= Some(second_prompt), "{third}");
    }

    #[test]
    fn refusals_store_nothing_and_say_why() {
        let place = place("refuse");
        let store = &place.1;
        let (r, _, _) = call(&parse(&["--message", "  "]), &place);
        assert!(matches!(r, Err(CliError::EmptyMessage)), "{r:?}");
        let (r, _, _) = call(&parse(&["--message", "hi", "--available-gb", "0"]), &place);
        assert!(matches!(r, Err(CliError::WouldNotFit { .. })), "{r:?}");
        assert_eq!(block_on(store.list_sessions()).map(|l| l.len()).ok(), Some(0));
        // The engine refuses a bad setting once the message is committed: the turn is an error answer.
        let (r, _, _) = call(&parse(&["--message", "hi", "--temp=-1"]), &place);
        let msg = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("temperature"), "{msg}");
        let msgs = block_on(store.messages("t")).unwrap_or_default();
        assert_eq!(msgs.iter().map(|m| m.status).collect::<Vec<_>>(), [MessageStatus::Complete, MessageStatus::Error]);
        assert!(msgs[1].error.as_deref().is_some_and(|e| e.contains("temperature")));
    }
}
