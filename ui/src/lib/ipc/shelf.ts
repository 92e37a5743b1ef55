// Typed bindings for the starter shelf (src-tauri/src/commands/shelf.rs):
// real models people run on 16–32 GB Macs, each with its fit verdict on
// this Mac before any download. Pulling one is `modelPull`.
import type { ShelfEntry, ShelfRefresh, ShelfSource } from './generated';
import { command } from './invoke';

export type { ShelfEntry, ShelfRefresh, ShelfSource };
/** The shelf, what fits first. Offline: the recorded sizes, or the last refresh's. */
export function shelfList(): Promise<ShelfEntry[]> {
  return command('shelf_list');
}

/**
 * Reads each shelf repo's config and weight headers from the hub, then lists
 * the shelf; unless `force`, a repo read in the last week is not asked again.
 */
export function shelfRefresh(force = false): Promise<ShelfRefresh> {
  return command('shelf_refresh', { force });
}
