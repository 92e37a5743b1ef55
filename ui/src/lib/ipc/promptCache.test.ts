import { describe, expect, it } from 'vitest';
import { promptCacheRows, type PromptCacheStats } from './promptCache';

const MB = 2 ** 20;
const stats = (o: Partial<PromptCacheStats> = {}): PromptCacheStats => ({
  entries: 3,
  bytes: 1200 * MB,
  latestBytes: 450 * MB,
  limitBytes: 2048 * MB,
  lookups: 10,
  hits: 8,
  diskHits: 2,
  hitRate: 0.8,
  reusedShare: 0.914,
  evictions: 1,
  diskFiles: 2,
  diskBytes: 600 * MB,
  diskLimitBytes: 4096 * MB,
  diskErrors: 0,
  ...o,
});

describe('promptCacheRows', () => {
  it('says what is held against its allowance, how well it served, and what is on disk', () => {
    expect(promptCacheRows(stats())).toEqual([
      ['Prompt cache', '3 prompts, 1.17 GB; others 750 MB of 2.00 GB'],
      ['Reused a prefix', '80 % of 10 requests; 91 % of prompt tokens not prefilled again'],
      ['Saved on disk', '2 states, 600 MB of 4.00 GB; 2 read back'],
    ]);
  });

  it('reads plainly before the first request, with one entry, without a disk tier, and after errors', () => {
    const rows = promptCacheRows(
      stats({ entries: 1, bytes: 3 * MB, latestBytes: 3 * MB, limitBytes: 0, lookups: 0, hits: 0, hitRate: null, reusedShare: null, diskLimitBytes: 0 }),
    );
    expect(rows.map((r) => r[1])).toEqual(['1 prompt, 3 MB; others 0 MB of 0 MB', 'no request yet', 'off']);
    expect(promptCacheRows(stats({ diskErrors: 2 }))[2]?.[1]).toContain('(2 could not be read or written)');
  });
});
