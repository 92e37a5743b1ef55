// Words for the starter shelf's rows.
import { formatGB } from '../fit/format';
import type { ShelfEntry } from '../ipc/shelf';
import { formatBytes } from '../pull/format';

/** A row's facts: `4-bit · 4.6 GB download · needs 7.4 GB`. */
export function shelfFacts(e: ShelfEntry): string {
  const parts: string[] = [];
  if (e.bits !== null) parts.push(`${e.bits}-bit`);
  // A download as Finder counts it (decimal); memory as Activity Monitor does.
  parts.push(`${formatBytes(e.download_bytes ?? e.weight_bytes)} download`);
  if (e.fit) parts.push(`needs ${formatGB(e.fit.estimate.predicted_peak_bytes)}`);
  return parts.join(' · ');
}

/** What a click on the row does, for its tooltip and label. */
export function shelfAction(e: ShelfEntry): string {
  const gated = e.gated ? ' (gated: needs a Hugging Face token with its terms accepted)' : '';
  return `Download ${e.repo} (${e.license})${gated}`;
}

/** The rows to offer: what is not in the model list yet (the list keeps the shelf's order: what fits first). */
export function offered(shelf: ShelfEntry[]): ShelfEntry[] {
  return shelf.filter((e) => !e.installed);
}
