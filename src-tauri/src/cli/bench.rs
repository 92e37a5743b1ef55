//! `headroom bench`: llama-bench's measurement on the engine's real
//! generation path. For each context depth d: fill the KV cache to d, then
//! r counted runs (after one warm-up) of prefill p + decode n, batch 1; the
//! mean ± sd of each figure with every label, peak memory, pressure and swap
//! delta; then the roofline (decode bytes per token vs memory bandwidth).
//! The plan and its report are `crate::bench`'s, which the app's Bench view
//! runs too.

use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Args;
use headroom_core::bench::MeanSd;
use headroom_engine::worker::{EngineHandle, LoadSettings};
use headroom_engine::ComputeDtype;
use headroom_memory::bandwidth::{self, BandwidthOptions};
use headroom_store::Store;

use super::fit::{guard, BudgetArgs, GuardRequest};
use super::hub::{model_label, resolve_model, HubEnv};
use super::kernel::KernelArgs;
use super::kv::KvArgs;
use super::speculative::SpeculativeArgs;
use super::CliError;
use crate::bench::{report_json, run_plan, Bandwidth, BenchPlan, BenchReport, StoreRecord};
use crate::runtime::block_on;

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// A model folder, a .gguf file, or a repo id (org/name) already in the
    /// local Hugging Face cache; the default model (SmolLM2-135M-Instruct) when omitted.
    pub model: Option<String>,
    /// Prompt tokens prefilled per run (random ids), after the depth.
    #[arg(short = 'p', long = "prompt-tokens", default_value_t = 512)]
    pub prompt_tokens: usize,
    /// Tokens decoded per run (EOS ignored); decode tok/s excludes the first.
    #[arg(short = 'n', long = "gen-tokens", default_value_t = 128)]
    pub gen_tokens: usize,
    /// Counted runs per depth (one more warm-up run is not counted).
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub repetitions: usize,
    /// Context depths: positions already in the KV cache before each run (comma-separated).
    #[arg(short = 'd', long = "depth", value_delimiter = ',', default_value = "0")]
    pub depths: Vec<usize>,
    /// Seed of the random prompt ids.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Compute dtype: native (the checkpoint's) or f32.
    #[arg(long, default_value = "native", value_parser = super::fit::parse_dtype)]
    pub dtype: ComputeDtype,
    #[command(flatten)]
    pub kernel: KernelArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub speculative: SpeculativeArgs,
    /// Memory bandwidth for the roofline, GB/s; without it `headroom bandwidth`'s
    /// measurement runs first (2 passes: seconds optimized, ~15 s in a debug build).
    #[arg(long, value_name = "GB_PER_S")]
    pub bandwidth: Option<f64>,
    /// Print the raw runs and the summary as one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Do not save the results in the app's database.
    #[arg(long)]
    pub no_save: bool,
    #[command(flatten)]
    pub budget: BudgetArgs,
    #[command(flatten)]
    pub peer: super::lend::PeerArgs,
    /// Load even if the fit check says the model would swap or cannot fit.
    #[arg(long)]
    pub override_fit: bool,
}

pub fn run(args: &BenchArgs) -> Result<(), CliError> {
    let stdout = std::io::stdout();
    // Like `generate`: what this machine measured calibrates the guard, and
    // a run past it is measured (its fill to a depth teaches the fit that
    // context), unless --no-save keeps the database untouched.
    let learned = super::chat::existing_store();
    let keep = |learned| if args.no_save { None } else { super::chat::store_to_measure_in(learned) };
    let report = bench(args, &HubEnv::from_process(), learned, keep, &mut stdout.lock(), &mut std::io::stderr())?;
    if !args.no_save {
        save(&report)?;
    }
    Ok(())
}

/// The command with what this machine measured (`learned`, for the guard),
/// where the runs past it are measured (`keep`, given `learned`; `None`:
/// nowhere) and its outputs injected, so tests can read them.
pub(crate) fn bench(
    args: &BenchArgs,
    env: &HubEnv,
    learned: Option<Store>,
    keep: impl FnOnce(Option<Store>) -> Option<Store>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<BenchReport, CliError> {
    let plan = BenchPlan {
        depths: args.depths.clone(),
        prompt_tokens: args.prompt_tokens,
        gen_tokens: args.gen_tokens,
        repetitions: args.repetitions,
        seed: args.seed,
        speculative: args.speculative.mode(),
    };
    if plan.depths.is_empty() {
        return Err(CliError::BadArgument { name: "--depth", reason: "give at least one depth".into() });
    }
    if let Some(b) = args.bandwidth {
        if !(b.is_finite() && b > 0.0) {
            return Err(CliError::BadArgument {
                name: "--bandwidth",
                reason: format!("{b} is not a positive GB/s figure"),
            });
        }
    }
    let dir = resolve_model(args.model.as_deref(), env)?;
    let draft = args.speculative.draft_dir(Some(&dir), env)?;
    let kv = args.kv.format()?;
    let request = GuardRequest {
        dir: &dir,
        model: args.model.as_deref(),
        context: plan.context(),
        dtype: args.dtype,
        kernel: args.kernel,
        kv,
        budget: &args.budget,
        peer: &args.peer,
        draft: draft.as_deref(),
        override_fit: args.override_fit,
        learned: learned.as_ref(),
    };
    let (report, peer) = guard(&request, err)?;
    // Measured before the model is loaded, so its buffers do not compete.
    let bandwidth = match args.bandwidth {
        Some(gb_per_s) => Bandwidth::Given { gb_per_s },
        None => {
            writeln!(err, "measuring memory bandwidth (headroom bandwidth) …")?;
            Bandwidth::Measured(bandwidth::measure(&BandwidthOptions { passes: 2, ..BandwidthOptions::default() })?)
        }
    };
    let engine = EngineHandle::spawn()?;
    if let Some(store) = keep(learned) {
        engine.set_meter(Some(crate::fit::store_meter(store)))?;
    }
    let settings = crate::fit::load_settings(&report, plan.context(), args.dtype, args.kernel.quant_kernel(), kv, 0);
    engine.load(&dir, LoadSettings { peer, draft, ..settings })?;
    let cancel = Arc::new(AtomicBool::new(false));
    let report = run_plan(&engine, &model_label(args.model.as_deref()), &dir, &plan, bandwidth, &cancel, |p| {
        let what = if p.run == 0 { "warm-up".to_owned() } else { format!("run {}/{}", p.run, p.runs) };
        let tps = p.decode_tps.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.1}"));
        let _ = writeln!(err, "depth {}: {what}: decode {tps} tok/s", p.depth);
    })?;
    // Two Macs: where the layers ran, and the hand-offs of the whole bench.
    let peer = engine.peer_hand_offs()?;
    if args.json {
        let mut json = report_json(&report);
        if let (Some(p), Some(object)) = (&peer, json.as_object_mut()) {
            object.insert("peer".into(), serde_json::to_value(p.report())?);
        }
        writeln!(out, "{}", serde_json::to_string(&json)?)?;
    } else {
        write!(out, "{}", table(&report))?;
        if let Some(p) = &peer {
            writeln!(out, "{} (the whole bench: warm-ups and depth fills too)", super::generate::peer_line(p))?;
        }
    }
    Ok(report)
}

/// Saves the report in the app's database.
fn save(report: &BenchReport) -> Result<(), CliError> {
    let store = super::chat::open_store()?;
    let r = StoreRecord::of(report);
    block_on(store.add_bench_run(&report.model, &r.labels, &r.machine, &r.summary, &r.runs))?;
    Ok(())
}

fn cell(v: Option<MeanSd>, digits: usize) -> String {
    v.map_or_else(|| "n/a".to_owned(), |m| format!("{m:.digits$}"))
}

/// A llama-bench-like Markdown table, then the labels and the roofline lines.
pub(crate) fn table(r: &BenchReport) -> String {
    let mut s = String::new();
    let labels = r.depths.first().map(|d| &d.case.labels);
    let quant = labels
        .and_then(|l| l.quantization)
        .map_or_else(|| "none".to_owned(), |(bits, group)| format!("{bits}-bit g{group}"));
    let model_type = labels.map_or("?", |l| l.model_type.as_str());
    s.push_str(
        "| model | quant | KV | batch | depth | test | TTFT ms | prefill tok/s | decode tok/s | e2e tok/s | peak MB | decoding |\n",
    );
    s.push_str("|---|---|---|--:|--:|---|--:|--:|--:|--:|--:|---|\n");
    for d in &r.depths {
        let shape = d.case.case.shape;
        // Per depth: a cache quantized from a start converts only past it.
        let kv = &d.case.labels.kv_dtype;
        s.push_str(&format!(
            "| {model_type} | {quant} | {kv} | 1 | {} | pp{} tg{} | {} | {} | {} | {} | {:.1} | {} |\n",
            shape.depth,
            shape.prompt_tokens,
            shape.gen_tokens,
            cell(d.summary.ttft_ms, 1),
            cell(d.summary.prefill_tps, 1),
            cell(d.summary.decode_tps, 2),
            cell(d.summary.e2e_tps, 2),
            d.peak_memory_bytes as f64 / 1e6,
            d.speculation().label(),
        ));
    }
    s.push_str(&format!(
        "\nmodel {} ({}); {} counted runs per depth after 1 warm-up; mean ± sd; decode excludes the first token; random prompt ids, EOS ignored\n",
        r.model,
        r.dir.display(),
        r.plan.repetitions
    ));
    if let Some(kernel) = labels.and_then(|l| l.quant_kernel) {
        s.push_str(&format!("quantized matmul: {}\n", kernel.describe()));
    }
    s.push_str(&format!(
        "machine: {} ({} cores, {:.1} GB, {})\n",
        r.machine.cpu,
        r.machine.cpu_cores,
        r.machine.total_memory_bytes as f64 / 1e9,
        r.machine.os
    ));
    for d in &r.depths {
        s.push_str(&format!(
            "depth {}: fill {:.0} ms (not counted); pressure {}; swap delta {:+.1} MB\n",
            d.case.case.shape.depth,
            d.case.fill_time.as_secs_f64() * 1e3,
            d.pressure,
            d.swap_delta_bytes as f64 / 1e6
        ));
    }
    let bw_source = match &r.bandwidth {
        Bandwidth::Measured(m) => {
            format!("measured, best of copy and triad, {} threads, {} MiB arrays", m.threads, m.array_bytes >> 20)
        }
        Bandwidth::Given { .. } => "given with --bandwidth".to_owned(),
    };
    for d in &r.depths {
        let depth = d.case.case.shape.depth;
        if let Some(l) = &d.roofline {
            let traffic = &d.case.labels.traffic;
            let experts = if traffic.experts > 0 {
                format!(", {} of {} experts", traffic.experts_per_token, traffic.experts)
            } else {
                String::new()
            };
            s.push_str(&format!(
                "roofline depth {depth}: {:.2} MB read per token (weights {:.2} MB active of {:.2} MB resident{experts} + KV{} {:.2} MB at {:.0} positions); bound {:.1} tok/s at {:.1} GB/s ({bw_source}); achieved {:.1} tok/s = {:.1} %\n",
                l.bytes_per_token / 1e6,
                traffic.weight_bytes as f64 / 1e6,
                traffic.resident_bytes() as f64 / 1e6,
                if traffic.state_bytes > 0 { " and state" } else { "" },
                (l.bytes_per_token - traffic.weight_bytes as f64) / 1e6,
                d.case.case.shape.mean_decode_context(),
                l.bound_tps,
                l.bandwidth_bytes_per_s / 1e9,
                l.achieved_tps,
                l.achieved_percent,
            ));
        }
        if let (Some(l), Some(rated)) = (&d.rated_roofline, r.rated) {
            s.push_str(&format!(
                "roofline depth {depth} (rated): bound {:.1} tok/s at {:.1} GB/s (Apple {} rated, {}); achieved {:.1} %\n",
                l.bound_tps, rated.gb_per_s, rated.chip, rated.source, l.achieved_percent
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};
    use headroom_core::settings::KernelChoice;
    use headroom_core::speculative::SpeculativeMode;
    use headroom_engine::QuantKernel;

    fn parse(argv: &[&str]) -> BenchArgs {
        match Cli::try_parse_from([&["headroom", "bench"], argv].concat()).unwrap().command {
            Some(Command::Bench(args)) => args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn flags_parse_like_llama_bench() {
        let a = parse(&["m", "-p", "64", "-n", "16", "-r", "3", "-d", "0,4096,12288", "--json", "--no-save"]);
        assert_eq!((a.prompt_tokens, a.gen_tokens, a.repetitions), (64, 16, 3));
        assert_eq!(a.depths, [0, 4096, 12288]);
        assert!(a.json && a.no_save && !a.override_fit);
        let d = parse(&["m"]);
        assert_eq!((d.prompt_tokens, d.gen_tokens, d.repetitions, d.depths.as_slice()), (512, 128, 5, &[0][..]));
        assert_eq!(d.kernel.kernel, KernelChoice::Auto, "the engine's choice for the device unless asked");
        assert_eq!(d.kernel.quant_kernel(), headroom_engine::worker::LoadSettings::default().kernel);
        assert_eq!(parse(&["m", "--kernel", "fused"]).kernel.quant_kernel(), QuantKernel::Fused);
        assert_eq!(parse(&["m", "--kernel", "cpu"]).kernel.quant_kernel(), QuantKernel::CPU);
        assert!(Cli::try_parse_from(["headroom", "bench", "m", "--kernel", "fast"]).is_err());
        let plan = BenchPlan {
            depths: a.depths,
            prompt_tokens: 64,
            gen_tokens: 16,
            repetitions: 3,
            seed: 0,
            speculative: SpeculativeMode::None,
        };
        assert_eq!(plan.context(), 12288 + 64 + 16);
    }

    #[test]
    fn bad_arguments_are_refused_before_loading() {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let e = bench(&parse(&["m", "--bandwidth=-1"]), &HubEnv::default(), None, |_| None, &mut out, &mut err).err();
        assert!(e.map(|e| e.to_string()).unwrap_or_default().contains("--bandwidth"));
        let e = bench(
            &parse(&["nobody/nothing", "--bandwidth", "10"]),
            &HubEnv::default(),
            None,
            |_| None,
            &mut out,
            &mut err,
        )
        .err();
        assert!(matches!(e, Some(CliError::ModelNotFound { .. })), "{e:?}");
    }
}
