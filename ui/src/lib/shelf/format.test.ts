import { describe, expect, it } from 'vitest';
import type { ShelfEntry } from '../ipc/shelf';
import { offered, shelfAction, shelfFacts } from './format';
import { shelfEntry } from './testing';

/** Qwen3 8B with its download size known. */
function entry(over: Partial<ShelfEntry> = {}): ShelfEntry {
  return shelfEntry(
    { repo: 'mlx-community/Qwen3-8B-4bit', name: 'Qwen3 8B', download_bytes: 4_620_000_000, weight_bytes: 4_607_731_712, ...over },
    7.4,
  );
}

describe('shelf rows', () => {
  it('say the bits, the download in decimal units and the memory need in GiB', () => {
    expect(shelfFacts(entry())).toBe('4-bit · 4.6 GB download · needs 7.4 GB');
  });

  it('fall back to the weights when the download size is unknown, and leave out an unknown need', () => {
    expect(shelfFacts(entry({ download_bytes: null, fit: null, bits: null }))).toBe('4.6 GB download');
  });

  it('name the licence, and the token a gated repo needs', () => {
    expect(shelfAction(entry())).toBe('Download mlx-community/Qwen3-8B-4bit (apache-2.0)');
    expect(shelfAction(entry({ gated: true, license: 'llama3.1' }))).toContain('gated: needs a Hugging Face token');
  });

  it('offer only what is not installed yet, in the shelf order', () => {
    const list = [entry({ repo: 'a/1' }), entry({ repo: 'b/2', installed: true }), entry({ repo: 'c/3' })];
    expect(offered(list).map((e) => e.repo)).toEqual(['a/1', 'c/3']);
  });
});
