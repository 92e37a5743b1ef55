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
  size_bytes: number;
  loaded: boolean;
}

/** Broadcast when the list or the loaded model changed (e.g. the demo model is ready). */
export const MODELS_CHANGED = 'models-changed';

export function modelsList(): Promise<ModelEntry[]> {
  return call<ModelEntry[]>('models_list');
}

/** Loads a model (seconds); resolves to its entry, now `loaded`. */
export function modelLoad(id: string): Promise<ModelEntry> {
  return call<ModelEntry>('model_load', { id });
}

export function onModelsChanged(handler: () => void): Promise<() => void> {
  return subscribe(MODELS_CHANGED, handler);
}
