-- The live graph's history (issue #16): what the popover's live graph and
-- `headroom chart live` draw after a restart. Pruned to a week by the app.

-- Each memory row now says how long it stands for: the app writes a row when
-- something changed and otherwise stretches the last one (an idle app writes
-- nothing), so rows are no longer fixed 10-second buckets. Rows written
-- before this migration were 10-second buckets.
ALTER TABLE memory_timeline ADD COLUMN span_ms INTEGER NOT NULL DEFAULT 10000 CHECK (span_ms >= 0);

-- Per-second decode rates of answers as they streamed
-- (headroom_core::slowdown::RatePoint): `tokens` arrived in (start_ms, at_ms].
-- `slowed` marks the points inside a stretch blamed on memory: they stay out
-- of the model's reference rate.
CREATE TABLE rate_timeline (
    model_id  TEXT    NOT NULL CHECK (length(model_id) > 0),
    at_ms     INTEGER NOT NULL,
    start_ms  INTEGER NOT NULL CHECK (start_ms < at_ms),
    tokens    INTEGER NOT NULL CHECK (tokens > 0),
    tps       REAL    NOT NULL CHECK (tps > 0),
    slowed    INTEGER NOT NULL DEFAULT 0 CHECK (slowed IN (0, 1)),
    PRIMARY KEY (model_id, at_ms)
);
CREATE INDEX rate_timeline_at ON rate_timeline (at_ms);

-- Stretches of an answer slowed by memory (headroom_core::slowdown::Stretch
-- with a cause): the shaded "slowed by swap" stretches of the graph.
CREATE TABLE slowdowns (
    model_id           TEXT    NOT NULL CHECK (length(model_id) > 0),
    start_ms           INTEGER NOT NULL,
    end_ms             INTEGER NOT NULL CHECK (end_ms >= start_ms),
    reference_tps      REAL    NOT NULL,
    tps                REAL    NOT NULL,
    tokens             INTEGER NOT NULL,
    swap_before_bytes  INTEGER NOT NULL,
    swap_peak_bytes    INTEGER NOT NULL,
    pressure_before    TEXT    NOT NULL CHECK (pressure_before IN ('normal', 'warning', 'critical', 'unknown')),
    pressure_peak      TEXT    NOT NULL CHECK (pressure_peak IN ('normal', 'warning', 'critical', 'unknown')),
    -- NULL: swap did not grow past the threshold (the cause was pressure).
    swap_growth_bytes  INTEGER,
    -- NULL: pressure did not rise (the cause was swap).
    pressure_rose_to   TEXT    CHECK (pressure_rose_to IS NULL OR pressure_rose_to IN ('warning', 'critical')),
    sentence           TEXT    NOT NULL,
    CHECK (swap_growth_bytes IS NOT NULL OR pressure_rose_to IS NOT NULL),
    PRIMARY KEY (model_id, start_ms)
);
CREATE INDEX slowdowns_end ON slowdowns (end_ms);
