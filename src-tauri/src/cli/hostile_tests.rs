//! The hostile corpus through the CLI's `fit` and `generate`, in process:
//! a folder with a bad config or header is refused by both with an error
//! naming what is wrong; one whose problem only a load can see (tokenizer,
//! template, tensors against the config) gets a verdict from `fit` and is
//! refused by `generate`. (`src-tauri/tests/cli.rs` runs a few through the
//! binary, `src/lib.rs` all through the app.)

use clap::Parser;
use headroom_engine::demo::{write_hostile_corpus, Caught};
use headroom_test_support::scratch;

use super::{Cli, Command};
use crate::models::HubEnv;

#[test]
fn fit_and_generate_refuse_every_hostile_folder_with_the_reason() {
    let root = scratch("hostile-cli");
    let corpus = write_hostile_corpus(&root).unwrap();
    assert!(corpus.len() >= 40);
    for case in &corpus {
        let dir = case.dir.to_string_lossy().into_owned();
        let Some(Command::Fit(fit)) =
            Cli::try_parse_from(["headroom", "fit", &dir, "--available-gb", "16"]).unwrap().command
        else {
            panic!("not fit")
        };
        let mut out = Vec::new();
        let fitted = super::fit::fit(&fit, &HubEnv::default(), None, &mut out);
        match (case.caught, fitted) {
            (Caught::Headers, Err(e)) => assert!(e.to_string().contains(case.needle), "{}: {e}", case.name),
            (Caught::Headers, Ok(())) => panic!("{}: fit gave a verdict: {}", case.name, String::from_utf8_lossy(&out)),
            (Caught::Load, Ok(())) => assert!(String::from_utf8_lossy(&out).contains("verdict"), "{}", case.name),
            (Caught::Load, Err(e)) => panic!("{}: fit failed although headers are sound: {e}", case.name),
        }

        let argv = ["headroom", "generate", &dir, "--prompt", "hi", "--max-tokens", "2", "--available-gb", "16"];
        let Some(Command::Generate(generate)) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not generate")
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let e = super::generate::generate(&generate, &HubEnv::default(), None, |_| None, &mut out, &mut err)
            .err()
            .unwrap_or_else(|| panic!("{}: generated {}", case.name, String::from_utf8_lossy(&out)));
        let message = e.to_string();
        assert!(message.contains(case.needle) && !message.contains("panicked"), "{}: {message}", case.name);
    }
}
