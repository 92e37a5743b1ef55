//! The private cache of cloud answers, from the turn's side: the key of a
//! request (what is asked, after what, of which endpoint and model, with
//! which sampling), whether it may be cached at all (`cache_policy::cacheable`:
//! only requests that went to the cloud with nothing sensitive and no
//! override), looking it up, and keeping a finished answer.

use headroom_cloud::{ChatParams, CloudConfig};
use headroom_core::cache_policy::{self, CacheSettings, SamplingKey};
use headroom_core::chat::Message;
use headroom_core::router::Decision;
use headroom_core::settings::Settings;
use headroom_store::cloud_cache::CachedAnswer;
use headroom_store::{Store, StoreError};

use crate::runtime::block_on;

/// A request's place in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    pub key: String,
    /// False: never looked up, never kept (sensitive, overridden, local).
    pub cacheable: bool,
}

/// The key of asking `text` after `history` at `config` with `params`. The
/// endpoint is part of the model's name (two providers may serve the same
/// id), and so is "summarised" when older turns would go as a summary (the
/// cloud then sees other messages). The API has no top-k; 0 stands for "not
/// used".
pub fn key(
    decision: &Decision,
    settings: &Settings,
    config: &CloudConfig,
    params: &ChatParams,
    text: &str,
    history: &[Message],
) -> CacheKey {
    let sampling = SamplingKey {
        temperature: params.temperature.unwrap_or(settings.temperature),
        top_p: params.top_p.unwrap_or(settings.top_p),
        top_k: 0,
        max_tokens: params.max_tokens.unwrap_or(u32::MAX),
        seed: params.seed,
    };
    let summarised = if settings.summarise_for_cloud { " summarised" } else { "" };
    let model = format!("{} {}{summarised}", config.base_url, config.model);
    let key = cache_policy::cache_key(text, &model, &sampling, &cache_policy::history_hash(history));
    CacheKey { key, cacheable: cache_policy::cacheable(decision) }
}

/// The earlier answer to this request, if it may be cached and was. Reads
/// only: the lookup is counted by [`count`] once the turn has run.
pub fn get(store: &Store, key: &CacheKey) -> Result<Option<CachedAnswer>, StoreError> {
    if !key.cacheable {
        return Ok(None);
    }
    block_on(store.cache_peek(&key.key))
}

/// Counts the lookup of a turn that ran: answered from the cache (`hit`) or
/// by asking the cloud. Only counting, so a failure is logged, not reported.
pub fn count(store: &Store, key: &CacheKey, hit: bool) {
    if key.cacheable {
        if let Err(e) = block_on(store.cache_count(&key.key, hit)) {
            tracing::warn!("could not count the cache lookup: {e}");
        }
    }
}

/// Keeps a finished answer (a cut or cancelled one is not kept). Failing to
/// cache only costs a future lookup, so it is logged, not reported.
pub fn put(store: &Store, decision: &Decision, key: &CacheKey, model: &str, answer: &str, settings: &Settings) {
    if !key.cacheable {
        return;
    }
    let budget = CacheSettings { budget_bytes: settings.cloud_cache_mb.saturating_mul(1_000_000), ttl: None };
    match block_on(store.cache_put(decision, &key.key, model, answer, &budget)) {
        Ok(outcome) => tracing::debug!("cloud answer cache: {outcome:?}"),
        Err(e) => tracing::warn!("could not cache the cloud answer: {e}"),
    }
}
