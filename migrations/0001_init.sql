-- Headroom's first schema. Forward-only: later changes are new files
-- (0002_…), never edits of this one. Times are Unix milliseconds (UTC).

-- A conversation. `id` is the stable key the UI and the CLI (`--session`)
-- use; `title` is what the user sees and may rename.
CREATE TABLE sessions (
    id          TEXT    PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 200),
    title       TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX sessions_by_update ON sessions (updated_at DESC);

-- Every message, in order of `id`. An assistant message is inserted as
-- `streaming` before generation starts, its text rewritten while it streams,
-- and ends `complete`, `interrupted` (stopped, or its process died) or `error`.
CREATE TABLE messages (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    role        TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content     TEXT    NOT NULL,
    -- The model that wrote (assistant) or was asked (user); NULL if none.
    model       TEXT,
    route       TEXT    NOT NULL DEFAULT 'local' CHECK (route IN ('local', 'cloud')),
    status      TEXT    NOT NULL CHECK (status IN ('streaming', 'complete', 'interrupted', 'error')),
    -- Why an `error` message failed, as the user was told.
    error       TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX messages_by_session ON messages (session_id, id);
-- Store::open looks for rows a dead process left streaming.
CREATE INDEX messages_streaming ON messages (status) WHERE status = 'streaming';

-- The measured figures of one assistant turn, with every label
-- ARCHITECTURE.md requires. Rates are NULL when undefined, never 0.
CREATE TABLE turn_stats (
    message_id          INTEGER PRIMARY KEY NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    model_id            TEXT    NOT NULL,
    -- e.g. "4-bit, group 64"; NULL for an unquantized model.
    quantization        TEXT,
    kv_dtype            TEXT    NOT NULL,
    batch               INTEGER NOT NULL,
    context_tokens      INTEGER NOT NULL,
    prompt_tokens       INTEGER NOT NULL,
    reused_tokens       INTEGER NOT NULL,
    generated_tokens    INTEGER NOT NULL,
    ttft_ms             REAL,
    prefill_tps         REAL,
    decode_tps          REAL,
    e2e_tps             REAL,
    prefill_ms          REAL    NOT NULL,
    first_token_ms      REAL,
    last_token_ms       REAL,
    peak_memory_bytes   INTEGER NOT NULL,
    -- The worst memory-pressure level seen around the turn.
    pressure            TEXT    NOT NULL CHECK (pressure IN ('normal', 'warning', 'critical', 'unknown')),
    -- Swap used after minus before (bytes; negative if swap shrank); NULL if unread.
    swap_delta_bytes    INTEGER,
    finish_reason       TEXT    NOT NULL CHECK (finish_reason IN ('stop', 'length', 'cancelled'))
);
CREATE INDEX turn_stats_by_model ON turn_stats (model_id);

-- A benchmark run as measured: the raw per-repetition JSON, its summary,
-- the machine it ran on and its labels (context, batch, quantization, …).
CREATE TABLE bench_runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at  INTEGER NOT NULL,
    model_id    TEXT    NOT NULL,
    labels      TEXT    NOT NULL CHECK (json_valid(labels)),
    machine     TEXT    NOT NULL CHECK (json_valid(machine)),
    summary     TEXT    NOT NULL CHECK (json_valid(summary)),
    runs        TEXT    NOT NULL CHECK (json_valid(runs))
);
CREATE INDEX bench_runs_by_model ON bench_runs (model_id, created_at);

-- The memory readings, downsampled: one row per time bucket (its start),
-- holding the worst of the readings that fell into it.
CREATE TABLE memory_timeline (
    at_ms               INTEGER PRIMARY KEY NOT NULL,
    total_bytes         INTEGER NOT NULL,
    available_bytes     INTEGER NOT NULL,
    used_bytes          INTEGER NOT NULL,
    swap_total_bytes    INTEGER NOT NULL,
    swap_used_bytes     INTEGER NOT NULL,
    process_rss_bytes   INTEGER NOT NULL,
    pressure            TEXT    NOT NULL CHECK (pressure IN ('normal', 'warning', 'critical', 'unknown'))
);

-- The user's settings, one JSON value per field of `headroom_core::settings::Settings`.
CREATE TABLE settings (
    key     TEXT PRIMARY KEY NOT NULL,
    value   TEXT NOT NULL CHECK (json_valid(value))
);
