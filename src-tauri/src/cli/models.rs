//! `headroom models`: what the model picker would offer (the app's models
//! folder and the Hugging Face cache), with disk size and fit verdict.

use std::io::Write;
use std::path::Path;

use clap::Args;
use headroom_engine::worker::DEFAULT_CONTEXT_LIMIT;

use super::fit::{budget_source, gb, verdict_line, BudgetArgs};
use super::kernel::KernelArgs;
use super::CliError;
use crate::models::{list_models_with_fit, HubEnv, ModelEntry};
use crate::Locations;

#[derive(Debug, Clone, Args)]
pub struct ModelsArgs {
    #[command(flatten)]
    pub budget: BudgetArgs,
    #[command(flatten)]
    pub kernel: KernelArgs,
    /// Print one JSON array (each model with its whole fit report).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &ModelsArgs) -> Result<(), CliError> {
    // The same folder the app uses, found the same way.
    let locations = Locations::from_env(|| crate::platform_app_data_dir().ok_or(CliError::NoDataDir))?;
    let stdout = std::io::stdout();
    models(args, &locations.data_dir, &locations.hub, &mut stdout.lock())
}

pub(crate) fn models(args: &ModelsArgs, data_dir: &Path, env: &HubEnv, out: &mut dyn Write) -> Result<(), CliError> {
    let mut source = budget_source(&args.budget);
    // One reading for the whole list, so every verdict is against the same budget.
    if source.available_bytes.is_none() {
        source.available_bytes = Some(headroom_memory::read()?.available);
    }
    let list = list_models_with_fit(
        data_dir,
        env,
        args.kernel.quant_kernel(),
        headroom_core::kv::KvFormat::Float,
        DEFAULT_CONTEXT_LIMIT,
        Some(source),
        super::chat::existing_store_in(data_dir).as_ref(),
    );
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&list)?)?;
    } else {
        write!(out, "{}", table(&list, data_dir, env))?;
    }
    Ok(())
}

fn table(list: &[ModelEntry], data_dir: &Path, env: &HubEnv) -> String {
    if list.is_empty() {
        let hubs = env.hub_dirs().iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
        return format!(
            "no models found in {} or the Hugging Face cache ({hubs})\n",
            data_dir.join(crate::locations::MODELS_DIR).display()
        );
    }
    let rows: Vec<[String; 6]> = list
        .iter()
        .map(|m| {
            [
                m.id.clone(),
                m.arch.clone().unwrap_or_else(|| "?".into()),
                m.bits.map_or_else(|| "-".into(), |b| b.to_string()),
                gb(m.size_bytes),
                m.fit.as_ref().map_or_else(|| "?".into(), |f| gb(f.estimate.predicted_peak_bytes)),
                match (&m.problem, &m.fit) {
                    (Some(p), _) => format!("cannot load: {}", p.message),
                    (None, Some(f)) => verdict_line(f),
                    (None, None) => "unknown".into(),
                },
            ]
        })
        .collect();
    let header = ["ID", "ARCH", "BITS", "SIZE", "PEAK", "VERDICT"];
    let mut text = format!("verdicts at {DEFAULT_CONTEXT_LIMIT} tokens of context\n");
    text.extend(super::table::lines(header, &rows, |i| (2..5).contains(&i)));
    text
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(argv: &[&str]) -> ModelsArgs {
        match Cli::try_parse_from([&["headroom", "models"], argv].concat()).unwrap().command {
            Some(Command::Models(args)) => args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lists_the_own_folder_with_size_and_verdict_as_a_table_and_json() {
        let tmp = headroom_test_support::scratch("cli-models");
        let root = tmp.join("data");
        let data = root.join("data");
        let model = data.join(crate::locations::MODELS_DIR).join("demo-tiny");
        write_demo_model(&model, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Four)).unwrap();
        let hub = root.join("empty-hub");
        std::fs::create_dir_all(&hub).unwrap();
        let env = HubEnv { hf_hub_cache: Some(hub.into()), ..HubEnv::default() };

        let mut out = Vec::new();
        models(&parse(&["--available-gb", "16"]), &data, &env, &mut out).unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("8192 tokens"), "{text}");
        let row = text.lines().find(|l| l.starts_with("demo-tiny")).unwrap_or_else(|| panic!("{text}"));
        for cell in ["qwen2", " 4 ", " GB", "fits"] {
            assert!(row.contains(cell), "{cell} in {row}");
        }

        let mut out = Vec::new();
        models(&parse(&["--json", "--available-gb", "0"]), &data, &env, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let list = v.as_array().unwrap_or_else(|| panic!("{v}"));
        assert_eq!(list.len(), 1, "{v}");
        assert_eq!(
            (list[0]["id"].as_str(), list[0]["arch"].as_str(), list[0]["bits"].as_u64()),
            (Some("demo-tiny"), Some("qwen2"), Some(4))
        );
        assert!(list[0]["size_bytes"].as_u64().is_some_and(|b| b > 0), "{v}");
        assert_eq!(list[0]["fit"]["estimate"]["context_tokens"], 8192);
        assert_eq!(list[0]["fit"]["verdict"]["kind"], "cannot_fit");

        let mut out = Vec::new();
        models(&parse(&["--available-gb", "16"]), &root.join("nowhere"), &env, &mut out).unwrap();
        assert!(String::from_utf8_lossy(&out).starts_with("no models found in"));
    }
}
