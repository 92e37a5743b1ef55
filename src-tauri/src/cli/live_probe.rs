//! `headroom live-probe MODEL`: answers with a local model one after another
//! and prints each answer's per-second decode rates with the memory beside
//! them, then whether a slowdown was blamed on memory: the app's live
//! attribution (`live::LiveRun`, the same code the chat path reports
//! through), on the command line, for checking it against a real memory hog
//! (`scripts/slowdown-hog.sh`).

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Args;
use headroom_core::chat::{Message, Role};
use headroom_core::slowdown::Stretch;
use headroom_engine::worker::{EngineEvent, EngineHandle, GenerateRequest, LoadSettings};
use headroom_engine::ComputeDtype;

use super::fit::{check_model, BudgetArgs};
use super::hub::{resolve_model, HubEnv};
use super::CliError;
use crate::live::Live;

#[derive(Debug, Clone, Args)]
pub struct LiveProbeArgs {
    /// A model folder, a .gguf file, or a repo id (org/name) already in the local Hugging Face cache.
    pub model: String,
    /// How many answers, one after another (the first ones are the model's own reference rate).
    #[arg(long, default_value_t = 2)]
    pub runs: u32,
    /// Tokens per answer (EOS is ignored, so each answer has the same length).
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Seconds to wait between answers.
    #[arg(long, default_value_t = 0.0)]
    pub pause: f64,
    #[arg(long, default_value = "Tell me a long story about a lighthouse keeper.")]
    pub prompt: String,
    /// Compute dtype: native or f32 (see `headroom generate`).
    #[arg(long, default_value = "native", value_parser = super::fit::parse_dtype)]
    pub dtype: ComputeDtype,
    #[command(flatten)]
    pub budget: BudgetArgs,
}

pub fn run(args: &LiveProbeArgs) -> Result<(), CliError> {
    let stdout = std::io::stdout();
    probe(args, &HubEnv::from_process(), &Live::new(), &mut stdout.lock())
}

/// The command with its model source, live state and output injected.
pub(crate) fn probe(args: &LiveProbeArgs, env: &HubEnv, live: &Live, out: &mut dyn Write) -> Result<(), CliError> {
    let dir = resolve_model(Some(&args.model), env)?;
    let context = headroom_engine::worker::DEFAULT_CONTEXT_LIMIT;
    let report = check_model(&dir, context, args.dtype, &args.budget)?;
    if report.verdict.refuses() {
        return Err(CliError::WouldNotFit { model: args.model.clone(), report: Box::new(report), remedies: None });
    }
    let engine = EngineHandle::spawn()?;
    engine.load(&dir, LoadSettings { context_limit: context, dtype: args.dtype, ..LoadSettings::default() })?;
    for n in 1..=args.runs.max(1) {
        if n > 1 && args.pause > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(args.pause));
        }
        let request = GenerateRequest {
            max_tokens: args.max_tokens,
            ignore_eos: true,
            ..GenerateRequest::new(vec![Message::new(Role::User, args.prompt.clone())])
        };
        let run = engine.generate(request)?;
        writeln!(out, "run {n} started")?;
        out.flush()?;
        let mut live_run = live.begin_run(&args.model);
        let began = Instant::now();
        let mut shown = 0;
        let mut decode = None;
        for event in &run.events {
            match event {
                EngineEvent::Token { .. } => live_run.on_token(Instant::now()),
                EngineEvent::Stats(s) => decode = s.rates.decode_tps,
                EngineEvent::Error(e) => return Err(e.into()),
                EngineEvent::Finished { .. } => break,
                _ => {}
            }
            for p in &live_run.points()[shown..] {
                let t = began.elapsed().as_secs_f64();
                let now = headroom_memory::read().ok();
                let swap = now.map_or(0, |r| r.swap_used);
                let level = now.map(|r| r.pressure).unwrap_or_default();
                writeln!(
                    out,
                    "  {t:6.1} s  {:7.2} tok/s  ({} tokens)  swap {:.2} GB  pressure {level}",
                    p.tps,
                    p.tokens,
                    gb(swap)
                )?;
            }
            shown = live_run.points().len();
            out.flush()?;
        }
        let stretches: Vec<Stretch> = live_run.stretches().to_vec();
        let note = live_run.finish();
        let decode = decode.map_or_else(|| "—".to_owned(), |d| format!("{d:.2}"));
        writeln!(out, "run {n} done: decode {decode} tok/s; {}", verdict(note.map(|n| n.sentence), &stretches))?;
        out.flush()?;
    }
    engine.shutdown();
    Ok(())
}

fn verdict(sentence: Option<String>, stretches: &[Stretch]) -> String {
    if let Some(s) = sentence {
        return s;
    }
    match stretches.first() {
        Some(s) => format!(
            "slowed ({:.1} → {:.1} tok/s over {:.1} s) but not blamed on memory: swap grew {:.2} GB, pressure {} → {}",
            s.reference_tps,
            s.tps,
            (s.end_ms - s.start_ms) as f64 / 1e3,
            gb(s.swap_growth_bytes()),
            s.pressure_before,
            s.pressure_peak
        ),
        None => "not slowed".to_owned(),
    }
}

fn gb(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};

    use super::*;
    use crate::cli::{Cli, Command};

    #[test]
    fn each_answer_gets_its_rates_and_a_verdict() {
        let tmp = headroom_test_support::scratch("live-probe");
        let dir = tmp.join("data");
        write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).unwrap();
        let model = dir.to_string_lossy().into_owned();
        let args = match Cli::try_parse_from(["headroom", "live-probe", &model, "--runs", "2", "--max-tokens", "1500"])
            .unwrap()
            .command
        {
            Some(Command::LiveProbe(args)) => args,
            other => panic!("{other:?}"),
        };
        let live = Live::with_memory(headroom_core::slowdown::Policy::default(), || None);
        let mut out = Vec::new();
        probe(&args, &HubEnv::default(), &live, &mut out).unwrap();
        let text = String::from_utf8_lossy(&out);
        let _ = std::fs::remove_dir_all(&dir);
        for n in [1, 2] {
            assert!(text.contains(&format!("run {n} started")), "{text}");
            let done = text.lines().find(|l| l.starts_with(&format!("run {n} done: decode "))).unwrap_or_default();
            // No memory readings were given: whatever the rates did, nothing is blamed on memory.
            assert!(done.ends_with("not slowed") || done.contains("not blamed on memory"), "{text}");
        }
        // 1500 tokens at a few hundred tok/s (up to ~650 here): over a second, so
        // at least one point per answer (600 tokens once ended inside the first second).
        assert!(text.matches(" tok/s  (").count() >= 2, "{text}");
        assert_eq!(live.activity().runs, 0);
    }
}
