//! The pull against the loopback test hub: header-only inspection, a full
//! pull into the HF cache layout, resume after a cut transfer and after a
//! cancel, a missing repo, a corrupted download, a gated repo with and
//! without the user's token (which the CDN never sees).

use std::path::{Path, PathBuf};

use headroom_core::format::LoadShape;
use headroom_test_support::{scratch, Scratch};

use crate::testserver::{Fault, TestHub};
use crate::{download, inspect, CancellationToken, Endpoint, HfToken, HubClient, HubError, PullEvent, RepoId};

const MODEL: &str = "model.safetensors";

/// Deterministic bytes (xorshift), so every file has its own hash.
fn noise(n: usize, mut seed: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 24) as u8
        })
        .collect()
}

/// The bytes the test model's tensors hold, as the engine would load them.
const WEIGHT_BYTES: u64 = 4000 * 64 * 2 + 128 * 64 * 2 + 64 * 4;

/// A small qwen2-shaped model in the mlx-community layout: config.json, a
/// tokenizer file and one safetensors file of ~0.5 MB (a RoPE table included,
/// which the loader drops and the footprint must not count).
fn write_model(dir: &Path) {
    let config = r#"{"model_type":"qwen2","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,
        "num_hidden_layers":2,"intermediate_size":128,"vocab_size":4000,"max_position_embeddings":2048,
        "rms_norm_eps":1e-6,"tie_word_embeddings":true}"#;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), config).unwrap();
    std::fs::write(dir.join("tokenizer.json"), noise(3000, 7)).unwrap();
    let tensors: [(&str, &str, &[u64]); 4] = [
        ("model.embed_tokens.weight", "BF16", &[4000, 64]),
        ("model.layers.0.mlp.up_proj.weight", "BF16", &[128, 64]),
        ("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", &[8]),
        ("model.norm.weight", "F32", &[64]),
    ];
    let mut header = String::from("{");
    let mut offset = 0u64;
    for (i, (name, dtype, shape)) in tensors.iter().enumerate() {
        let bytes = shape.iter().product::<u64>() * if *dtype == "F32" { 4 } else { 2 };
        let sep = if i == 0 { "" } else { "," };
        header.push_str(&format!(
            r#"{sep}"{name}":{{"dtype":"{dtype}","shape":{shape:?},"data_offsets":[{offset},{}]}}"#,
            offset + bytes
        ));
        offset += bytes;
    }
    header.push('}');
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend(noise(usize::try_from(offset).unwrap_or(0), 42));
    std::fs::write(dir.join(MODEL), file).unwrap();
}

struct Fixture {
    hub: TestHub,
    client: HubClient,
    source: PathBuf,
    cache: PathBuf,
    repo: RepoId,
    commit: String,
    /// The folder `source` and `cache` are in, removed after the test.
    _root: Scratch,
}

fn fixture(tag: &str) -> Fixture {
    let root = scratch(&format!("hub-{tag}"));
    let source = root.join("source");
    write_model(&source);
    let hub = TestHub::start().unwrap();
    let commit = hub.add_repo("mlx-community/Tiny-4bit", &source).unwrap();
    let client = HubClient::new(Endpoint::parse(&hub.endpoint()).unwrap()).unwrap();
    let repo = RepoId::parse("mlx-community/Tiny-4bit").unwrap();
    Fixture { hub, client, source, cache: root.join("hub"), repo, commit, _root: root }
}

fn repo_dir(fx: &Fixture) -> PathBuf {
    fx.cache.join("models--mlx-community--Tiny-4bit")
}

/// What the model list needs to show a cache entry: `refs/main` naming a snapshot.
fn listed(fx: &Fixture) -> bool {
    std::fs::read_to_string(repo_dir(fx).join("refs/main"))
        .is_ok_and(|sha| repo_dir(fx).join("snapshots").join(sha.trim()).join("config.json").is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspection_reads_the_headers_with_ranges_and_downloads_no_weights() {
    let fx = fixture("inspect");
    let model = inspect(&fx.client, &fx.repo, "main", &fx.cache, LoadShape::default()).await.unwrap();
    assert_eq!((model.commit.as_str(), model.arch.as_str(), model.bits), (fx.commit.as_str(), "qwen2", None));
    assert_eq!(model.footprint.weight_bytes, WEIGHT_BYTES, "the RoPE table is not counted");
    // A BF16 embedding beside an F32 norm: the activations, and the KV cache, are f32.
    assert_eq!((model.footprint.head_dim, model.footprint.kv_heads, model.footprint.kv_bytes_per_element), (16, 2, 4));
    let size = std::fs::metadata(fx.source.join(MODEL)).map(|m| m.len()).unwrap_or(0);
    let weights = model.files.iter().find(|f| f.path == MODEL).unwrap_or_else(|| panic!("{:?}", model.files));
    assert!(weights.lfs && weights.size == size && weights.etag.len() == 64, "{weights:?}");
    assert_eq!(model.cached_bytes, 0);
    // The weights were only touched through two small ranges: the length, then the header.
    let weight_gets: Vec<_> =
        fx.hub.log().into_iter().filter(|r| r.method == "GET" && r.path.starts_with("/cdn/")).collect();
    let ranges: Vec<_> = weight_gets.iter().map(|r| r.range.clone().unwrap_or_default()).collect();
    assert_eq!(ranges.len(), 2, "{weight_gets:?}");
    assert_eq!(ranges[0], "bytes=0-7");
    assert!(ranges[1].starts_with("bytes=8-"), "{ranges:?}");
    assert!(!fx.cache.exists(), "inspection writes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pull_lays_out_the_hf_cache_and_a_second_reuses_it() {
    let fx = fixture("full");
    let model = inspect(&fx.client, &fx.repo, "main", &fx.cache, LoadShape::default()).await.unwrap();
    let mut events = Vec::new();
    let out = download(&fx.client, &fx.cache, &model, &CancellationToken::new(), |e| events.push(e)).await.unwrap();
    assert_eq!(out.snapshot, repo_dir(&fx).join("snapshots").join(&fx.commit));
    assert_eq!(out.downloaded_bytes, model.total_bytes);
    for f in &model.files {
        let link = out.snapshot.join(&f.path);
        let target = std::fs::read_link(&link).expect("a snapshot file is a link");
        assert_eq!(target, PathBuf::from(format!("../../blobs/{}", f.etag)));
        assert_eq!(std::fs::read(&link).ok(), std::fs::read(fx.source.join(&f.path)).ok(), "{}", f.path);
    }
    assert_eq!(std::fs::read_to_string(repo_dir(&fx).join("refs/main")).ok(), Some(fx.commit.clone()));
    assert!(listed(&fx));
    let leftovers = std::fs::read_dir(repo_dir(&fx).join("blobs")).into_iter().flatten().flatten();
    assert!(leftovers.filter(|e| e.path().extension().is_some_and(|x| x == "incomplete")).count() == 0);
    assert!(matches!(events.first(), Some(PullEvent::Started { files: 3, cached_bytes: 0, .. })), "{events:?}");
    assert!(matches!(events.last(), Some(PullEvent::Finished { .. })));
    let last_progress = events.iter().rev().find_map(|e| match e {
        PullEvent::Progress { done_bytes, total_bytes, eta_secs, .. } => Some((*done_bytes, *total_bytes, *eta_secs)),
        _ => None,
    });
    assert_eq!(last_progress, Some((model.total_bytes, model.total_bytes, Some(0.0))));
    assert!(events.iter().any(|e| matches!(e, PullEvent::FileDone { file, verified: crate::Verified::Sha256, reused: false, .. } if file == MODEL)));
    // A regular git file is checked against its git blob id, not its size alone.
    assert!(events.iter().any(|e| matches!(e, PullEvent::FileDone { file, verified: crate::Verified::GitBlob, reused: false, .. } if file == "config.json")), "{events:?}");

    // Again: everything is in the cache already; nothing is fetched.
    let again = inspect(&fx.client, &fx.repo, "main", &fx.cache, LoadShape::default()).await.unwrap();
    assert_eq!(again.cached_bytes, again.total_bytes);
    let before = fx.hub.log().len();
    let out = download(&fx.client, &fx.cache, &again, &CancellationToken::new(), |_| {}).await.unwrap();
    assert_eq!((out.downloaded_bytes, out.reused_bytes), (0, again.total_bytes));
    assert_eq!(fx.hub.log().len(), before, "no request for a cached pull");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_cut_off_midway_resumes_with_a_range_and_verifies() {
    let fx = fixture("cut");
    let model = inspect(&fx.client, &fx.repo, "main", &fx.cache, LoadShape::default()).await.unwrap();
    fx.hub.add_fault(Fault::CloseAfter { file: MODEL.into(), after: 300_000 });
    let mut events = Vec::new();
    let out = download(&fx.client, &fx.cache, &model, &CancellationToken::new(), |e| events.push(e)).await.unwrap();
    let retry = events.iter().find_map(|e| match e {
        PullEvent::Retrying { file, resume_from, .. } => Some((file.clone(), *resume_from)),
        _ => None,
    });
    assert_eq!(retry, Some((MODEL.to_owned(), 300_000)), "{events:?}");
    let resumed =
        fx.hub.log().into_iter().any(|r| r.path.starts_with("/cdn/") && r.range.as_deref() == Some("bytes=300000-"));
    assert!(resumed, "{:?}", fx.hub.log());
    assert_eq!(std::fs::read(out.snapshot.join(MODEL)).ok(), std::fs::read(fx.source.join(MODEL)).ok());
    assert!(listed(&fx));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_pull_lists_nothing_and_the_next_one_resumes() {
    let fx = fixture("cancel");
    let model = inspect(&fx.client, &fx.repo, "main", &fx.cache, LoadShape::default()).await.unwrap();
    fx.hub.add_fault(Fault::Stall { file: MODEL.into(), after: 200_000 });
    let etag = model.files.iter().find(|f| f.path == MODEL).expect("no weights").etag.clone();
    let partial = repo_dir(&fx).join("blobs").join(format!("{etag}.incomplete"));
    let cancel = CancellationToken::new();
    // Cancel once the transfer has stalled with 200 000 bytes on disk (the user's click).
    let watcher = {
        let (cancel, partial) = (cancel.clone(), partial.clone());
        tokio::spawn(async move {
            while std::fs::metadata(&partial).map_or(0, |m| m.len()) < 200_000 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            cancel.cancel();
        })
    };
    let started = std::time::Instant::now();
    let result = download(&fx.client, &fx.cache, &model, &cancel, |_| {}).await;
    assert!(started.elapsed().as_secs() < 10, "the cancel took {:?}", started.elapsed());
    watcher.abort();
    assert!(matches!(result, Err(HubError::Cancelled { .. })), "{result:?}");
    assert!(!listed(&fx) && !repo_dir(&fx).join("refs").exists() && !repo_dir(&fx).join("snapshots").exists());
    assert_eq!(std::fs::metadata(&partial).map(|m| m.len()).ok(), Some(200_000));

    let out = download(&fx.client, &fx.cache, &model, &CancellationToken::new(), |_| {}).await.unwrap();
    let resumed =
        fx.hub.log().into_iter().any(|r| r.path.starts_with("/cdn/") && r.range.as_deref() == Some("bytes=200000-"));
    assert!(resumed, "{:?}", fx.hub.log());
    assert!(!partial.exists());
    assert_eq!(std::fs::read(out.snapshot.join(MODEL)).ok(), std::fs::read(fx.source.join(MODEL)).ok());
    assert!(listed(&fx));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_download_is_deleted_with_a_clear_error() {
    let fx = fixture("corrupt");
    let model = inspect(&fx.client, &fx.repo, "main", &fx.cache, LoadShape::default()).await.unwrap();
    fx.hub.add_fault(Fault::Corrupt { file: MODEL.into() });
    let err = download(&fx.client, &fx.cache, &model, &CancellationToken::new(), |_| {}).await.err();
    let Some(err @ HubError::HashMismatch { .. }) = err else { panic!("{err:?}") };
    let text = err.to_string();
    assert!(text.starts_with("model.safetensors arrived with sha256") && text.contains("nothing was added"), "{text}");
    assert!(!listed(&fx));
    let etag = &model.files.iter().find(|f| f.path == MODEL).expect("no weights").etag;
    let blobs: Vec<String> = std::fs::read_dir(repo_dir(&fx).join("blobs"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    // config.json (first in order) arrived intact; the weights left nothing behind.
    assert!(!blobs.is_empty() && blobs.iter().all(|b| !b.starts_with(etag.as_str())), "{blobs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_repos_revisions_and_weights_are_named() {
    let fx = fixture("missing");
    let absent = RepoId::parse("mlx-community/absent").unwrap();
    let err = inspect(&fx.client, &absent, "main", &fx.cache, LoadShape::default())
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.starts_with("repository mlx-community/absent was not found at http://127.0.0.1:")
            && err.contains("HTTP 404"),
        "{err}"
    );
    let err = inspect(&fx.client, &fx.repo, "v9", &fx.cache, LoadShape::default()).await.err();
    assert!(matches!(err, Some(HubError::RevisionNotFound { ref revision, .. }) if revision == "v9"), "{err:?}");
    let err = inspect(&fx.client, &fx.repo, "a/b", &fx.cache, LoadShape::default()).await.err();
    assert!(matches!(err, Some(HubError::InvalidRevision { .. })), "{err:?}");

    let no_weights = fx.source.with_file_name("no-weights");
    std::fs::create_dir_all(&no_weights).unwrap();
    std::fs::copy(fx.source.join("config.json"), no_weights.join("config.json")).unwrap();
    fx.hub.add_repo("org/no-weights", &no_weights).unwrap();
    let repo = RepoId::parse("org/no-weights").unwrap();
    let err = inspect(&fx.client, &repo, "main", &fx.cache, LoadShape::default()).await.err();
    assert!(matches!(err, Some(HubError::NoWeights { .. })), "{err:?}");

    // Nothing listens here: unreachable, with the URL in the message.
    let dead = HubClient::new(Endpoint::parse("http://127.0.0.1:9").unwrap()).unwrap();
    let err = inspect(&dead, &fx.repo, "main", &fx.cache, LoadShape::default())
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.starts_with("cannot reach http://127.0.0.1:9/api/models/mlx-community/Tiny-4bit/revision/main"),
        "{err}"
    );
}

/// The pull check reads the repo with the same reader as a load: a hostile
/// config or a lying header is refused with the field or tensor named,
/// before any weight byte is downloaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_configs_and_headers_are_refused_before_downloading() {
    let fx = fixture("hostile");
    let hostile = fx.source.with_file_name("hostile");
    write_model(&hostile);
    let config = std::fs::read_to_string(hostile.join("config.json")).unwrap();
    let config = config.replace(r#""num_attention_heads":4"#, r#""num_attention_heads":4,"head_dim":-2147483648"#);
    std::fs::write(hostile.join("config.json"), config.replace("\"qwen2\"", "\"llama\"")).unwrap();
    fx.hub.add_repo("org/hostile", &hostile).unwrap();
    let repo = RepoId::parse("org/hostile").unwrap();
    let err = inspect(&fx.client, &repo, "main", &fx.cache, LoadShape::default()).await.err();
    assert!(
        matches!(&err, Some(HubError::Format { file, source, .. }) if file == "config.json" && source.field() == Some("head_dim")),
        "{err:?}"
    );

    let lying = fx.source.with_file_name("lying");
    write_model(&lying);
    let mut bytes = std::fs::read(lying.join(MODEL)).unwrap();
    let cut = bytes.len() - 10;
    bytes.truncate(cut);
    std::fs::write(lying.join(MODEL), bytes).unwrap();
    fx.hub.add_repo("org/lying", &lying).unwrap();
    let repo = RepoId::parse("org/lying").unwrap();
    let err = inspect(&fx.client, &repo, "main", &fx.cache, LoadShape::default()).await.err();
    let message = err.as_ref().map(ToString::to_string).unwrap_or_default();
    assert!(
        matches!(&err, Some(HubError::Format { file, .. }) if file == MODEL) && message.contains("truncated"),
        "{message}"
    );
    let cdn: Vec<_> = fx.hub.log().into_iter().filter(|r| r.path.starts_with("/cdn/")).collect();
    assert!(!cdn.is_empty(), "the header was read from the CDN");
    assert!(cdn.iter().all(|r| r.range.is_some()), "only header ranges were fetched: {cdn:?}");
}

const GATED: &str = "meta-llama/Tiny-gated";
const TOKEN: &str = "hf_TestTokenThatMustNotLeak";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_repo_without_a_token_says_what_to_do_and_a_refused_token_says_so() {
    let fx = fixture("gated-refused");
    fx.hub.add_gated_repo(GATED, &fx.source, TOKEN).unwrap();
    let gated = RepoId::parse(GATED).unwrap();
    let page = format!("{}/{GATED}", fx.hub.endpoint());

    let err = inspect(&fx.client, &gated, "main", &fx.cache, LoadShape::default()).await.unwrap_err();
    assert!(matches!(&err, HubError::Gated { status: 401, .. }), "{err:?}");
    let text = err.to_string();
    for needed in ["is gated", "Accept the license on the model's page", &page, "huggingface-cli login", "HF_TOKEN"] {
        assert!(text.contains(needed), "{needed:?} missing from: {text}");
    }

    // A token the hub does not accept for this repo: sent, refused, and never shown.
    let client = fx.client.clone().with_token(Some(HfToken::new("hf_WrongTokenAlsoSecret").unwrap()));
    let err = inspect(&client, &gated, "main", &fx.cache, LoadShape::default()).await.unwrap_err();
    assert!(matches!(&err, HubError::TokenRefused { status: 403, .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("although a Hugging Face token was sent (from the token given to Headroom)"), "{text}");
    assert!(text.contains(&page), "{text}");
    let shown = format!("{text} {err:?} {client:?}");
    assert!(!shown.contains("WrongToken"), "{shown}");
    assert!(!fx.cache.exists(), "a refused pull writes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_repo_pulls_with_the_token_which_goes_to_the_hub_and_not_to_the_cdn() {
    let fx = fixture("gated-pull");
    // The CDN: another server (another port, so another origin) holding the same blobs.
    let cdn = TestHub::start().unwrap();
    cdn.add_repo("cdn/blobs", &fx.source).unwrap();
    fx.hub.add_gated_repo(GATED, &fx.source, TOKEN).unwrap();
    fx.hub.redirect_lfs_to(&cdn.endpoint());
    let gated = RepoId::parse(GATED).unwrap();
    // As a user with HF_TOKEN set would have it, from a fake environment.
    let token = HfToken::from_lookup(|var| (var == "HF_TOKEN").then(|| TOKEN.into())).unwrap().unwrap();
    let client = fx.client.clone().with_token(Some(token));

    let model = inspect(&client, &gated, "main", &fx.cache, LoadShape::default()).await.unwrap();
    let out = download(&client, &fx.cache, &model, &CancellationToken::new(), |_| {}).await.unwrap();
    assert_eq!(std::fs::read(out.snapshot.join(MODEL)).ok(), std::fs::read(fx.source.join(MODEL)).ok());

    let bearer = format!("Bearer {TOKEN}");
    let hub_log = fx.hub.log();
    assert!(!hub_log.is_empty() && hub_log.iter().all(|r| r.authorization.as_deref() == Some(bearer.as_str())));
    // The weights came from the CDN (the header ranges and the download), without the token.
    let cdn_log = cdn.log();
    assert!(cdn_log.iter().any(|r| r.method == "GET" && r.range.is_none()), "{cdn_log:?}");
    assert!(cdn_log.iter().all(|r| r.path.starts_with("/cdn/") && r.authorization.is_none()), "{cdn_log:?}");
    let shown = format!("{client:?}");
    assert!(shown.contains("redacted") && !shown.contains(TOKEN), "{shown}");
}

/// Git's own ids for two blobs (`git hash-object`): the empty file and
/// "hello world\n".
#[test]
fn the_git_blob_id_is_the_one_git_computes() {
    use crate::testserver::git_blob_id;
    assert_eq!(git_blob_id(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    assert_eq!(git_blob_id(b"hello world\n"), "3b18e512dba79e4c8300dd08aeb37f8e728b8dad");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regular_file_with_a_flipped_byte_is_deleted_with_a_clear_error() {
    let fx = fixture("corrupt-git");
    let model = inspect(&fx.client, &fx.repo, "main", &fx.cache, LoadShape::default()).await.unwrap();
    let config = model.files.iter().find(|f| f.path == "config.json").expect("no config");
    assert!(!config.lfs && config.etag.len() == 40, "{config:?}");
    fx.hub.add_fault(Fault::Corrupt { file: "config.json".into() });
    let err = download(&fx.client, &fx.cache, &model, &CancellationToken::new(), |_| {}).await.err();
    let Some(err @ HubError::BlobIdMismatch { .. }) = err else { panic!("{err:?}") };
    let text = err.to_string();
    assert!(text.starts_with("config.json arrived with git blob id") && text.contains("nothing was added"), "{text}");
    assert!(!listed(&fx));
    let blobs = std::fs::read_dir(repo_dir(&fx).join("blobs")).into_iter().flatten().flatten();
    assert!(blobs.map(|e| e.file_name()).all(|b| !b.to_string_lossy().starts_with(config.etag.as_str())));
}
