-- The private cache of cloud answers (issue #8). Only answers to requests
-- that passed the privacy rules are stored (headroom_core::cache_policy::
-- cacheable); rows are evicted least recently used first once their bytes
-- exceed the user's budget, and may expire after a time-to-live.

-- One cached answer. `key` is cache_policy::cache_key: 32 hex digits over the
-- normalised prompt, model, sampling parameters and the history's hash.
-- `bytes` is what the row costs against the budget (answer + model + key).
CREATE TABLE cloud_cache (
    key           TEXT    PRIMARY KEY NOT NULL CHECK (length(key) = 32),
    model         TEXT    NOT NULL,
    answer        TEXT    NOT NULL,
    bytes         INTEGER NOT NULL CHECK (bytes >= 0),
    created_at    INTEGER NOT NULL,
    last_used_at  INTEGER NOT NULL,
    -- NULL: kept until evicted.
    ttl_ms        INTEGER CHECK (ttl_ms IS NULL OR ttl_ms > 0),
    hits          INTEGER NOT NULL DEFAULT 0 CHECK (hits >= 0)
);
-- Eviction walks the rows oldest-used first.
CREATE INDEX cloud_cache_lru ON cloud_cache (last_used_at, key);

-- Lifetime hit and miss counts, shown in settings. One row.
CREATE TABLE cloud_cache_stats (
    id      INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    hits    INTEGER NOT NULL DEFAULT 0 CHECK (hits >= 0),
    misses  INTEGER NOT NULL DEFAULT 0 CHECK (misses >= 0)
);
INSERT INTO cloud_cache_stats (id, hits, misses) VALUES (1, 0, 0);
