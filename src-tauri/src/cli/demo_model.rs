//! `headroom demo-model`: writes a random-weight model in the mlx-community
//! layout, or (`--hostile`) the corpus of broken and hostile model folders
//! the tests run through every path that reads a model.

use std::path::PathBuf;

use clap::Args;
use headroom_engine::demo::{write_demo_model, write_hostile_corpus, Arch, Bits, Caught, DemoSpec, Preset};

use super::CliError;

#[derive(Debug, Clone, Args)]
pub struct DemoModelArgs {
    /// Folder to write (created if needed; earlier weight files are replaced).
    pub dir: PathBuf,
    /// Shape: tiny | tiny-kv | small | medium | qwen2.5-0.5b | qwen2.5-7b | qwen2.5-14b |
    /// qwen3-30b-a3b | gemma-3-12b | qwen3.5-35b-a3b (the last three with their
    /// own --arch).
    #[arg(long, default_value = "tiny")]
    pub preset: Preset,
    /// Architecture (config.json model_type): qwen2 | qwen3 | llama | mistral |
    /// qwen3_moe | gemma3_text | qwen3_5 | qwen3_5_moe.
    #[arg(long, default_value = "qwen2")]
    pub arch: Arch,
    /// 4 or 8 (affine-quantized, group size 64) or 16 (bf16).
    #[arg(long, default_value = "4")]
    pub bits: Bits,
    /// Seed of the random weights (same seed, same files).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write every header but leave the tensor data as holes (a sparse
    /// file): `headroom fit` sees the real model, the disk holds kilobytes.
    /// Such a model cannot be run.
    #[arg(long)]
    pub sparse: bool,
    /// A chat template that thinks (ChatML architectures): the answer
    /// starts inside `<think>`, which the random weights never close; a
    /// thinking budget closes it (`--think budget N`). For showing and
    /// testing the thinking path, not the quality of any thought.
    #[arg(long)]
    pub thinking: bool,
    /// Write the hostile corpus instead: one folder per broken or hostile
    /// model (sizes out of range, lying headers, bad tokenizers, looping
    /// templates, …) inside DIR, and list what each must fail with.
    #[arg(long, conflicts_with_all = ["preset", "arch", "bits", "seed", "sparse", "thinking"])]
    pub hostile: bool,
}

pub fn run(args: &DemoModelArgs) -> Result<(), CliError> {
    if args.hostile {
        for case in write_hostile_corpus(&args.dir)? {
            let caught = match case.caught {
                Caught::Headers => "config/headers",
                Caught::Load => "load",
            };
            println!("{}\t{caught}\t{}", case.dir.display(), case.needle);
        }
        return Ok(());
    }
    let spec = DemoSpec {
        seed: args.seed,
        sparse: args.sparse,
        thinking: args.thinking,
        ..DemoSpec::new(args.arch, args.preset, args.bits)
    };
    let bytes = spec.weight_bytes()?;
    // The real-shape presets take minutes and gigabytes: say so before starting.
    if bytes > 256 << 20 && !args.sparse {
        eprintln!("headroom: writing {:.1} GB of weights to {}", bytes as f64 / 1e9, args.dir.display());
    }
    let summary = write_demo_model(&args.dir, &spec)?;
    println!(
        "wrote {} {} {}-bit demo model to {}: {} files, {:.1} MB, {} parameters, vocabulary {}",
        args.arch,
        args.preset,
        args.bits,
        args.dir.display(),
        summary.files.len(),
        summary.total_bytes as f64 / 1e6,
        summary.parameters,
        summary.vocab_size,
    );
    Ok(())
}
