// Typed bindings for the model picker (src-tauri/src/commands/models.rs).
import type {
  Calibration,
  Experts,
  FitReport,
  KvFormat,
  KvLayers,
  LoadResult,
  ModelEntry,
  ModelFootprint,
  ModelProblem,
  PeerSplit,
  Remedy,
  Share,
  TooLargeDetails,
  Verdict,
} from './generated';
import { command, subscribe, type ErrorCode } from './invoke';

export type {
  Calibration,
  Experts,
  FitReport,
  KvFormat,
  KvLayers,
  LoadResult,
  ModelEntry,
  ModelFootprint,
  ModelProblem,
  PeerSplit,
  Remedy,
  Share,
  TooLargeDetails,
  Verdict,
};
/** The code a refused load rejects with; its `details` are a `TooLargeDetails`. */
export const MODEL_TOO_LARGE = 'MODEL_TOO_LARGE' satisfies ErrorCode;

export interface LoadOptions {
  /** Load with this context (tokens) instead of the app's limit. */
  contextLimit?: number;
  /** Load even though the verdict says it would swap. */
  override?: boolean;
  /** Keep the KV cache this way for this load instead of the settings' format. */
  kv?: KvFormat;
  /** Split the model with the peer Mac the settings name (its later layers run there). */
  acrossPeer?: boolean;
}

/** Broadcast when the list or the loaded model changed (e.g. the demo model is ready). */
export const MODELS_CHANGED = 'models-changed';

export function modelsList(): Promise<ModelEntry[]> {
  return command('models_list');
}

/**
 * Loads a model (seconds); resolves to its entry, now `loaded`. Rejects with
 * `MODEL_TOO_LARGE` (numbers in `details`) when it would swap, unless `override`.
 */
export function modelLoad(id: string, options: LoadOptions = {}): Promise<LoadResult> {
  return command('model_load', { id, ...options });
}

export function onModelsChanged(handler: () => void): Promise<() => void> {
  return subscribe(MODELS_CHANGED, handler);
}
