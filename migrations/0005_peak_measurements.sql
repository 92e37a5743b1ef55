-- What loads and turns really took, for estimates that learn from this
-- machine (core::calibration): one row per load or turn of a model as
-- loaded (`fingerprint`: its files, dtype and kernel, the engine's
-- model_fingerprint), with the KV format it ran with (core::kv::KvFormat as
-- JSON), the positions the KV cache held, how many prompt tokens were reused
-- rather than prefilled, MLX's peak and its active memory at the end, the
-- process's resident growth, and the other requests' KV states the prompt
-- cache held meanwhile.
CREATE TABLE peak_measurements (
    id INTEGER PRIMARY KEY,
    measured_at INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('load', 'turn')),
    kv TEXT NOT NULL,
    context_tokens INTEGER NOT NULL CHECK (context_tokens >= 0),
    prompt_tokens INTEGER NOT NULL CHECK (prompt_tokens >= 0),
    reused_tokens INTEGER NOT NULL CHECK (reused_tokens >= 0),
    mlx_peak_bytes INTEGER NOT NULL CHECK (mlx_peak_bytes >= 0),
    mlx_active_bytes INTEGER NOT NULL CHECK (mlx_active_bytes >= 0),
    resident_peak_bytes INTEGER CHECK (resident_peak_bytes >= 0),
    cached_bytes INTEGER NOT NULL DEFAULT 0 CHECK (cached_bytes >= 0)
);
CREATE INDEX peak_measurements_by_model ON peak_measurements (fingerprint, measured_at);
