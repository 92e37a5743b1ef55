//! `--kernel auto|fused|cpu`: the quantized-matmul kernel, one flag for
//! every subcommand that loads a model (bench, generate, serve, chat), over
//! the same `KernelChoice` the app's settings hold.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use headroom_core::settings::KernelChoice;
use headroom_engine::QuantKernel;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Args)]
pub struct KernelArgs {
    /// Quantized matmul: auto (what suits the device: cpu on MLX's CPU
    /// backend, fused on Metal), fused (MLX's quantized_matmul in the
    /// activations' dtype for every shape, as mlx-lm: gives mlx-lm's tokens),
    /// or cpu (in f32; prompt chunks through the weight dequantized once and
    /// BLAS: fast on the CPU backend, its tokens may differ from mlx-lm's).
    #[arg(long, default_value = "auto", value_parser = kernel_parser())]
    pub kernel: KernelChoice,
}

impl KernelArgs {
    /// The kernel the engine loads with.
    pub fn quant_kernel(self) -> QuantKernel {
        QuantKernel::choose(self.kernel)
    }
}

fn kernel_parser() -> impl TypedValueParser<Value = KernelChoice> {
    PossibleValuesParser::new(KernelChoice::ALL.map(KernelChoice::as_str))
        .map(|s| KernelChoice::ALL.into_iter().find(|k| k.as_str() == s).unwrap_or_default())
}
