//! `headroom chat`: one persisted turn in a named session. The stored
//! history is the context, the answer streams to stdout while the shared
//! [`TurnRecorder`] saves it, and Ctrl-C stops it as `interrupted`.

use std::io::Write;

use clap::Args;
use headroom_core::chat::FinishReason;
use headroom_engine::worker::{EngineHandle, GenerateRequest, LoadSettings, OverflowPolicy};
use headroom_engine::{ComputeDtype, SamplingParams};
use headroom_store::Store;
use serde_json::json;

use super::chat_cloud::RouteArg;
use super::fit::{check_model, BudgetArgs};
use super::hub::{resolve_model, HubEnv};
use super::CliError;
use crate::chat::{block_on, forward, ModelLabels, TurnEnd, TurnRecorder};
use crate::state::Locations;

#[derive(Debug, Clone, Args)]
pub struct ChatArgs {
    /// A model folder, or a repo id (org/name) already in the local Hugging Face cache.
    pub model: String,
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
    /// Print one JSON object (ids, text, status, stats) instead of streaming.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub budget: BudgetArgs,
    /// Load even if the fit check says the model would swap or cannot fit.
    #[arg(long)]
    pub override_fit: bool,
    /// Where the answer comes from: the local MODEL, the cloud endpoint, or
    /// `auto` (the router decides and says why on stderr).
    #[arg(long, value_enum, default_value_t)]
    pub route: RouteArg,
    /// The cloud endpoint's base URL, e.g. https://api.openai.com/v1
    /// (default: the stored setting). The key comes from
    /// $HEADROOM_CLOUD_API_KEY, else `headroom cloud-key set`.
    #[arg(long)]
    pub cloud_url: Option<String>,
    /// The model to ask at the cloud endpoint (default: the stored setting).
    #[arg(long)]
    pub cloud_model: Option<String>,
}

/// The database in the app's data folder (`$HEADROOM_DATA_DIR` first).
pub(crate) fn open_store() -> Result<Store, CliError> {
    let locations = Locations::from_env(|| crate::platform_app_data_dir().ok_or(CliError::NoDataDir))?;
    Ok(block_on(Store::open(&locations.data_dir))?)
}

pub fn run(args: &ChatArgs) -> Result<(), CliError> {
    let store = open_store()?;
    let stdout = std::io::stdout();
    chat(args, &store, &HubEnv::from_process(), &mut stdout.lock(), &mut std::io::stderr())
}

/// The command with its store and outputs injected, so tests can read them.
pub(crate) fn chat(
    args: &ChatArgs,
    store: &Store,
    env: &HubEnv,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CliError> {
    if args.message.trim().is_empty() {
        return Err(CliError::EmptyMessage);
    }
    let settings = block_on(store.settings())?;
    if args.route == RouteArg::Cloud {
        return super::chat_cloud::chat(args, store, &settings, out, err);
    }
    let context = args.context.unwrap_or(settings.context_limit);
    let dir = resolve_model(&args.model, env)?;
    if args.route == RouteArg::Auto && super::chat_cloud::auto_picks_cloud(args, store, &settings, &dir, err)? {
        return super::chat_cloud::chat(args, store, &settings, out, err);
    }
    // The guard: headers only, before the engine (and MLX) allocate anything.
    let report = check_model(&dir, context, ComputeDtype::Native, &args.budget)?;
    if report.verdict.refuses() {
        if !args.override_fit {
            return Err(CliError::WouldNotFit { model: args.model.clone(), report: Box::new(report) });
        }
        writeln!(err, "headroom: --override-fit: loading although it {}", super::fit::verdict_line(&report))?;
    }
    let engine = EngineHandle::spawn()?;
    engine.load(&dir, LoadSettings { context_limit: context, ..LoadSettings::default() })?;

    // Committed before generation starts: from here on nothing is lost.
    let mut recorder = TurnRecorder::begin(store, &args.session, &args.message, ModelLabels::of(&args.model, &dir))?;
    let request = GenerateRequest {
        max_tokens: args.max_tokens.unwrap_or(settings.max_tokens),
        ignore_eos: args.ignore_eos,
        overflow: OverflowPolicy::TruncateOldest,
        sampling: SamplingParams {
            temperature: args.temp.unwrap_or(settings.temperature),
            top_p: args.top_p.unwrap_or(settings.top_p),
            seed: args.seed,
            ..SamplingParams::default()
        },
        ..GenerateRequest::new(recorder.start.history.clone())
    };
    let run = match engine.generate(request) {
        Ok(run) => run,
        Err(e) => {
            recorder.fail(&e.to_string())?;
            return Err(e.into());
        }
    };
    // Ctrl-C stops the run after the current token; the answer is then
    // committed as interrupted like any other end.
    let canceller = engine.clone();
    let id = run.id;
    let ctrl_c = tauri::async_runtime::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            canceller.cancel(id);
        }
    });

    let mut write_error = None;
    let end = forward(
        id,
        &run.events,
        &args.model,
        |event| {
            if let (false, None, crate::chat::ChatEvent::Token { text }) = (args.json, &write_error, &event) {
                // Flushed per token: the point is to watch it arrive.
                if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                    write_error = Some(e);
                }
            }
            true
        },
        || {},
        |so_far| recorder.on_text(so_far),
    );
    ctrl_c.abort();
    let assistant_id = recorder.start.assistant_message_id;
    let user_id = recorder.start.user_message_id;
    recorder.finish(&end)?;
    if let Some(e) = write_error {
        return Err(e.into());
    }
    report_turn(args, store, &end, user_id, assistant_id, out, err)
}

pub(super) fn report_turn(
    args: &ChatArgs,
    store: &Store,
    end: &TurnEnd,
    user_id: i64,
    assistant_id: i64,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CliError> {
    let stored = block_on(store.message(assistant_id))?;
    if args.json {
        let v = json!({
            "session": args.session,
            "user_message_id": user_id,
            "assistant_message_id": assistant_id,
            "text": stored.content,
            "status": stored.status,
            "error": stored.error,
            "finish_reason": end.reason,
            "stats": stored.stats,
        });
        writeln!(out, "{}", serde_json::to_string(&v)?)?;
    } else {
        writeln!(out)?;
        if let (Some(stats), Some(reason)) = (&end.stats, end.reason) {
            writeln!(err, "{}", super::generate::stats_line(stats, reason))?;
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

    use super::*;
    use crate::cli::{Cli, Command};

    fn demo_dir() -> &'static PathBuf {
        static DIR: OnceLock<PathBuf> = OnceLock::new();
        DIR.get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("headroom-cli-chat-demo-{}", std::process::id()));
            write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four))
                .unwrap_or_else(|e| panic!("{e}"));
            dir
        })
    }

    fn store(tag: &str) -> Store {
        let dir = std::env::temp_dir().join(format!("headroom-cli-chat-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        block_on(Store::open(&dir)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn parse(extra: &[&str]) -> ChatArgs {
        let dir = demo_dir().to_string_lossy().into_owned();
        let argv = [&["headroom", "chat", dir.as_str(), "--session", "t"], extra].concat();
        match Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).command {
            Some(Command::Chat(args)) => args,
            other => panic!("{other:?}"),
        }
    }

    fn call(args: &ChatArgs, store: &Store) -> (Result<(), CliError>, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let r = chat(args, store, &HubEnv::default(), &mut out, &mut err);
        (r, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
    }

    #[test]
    fn two_turns_continue_one_stored_session() {
        let store = store("turns");
        let (r, out, _) =
            call(&parse(&["--message", "Hello", "--max-tokens", "4", "--ignore-eos", "--temp", "0", "--json"]), &store);
        r.unwrap_or_else(|e| panic!("{e}"));
        let first: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!((first["status"].as_str(), first["finish_reason"].as_str()), (Some("complete"), Some("length")));
        assert_eq!(first["stats"]["generatedTokens"], 4);
        assert_eq!(first["stats"]["batch"], 1);
        assert_eq!(first["stats"]["quantization"], "4-bit, group 64");

        let (r, out, err) =
            call(&parse(&["--message", "And then?", "--max-tokens", "3", "--ignore-eos", "--temp", "0"]), &store);
        r.unwrap_or_else(|e| panic!("{e}"));
        assert!(err.contains("decode: 3 tokens") && err.contains("| length"), "{err}");
        let msgs = block_on(store.messages("t")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(msgs.len(), 4);
        assert_eq!(format!("{}\n", msgs[3].content), out, "what streamed is what was stored");
        assert_eq!(msgs[1].content, first["text"].as_str().unwrap_or_default());
        let prompts: Vec<i64> = msgs.iter().filter_map(|m| m.stats.as_ref().map(|s| s.prompt_tokens)).collect();
        assert!(prompts.len() == 2 && prompts[1] > prompts[0], "the second prompt holds the first turn: {prompts:?}");
        assert!(msgs.iter().all(|m| m.status == MessageStatus::Complete));
    }

    #[test]
    fn refusals_store_nothing_and_say_why() {
        let store = store("refuse");
        let (r, _, _) = call(&parse(&["--message", "  "]), &store);
        assert!(matches!(r, Err(CliError::EmptyMessage)), "{r:?}");
        let (r, _, _) = call(&parse(&["--message", "hi", "--available-gb", "0"]), &store);
        assert!(matches!(r, Err(CliError::WouldNotFit { .. })), "{r:?}");
        assert_eq!(block_on(store.list_sessions()).map(|l| l.len()).ok(), Some(0));
        // The engine refuses a bad setting once the message is committed: the turn is an error answer.
        let (r, _, _) = call(&parse(&["--message", "hi", "--temp=-1"]), &store);
        let msg = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("temperature"), "{msg}");
        let msgs = block_on(store.messages("t")).unwrap_or_default();
        assert_eq!(msgs.iter().map(|m| m.status).collect::<Vec<_>>(), [MessageStatus::Complete, MessageStatus::Error]);
        assert!(msgs[1].error.as_deref().is_some_and(|e| e.contains("temperature")));
    }
}
