// Words for a download: sizes, rates and time left, as Finder and Safari say them.

/** Decimal units, as macOS shows file sizes: `4.3 GB`, `812 MB`, `12 KB`. */
export function formatBytes(bytes: number): string {
  if (bytes >= 1e9) return `${(bytes / 1e9).toFixed(1)} GB`;
  if (bytes >= 1e6) return `${Math.round(bytes / 1e6)} MB`;
  if (bytes >= 1e3) return `${Math.round(bytes / 1e3)} KB`;
  return `${Math.max(0, Math.round(bytes))} bytes`;
}

/** `24.1 MB/s`. */
export function formatRate(bytesPerSec: number): string {
  return `${formatBytes(bytesPerSec)}/s`;
}

/** Time left: `about 3 min`, `12 s`, `1 h 5 min`; `—` while unknown. */
export function formatEta(secs: number | null): string {
  if (secs === null || !Number.isFinite(secs) || secs < 0) return '—';
  if (secs < 60) return `${Math.ceil(secs)} s`;
  const min = Math.round(secs / 60);
  if (min < 60) return `about ${min} min`;
  return `${Math.floor(min / 60)} h ${min % 60} min`;
}

/** A repo id as typed (spaces, a pasted hub URL) → `org/name`, or null if it cannot be one. */
export function normaliseRepo(typed: string): string | null {
  let t = typed.trim();
  const url = t.match(/^https?:\/\/[^/]+\/(.+)$/);
  if (url?.[1]) t = url[1];
  t = t.replace(/\/(tree|blob|resolve)\/.*$/, '').replace(/\/+$/, '');
  return /^[\w.-]+\/[\w.-]+$/.test(t) ? t : null;
}
