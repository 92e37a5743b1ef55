//! The memory guard end to end: a model whose headers claim 200 GB of
//! tensors (a sparse file: no data on disk) is refused by `generate` before
//! anything is loaded, and `fit` reports the numbers. Its own test binary, so
//! no other test loads models in this process while RSS is measured.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use headroom::cli::{run, Cli};
use headroom_engine::demo::{write_demo_model, Arch, Bits, DemoSpec, Preset};
use headroom_test_support::Scratch;

use crate::common::headroom;

const CLAIMED: u64 = 200_000_000_000;

/// A demo model folder whose single weight file claims `CLAIMED` bytes of
/// bf16 embedding, made sparse with `set_len` so it takes no disk; the
/// folder it is in goes with the first value.
fn sparse_huge_model() -> (Scratch, PathBuf) {
    let tmp = headroom_test_support::scratch("sparse-huge");
    let dir = tmp.join("model");
    write_demo_model(&dir, &DemoSpec::new(Arch::Qwen2, Preset::Tiny, Bits::Sixteen)).unwrap();
    for f in ["model.safetensors.index.json", "model.safetensors"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    let rows = CLAIMED / 2 / 1_000_000;
    let header = format!(
        r#"{{"model.embed_tokens.weight":{{"dtype":"BF16","shape":[{rows},1000000],"data_offsets":[0,{CLAIMED}]}}}}"#
    );
    let path = dir.join("model.safetensors");
    let mut f = File::create(&path).unwrap();
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    f.set_len(8 + header.len() as u64 + CLAIMED).unwrap();
    (tmp, dir)
}

fn disk_usage(path: &Path) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).map(|m| m.blocks() * 512).unwrap_or(u64::MAX)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        0
    }
}

#[test]
fn a_refused_load_allocates_nothing_and_says_why() {
    let (_tmp, dir) = sparse_huge_model();
    assert!(disk_usage(&dir.join("model.safetensors")) < 1 << 20, "the fixture must be sparse");
    let d = dir.to_string_lossy().into_owned();

    // In this process: RSS before and after the refused `generate`.
    let cli = Cli::try_parse_from(["headroom", "generate", &d, "--prompt", "Hello"]).unwrap();
    let before = headroom_memory::process_rss().unwrap();
    let code = run(cli.command.expect("a subcommand"));
    let after = headroom_memory::process_rss().unwrap();
    assert_eq!(format!("{code:?}"), format!("{:?}", ExitCode::FAILURE));
    let grew = after.saturating_sub(before);
    assert!(grew < 8 << 20, "RSS grew by {grew} bytes during a refused load ({before} -> {after})");

    // The binary: the refusal with its numbers, then what would fit (here
    // nothing), exit code 1, nothing on stdout.
    let out = headroom(&["generate", &d, "--prompt", "Hello"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("headroom: refusing to load"), "{stderr}");
    assert!(stderr.contains("cannot fit at any context") && stderr.contains("weights 186.26 GB"), "{stderr}");
    assert!(stderr.contains("\nwhat would fit      nothing:"), "{stderr}");
    assert!(out.stdout.is_empty());

    // `fit --json` has every part; the weights are exactly what the header claims.
    let out = headroom(&["fit", &d, "--json", "--context", "4096"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["estimate"]["weight_bytes"], CLAIMED);
    assert_eq!(v["estimate"]["context_tokens"], 4096);
    assert_eq!(v["verdict"]["kind"], "cannot_fit");
    assert!(v["largest_context_that_fits"].is_null());
}

#[test]
fn an_override_loads_a_model_the_guard_refused() {
    let tmp = headroom_test_support::scratch("guard-override");
    let dir = tmp.join("data");
    write_demo_model(&dir, &DemoSpec::new(Arch::Llama, Preset::Tiny, Bits::Four)).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let base = ["generate", &d, "--prompt", "Hi", "--max-tokens", "3", "--ignore-eos", "--json", "--available-gb", "1"];
    let out = headroom(&base);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let out = headroom(&[&base[..], &["--override-fit"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stats"]["generated_tokens"], 3);
}
