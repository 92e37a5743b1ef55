// Typed binding for the prompt cache's figures (src-tauri/src/commands/prompt_cache.rs).
import type { PromptCacheView } from './generated';
import { command } from './invoke';

/** What the prompt cache holds and how it served (`commands::prompt_cache::PromptCacheView`). */
export type PromptCacheStats = PromptCacheView;
/** What the prompt cache holds in memory and on disk, and how often it saved a prefill. */
export function promptCacheStats(): Promise<PromptCacheStats> {
  return command('prompt_cache_stats');
}

// Binary units, as the Settings fields count them (4096 MB = 4.00 GB).
const size = (bytes: number): string =>
  bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(2)} GB` : `${Math.round(bytes / 2 ** 20)} MB`;
const percent = (share: number): string => `${Math.round(share * 100)} %`;

/** The figures in words, as label / value rows: what it holds, how well it served, the disk tier. */
export function promptCacheRows(s: PromptCacheStats): string[][] {
  const others = s.bytes - s.latestBytes;
  const held = `${s.entries} ${s.entries === 1 ? 'prompt' : 'prompts'}, ${size(s.bytes)}; others ${size(others)} of ${size(s.limitBytes)}`;
  const served =
    s.hitRate === null
      ? 'no request yet'
      : `${percent(s.hitRate)} of ${s.lookups} requests; ${percent(s.reusedShare ?? 0)} of prompt tokens not prefilled again`;
  const disk =
    s.diskLimitBytes === 0
      ? 'off'
      : `${s.diskFiles} ${s.diskFiles === 1 ? 'state' : 'states'}, ${size(s.diskBytes)} of ${size(s.diskLimitBytes)}; ${s.diskHits} read back` +
        (s.diskErrors > 0 ? ` (${s.diskErrors} could not be read or written)` : '');
  return [
    ['Prompt cache', held],
    ['Reused a prefix', served],
    ['Saved on disk', disk],
  ];
}
