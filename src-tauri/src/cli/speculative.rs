//! `--speculative none|lookup`: one flag for every subcommand that decodes
//! (generate, chat, serve, bench), over `headroom_core::speculative`.

use clap::Args;
use headroom_core::speculative::SpeculativeMode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Args)]
pub struct SpeculativeArgs {
    /// How decoding proposes tokens: none (one token per forward pass) or
    /// lookup (prompt lookup: tokens that followed the same words earlier in
    /// the conversation, several checked per pass; greedy output unchanged,
    /// and it switches itself off when it does not pay).
    #[arg(long, default_value = "none", value_parser = parse_mode)]
    pub speculative: SpeculativeMode,
}

fn parse_mode(s: &str) -> Result<SpeculativeMode, String> {
    SpeculativeMode::parse(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Probe {
        #[command(flatten)]
        spec: SpeculativeArgs,
    }

    #[test]
    fn the_flag_takes_each_mode_and_refuses_others_by_name() {
        let parse = |argv: &[&str]| Probe::try_parse_from([&["probe"], argv].concat()).map(|p| p.spec.speculative);
        assert_eq!(parse(&[]).unwrap(), SpeculativeMode::None);
        assert_eq!(parse(&["--speculative", "lookup"]).unwrap(), SpeculativeMode::Lookup);
        let err = parse(&["--speculative", "draft"]).unwrap_err().to_string();
        assert!(err.contains("unknown speculative mode 'draft'"), "{err}");
    }
}
