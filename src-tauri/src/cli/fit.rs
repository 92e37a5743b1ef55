//! `headroom fit`, and the guard `headroom generate` runs before loading:
//! the model's footprint from its headers, the budget from this machine's
//! memory, and the verdict with every part.

use std::io::Write;
use std::path::Path;

use clap::Args;
use headroom_core::attention::AttentionPath;
use headroom_core::calibration::Measured;
use headroom_core::fit::{BudgetLimit, Estimate, FitReport, KvKind, KvLayers, ModelFootprint, GIB};
use headroom_core::kv::KvFormat;
use headroom_core::remedies::{Candidate, Remedy};
use headroom_engine::worker::DEFAULT_CONTEXT_LIMIT;
use headroom_engine::ComputeDtype;
use headroom_store::Store;

use super::hub::{resolve_model, HubEnv};
use super::kernel::KernelArgs;
use super::kv::KvArgs;
use super::CliError;
use crate::fit::{BudgetSource, LoadPlan};

/// How much memory a model may use; shared by `fit` and `generate`.
#[derive(Debug, Clone, Args)]
pub struct BudgetArgs {
    /// Memory to leave to the OS and other apps, in GB (2^30 bytes, as Activity Monitor counts).
    #[arg(long, default_value_t = 4.0, value_parser = parse_gb)]
    pub headroom_gb: f64,
    /// Plan as if this much memory were available (GB), instead of reading it from the OS.
    #[arg(long, value_parser = parse_gb)]
    pub available_gb: Option<f64>,
}

impl Default for BudgetArgs {
    fn default() -> Self {
        Self { headroom_gb: 4.0, available_gb: None }
    }
}

fn parse_gb(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a size in GB (a number, 0 or more)")),
    }
}

/// `--dtype`: `native` keeps the checkpoint's float dtype (bf16 for
/// mlx-community models), `f32` widens it at load (much faster on MLX's CPU backend).
pub(crate) fn parse_dtype(s: &str) -> Result<ComputeDtype, String> {
    match s.to_ascii_lowercase().as_str() {
        "native" => Ok(ComputeDtype::Native),
        "f32" | "float32" => Ok(ComputeDtype::F32),
        _ => Err(format!("`{s}` is not a compute dtype (native or f32)")),
    }
}

fn gb_to_bytes(gb: f64) -> u64 {
    // Finite and non-negative (parse_gb): the cast only rounds.
    (gb * GIB as f64) as u64
}

#[derive(Debug, Clone, Args)]
pub struct FitArgs {
    /// A model folder, a .gguf file, or a repo id (org/name) already in the local Hugging Face cache.
    pub model: String,
    /// Context length in tokens (prompt + reply) the verdict is for.
    #[arg(long, default_value_t = DEFAULT_CONTEXT_LIMIT)]
    pub context: usize,
    /// The dtype the model would be loaded with, as `generate --dtype`: native | f32.
    #[arg(long, default_value = "native", value_parser = parse_dtype)]
    pub dtype: ComputeDtype,
    #[command(flatten)]
    pub budget: BudgetArgs,
    #[command(flatten)]
    pub kernel: KernelArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    /// Print one JSON object (every part of the estimate, the budget and the verdict).
    #[arg(long)]
    pub json: bool,
    /// A peak measured for this model with this KV format, CONTEXT:BYTES
    /// (repeatable), besides those this machine recorded (every load and
    /// turn of the app, `chat`, `generate` and `serve` records one): the
    /// prediction is calibrated by the nearest (`core::calibration`) and
    /// says so.
    #[arg(long = "measured", value_name = "CONTEXT:BYTES", value_parser = parse_measured)]
    pub measured: Vec<(u64, u64)>,
    #[command(flatten)]
    pub peer: super::lend::PeerArgs,
    /// A draft model loaded beside it (as `generate --draft-model`): its
    /// weights and KV cache are counted too (by the formula alone).
    #[arg(long, value_name = "MODEL", conflicts_with_all = ["measured", "peer"])]
    pub draft_model: Option<String>,
}

fn parse_measured(s: &str) -> Result<(u64, u64), String> {
    let (context, bytes) =
        s.split_once(':').ok_or_else(|| format!("`{s}` is not CONTEXT:BYTES, e.g. 4096:9800000000"))?;
    let number =
        |v: &str, what: &str| v.trim().parse::<u64>().map_err(|_| format!("{what} `{v}` is not a whole number"));
    let m = (number(context, "the context")?, number(bytes, "the peak")?);
    if m.0 == 0 || m.1 == 0 {
        return Err(format!("`{s}`: a measurement of nothing (zero context or zero bytes)"));
    }
    Ok(m)
}

/// `headroom fit --json`: the report (its `calibration` and `basis` say
/// what the prediction rests on) and the remedies.
#[derive(serde::Serialize)]
struct FitOutput<'a> {
    #[serde(flatten)]
    report: &'a FitReport,
    /// What would make a refused model fit (empty when it fits).
    remedies: &'a [Remedy],
    /// With `--peer`: the split across this Mac and the peer, each Mac's share and verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    split: Option<&'a crate::fit::PeerSplit>,
}

/// The verdict for the model in `dir` at `context` tokens with the device's
/// default kernel (the shared check in [`crate::fit`]): reads only
/// config.json and the weight headers.
pub fn check_model(
    dir: &Path,
    context: usize,
    dtype: ComputeDtype,
    budget: &BudgetArgs,
) -> Result<FitReport, CliError> {
    Ok(crate::fit::check_model_as(dir, context, dtype, budget_source(budget))?)
}

/// What a CLI load asks of the guard: the model, how it would be loaded,
/// the budget, and where its later layers could go.
pub(crate) struct GuardRequest<'a> {
    pub dir: &'a Path,
    /// The model as the user named it (for the refusal).
    pub model: Option<&'a str>,
    pub context: usize,
    pub dtype: ComputeDtype,
    pub kernel: KernelArgs,
    pub kv: KvFormat,
    pub budget: &'a BudgetArgs,
    pub peer: &'a super::lend::PeerArgs,
    /// A draft model loaded beside it (`--draft-model`), counted in the fit.
    pub draft: Option<&'a Path>,
    pub override_fit: bool,
    /// What this machine measured (calibrates the one-Mac verdict).
    pub learned: Option<&'a Store>,
}

/// The guard every CLI load passes (generate, chat, bench): the verdict
/// from the headers before anything is allocated, on this Mac alone or,
/// with `--peer`, for each of two Macs (the split printed on `err`);
/// refused unless `--override-fit`. Returns the report this Mac's load
/// settings follow, and where the later layers go.
pub(crate) fn guard(
    g: &GuardRequest<'_>,
    err: &mut dyn Write,
) -> Result<(FitReport, Option<headroom_engine::peer::PeerPlacement>), CliError> {
    let label = super::hub::model_label(g.model);
    let (report, placement) = match &g.peer.peer {
        Some(_) if g.draft.is_some() => {
            return Err(CliError::BadArgument {
                name: "--draft-model",
                reason: "a draft model does not run with --peer yet: use one or the other".into(),
            })
        }
        Some(peer) => {
            let source = budget_source(g.budget);
            let kernel = g.kernel.quant_kernel();
            let split = crate::fit::check_split(g.dir, g.context, g.dtype, kernel, g.kv, source, peer)?;
            write!(err, "{}", super::lend::split_lines(&split))?;
            if split.report.refuses() && !g.override_fit {
                return Err(CliError::SplitWouldNotFit { model: label, split: Box::new(split) });
            }
            (split.report.host.fit.clone(), Some(split.placement()?))
        }
        None => {
            let plan = LoadPlan {
                dir: g.dir,
                draft: g.draft,
                context: g.context,
                dtype: g.dtype,
                kernel: g.kernel.quant_kernel(),
                kv: g.kv,
            };
            let report = crate::fit::check_load(&plan, budget_source(g.budget), g.learned)?;
            if report.verdict.refuses() && !g.override_fit {
                let remedies = Some(remedies_for(&report, g.dir, g.dtype, g.kernel));
                return Err(CliError::WouldNotFit { model: label, report: Box::new(report), remedies });
            }
            (report, None)
        }
    };
    if report.verdict.refuses() {
        writeln!(err, "headroom: --override-fit: loading although it {}", verdict_line(&report))?;
    }
    Ok((report, placement))
}

/// The budget the CLI's flags describe.
pub(crate) fn budget_source(budget: &BudgetArgs) -> BudgetSource {
    BudgetSource {
        available_bytes: budget.available_gb.map(gb_to_bytes),
        // The CLI runs in its own process: nothing is loaded to unload.
        freed_by_unload_bytes: 0,
        os_headroom_bytes: gb_to_bytes(budget.headroom_gb),
        ..BudgetSource::default()
    }
}

pub fn run(args: &FitArgs) -> Result<(), CliError> {
    let stdout = std::io::stdout();
    let store = super::chat::existing_store();
    fit(args, &HubEnv::from_process(), store.as_ref(), &mut stdout.lock())
}

/// The command with what this machine measured (`learned`) and its output injected.
pub(crate) fn fit(args: &FitArgs, env: &HubEnv, learned: Option<&Store>, out: &mut dyn Write) -> Result<(), CliError> {
    let dir = resolve_model(Some(&args.model), env)?;
    let kv = args.kv.format()?;
    let draft = args.draft_model.as_deref().map(|d| resolve_model(Some(d), env)).transpose()?;
    let plan = LoadPlan {
        dir: &dir,
        draft: draft.as_deref(),
        context: args.context,
        dtype: args.dtype,
        kernel: args.kernel.quant_kernel(),
        kv,
    };
    let mut report = crate::fit::check_load(&plan, budget_source(&args.budget), learned)?;
    if !args.measured.is_empty() {
        // The user's figures first: the nearest wins, the first among equals.
        let mut measured: Vec<Measured> = args
            .measured
            .iter()
            .map(|&(context_tokens, peak_bytes)| Measured { kv, context_tokens, peak_bytes })
            .collect();
        measured.extend(report.measured.iter().copied());
        let context = report.estimate.context_tokens;
        report = headroom_core::fit::check_with(&report.footprint, context, kv, report.budget.inputs, &measured);
    }
    let remedies =
        if report.verdict.refuses() { remedies_for(&report, &dir, args.dtype, args.kernel) } else { Vec::new() };
    // Two Macs: the same model split between this Mac and the peer, each
    // within its own budget, beside the verdict for this Mac alone.
    let split = match &args.peer.peer {
        Some(peer) => {
            let source = budget_source(&args.budget);
            let kernel = args.kernel.quant_kernel();
            Some(crate::fit::check_split(&dir, args.context, args.dtype, kernel, kv, source, peer)?)
        }
        None => None,
    };
    if args.json {
        let output = FitOutput { report: &report, remedies: &remedies, split: split.as_ref() };
        writeln!(out, "{}", serde_json::to_string(&output)?)?;
    } else {
        let label = match &draft {
            Some(d) => format!("{} with the draft model {}", dir.display(), d.display()),
            None => dir.display().to_string(),
        };
        write!(out, "{}", describe(&label, &report))?;
        if report.verdict.refuses() {
            write!(out, "{}", remedy_lines(&report, &remedies))?;
        }
        if let Some(split) = &split {
            write!(out, "{}", super::lend::split_lines(split))?;
        }
    }
    Ok(())
}

/// What would make the refused `report` of the model in `dir` fit (the
/// app's picker offers the same kinds): a smaller KV cache, another
/// quantization beside it on disk, a shorter context.
pub(crate) fn remedies_for(report: &FitReport, dir: &Path, dtype: ComputeDtype, kernel: KernelArgs) -> Vec<Remedy> {
    let kv = report.estimate.kv_format;
    let candidates = candidates_beside(dir, dtype, kernel);
    headroom_core::remedies::remedies(report, kv, kv.quant().map_or(0, |q| q.start), &candidates)
}

/// The other model folders beside `dir` (its siblings in the same parent
/// folder: where a 4-bit download sits beside the 8-bit one), read as `fit`
/// reads `dir`. A folder that cannot be read is not a candidate.
fn candidates_beside(dir: &Path, dtype: ComputeDtype, kernel: KernelArgs) -> Vec<Candidate> {
    let Some(entries) = dir.parent().and_then(|p| std::fs::read_dir(p).ok()) else { return Vec::new() };
    let mut out: Vec<Candidate> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p != dir && p.join(headroom_core::format::CONFIG_FILE).is_file())
        .filter_map(|p| {
            let inspection = headroom_engine::inspect(&p, dtype, kernel.quant_kernel()).ok()?;
            let name = p.file_name()?.to_string_lossy().into_owned();
            let bits = inspection.config.quantization.as_ref().and_then(|q| u32::try_from(q.default.bits).ok());
            Some(Candidate { id: p.display().to_string(), name, footprint: inspection.footprint, bits })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// "What would fit", one line per remedy with its predicted peak against
/// the budget; or why nothing is offered.
pub(crate) fn remedy_lines(report: &FitReport, remedies: &[Remedy]) -> String {
    let budget = gb(report.budget.budget_bytes);
    if remedies.is_empty() {
        return format!(
            "what would fit      nothing: no KV cache, quantization on disk or context brings it within {budget}\n"
        );
    }
    let mut s = format!("what would fit      (each within the {budget} budget)\n");
    for r in remedies {
        let peak = gb(r.predicted_peak_bytes());
        let line = match r {
            Remedy::KvCache { bits, label, .. } => {
                format!("the KV cache at {bits} bits ({label}): peak {peak}   --kv-bits {bits} --quantized-kv-start 0")
            }
            Remedy::OtherQuantization { name, bits, .. } => {
                let bits = bits.map_or_else(|| "unquantized".to_owned(), |b| format!("{b}-bit"));
                format!("{name} ({bits}, on disk): peak {peak}")
            }
            Remedy::ShorterContext { context_tokens, .. } => {
                format!("a context of {context_tokens} tokens: peak {peak}   --context {context_tokens}")
            }
        };
        s.push_str(&format!("  - {line}\n"));
    }
    s
}

// The lender (in the service crate) says its refusals with the same words.
pub(crate) use crate::fit::{gb, verdict_line};

fn largest_line(report: &FitReport) -> String {
    match report.largest_context_that_fits {
        Some(n) if Some(n) == report.footprint.max_context => format!("{n} tokens (the model's maximum)"),
        Some(n) => format!("{n} tokens"),
        None => "none".into(),
    }
}

/// The overhead terms only some models or backends have, named where they count.
fn overhead_extras(o: &headroom_core::fit::Overhead) -> String {
    [
        (o.dequantized_weight_bytes, "dequantized weight"),
        (o.prefill_slack_bytes, "multi-chunk prefill slack"),
        (o.recurrence_bytes, "linear-attention recurrence"),
    ]
    .iter()
    .filter(|(bytes, _)| *bytes > 0)
    .map(|(bytes, name)| format!(" + {name} {}", gb(*bytes)))
    .collect()
}

/// The multi-line report `headroom fit` prints.
pub(crate) fn describe(model: &str, r: &FitReport) -> String {
    let e = &r.estimate;
    let f = &r.footprint;
    let o = &e.overhead;
    let b = &r.budget;
    let gpu = match (b.inputs.gpu_working_set_bytes, b.limited_by) {
        (Some(g), BudgetLimit::GpuWorkingSet) => format!("; capped by the GPU working set {}", gb(g)),
        (Some(g), BudgetLimit::Memory) => format!("; GPU working set {}", gb(g)),
        (None, _) => String::new(),
    };
    let path = match o.attention_path {
        AttentionPath::Fused => "fused kernel: no score matrix",
        AttentionPath::Unfused => "scores materialized",
        AttentionPath::Quantized => "over the quantized cache: scores materialized",
    };
    format!(
        "model: {model}\n\
         context: {ctx} tokens{beyond}\n\
         \x20 weights          {w:>10}  (exact, from the weight headers){experts}\n\
         \x20 KV cache         {kv:>10}  {kv_label}: {kv_parts}\n\
         \x20 overhead         {oh:>10}  ({att_act} + logits {lg}{more} + fixed {fx}; prefill chunk {chunk})\n\
         \x20 predicted peak   {peak:>10}  ({basis})\n\
         {peak_at}\
         budget             {budget:>10}  (available {avail} + freed by unload {freed} − OS headroom {head}{gpu})\n\
         verdict: {verdict}\n\
         {leftover}\
         largest context that fits (KV cache {kv_label}): {largest}\n",
        ctx = e.context_tokens,
        basis = match r.calibration {
            Some(_) => format!("{}; the formula alone: {}", r.basis, gb(r.formula_peak_bytes)),
            None => r.basis.clone(),
        },
        beyond = match f.max_context {
            // Memory would allow it, but the model was not trained that far.
            Some(max) if e.context_tokens > max =>
                format!(" (beyond the model's maximum of {max}: answers past it degrade)"),
            _ => String::new(),
        },
        w = gb(e.weight_bytes),
        experts = experts_lines(f),
        // Where an earlier prompt chunk peaks: the cache at the full context
        // here, the smaller one the peak counts on its own line.
        kv = gb(if e.peak_positions < e.context_tokens { e.kv_cache_bytes } else { e.kv_peak_bytes() }),
        peak_at = peak_line(e),
        kv_parts = kv_lines(f, e),
        kv_label = r.kv_label,
        oh = gb(o.total_bytes),
        att_act = match o.activation_bytes {
            // The CPU kernel's MLP runs in what the attention call freed
            // (core::fit's `chunk_overhead`): "activations 0.00 GB" read as
            // if they had been forgotten.
            0 if o.attention_bytes > 0 => {
                format!("attention {} ({path}; the MLP's activations fit in it)", gb(o.attention_bytes))
            }
            act => format!("attention {} ({path}) + activations {}", gb(o.attention_bytes), gb(act)),
        },
        lg = gb(o.logits_bytes),
        fx = gb(o.fixed_bytes),
        more = overhead_extras(o),
        chunk = o.chunk_tokens,
        peak = gb(e.predicted_peak_bytes),
        budget = gb(b.budget_bytes),
        avail = gb(b.inputs.available_bytes),
        freed = gb(b.inputs.freed_by_unload_bytes),
        head = gb(b.inputs.os_headroom_bytes),
        verdict = verdict_line(r),
        leftover = leftover_line(r),
        largest = largest_line(r),
    )
}

/// Where the peak is reached before the context is full: the last full
/// prompt chunk's pass, with the cache as long as it then.
fn peak_line(e: &Estimate) -> String {
    if e.peak_positions >= e.context_tokens {
        return String::new();
    }
    format!(
        "  peak reached at  {:>10}  positions: the last full prompt chunk's pass costs more than the \
         shorter last one's, and the KV cache holds {} then\n",
        e.peak_positions,
        gb(e.kv_peak_bytes())
    )
}

/// What the budget leaves after the peak goes to, by the rules every load
/// applies (`headroom_core::fit`): the prompt cache's allowance (other
/// chats' KV states; the chat in use is the KV cache above) at the default
/// ceiling, and MLX's buffer cache.
fn leftover_line(r: &FitReport) -> String {
    if r.spare_bytes <= 0 {
        return String::new();
    }
    let prompts = headroom_core::fit::prompt_cache_limit(r, headroom_core::fit::DEFAULT_PROMPT_CACHE_MAX);
    let buffers = headroom_core::fit::buffer_cache_limit(r, prompts);
    format!(
        "what is left        prompt cache up to {} (other chats' KV states: half of the spare, at most {}), MLX buffer cache up to {}\n",
        gb(prompts),
        gb(headroom_core::fit::DEFAULT_PROMPT_CACHE_MAX),
        gb(buffers)
    )
}

/// A mixture-of-experts model's weights in words: all resident, a few read per token.
fn experts_lines(f: &ModelFootprint) -> String {
    match f.experts {
        None => String::new(),
        Some(x) => format!(
            "\n    experts        {all:>10}  ({count} per layer, all in memory; a token uses {k} of them: {active} of experts read per token)\n    \
             read per token {read:>10}  (the bandwidth bound's weights: one embedding row, attention, router, {k} experts)",
            all = gb(x.resident_bytes),
            count = x.count,
            k = x.per_token,
            active = gb(x.active_bytes),
            read = gb(f.active_weight_bytes),
        ),
    }
}

/// The KV cache's formula, or, where layers keep different amounts, each part in words.
fn kv_lines(f: &ModelFootprint, e: &Estimate) -> String {
    let full = f.kv_layers.iter().find(|g| g.kind() == KvKind::Full);
    let simple = f.kv_layers.iter().all(|g| g.kind() == KvKind::Full);
    let stored = if e.kv_quantized { e.kv_format } else { KvFormat::Float };
    let full_formula = |layers: u64, kvh: u64, hd: u64| {
        match stored.quant() {
        None => format!(
            "2 × {layers} layers × {kvh} KV heads × {hd} × {} positions × {} bytes",
            e.kv_positions, f.kv_bytes_per_element
        ),
        Some(q) => format!(
            "2 × {layers} layers × {kvh} KV heads × {} positions × {} bytes ({hd} × {} bits + a scale and a bias of {} bytes per {} elements)",
            e.kv_positions,
            stored.bytes_per_head_position(hd, f.kv_bytes_per_element),
            q.bits,
            f.kv_bytes_per_element,
            q.group_size
        ),
    }
    };
    let conversion = if e.kv_before_conversion_bytes > e.kv_cache_bytes {
        format!("; {} in float until it is converted", gb(e.kv_before_conversion_bytes))
    } else {
        String::new()
    };
    if simple {
        let (layers, kvh, hd) = full.map_or((f.layers, f.kv_heads, f.head_dim), |g| (g.layers, g.kv_heads, g.head_dim));
        return format!("({}{conversion})", full_formula(layers, kvh, hd));
    }
    let mut out = String::from("(only part of it grows with the context)");
    for g in &f.kv_layers {
        let line = match g.kind() {
            KvKind::Full => format!(
                "\n    full attention {:>10}  ({} layers see the whole context: {})",
                gb(e.kv_full_bytes),
                g.layers,
                full_formula(g.layers, g.kv_heads, g.head_dim)
            ),
            KvKind::Window => format!(
                "\n    sliding window {:>10}  ({} layers see only the last {} positions: they stop growing there \
                 (up to {} while a prompt chunk is read))",
                gb(e.kv_window_bytes),
                g.layers,
                g.window.unwrap_or(0),
                g.window.map_or(0, KvLayers::window_peak_positions),
            ),
            KvKind::State => format!(
                "\n    linear state   {:>10}  ({} linear-attention layers keep a fixed {} each, however long the context)",
                gb(e.kv_state_bytes),
                g.layers,
                mb(g.state_bytes),
            ),
        };
        out.push_str(&line);
    }
    out
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// The one-line refusal `generate` fails with.
pub(crate) fn refusal(model: &str, r: &FitReport) -> String {
    let e = &r.estimate;
    format!(
        "refusing to load `{model}`: it {verdict}. Predicted peak {peak} (weights {w} + KV cache {kv} ({kv_label}) + overhead {oh} at {ctx} tokens) \
         vs budget {budget} (available {avail} + freed by unload {freed} − OS headroom {head}); largest context that fits: {largest}. \
         Nothing was loaded. Use a smaller --context, free memory, or pass --override-fit to load anyway.",
        verdict = verdict_line(r),
        peak = gb(e.predicted_peak_bytes),
        w = gb(e.weight_bytes),
        kv = gb(e.kv_peak_bytes()),
        kv_label = r.kv_label,
        oh = gb(e.overhead.total_bytes),
        ctx = e.context_tokens,
        budget = gb(r.budget.budget_bytes),
        avail = gb(r.budget.inputs.available_bytes),
        freed = gb(r.budget.inputs.freed_by_unload_bytes),
        head = gb(r.budget.inputs.os_headroom_bytes),
        largest = largest_line(r),
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
    use headroom_test_support::{scratch, Scratch};

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(argv: &[&str]) -> FitArgs {
        match Cli::try_parse_from([&["headroom", "fit"], argv].concat()).unwrap().command {
            Some(Command::Fit(args)) => args,
            other => panic!("{other:?}"),
        }
    }

    fn demo(tag: &str) -> Scratch {
        let dir = scratch(&format!("fit-{tag}"));
        write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).unwrap();
        dir
    }

    #[test]
    fn a_draft_model_adds_its_weights_and_cache_to_the_verdict() {
        let (dir, draft) = (demo("target"), scratch("fit-draft"));
        write_demo_model(&draft, &DemoSpec { seed: 9, ..DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four) })
            .unwrap();
        let (d, dr) = (dir.to_string_lossy().into_owned(), draft.to_string_lossy().into_owned());
        let json = |extra: &[&str]| {
            let mut out = Vec::new();
            let argv = [&[d.as_str(), "--context", "1024", "--available-gb", "8", "--json"], extra].concat();
            fit(&parse(&argv), &HubEnv::default(), None, &mut out).unwrap();
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()
        };
        let (alone, both) = (json(&[]), json(&["--draft-model", &dr]));
        let e = |v: &serde_json::Value, k: &str| v["estimate"][k].as_u64().unwrap();
        assert_eq!(e(&both, "weight_bytes"), 2 * e(&alone, "weight_bytes"), "the same shape twice");
        assert_eq!(e(&both, "kv_cache_bytes"), 2 * e(&alone, "kv_cache_bytes"));
        assert!(e(&both, "predicted_peak_bytes") > e(&alone, "predicted_peak_bytes"));
        let mut out = Vec::new();
        fit(&parse(&[&d, "--draft-model", &dr]), &HubEnv::default(), None, &mut out).unwrap();
        assert!(String::from_utf8_lossy(&out).contains("with the draft model"), "{}", String::from_utf8_lossy(&out));
    }

    #[test]
    fn text_report_shows_every_part() {
        let dir = demo("text");
        let d = dir.to_string_lossy().into_owned();
        let mut out = Vec::new();
        fit(&parse(&[&d, "--context", "1024", "--available-gb", "8"]), &HubEnv::default(), None, &mut out).unwrap();
        let text = String::from_utf8_lossy(&out);
        for needle in [
            "context: 1024 tokens",
            "weights",
            "KV cache",
            "overhead",
            "predicted peak",
            "budget",
            "available 8.00 GB",
            "OS headroom 4.00 GB",
            "verdict: fits",
            "what is left        prompt cache up to",
            "largest context that fits (KV cache 16-bit float):",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        assert!(!text.contains("beyond the model's maximum"), "{text}");

        // The tiny demo model is trained for 4096 positions: more fits in
        // memory but is said to be past what the model can do.
        let mut out = Vec::new();
        fit(&parse(&[&d, "--context", "8192", "--available-gb", "8"]), &HubEnv::default(), None, &mut out).unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("context: 8192 tokens (beyond the model's maximum of 4096"), "{text}");
    }

    #[test]
    fn json_report_and_a_budget_too_small() {
        let dir = demo("json");
        let d = dir.to_string_lossy().into_owned();
        let mut out = Vec::new();
        fit(&parse(&[&d, "--json", "--available-gb", "4", "--headroom-gb", "4"]), &HubEnv::default(), None, &mut out)
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["verdict"]["kind"], "cannot_fit");
        assert_eq!(v["budget"]["budget_bytes"], 0);
        assert!(v["estimate"]["weight_bytes"].as_u64().is_some_and(|w| w > 0));
        assert!(v["largest_context_that_fits"].is_null());

        // --dtype f32: what `generate --dtype f32` will hold (floats widened).
        let json = |extra: &[&str]| {
            let mut out = Vec::new();
            fit(
                &parse(&[&[d.as_str(), "--json", "--available-gb", "8"], extra].concat()),
                &HubEnv::default(),
                None,
                &mut out,
            )
            .unwrap();
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()
        };
        let (native, wide) = (json(&[]), json(&["--dtype", "f32"]));
        assert_eq!(
            (native["footprint"]["kv_bytes_per_element"].as_u64(), wide["footprint"]["kv_bytes_per_element"].as_u64()),
            (Some(2), Some(4))
        );
        assert!(wide["estimate"]["weight_bytes"].as_u64() > native["estimate"]["weight_bytes"].as_u64());
        assert!(Cli::try_parse_from(["headroom", "fit", "m", "--dtype", "int8"]).is_err());
        assert_eq!((native["basis"].as_str(), native["calibration"].is_null()), (Some("estimated"), true));

        // A peak measured here calibrates the prediction, and says so.
        let formula = native["estimate"]["predicted_peak_bytes"].as_u64().unwrap_or_default();
        let measured = format!("8192:{}", formula + (300 << 20));
        let same = json(&["--measured", &measured]);
        assert_eq!(same["estimate"]["predicted_peak_bytes"].as_u64(), Some(formula + (300 << 20)));
        assert_eq!(same["formula_peak_bytes"].as_u64(), Some(formula), "the formula's own figure is kept");
        assert_eq!(same["calibration"]["at_context"].as_u64(), Some(8192));
        assert!(same["basis"].as_str().is_some_and(|b| b.starts_with("measured here at 8K: ")), "{same}");
        let mut text = Vec::new();
        fit(&parse(&[d.as_str(), "--available-gb", "8", "--measured", &measured]), &HubEnv::default(), None, &mut text)
            .unwrap();
        let text = String::from_utf8_lossy(&text);
        assert!(text.contains("predicted peak") && text.contains("(measured here at 8K: "), "{text}");
        assert!(text.contains("; the formula alone: "), "{text}");
        for bad in ["8192", "0:5", "8192:0", "x:1", "1:-5"] {
            assert!(Cli::try_parse_from(["headroom", "fit", "m", "--measured", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_must_be_non_negative_numbers() {
        for bad in ["-1", "lots", "NaN", "inf"] {
            assert!(Cli::try_parse_from(["headroom", "fit", "m", "--headroom-gb", bad]).is_err(), "{bad}");
        }
        assert_eq!(gb_to_bytes(1.5), 3 << 29);
    }
}
