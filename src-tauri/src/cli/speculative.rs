//! `--speculative none|lookup|draft` and `--draft-model MODEL`: one pair of
//! flags for every subcommand that decodes (generate, chat, serve, bench),
//! over `headroom_core::speculative`.

use std::path::PathBuf;

use clap::Args;
use headroom_core::speculative::SpeculativeMode;

use super::CliError;
use crate::models::HubEnv;

#[derive(Debug, Clone, PartialEq, Eq, Default, Args)]
pub struct SpeculativeArgs {
    /// How decoding proposes tokens: none (one token per forward pass),
    /// lookup (prompt lookup: tokens that followed the same words earlier in
    /// the conversation) or draft (a draft model's, see --draft-model); the
    /// proposals are checked several per pass, greedy output is unchanged,
    /// and it switches itself off when it does not pay. Default: draft with
    /// --draft-model, else the app's setting (`headroom chat`) or its
    /// default (lookup).
    #[arg(long, value_parser = parse_mode)]
    pub speculative: Option<SpeculativeMode>,
    /// A smaller model of the same vocabulary (a path, a hub repo id in the
    /// cache, or a name from `headroom models`) loaded beside the model to
    /// propose tokens; counted in the fit with its weights and KV cache.
    #[arg(long, value_name = "MODEL")]
    pub draft_model: Option<String>,
}

impl SpeculativeArgs {
    /// The flag, else draft where a draft model is named, else `setting`
    /// (the stored setting, or the settings' default).
    pub fn or(&self, setting: SpeculativeMode) -> SpeculativeMode {
        let implied = if self.draft_model.is_some() { SpeculativeMode::Draft } else { setting };
        self.speculative.unwrap_or(implied)
    }

    /// The flag, else the settings' default: one default for the app and the CLI.
    pub fn mode(&self) -> SpeculativeMode {
        self.or(headroom_core::settings::Settings::default().speculative)
    }

    /// The draft model's folder, resolved as the model is; refused where
    /// `--speculative draft` names none, or where it is `model` itself (a
    /// server, serving several, names none).
    pub fn draft_dir(&self, model: Option<&std::path::Path>, env: &HubEnv) -> Result<Option<PathBuf>, CliError> {
        let Some(name) = &self.draft_model else {
            if self.speculative == Some(SpeculativeMode::Draft) {
                return Err(CliError::BadArgument {
                    name: "--speculative",
                    reason:
                        "draft needs a draft model: add --draft-model MODEL (a smaller model of the same vocabulary)"
                            .into(),
                });
            }
            return Ok(None);
        };
        let dir = super::hub::resolve_model(Some(name), env)?;
        if model.is_some_and(|m| std::fs::canonicalize(&dir).ok() == std::fs::canonicalize(m).ok()) {
            return Err(CliError::BadArgument {
                name: "--draft-model",
                reason: "the draft is the model itself: it would propose what the model says, at the model's cost"
                    .into(),
            });
        }
        Ok(Some(dir))
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
        let err = parse(&["--speculative", "medusa"]).unwrap_err().to_string();
        assert!(err.contains("unknown speculative mode 'medusa'"), "{err}");
        let drafted = parse(&["--draft-model", "small"]).unwrap();
        assert_eq!(drafted.or(SpeculativeMode::Lookup), SpeculativeMode::Draft, "a draft model implies draft");
        let told = parse(&["--draft-model", "small", "--speculative", "none"]).unwrap();
        assert_eq!(told.mode(), SpeculativeMode::None, "the flag wins");
    }
}
