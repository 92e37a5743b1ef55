// The stats line under an answer and its expanded labels, from one TurnStats.
// The numbers themselves are defined once, in Rust (`core::stats`).
import type { FinishReason, ReusedFrom, TurnStats } from '../ipc/chat';

/**
 * A turn's figures as the chat shows them: a live answer's `stats` event, or
 * a stored answer's record, which keeps how many tokens were reused but not
 * where from (`reusedFrom: null`).
 */
export type ShownStats = Omit<TurnStats, 'reusedFrom' | 'thinkingTokens'> & {
  reusedFrom: ReusedFrom | null;
  /** Of the generated tokens, how many were thinking; null where not known (a stored answer). */
  thinkingTokens: number | null;
};

export function formatMs(ms: number | null): string {
  if (ms === null) return '—';
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

export function formatTps(tps: number | null): string {
  if (tps === null) return '— tok/s';
  return tps < 100 ? `${tps.toFixed(1)} tok/s` : `${Math.round(tps)} tok/s`;
}

/** Token counts as people read them: 20, 980, 1.9K, 12K. */
export function formatCount(n: number): string {
  if (n < 1000) return String(n);
  const k = n / 1000;
  return k < 10 ? `${k.toFixed(1)}K` : `${Math.round(k)}K`;
}

export function formatBytes(bytes: number): string {
  if (bytes >= 1e9) return `${(bytes / 1e9).toFixed(1)} GB`;
  if (bytes >= 1e7) return `${Math.round(bytes / 1e6)} MB`;
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

const REASONS: Record<FinishReason, string> = {
  stop: 'finished',
  length: 'hit the token limit',
  cancelled: 'stopped',
};

export function formatReason(reason: FinishReason): string {
  return REASONS[reason];
}

/** The compact line, e.g. `TTFT 25 ms · 193 tok/s · 40 tok · ctx 20`. */
export function formatStatsLine(s: ShownStats, reason?: FinishReason): string {
  const parts = [
    `TTFT ${formatMs(s.ttftMs)}`,
    formatTps(s.decodeTps),
    s.thinkingTokens
      ? `${formatCount(s.generatedTokens)} tok (${formatCount(s.thinkingTokens)} thinking)`
      : `${formatCount(s.generatedTokens)} tok`,
    `ctx ${formatCount(s.contextTokens)}`,
  ];
  if (reason === 'cancelled') parts.push('stopped');
  if (s.speculation) parts.push(s.speculation);
  if (s.twoMacs) parts.push('two Macs');
  if (s.slowdown) parts.push(s.slowdown);
  return parts.join(' · ');
}

/** How much of the prompt the prompt cache held, and where from. */
export function cachedWords(s: ShownStats): string {
  if (s.reusedTokens === 0) return 'none';
  const from = s.reusedFrom === 'disk' ? ', from disk' : s.reusedFrom === 'memory' ? ', in memory' : '';
  return `${s.reusedTokens} of ${s.promptTokens}${from}`;
}

/** Every label, for the expanded view. */
export function statsDetails(s: ShownStats, reason?: FinishReason): Array<[string, string]> {
  const rows: Array<[string, string]> = [
    ['Time to first token', formatMs(s.ttftMs)],
    ['Prefill', formatTps(s.prefillTps)],
    ['Decode', formatTps(s.decodeTps)],
    ['End to end', formatTps(s.e2eTps)],
    ['Prompt tokens', String(s.promptTokens)],
    ['Cached, not prefilled', cachedWords(s)],
    ['Generated tokens', String(s.generatedTokens)],
    ...(s.thinkingTokens ? [['Of which thinking', String(s.thinkingTokens)] as [string, string]] : []),
    ['Context at start', String(s.contextTokens)],
    ['Batch', String(s.batch)],
    ['Peak memory', formatBytes(s.peakMemoryBytes)],
    ['Model', s.model],
    ['KV cache', s.kvCache],
    ['Decoding', s.speculation ?? 'one token per pass'],
  ];
  if (s.twoMacs) rows.push(['Ran', s.twoMacs]);
  if (reason) rows.push(['Ended', formatReason(reason)]);
  if (s.slowdown) rows.push(['Slowed', s.slowdown]);
  return rows;
}
