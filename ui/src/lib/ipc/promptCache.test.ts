import { describe, expect, it } from 'vitest';
import { promptCacheLines, type PromptCacheStats } from './promptCache';

const stats = (o: Partial<PromptCacheStats> = {}): PromptCacheStats => ({
  entries: 3,
  bytes: 1_200_000_000,
  latestBytes: 450_000_000,
  limitBytes: 2_000_000_000,
  lookups: 10,
  hits: 8,
  diskHits: 2,
  hitRate: 0.8,
  reusedShare: 0.914,
  evictions: 1,
  diskFiles: 2,
  diskBytes: 600_000_000,
  diskLimitBytes: 4_294_967_296,
  diskErrors: 0,
  ...o,
});

describe('promptCacheLines', () => {
  it('says what is held against its allowance, how well it served, and what is on disk', () => {
    expect(promptCacheLines(stats())).toEqual([
      '3 prompts in memory, 1.20 GB (750 MB beside the chat in use, of 2.00 GB allowed)',
      '80 % of 10 requests reused a cached prefix; 91 % of prompt tokens were not prefilled again',
      'On disk: 2 chats, 600 MB of 4.29 GB; 2 continued from disk',
    ]);
  });

  it('reads plainly before the first request, with one entry, without a disk tier, and after errors', () => {
    const [held, served, disk] = promptCacheLines(
      stats({ entries: 1, bytes: 3_000_000, latestBytes: 3_000_000, limitBytes: 0, lookups: 0, hits: 0, hitRate: null, reusedShare: null, diskLimitBytes: 0 }),
    );
    expect(held).toBe('1 prompt in memory, 3.0 MB (0.0 MB allowed beside the chat in use)');
    expect(served).toBe('No request yet');
    expect(disk).toBe('Chats are not saved to disk');
    expect(promptCacheLines(stats({ diskErrors: 2 }))[2]).toContain('(2 could not be read or written)');
  });
});
