// Typed binding for the prompt cache's figures (src-tauri/src/commands/prompt_cache.rs).
import { call } from './invoke';

/** Mirrors `commands::prompt_cache::PromptCacheView`. */
export interface PromptCacheStats {
  entries: number;
  bytes: number;
  /** Of `bytes`, the chat in use's: the fit verdict counts it as the KV cache. */
  latestBytes: number;
  /** What the other entries may hold (from the load's fit). */
  limitBytes: number;
  lookups: number;
  hits: number;
  diskHits: number;
  /** hits / lookups; null before the first request. */
  hitRate: number | null;
  /** Share of all prompt tokens asked for that were not prefilled again. */
  reusedShare: number | null;
  evictions: number;
  diskFiles: number;
  diskBytes: number;
  diskLimitBytes: number;
  diskErrors: number;
}

/** What the prompt cache holds in memory and on disk, and how often it saved a prefill. */
export function promptCacheStats(): Promise<PromptCacheStats> {
  return call<PromptCacheStats>('prompt_cache_stats');
}

const size = (bytes: number): string =>
  bytes >= 1e9 ? `${(bytes / 1e9).toFixed(2)} GB` : `${(bytes / 1e6).toFixed(bytes >= 1e7 ? 0 : 1)} MB`;
const percent = (share: number): string => `${Math.round(share * 100)} %`;

/** The figures in words, one line each: memory, how well it served, disk. */
export function promptCacheLines(s: PromptCacheStats): string[] {
  const held = `${s.entries} ${s.entries === 1 ? 'prompt' : 'prompts'} in memory, ${size(s.bytes)}`;
  const others = s.entries > 1 ? ` (${size(s.bytes - s.latestBytes)} beside the chat in use, of ${size(s.limitBytes)} allowed)` : ` (${size(s.limitBytes)} allowed beside the chat in use)`;
  const served =
    s.hitRate === null
      ? 'No request yet'
      : `${percent(s.hitRate)} of ${s.lookups} requests reused a cached prefix; ${percent(s.reusedShare ?? 0)} of prompt tokens were not prefilled again`;
  const disk =
    s.diskLimitBytes === 0
      ? 'Chats are not saved to disk'
      : `On disk: ${s.diskFiles} ${s.diskFiles === 1 ? 'chat' : 'chats'}, ${size(s.diskBytes)} of ${size(s.diskLimitBytes)}; ${s.diskHits} continued from disk`;
  return [held + others, served, disk + (s.diskErrors > 0 ? ` (${s.diskErrors} could not be read or written)` : '')];
}
