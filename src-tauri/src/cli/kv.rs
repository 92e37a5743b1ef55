//! `--kv-bits`, `--kv-group-size`, `--quantized-kv-start`: the KV cache's
//! quantization, mlx-lm's three flags with its names and defaults, one set
//! for every subcommand that loads or checks a model (generate, chat, bench,
//! fit, serve), over the one `KvFormat` the engine and the fit share.

use clap::Args;
use headroom_core::kv::KvFormat;

use super::CliError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Args)]
pub struct KvArgs {
    /// Keep the KV cache quantized to this many bits (8 or 4; MLX also takes
    /// 2, 3, 5, 6), as mlx-lm's --kv-bits: about 0.53× (8-bit) or 0.28×
    /// (4-bit) of a bf16 cache. Unset: the activations' float type.
    #[arg(long)]
    pub kv_bits: Option<u64>,
    /// Elements per scale and bias of the quantized cache: 32, 64 (default) or 128.
    #[arg(long, requires = "kv_bits")]
    pub kv_group_size: Option<u64>,
    /// Tokens the cache stays in float before it is quantized (default
    /// 5000, mlx-lm's; 0 quantizes from the first prompt chunk on).
    #[arg(long, requires = "kv_bits")]
    pub quantized_kv_start: Option<u64>,
}

impl KvArgs {
    /// The format the flags describe, checked.
    pub fn format(self) -> Result<KvFormat, CliError> {
        KvFormat::from_parts(self.kv_bits, self.kv_group_size, self.quantized_kv_start)
            .map_err(|e| CliError::BadArgument { name: "KV cache flags", reason: e.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Probe {
        #[command(flatten)]
        kv: KvArgs,
    }

    fn parse(argv: &[&str]) -> Result<KvFormat, String> {
        let probe = Probe::try_parse_from([&["probe"], argv].concat()).map_err(|e| e.to_string())?;
        probe.kv.format().map_err(|e| e.to_string())
    }

    #[test]
    fn the_flags_make_mlx_lm_s_formats_and_refuse_what_mlx_cannot_do() {
        assert_eq!(parse(&[]), Ok(KvFormat::Float));
        assert_eq!(
            parse(&["--kv-bits", "8"]),
            KvFormat::from_parts(Some(8), Some(64), Some(5000)).map_err(|e| e.to_string())
        );
        assert_eq!(
            parse(&["--kv-bits", "4", "--kv-group-size", "32", "--quantized-kv-start", "0"]),
            KvFormat::from_parts(Some(4), Some(32), Some(0)).map_err(|e| e.to_string())
        );
        assert!(parse(&["--kv-bits", "7"]).is_err_and(|e| e.contains("KV bits must be one of")));
        assert!(parse(&["--kv-bits", "8", "--kv-group-size", "100"]).is_err_and(|e| e.contains("group size")));
        // The group size or start alone mean nothing.
        assert!(parse(&["--kv-group-size", "64"]).is_err_and(|e| e.contains("--kv-bits")));
        assert!(parse(&["--kv-bits", "-4"]).is_err());
    }
}
