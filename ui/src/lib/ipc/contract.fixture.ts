// Test fixtures: whole values of the generated contract's larger types
// (ui/src/lib/ipc/generated/), for the tests that fake the backend. Each
// takes the fields a test cares about and fills the rest with what Rust
// sends for a plain dense 8 GB model at 8K context, so a fixture stops
// compiling when the Rust type gains, loses or renames a field. (Not
// shipped: only *.test.ts files import it.)
import type {
  BenchSpeculation,
  Budget,
  Calibration,
  DecodeTraffic,
  Estimate,
  FitReport,
  ModelEntry,
  ModelFootprint,
  Overhead,
  RemoteModel,
} from './generated';

const GB = 1024 ** 3;

export function overhead(o: Partial<Overhead> = {}): Overhead {
  return {
    chunk_tokens: 512,
    attention_queries: 512,
    attention_keys: 8192,
    attention_path: 'fused',
    attention_bytes: 0.25 * GB,
    activation_bytes: 0.25 * GB,
    logits_bytes: 0.25 * GB,
    dequantized_weight_bytes: 0,
    prefill_slack_bytes: 0,
    recurrence_bytes: 0,
    fixed_bytes: 0.25 * GB,
    total_bytes: GB,
    ...o,
  };
}

export function estimate(o: Partial<Estimate> = {}): Estimate {
  const kv = o.kv_cache_bytes ?? 3 * GB;
  return {
    context_tokens: 8192,
    kv_format: { kind: 'float' },
    kv_quantized: false,
    kv_positions: 8192,
    weight_bytes: 8 * GB,
    kv_cache_bytes: kv,
    kv_full_bytes: kv,
    kv_window_bytes: 0,
    kv_state_bytes: 0,
    kv_before_conversion_bytes: 0,
    peak_positions: o.context_tokens ?? 8192,
    kv_at_peak_bytes: kv,
    overhead: overhead(),
    predicted_peak_bytes: 12 * GB,
    ...o,
  };
}

export function budget(o: Partial<Budget> = {}): Budget {
  return {
    from_memory_bytes: 10 * GB,
    budget_bytes: 10 * GB,
    limited_by: 'memory',
    available_bytes: 14 * GB,
    freed_by_unload_bytes: 0,
    os_headroom_bytes: 4 * GB,
    gpu_working_set_bytes: null,
    ...o,
  };
}

/** A dense model: full attention in every layer, no experts. */
export function footprint(o: Partial<ModelFootprint> = {}): ModelFootprint {
  return {
    weight_bytes: 8 * GB,
    layers: 28,
    attention_heads: 28,
    kv_heads: 4,
    head_dim: 128,
    hidden_size: 3584,
    intermediate_size: 18944,
    vocab_size: 152064,
    kv_bytes_per_element: 2,
    max_context: 32768,
    prefill_dequantizes: false,
    kv_layers: [{ layers: 28, kv_heads: 4, head_dim: 128, window: null, state_bytes: 0 }],
    backend: 'cpu',
    active_weight_bytes: 8 * GB,
    experts: null,
    ...o,
  };
}

export function calibration(o: Partial<Calibration> = {}): Calibration {
  return {
    at_context: 4096,
    peak_bytes: 9 * GB,
    formula_bytes: 8 * GB,
    offset_bytes: GB,
    capped: false,
    confirmed_at: null,
    for_context: 4096,
    weight_percent: 100,
    rule: 'the rule',
    ...o,
  };
}

/** A report with no calibration (`basis: 'estimated'`); give `verdict` and what else matters. */
export function fitReport(o: Partial<FitReport> = {}): FitReport {
  const e = o.estimate ?? estimate();
  return {
    footprint: footprint(),
    estimate: e,
    budget: budget(),
    verdict: { kind: 'fits' },
    spare_bytes: 0,
    largest_context_that_fits: 8192,
    kv_label: '16-bit float',
    formula_peak_bytes: e.predicted_peak_bytes,
    calibration: null,
    basis: 'estimated',
    ...o,
  };
}

/** A model that is on disk, not loaded, with no verdict (`fit: null`). */
export function modelEntry(o: Partial<ModelEntry> & Pick<ModelEntry, 'id'>): ModelEntry {
  return {
    name: o.id,
    path: `/models/${o.id}`,
    arch: null,
    bits: null,
    quantization: null,
    size_bytes: 0,
    loaded: false,
    thinks: false,
    fit: null,
    remedies: [],
    problem: null,
    two_macs: null,
    ...o,
  };
}

export function remoteModel(o: Partial<RemoteModel> & Pick<RemoteModel, 'repo'>): RemoteModel {
  return {
    revision: 'main',
    commit: 'abc',
    arch: 'qwen2',
    bits: null,
    quantization: null,
    files: [],
    total_bytes: 0,
    cached_bytes: 0,
    footprint: footprint(),
    ...o,
  };
}

/** What one decode step of a dense model reads, by part. */
export function decodeTraffic(o: Partial<DecodeTraffic> = {}): DecodeTraffic {
  return {
    weight_bytes: 0,
    resident_weight_bytes: 0,
    kv_bytes_per_position: 0,
    window_kv_bytes_per_position: 0,
    window: 0,
    state_bytes: 0,
    experts: 0,
    experts_per_token: 0,
    ...o,
  };
}

/** A depth whose runs decoded one token per pass. */
export function plainSpeculation(): BenchSpeculation {
  return { mode: 'none', drafted: 0, accepted: 0, acceptance: null, forward_passes: 0, tokens_per_pass: null, plain_because: null };
}
