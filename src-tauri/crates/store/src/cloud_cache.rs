//! The private cache of cloud answers in the `cloud_cache` table: lookups
//! that count hits and misses, stores that evict least recently used rows
//! to stay within the byte budget, and expiry by time-to-live. What may be
//! cached, the key, the eviction order and expiry are decided by
//! `headroom_core::cache_policy`; this file only applies them to rows.

use std::time::Duration;

use headroom_core::cache_policy::{self, CacheSettings, EntryMeta};
use headroom_core::router::Decision;
use serde::Serialize;

use crate::error::{Context, Result};
use crate::{now_ms, Store};

/// A cache hit: the stored answer, to be shown marked as cached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedAnswer {
    pub key: String,
    pub model: String,
    pub answer: String,
    /// When the cloud gave it (Unix ms).
    pub created_at: i64,
    /// Hits including this one.
    pub hits: i64,
}

/// What `cache_put` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// Stored, after evicting these keys (least recently used first).
    Stored { evicted: Vec<String> },
    /// Not stored: the request was sensitive, privacy was overridden, or it
    /// did not go to the cloud.
    NotCacheable,
    /// Not stored: the answer alone is bigger than the budget (or the budget is 0).
    TooLarge { bytes: u64, budget: u64 },
}

/// The figures settings shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub entries: u64,
    pub bytes: u64,
}

/// What a row costs against the budget: its text columns.
fn row_bytes(key: &str, model: &str, answer: &str) -> u64 {
    (key.len() + model.len() + answer.len()) as u64
}

fn ttl_of(ttl_ms: Option<i64>) -> Option<Duration> {
    ttl_ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

impl Store {
    /// The answer stored under `key`, if any and not expired; a hit marks
    /// the row used now. Hits and misses are counted.
    pub async fn cache_get(&self, key: &str) -> Result<Option<CachedAnswer>> {
        self.cache_get_at(key, now_ms()).await
    }

    /// [`Store::cache_get`] at a given time (tests drive the clock).
    pub async fn cache_get_at(&self, key: &str, now: i64) -> Result<Option<CachedAnswer>> {
        let hit = self.cache_peek_at(key, now).await?;
        self.cache_count_at(key, hit.is_some(), now).await?;
        Ok(hit.map(|h| CachedAnswer { hits: h.hits + 1, ..h }))
    }

    /// The answer stored under `key`, if any and not expired, without
    /// writing anything: a turn looks first and counts the lookup with
    /// [`Store::cache_count`] only once it has run (a refused turn leaves
    /// the database as it was).
    pub async fn cache_peek(&self, key: &str) -> Result<Option<CachedAnswer>> {
        self.cache_peek_at(key, now_ms()).await
    }

    async fn cache_peek_at(&self, key: &str, now: i64) -> Result<Option<CachedAnswer>> {
        let row: Option<(String, String, i64, Option<i64>, i64)> =
            sqlx::query_as("SELECT model, answer, created_at, ttl_ms, hits FROM cloud_cache WHERE key = ?1")
                .bind(key)
                .fetch_optional(self.pool())
                .await
                .ctx("look up a cached answer")?;
        Ok(match row {
            Some((_, _, created_at, ttl_ms, _)) if cache_policy::is_expired(created_at, now, ttl_of(ttl_ms)) => None,
            Some((model, answer, created_at, _, hits)) => {
                Some(CachedAnswer { key: key.to_owned(), model, answer, created_at, hits })
            }
            None => None,
        })
    }

    /// Counts a lookup of `key`: a hit marks the row used now (for the
    /// least-recently-used eviction); a miss drops the row if it expired.
    pub async fn cache_count(&self, key: &str, hit: bool) -> Result<()> {
        self.cache_count_at(key, hit, now_ms()).await
    }

    async fn cache_count_at(&self, key: &str, hit: bool, now: i64) -> Result<()> {
        let mut tx = self.pool().begin().await.ctx("begin cache lookup")?;
        if hit {
            sqlx::query("UPDATE cloud_cache SET last_used_at = ?2, hits = hits + 1 WHERE key = ?1")
                .bind(key)
                .bind(now)
                .execute(&mut *tx)
                .await
                .ctx("mark a cached answer used")?;
        } else {
            let row: Option<(i64, Option<i64>)> =
                sqlx::query_as("SELECT created_at, ttl_ms FROM cloud_cache WHERE key = ?1")
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await
                    .ctx("look up a cached answer")?;
            if row.is_some_and(|(created_at, ttl_ms)| cache_policy::is_expired(created_at, now, ttl_of(ttl_ms))) {
                sqlx::query("DELETE FROM cloud_cache WHERE key = ?1")
                    .bind(key)
                    .execute(&mut *tx)
                    .await
                    .ctx("drop an expired cached answer")?;
            }
        }
        let counter = if hit {
            "UPDATE cloud_cache_stats SET hits = hits + 1 WHERE id = 1"
        } else {
            "UPDATE cloud_cache_stats SET misses = misses + 1 WHERE id = 1"
        };
        sqlx::query(counter).execute(&mut *tx).await.ctx("count a cache lookup")?;
        tx.commit().await.ctx("commit cache lookup")?;
        Ok(())
    }

    /// Stores the cloud's `answer` to the request `decision` was made for,
    /// if [`cache_policy::cacheable`] allows it, evicting least recently
    /// used rows until everything fits in `settings.budget_bytes`.
    pub async fn cache_put(
        &self,
        decision: &Decision,
        key: &str,
        model: &str,
        answer: &str,
        settings: &CacheSettings,
    ) -> Result<PutOutcome> {
        self.cache_put_at(decision, key, model, answer, settings, now_ms()).await
    }

    /// [`Store::cache_put`] at a given time.
    pub async fn cache_put_at(
        &self,
        decision: &Decision,
        key: &str,
        model: &str,
        answer: &str,
        settings: &CacheSettings,
        now: i64,
    ) -> Result<PutOutcome> {
        if !cache_policy::cacheable(decision) {
            return Ok(PutOutcome::NotCacheable);
        }
        let bytes = row_bytes(key, model, answer);
        let budget = settings.budget_bytes;
        let mut tx = self.pool().begin().await.ctx("begin cache store")?;
        // Expired rows go first: they must not push live ones out.
        let rows: Vec<(String, i64, i64, i64, Option<i64>)> =
            sqlx::query_as("SELECT key, bytes, last_used_at, created_at, ttl_ms FROM cloud_cache WHERE key != ?1")
                .bind(key)
                .fetch_all(&mut *tx)
                .await
                .ctx("read the cache's entries")?;
        let mut expired = Vec::new();
        let mut live = Vec::with_capacity(rows.len());
        for (k, b, last_used_ms, created, ttl_ms) in rows {
            if cache_policy::is_expired(created, now, ttl_of(ttl_ms)) {
                expired.push(k);
            } else {
                live.push(EntryMeta { key: k, bytes: u64::try_from(b).unwrap_or(0), last_used_ms });
            }
        }
        let Some(evicted) = cache_policy::evictions(&live, bytes, budget) else {
            return Ok(PutOutcome::TooLarge { bytes, budget });
        };
        for k in expired.iter().chain(&evicted) {
            sqlx::query("DELETE FROM cloud_cache WHERE key = ?1")
                .bind(k)
                .execute(&mut *tx)
                .await
                .ctx("evict a cached answer")?;
        }
        let ttl_ms = settings.ttl.map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX).max(1));
        sqlx::query(
            "INSERT INTO cloud_cache (key, model, answer, bytes, created_at, last_used_at, ttl_ms, hits)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, 0)
             ON CONFLICT (key) DO UPDATE SET model = excluded.model, answer = excluded.answer,
                 bytes = excluded.bytes, created_at = excluded.created_at,
                 last_used_at = excluded.last_used_at, ttl_ms = excluded.ttl_ms, hits = 0",
        )
        .bind(key)
        .bind(model)
        .bind(answer)
        .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
        .bind(now)
        .bind(ttl_ms)
        .execute(&mut *tx)
        .await
        .ctx("store a cached answer")?;
        tx.commit().await.ctx("commit cache store")?;
        Ok(PutOutcome::Stored { evicted })
    }

    /// Hits and misses since the database was made, and what is stored now.
    pub async fn cache_stats(&self) -> Result<CacheStats> {
        let (hits, misses): (i64, i64) = sqlx::query_as("SELECT hits, misses FROM cloud_cache_stats WHERE id = 1")
            .fetch_one(self.pool())
            .await
            .ctx("read cache counters")?;
        let (entries, bytes): (i64, i64) = sqlx::query_as("SELECT count(*), coalesce(sum(bytes), 0) FROM cloud_cache")
            .fetch_one(self.pool())
            .await
            .ctx("measure the cache")?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(CacheStats { hits: n(hits), misses: n(misses), entries: n(entries), bytes: n(bytes) })
    }

    /// Empties the cache (the counters stay: they are lifetime figures).
    pub async fn cache_clear(&self) -> Result<u64> {
        let done = sqlx::query("DELETE FROM cloud_cache").execute(self.pool()).await.ctx("clear the cache")?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::cache_policy::{cache_key, history_hash, SamplingKey};
    use headroom_core::fit::Verdict;
    use headroom_core::router::{route, Force, LocalModel, RouteContext, RouteRequest};

    use super::*;
    use crate::testutil::store;

    const SAMPLING: SamplingKey = SamplingKey { temperature: 0.0, top_p: 1.0, top_k: 0, max_tokens: 256, seed: None };
    const MODEL: &str = "gpt-4o-mini";

    /// A real router decision for `text` (a cloud one when it is clean).
    fn decide(text: &str, allow_sensitive: bool) -> Decision {
        let words = |t: &str| t.split_whitespace().count();
        let fits = |_: u64| Verdict::Fits;
        let ctx = RouteContext {
            local: Some(LocalModel { id: "local".into(), fit_at: &fits }),
            cloud: Some("openai".into()),
            ..RouteContext::new(&words)
        };
        let force = Some(Force::Cloud);
        route(&RouteRequest { force, allow_sensitive, ..RouteRequest::new(text) }, &ctx).unwrap()
    }

    fn key(text: &str) -> String {
        cache_key(text, MODEL, &SAMPLING, &history_hash(&[]))
    }

    fn budget(bytes: u64) -> CacheSettings {
        CacheSettings { budget_bytes: bytes, ttl: None }
    }

    #[tokio::test]
    async fn a_miss_then_a_hit_counted_and_marked() {
        let store = store("cache-hit").await;
        let text = "What is the capital of France?";
        assert_eq!(store.cache_get_at(&key(text), 1_000).await.ok(), Some(None));
        let put = store.cache_put_at(&decide(text, false), &key(text), MODEL, "Paris.", &budget(1 << 20), 2_000).await;
        assert_eq!(put.ok(), Some(PutOutcome::Stored { evicted: vec![] }));

        // The same question with other spacing is the same key.
        let hit = store.cache_get_at(&key("What is the   capital of France?  "), 3_000).await.unwrap();
        let hit = hit.expect("expected a hit");
        assert_eq!((hit.answer.as_str(), hit.model.as_str(), hit.created_at, hit.hits), ("Paris.", MODEL, 2_000, 1));
        // Another question, or another model, misses.
        assert_eq!(store.cache_get_at(&key("What is the capital of Spain?"), 3_000).await.ok(), Some(None));
        let other_model = cache_key(text, "gpt-4o", &SAMPLING, &history_hash(&[]));
        assert_eq!(store.cache_get_at(&other_model, 3_000).await.ok(), Some(None));

        let stats = store.cache_stats().await.unwrap();
        let bytes = (32 + MODEL.len() + "Paris.".len()) as u64;
        assert_eq!(stats, CacheStats { hits: 1, misses: 3, entries: 1, bytes });
        let last_used: i64 =
            sqlx::query_scalar("SELECT last_used_at FROM cloud_cache").fetch_one(store.pool()).await.unwrap();
        assert_eq!(last_used, 3_000);
    }

    #[tokio::test]
    async fn the_least_recently_used_answers_go_when_the_budget_is_exceeded() {
        let store = store("cache-lru").await;
        let answer = "x".repeat(68); // 32 + 11 + 68 = 111 bytes a row
        let row = 111u64;
        let settings = budget(3 * row);
        for (i, q) in ["q one", "q two", "q three"].iter().enumerate() {
            let put = store.cache_put_at(&decide(q, false), &key(q), MODEL, &answer, &settings, 1_000 + i as i64).await;
            assert_eq!(put.ok(), Some(PutOutcome::Stored { evicted: vec![] }));
        }
        // Using "q one" makes "q two" the least recently used.
        assert!(store.cache_get_at(&key("q one"), 5_000).await.ok().flatten().is_some());
        let put = store.cache_put_at(&decide("q four", false), &key("q four"), MODEL, &answer, &settings, 6_000).await;
        assert_eq!(put.ok(), Some(PutOutcome::Stored { evicted: vec![key("q two")] }));
        assert_eq!(store.cache_get_at(&key("q two"), 7_000).await.ok(), Some(None));
        for (i, q) in ["q one", "q three", "q four"].iter().enumerate() {
            assert!(store.cache_get_at(&key(q), 7_000 + i as i64).await.ok().flatten().is_some(), "{q}");
        }
        let stats = store.cache_stats().await.unwrap();
        assert_eq!((stats.entries, stats.bytes), (3, 3 * row));

        // A bigger answer pushes out as many as it needs, oldest first.
        let big = "y".repeat(68 + 2 * 111);
        let put = store.cache_put_at(&decide("q five", false), &key("q five"), MODEL, &big, &settings, 8_000).await;
        assert_eq!(put.ok(), Some(PutOutcome::Stored { evicted: vec![key("q one"), key("q three"), key("q four")] }));
        // One bigger than the whole budget is not stored and evicts nothing.
        let huge = "z".repeat(400);
        let put = store.cache_put_at(&decide("q six", false), &key("q six"), MODEL, &huge, &settings, 9_000).await;
        assert_eq!(put.ok(), Some(PutOutcome::TooLarge { bytes: 32 + 11 + 400, budget: 3 * row }));
        assert_eq!(store.cache_stats().await.map(|s| s.entries).ok(), Some(1));
    }

    #[tokio::test]
    async fn answers_expire_after_their_time_to_live() {
        let store = store("cache-ttl").await;
        let settings = CacheSettings { budget_bytes: 1 << 20, ttl: Some(Duration::from_secs(60)) };
        let q = "weather in Paris";
        let put = store.cache_put_at(&decide(q, false), &key(q), MODEL, "Sunny.", &settings, 10_000).await;
        assert!(matches!(put, Ok(PutOutcome::Stored { .. })));
        assert!(store.cache_get_at(&key(q), 69_999).await.ok().flatten().is_some(), "59.999 s old");
        assert_eq!(store.cache_get_at(&key(q), 70_000).await.ok(), Some(None), "60 s old: expired");
        assert_eq!(store.cache_stats().await.map(|s| (s.entries, s.hits, s.misses)).ok(), Some((0, 1, 1)));

        // Expired rows are dropped when a new answer is stored, before any live one.
        let old = "old news";
        let _ = store.cache_put_at(&decide(old, false), &key(old), MODEL, "Old.", &settings, 0).await;
        let fresh = "fresh news";
        let put =
            store.cache_put_at(&decide(fresh, false), &key(fresh), MODEL, "Fresh.", &budget(1 << 20), 100_000).await;
        assert_eq!(put.ok(), Some(PutOutcome::Stored { evicted: vec![] }));
        assert_eq!(store.cache_stats().await.map(|s| s.entries).ok(), Some(1));
    }

    #[tokio::test]
    async fn sensitive_requests_are_never_cached() {
        let store = store("cache-private").await;
        let settings = budget(1 << 20);
        for (text, allow) in [
            // Stays local: not a cloud answer at all.
            ("mail the report to j.doe@example.com", false),
            // Sent to the cloud by the user's override for this one message: still not kept.
            ("mail the report to j.doe@example.com", true),
            ("my key is sk-proj-a1B2c3D4e5F6g7H8i9J0kLmNoPqRsT", true),
        ] {
            let d = decide(text, allow);
            assert!(d.is_sensitive());
            let put = store.cache_put_at(&d, &key(text), MODEL, "Done.", &settings, 1_000).await;
            assert_eq!(put.ok(), Some(PutOutcome::NotCacheable), "{text}");
            assert_eq!(store.cache_get_at(&key(text), 2_000).await.ok(), Some(None));
        }
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM cloud_cache").fetch_one(store.pool()).await.unwrap();
        assert_eq!(rows, 0);
    }

    #[tokio::test]
    async fn clearing_empties_the_cache_but_keeps_the_counts() {
        let store = store("cache-clear").await;
        let q = "hello";
        let _ = store.cache_put_at(&decide(q, false), &key(q), MODEL, "Hi.", &budget(1 << 20), 1).await;
        let _ = store.cache_get_at(&key(q), 2).await;
        assert_eq!(store.cache_clear().await.ok(), Some(1));
        assert_eq!(store.cache_stats().await.ok(), Some(CacheStats { hits: 1, misses: 0, entries: 0, bytes: 0 }));
    }
}
