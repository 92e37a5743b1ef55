// Typed bindings for the model picker (src-tauri/src/commands/models.rs).
import { call, subscribe } from './invoke';

/** Mirrors `models::ModelEntry`. */
export interface ModelEntry {
  /** Folder name for the app's own models, `org/name` for the HF cache. */
  id: string;
  name: string;
  path: string;
  arch: string | null;
  bits: number | null;
  /** e.g. "4-bit, group 64"; null if unquantized or unreadable. */
  quantization?: string | null;
  size_bytes: number;
  loaded: boolean;
  /** The fit verdict at the app's context limit; null if there is no budget or the model cannot be read. */
  fit: FitReport | null;
  /** Why the folder cannot be loaded (a broken config, a lying header, …); loading it would fail with this. */
  problem?: { code: string; message: string } | null;
  /** What would make it fit when `fit` refuses (empty otherwise). */
  remedies?: Remedy[];
}

/** Mirrors `headroom_core::remedies::Remedy`: one way to make a refused model fit, with its predicted peak. */
export type Remedy =
  | { kind: 'kv_cache'; bits: number; groupSize: number; start: number; label: string; predictedPeakBytes: number }
  | { kind: 'other_quantization'; id: string; name: string; bits: number | null; predictedPeakBytes: number }
  | { kind: 'shorter_context'; contextTokens: number; predictedPeakBytes: number };

/** Mirrors `headroom_core::kv::KvFormat`, as `model_load` takes it. */
export type KvFormat = { kind: 'float' } | { kind: 'quantized'; bits: number; group_size: number; start: number };

/** Mirrors `headroom_core::fit::Verdict` (tagged by `kind`). */
export type Verdict =
  | { kind: 'fits' }
  | { kind: 'tight' }
  | { kind: 'would_swap'; by_bytes: number }
  | { kind: 'cannot_fit'; by_bytes: number };

/** Mirrors `headroom_core::fit::KvLayers`: layers of one kind and what their cache keeps. */
export interface KvLayers {
  layers: number;
  kv_heads: number;
  head_dim: number;
  /** A sliding window: at most this many positions. */
  window: number | null;
  /** Linear attention: a fixed state of this many bytes per layer (0 for attention layers). */
  state_bytes: number;
}

/** Mirrors `headroom_core::fit::Experts`. */
export interface Experts {
  count: number;
  per_token: number;
  resident_bytes: number;
  active_bytes: number;
}

/** The parts of `headroom_core::fit::FitReport` the UI shows. */
export interface FitReport {
  estimate: {
    context_tokens: number;
    weight_bytes: number;
    kv_cache_bytes: number;
    /** The KV cache by kind of layer (their sum is `kv_cache_bytes`). */
    kv_full_bytes?: number;
    kv_window_bytes?: number;
    kv_state_bytes?: number;
    overhead: { total_bytes: number };
    predicted_peak_bytes: number;
  };
  /** What the model is made of (the parts of `ModelFootprint` the UI shows). */
  footprint?: {
    kv_layers: KvLayers[];
    experts: Experts | null;
    active_weight_bytes: number;
  };
  budget: {
    available_bytes: number;
    freed_by_unload_bytes: number;
    os_headroom_bytes: number;
    budget_bytes: number;
  };
  verdict: Verdict;
  spare_bytes: number;
  largest_context_that_fits: number | null;
  /** The formula's own peak; `estimate.predicted_peak_bytes` is it, calibrated when `calibration` is set. */
  formula_peak_bytes?: number;
  /** The peak measured for this model on this Mac the prediction rests on (`core::calibration`). */
  calibration?: Calibration | null;
  /** What the prediction rests on, in words: `measured here at 4K: 9.8 GB, counted 75 % at 8K` or `estimated`. */
  basis?: string;
}

/** A peak measured on this Mac and how it counts (`core::calibration::Calibration`). */
export interface Calibration {
  at_context: number;
  /** The peak measured there. */
  peak_bytes: number;
  /** The formula's peak there. */
  formula_bytes: number;
  /** What the correction counts there, less the formula (negative: the formula errs high). */
  offset_bytes: number;
  /** One run lowered the formula by more than the margin and nothing confirms it: held at the margin. */
  capped: boolean;
  /** The context of a second measurement that confirms a lowering beyond the margin. */
  confirmed_at: number | null;
  /** The context the prediction is for, and how much of the correction counts there (percent). */
  for_context: number;
  weight_percent: number;
  /** The rule in words, for the fit sheet. */
  rule: string;
}

/** What `model_load` resolves to: the entry, now loaded, and the switch's timings. */
export interface LoadResult extends ModelEntry {
  context_limit: number;
  unload_ms: number;
  load_ms: number;
  /** MLX's buffer-cache cap while this model is loaded (`fit::buffer_cache_limit`). */
  cache_limit_bytes: number;
  /** MLX's wired limit; null: nothing wired (off Metal, or no safe reserve: `fit::wired_limit`). */
  wired_limit_bytes: number | null;
  /** How its KV caches store keys and values ("8-bit (group 64) from 5000 tokens"). */
  kv_cache: string;
}

/** The code a refused load rejects with; its `details.report` is the `FitReport`. */
export const MODEL_TOO_LARGE = 'MODEL_TOO_LARGE';

/** Mirrors `fit::refusal_details`. */
export interface TooLargeDetails {
  verdict: Verdict;
  contextTokens: number;
  weightBytes: number;
  kvCacheBytes: number;
  overheadBytes: number;
  predictedPeakBytes: number;
  budgetBytes: number;
  overByBytes: number;
  largestContextThatFits: number | null;
  remedies?: Remedy[];
  report: FitReport;
}

export interface LoadOptions {
  /** Load with this context (tokens) instead of the app's limit. */
  contextLimit?: number;
  /** Load even though the verdict says it would swap. */
  override?: boolean;
  /** Keep the KV cache this way for this load instead of the settings' format. */
  kv?: KvFormat;
}

/** Broadcast when the list or the loaded model changed (e.g. the demo model is ready). */
export const MODELS_CHANGED = 'models-changed';

export function modelsList(): Promise<ModelEntry[]> {
  return call<ModelEntry[]>('models_list');
}

/**
 * Loads a model (seconds); resolves to its entry, now `loaded`. Rejects with
 * `MODEL_TOO_LARGE` (numbers in `details`) when it would swap, unless `override`.
 */
export function modelLoad(id: string, options: LoadOptions = {}): Promise<LoadResult> {
  return call<LoadResult>('model_load', { id, ...options });
}

export function onModelsChanged(handler: () => void): Promise<() => void> {
  return subscribe(MODELS_CHANGED, handler);
}
