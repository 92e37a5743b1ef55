// Sentences built from backend replies; versions and devices always come from
// the reply, never from constants here.
import type { AppInfo } from '../ipc/app';
import type { ModelEntry } from '../ipc/models';
import { formatGB } from '../fit/format';

/** The quiet footer line, e.g. `v0.1.0 · MLX cpu`. */
export function formatAppInfo(info: AppInfo): string {
  return `v${info.version} · MLX ${info.device}`;
}

const MIB = 1024 ** 2;

/**
 * A picker row's second line: `4-bit · 4.0 GB` (quantization, size on disk).
 * In the same units as the memory it needs beside it (2^30, as Activity
 * Monitor counts), so a 200 GB file never reads as "needs 186 GB".
 */
export function modelFacts(m: ModelEntry): string {
  const parts: string[] = [];
  if (m.bits !== null) parts.push(`${m.bits}-bit`);
  parts.push(m.size_bytes >= 1024 * MIB ? formatGB(m.size_bytes) : `${Math.max(1, Math.round(m.size_bytes / MIB))} MB`);
  return parts.join(' · ');
}
