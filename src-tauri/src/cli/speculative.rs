//! `--speculative none|lookup`: one flag for every subcommand that decodes
//! (generate, chat, serve, bench), over `headroom_core::speculative`.

use clap::Args;
use headroom_core::speculative::SpeculativeMode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Args)]
pub struct SpeculativeArgs {
    /// How decoding proposes tokens: none (one token per forward pass) or
    /// lookup (prompt lookup: tokens that followed the same words earlier in
    /// the conversation, several checked per pass; greedy output unchanged,
    /// and it switches itself off when it does not pay). Default: the app's
    /// setting (`headroom chat`) or its default (lookup).
    #[arg(long, value_parser = parse_mode)]
    pub speculative: Option<SpeculativeMode>,
}

impl SpeculativeArgs {
    /// The flag, else `setting` (the stored setting, or the settings' default).
    pub fn or(self, setting: SpeculativeMode) -> SpeculativeMode {
        self.speculative.unwrap_or(setting)
    }

    /// The flag, else the settings' default: one default for the app and the CLI.
    pub fn mode(self) -> SpeculativeMode {
        self.or(headroom_core::settings::Settings::default().speculative)
    }
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
        let parse = |argv: &[&str]| Probe::try_parse_from([&["probe"], argv].concat()).map(|p| p.spec);
        let unset = parse(&[]).unwrap();
        assert_eq!(unset.mode(), headroom_core::settings::Settings::default().speculative);
        assert_eq!(unset.or(SpeculativeMode::None), SpeculativeMode::None, "unset: the stored setting");
        assert_eq!(parse(&["--speculative", "none"]).unwrap().mode(), SpeculativeMode::None);
        assert_eq!(parse(&["--speculative", "lookup"]).unwrap().or(SpeculativeMode::None), SpeculativeMode::Lookup);
        let err = parse(&["--speculative", "draft"]).unwrap_err().to_string();
        assert!(err.contains("unknown speculative mode 'draft'"), "{err}");
    }
}
