// Typed bindings for the starter shelf (src-tauri/src/commands/shelf.rs):
// real models people run on 16–32 GB Macs, each with its fit verdict on
// this Mac before any download. Pulling one is `modelPull`.
import { call, type CommandError } from './invoke';
import type { FitReport, Remedy } from './models';

/** Mirrors `crate::shelf::ShelfSource` (tag `kind`). */
export type ShelfSource = { kind: 'recorded'; on: string } | { kind: 'hub'; commit: string };

/** Mirrors `crate::shelf::ShelfEntry`. */
export interface ShelfEntry {
  /** The Hugging Face repo a pull fetches. */
  repo: string;
  name: string;
  about: string;
  license: string;
  /** The repo asks for its terms to be accepted: a Hugging Face token is needed. */
  gated: boolean;
  arch: string;
  bits: number | null;
  quantization: string | null;
  /** Bytes a pull downloads; null when the record does not know. */
  download_bytes: number | null;
  weight_bytes: number;
  /** Already in the model list. */
  installed: boolean;
  /** The verdict at the app's context limit; null when memory could not be read. */
  fit: FitReport | null;
  remedies: Remedy[];
  /** Why it does not fit, with its numbers; null when it fits. */
  why: string | null;
  source: ShelfSource;
}

/** What `shelf_refresh` resolves to. */
export interface ShelfRefresh {
  entries: ShelfEntry[];
  /** The repos the hub could not give; each keeps its older record. */
  failed: CommandError[];
}

/** The shelf, what fits first. Offline: the recorded sizes, or the last refresh's. */
export function shelfList(): Promise<ShelfEntry[]> {
  return call<ShelfEntry[]>('shelf_list');
}

/**
 * Reads each shelf repo's config and weight headers from the hub, then lists
 * the shelf; unless `force`, a repo read in the last week is not asked again.
 */
export function shelfRefresh(force = false): Promise<ShelfRefresh> {
  return call<ShelfRefresh>('shelf_refresh', { force });
}
