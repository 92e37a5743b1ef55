// Sentences built from backend replies; versions and devices always come from
// the reply, never from constants here.
import type { AppInfo } from '../ipc/app';
import type { ModelEntry } from '../ipc/models';

/** The quiet footer line, e.g. `v0.1.0 · MLX cpu`. */
export function formatAppInfo(info: AppInfo): string {
  return `v${info.version} · MLX ${info.device}`;
}

/** A picker row's second line: `4-bit · 4.3 GB` (quantization, size on disk). */
export function modelFacts(m: ModelEntry): string {
  const parts: string[] = [];
  if (m.bits !== null) parts.push(`${m.bits}-bit`);
  parts.push(m.size_bytes >= 1e9 ? `${(m.size_bytes / 1e9).toFixed(1)} GB` : `${Math.max(1, Math.round(m.size_bytes / 1e6))} MB`);
  return parts.join(' · ');
}
