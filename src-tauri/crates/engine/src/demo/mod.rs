//! Demo models: random weights in the exact mlx-community layout, written by
//! the project itself so that tests and demos never download anything.
//!
//! A demo model folder holds what `mlx_lm.convert` would write for a real
//! checkpoint: `config.json` (with `quantization` when quantized),
//! `model.safetensors` or shards + `model.safetensors.index.json`,
//! `tokenizer.json` (a real byte-level BPE vocabulary trained here from the
//! text in `assets/demo/`), `tokenizer_config.json` with a ChatML or Llama-3
//! chat template, and `generation_config.json`. mlx-lm 0.32.2 loads these
//! folders unchanged. The same [`DemoSpec`] always gives byte-identical files.
//!
//! Sizes: `tiny` and `small` are a few MB at most. The real-shape presets
//! write what the real checkpoints weigh: Qwen2.5-0.5B ≈ 0.3 GB at 4-bit,
//! 0.5 GB at 8-bit, 1 GB at bf16; 7B ≈ 4.3 / 8.1 / 15.2 GB; 14B ≈ 8.3 / 15.7 /
//! 29.5 GB. They are generated tensor by tensor (never more than ~64 MB of
//! f32 at once) and written shard by shard, so peak memory is about one
//! shard (`max_shard_bytes`, 5 GiB by default as in mlx-lm) plus one tensor.

mod config;
mod error;
mod hostile;
mod tokenizer;
mod weights;

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use config::ModelShape;
pub use error::DemoError;
pub use hostile::{write_hostile_corpus, Caught, HostileCase};

/// mlx-lm's shard limit (`MAX_FILE_SIZE_GB = 5`, in GiB).
pub const MLX_LM_MAX_SHARD_BYTES: u64 = 5 << 30;

/// The architecture, i.e. the `model_type` written to config.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Qwen2 / Qwen2.5: q/k/v projections carry biases; ChatML tokenizer.
    Qwen2,
    /// Qwen3: explicit `head_dim`, per-head q/k RMS norms; ChatML tokenizer.
    Qwen3,
    /// Llama 3.x: `rope_scaling` of type `llama3`; Llama-3 tokenizer.
    Llama,
    /// Mistral: the Llama layout under its own `model_type`; Llama-3 tokenizer.
    Mistral,
    /// Qwen3 MoE: Qwen3's attention, a mixture of SwiGLU experts per layer; ChatML.
    Qwen3Moe,
    /// Gemma 3's language model: sliding-window layers and global ones,
    /// Gemma norms, GELU MLP; ChatML tokenizer (the demo has no Gemma one).
    Gemma3Text,
    /// Qwen3.5: gated delta nets (linear attention) and gated full attention; ChatML.
    Qwen3_5,
    /// Qwen3.5 with experts and a shared expert; ChatML.
    Qwen3_5Moe,
}

impl Arch {
    /// The dense, full-attention architectures (the writer's parity with mlx-lm covers them).
    pub const ALL: [Arch; 4] = [Arch::Qwen2, Arch::Qwen3, Arch::Llama, Arch::Mistral];
    /// Every architecture the writer knows.
    pub const EVERY: [Arch; 8] = [
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Llama,
        Arch::Mistral,
        Arch::Qwen3Moe,
        Arch::Gemma3Text,
        Arch::Qwen3_5,
        Arch::Qwen3_5Moe,
    ];
    const CLI: [Arch; 8] = Self::EVERY;

    /// The HF `model_type`, also the CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Llama => "llama",
            Arch::Mistral => "mistral",
            Arch::Qwen3Moe => "qwen3_moe",
            Arch::Gemma3Text => "gemma3_text",
            Arch::Qwen3_5 => "qwen3_5",
            Arch::Qwen3_5Moe => "qwen3_5_moe",
        }
    }

    fn has_qkv_bias(self) -> bool {
        self == Arch::Qwen2
    }

    fn has_qk_norm(self) -> bool {
        !matches!(self, Arch::Qwen2 | Arch::Llama | Arch::Mistral)
    }

    /// Where the language model's tensors sit (mlx-lm saves Qwen3.5 under `language_model.`).
    fn prefix(self) -> &'static str {
        match self {
            Arch::Qwen3_5 | Arch::Qwen3_5Moe => "language_model.",
            _ => "",
        }
    }
}

/// The shape of the model: two small ones for tests and the real shapes of
/// the Qwen2.5 models the product is about (taken from their HF configs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Preset {
    /// 2 layers × 64 wide, vocabulary = the demo tokenizer's: for unit tests.
    Tiny,
    /// Tiny, but with heads 64 wide (2 layers × 256, 4/2 heads): the
    /// smallest model whose keys and values MLX can quantize with mlx-lm's
    /// KV group size of 64 (the quantized-KV tests and their parity).
    TinyKv,
    /// 32 layers × 512 wide, 8/8 heads of 64, 64K positions: a small model
    /// whose KV cache is most of its memory at a long context (4.3 GB in
    /// bf16 at 64K, 2.3 GB at 8 bits), for the "fits with an 8-bit KV
    /// cache" remedy end to end.
    KvHeavy,
    /// 12 layers × 256 wide: still quick on a CPU, big enough to time.
    Small,
    /// 12 layers × 768 wide, 12/4 heads: about 100 M parameters (fit calibration).
    Medium,
    /// Qwen2.5-0.5B: 24 layers × 896, 14/2 heads, tied embeddings.
    Qwen25_0_5B,
    /// Qwen2.5-7B: 28 layers × 3584, 28/4 heads, untied.
    Qwen25_7B,
    /// Qwen2.5-14B: 48 layers × 5120, 40/8 heads, untied.
    Qwen25_14B,
    /// Qwen3-30B-A3B (qwen3_moe): 48 layers × 2048, 128 experts of 768, 8 per token.
    Qwen3_30bA3b,
    /// Gemma-3-12B (gemma3_text): 48 layers × 3840, 16/8 heads of 256, window 1024, 5 sliding : 1 global.
    Gemma3_12b,
    /// A Qwen3.5 MoE shape (qwen3_5_moe): 40 layers × 2048, 3 linear : 1 full,
    /// 256 experts of 512, 8 per token, a shared expert.
    Qwen3_5_35bA3b,
}

impl Preset {
    pub const ALL: [Preset; 7] = [
        Preset::Tiny,
        Preset::TinyKv,
        Preset::Small,
        Preset::Medium,
        Preset::Qwen25_0_5B,
        Preset::Qwen25_7B,
        Preset::Qwen25_14B,
    ];
    const CLI: [Preset; 11] = [
        Preset::Tiny,
        Preset::TinyKv,
        Preset::KvHeavy,
        Preset::Small,
        Preset::Medium,
        Preset::Qwen25_0_5B,
        Preset::Qwen25_7B,
        Preset::Qwen25_14B,
        Preset::Qwen3_30bA3b,
        Preset::Gemma3_12b,
        Preset::Qwen3_5_35bA3b,
    ];

    /// The architecture a real-shape preset of a non-Llama layout belongs to.
    pub fn arch(self) -> Option<Arch> {
        match self {
            Preset::Qwen3_30bA3b => Some(Arch::Qwen3Moe),
            Preset::Gemma3_12b => Some(Arch::Gemma3Text),
            Preset::Qwen3_5_35bA3b => Some(Arch::Qwen3_5Moe),
            _ => None,
        }
    }

    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::TinyKv => "tiny-kv",
            Preset::KvHeavy => "kv-heavy",
            Preset::Small => "small",
            Preset::Medium => "medium",
            Preset::Qwen25_0_5B => "qwen2.5-0.5b",
            Preset::Qwen25_7B => "qwen2.5-7b",
            Preset::Qwen25_14B => "qwen2.5-14b",
            Preset::Qwen3_30bA3b => "qwen3-30b-a3b",
            Preset::Gemma3_12b => "gemma-3-12b",
            Preset::Qwen3_5_35bA3b => "qwen3.5-35b-a3b",
        }
    }
}

/// How the linear layers and embeddings are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bits {
    /// Affine 4-bit (packed u32 + bf16 scales/biases).
    Four,
    /// Affine 8-bit.
    Eight,
    /// Unquantized bfloat16.
    Sixteen,
}

impl Bits {
    pub const ALL: [Bits; 3] = [Bits::Four, Bits::Eight, Bits::Sixteen];
    const CLI: [Bits; 3] = Self::ALL;

    /// The quantization bit width, `None` for unquantized bf16.
    pub fn quantized(self) -> Option<i32> {
        match self {
            Bits::Four => Some(4),
            Bits::Eight => Some(8),
            Bits::Sixteen => None,
        }
    }

    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Bits::Four => "4",
            Bits::Eight => "8",
            Bits::Sixteen => "16",
        }
    }
}

macro_rules! cli_enum {
    ($ty:ty, $what:literal, $expected:literal, [$($extra:literal => $val:expr),*]) => {
        impl FromStr for $ty {
            type Err = DemoError;
            fn from_str(s: &str) -> Result<Self, DemoError> {
                let lower = s.to_ascii_lowercase();
                if let Some(v) = Self::CLI.into_iter().find(|v| v.as_str() == lower) {
                    return Ok(v);
                }
                match lower.as_str() {
                    $($extra => Ok($val),)*
                    _ => Err(DemoError::UnknownOption { what: $what, given: s.to_owned(), expected: $expected }),
                }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
cli_enum!(Arch, "architecture", "qwen2, qwen3, llama, mistral, qwen3_moe, gemma3_text, qwen3_5, qwen3_5_moe", []);
cli_enum!(
    Preset,
    "preset",
    "tiny, tiny-kv, small, medium, qwen2.5-0.5b, qwen2.5-7b, qwen2.5-14b, qwen3-30b-a3b, gemma-3-12b, qwen3.5-35b-a3b",
    []
);
cli_enum!(Bits, "bit width", "4, 8, 16", ["bf16" => Bits::Sixteen]);

/// Everything that determines a demo model; equal specs give identical files.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DemoSpec {
    pub arch: Arch,
    pub preset: Preset,
    pub bits: Bits,
    /// Quantization group size (32, 64 or 128); ignored for bf16.
    pub group_size: i32,
    /// Seeds the random weights.
    pub seed: u64,
    /// Quantized models only: store `model.layers.0.mlp.down_proj` with
    /// group size 32 and the other bit width (8 for a 4-bit model, 4 for an
    /// 8-bit one), declared as a per-layer entry inside `quantization`, as
    /// mlx-lm's mixed-precision recipes do.
    pub mixed_precision: bool,
    /// `None`: one `model.safetensors`, no index. `Some(n)`: exactly what
    /// mlx-lm writes: shards of at most `n` bytes (a bigger tensor gets a
    /// shard of its own), named `model-0000i-of-0000N.safetensors` (or
    /// `model.safetensors` if only one), plus `model.safetensors.index.json`.
    pub max_shard_bytes: Option<u64>,
    /// Write the headers and leave the data as holes (a sparse file): the
    /// real shapes' fit can then be checked without writing gigabytes.
    /// Such a model cannot be run.
    pub sparse: bool,
    /// A ChatML model only: a chat template that thinks, as Qwen3's
    /// thinking releases do: the generation prompt opens `<think>` (and
    /// closes it empty with `enable_thinking` false). The random weights
    /// never close it themselves; a thinking budget does.
    pub thinking: bool,
}

impl DemoSpec {
    /// Group size 64, seed 0, uniform precision, mlx-lm's 5 GiB shards.
    pub fn new(arch: Arch, preset: Preset, bits: Bits) -> Self {
        Self {
            arch,
            preset,
            bits,
            group_size: 64,
            seed: 0,
            mixed_precision: false,
            max_shard_bytes: Some(MLX_LM_MAX_SHARD_BYTES),
            sparse: false,
            thinking: false,
        }
    }

    /// The dimensions, with the vocabulary resolved (the demo tokenizer's
    /// size rounded up to a multiple of 64 where the preset does not fix it).
    pub fn shape(&self) -> Result<ModelShape, DemoError> {
        let mut shape = config::preset_shape(self.preset, self.arch);
        if shape.vocab_size == 0 {
            let tok = tokenizer::trained(tokenizer::Flavor::of(self.arch))?;
            shape.vocab_size = round_up(tok.vocab_size as i32, 64);
        }
        Ok(shape)
    }

    /// Bytes of tensor data the weights will take on disk (the index's
    /// `total_size`), so a caller can warn before writing gigabytes.
    pub fn weight_bytes(&self) -> Result<u64, DemoError> {
        let tokens = tokenizer::trained(tokenizer::Flavor::of(self.arch))?.vocab_size;
        let plan = weights::Plan::new(self, &self.shape()?, tokens as i32)?;
        Ok(plan.total_bytes())
    }
}

/// What [`write_demo_model`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoSummary {
    /// Every file written, sorted by name.
    pub files: Vec<PathBuf>,
    /// Their sizes on disk, summed.
    pub total_bytes: u64,
    /// Tensor bytes of the weights alone (the index's `total_size`).
    pub weight_bytes: u64,
    /// Parameters as mlx-lm counts them: a quantized matrix counts as its
    /// dense size; scales and biases do not count.
    pub parameters: u64,
    /// Number of safetensors files.
    pub shards: usize,
    /// `vocab_size` in config.json (embedding rows).
    pub vocab_size: i32,
    /// Tokens the tokenizer knows, special tokens included (≤ `vocab_size`).
    pub tokenizer_vocab_size: usize,
}

/// Writes a demo model into `dir` (created if needed). Files of a previous
/// demo model there (`model*.safetensors`, the index) are replaced, so a
/// folder never mixes two models' shards.
pub fn write_demo_model(dir: &Path, spec: &DemoSpec) -> Result<DemoSummary, DemoError> {
    let shape = spec.shape()?;
    let flavor = tokenizer::Flavor::of(spec.arch);
    if spec.thinking && flavor != tokenizer::Flavor::ChatMl {
        return Err(DemoError::InvalidSpec {
            reason: format!("a thinking template is ChatML's; {:?} is not ChatML", spec.arch),
        });
    }
    let tok = tokenizer::trained(flavor)?;
    let plan = weights::Plan::new(spec, &shape, tok.vocab_size as i32)?;

    fs::create_dir_all(dir).map_err(|source| DemoError::Io { path: dir.to_owned(), source })?;
    remove_stale_weights(dir)?;

    let mut files = Vec::new();
    let mut write = |name: &str, text: &str| -> Result<(), DemoError> {
        let path = dir.join(name);
        fs::write(&path, text).map_err(|source| DemoError::Io { path: path.clone(), source })?;
        files.push(path);
        Ok(())
    };
    write("tokenizer.json", &tok.json)?;
    write("tokenizer_config.json", &tokenizer::tokenizer_config_json(flavor, tok, spec.thinking)?)?;
    write("config.json", &config::config_json(spec, &shape, tok)?)?;
    write("generation_config.json", &config::generation_config_json(flavor, tok)?)?;

    let written = if spec.sparse { plan.write_sparse(dir)? } else { plan.write(dir)? };
    let shards = written.iter().filter(|p| p.extension().is_some_and(|e| e == "safetensors")).count();
    files.extend(written);
    files.sort();

    let mut total_bytes = 0;
    for path in &files {
        let meta = fs::metadata(path).map_err(|source| DemoError::Io { path: path.clone(), source })?;
        total_bytes += meta.len();
    }
    Ok(DemoSummary {
        files,
        total_bytes,
        weight_bytes: plan.total_bytes(),
        parameters: plan.parameters(),
        shards,
        vocab_size: shape.vocab_size,
        tokenizer_vocab_size: tok.vocab_size,
    })
}

/// Removes weight files of an earlier demo model (only names this writer uses).
fn remove_stale_weights(dir: &Path) -> Result<(), DemoError> {
    let entries = fs::read_dir(dir).map_err(|source| DemoError::Io { path: dir.to_owned(), source })?;
    for entry in entries {
        let entry = entry.map_err(|source| DemoError::Io { path: dir.to_owned(), source })?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name == "model.safetensors" || name == weights::INDEX_FILE || weights::is_shard_name(name) {
            let path = entry.path();
            fs::remove_file(&path).map_err(|source| DemoError::Io { path, source })?;
        }
    }
    Ok(())
}

fn round_up(n: i32, multiple: i32) -> i32 {
    (n + multiple - 1) / multiple * multiple
}

#[cfg(test)]
mod tests;
