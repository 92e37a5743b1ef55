import { describe, expect, it } from 'vitest';
import { formatBytes, formatEta, formatRate, normaliseRepo } from './format';

describe('download words', () => {
  it('says sizes in decimal units, as Finder does', () => {
    expect(formatBytes(4_300_000_000)).toBe('4.3 GB');
    expect(formatBytes(812_400_000)).toBe('812 MB');
    expect(formatBytes(12_345)).toBe('12 KB');
    expect(formatBytes(5)).toBe('5 bytes');
    expect(formatRate(24_100_000)).toBe('24 MB/s');
  });

  it('says time left roughly, and a dash while unknown', () => {
    expect(formatEta(null)).toBe('—');
    expect(formatEta(Number.POSITIVE_INFINITY)).toBe('—');
    expect(formatEta(11.2)).toBe('12 s');
    expect(formatEta(185)).toBe('about 3 min');
    expect(formatEta(3900)).toBe('1 h 5 min');
  });

  it('takes a repo id typed or pasted as a hub URL', () => {
    expect(normaliseRepo('  mlx-community/Qwen2.5-7B-Instruct-4bit ')).toBe('mlx-community/Qwen2.5-7B-Instruct-4bit');
    expect(normaliseRepo('https://huggingface.co/mlx-community/Qwen2.5-7B-Instruct-4bit/tree/main')).toBe(
      'mlx-community/Qwen2.5-7B-Instruct-4bit',
    );
    expect(normaliseRepo('Qwen2.5-7B')).toBeNull();
    expect(normaliseRepo('a/b/c')).toBeNull();
    expect(normaliseRepo('org/name with space')).toBeNull();
  });
});
