import { describe, expect, it } from 'vitest';
import { formatBytes, formatCount, formatMs, formatStatsLine, formatTps, statsDetails, type ShownStats } from './stats';
import { shownStats } from './testing';

const stats = shownStats;

describe('formatStatsLine', () => {
  it('is TTFT, decode speed, tokens and context', () => {
    expect(formatStatsLine(stats())).toBe('TTFT 25 ms · 193 tok/s · 40 tok · ctx 20');
  });

  it('scales units and marks a stopped turn', () => {
    const line = formatStatsLine(stats({ ttftMs: 1420, decodeTps: 34.21, generatedTokens: 512, contextTokens: 1900 }), 'cancelled');
    expect(line).toBe('TTFT 1.4 s · 34.2 tok/s · 512 tok · ctx 1.9K · stopped');
  });

  it("ends with the live view's verdict when memory slowed the answer", () => {
    const slowed = stats({ slowdown: 'slowed by swap: 3.1 → 0.8 tok/s while swap grew 1.2 GB' });
    expect(formatStatsLine(slowed)).toBe(
      'TTFT 25 ms · 193 tok/s · 40 tok · ctx 20 · slowed by swap: 3.1 → 0.8 tok/s while swap grew 1.2 GB',
    );
    expect(statsDetails(slowed)).toContainEqual(['Slowed', 'slowed by swap: 3.1 → 0.8 tok/s while swap grew 1.2 GB']);
    expect(statsDetails(stats()).map(([label]) => label)).not.toContain('Slowed');
  });

  it('says what prompt lookup did, in the line and the details', () => {
    const looked = stats({ speculation: 'lookup: 62% accepted, 2.5 tok/pass' });
    expect(formatStatsLine(looked)).toBe('TTFT 25 ms · 193 tok/s · 40 tok · ctx 20 · lookup: 62% accepted, 2.5 tok/pass');
    expect(statsDetails(looked)).toContainEqual(['Decoding', 'lookup: 62% accepted, 2.5 tok/pass']);
    expect(statsDetails(stats())).toContainEqual(['Decoding', 'one token per pass']);
  });

  it('says an answer ran across two Macs: briefly in the line, where and at what cost in the details', () => {
    const split = stats({ twoMacs: 'across two Macs: layers 15–29 on 10.0.0.2:7070, hand-off 1.2 ms a pass' });
    expect(formatStatsLine(split)).toBe('TTFT 25 ms · 193 tok/s · 40 tok · ctx 20 · two Macs');
    expect(statsDetails(split)).toContainEqual(['Ran', 'across two Macs: layers 15–29 on 10.0.0.2:7070, hand-off 1.2 ms a pass']);
    expect(statsDetails(stats()).map(([label]) => label)).not.toContain('Ran');
  });

  it('shows an undefined rate as a dash, never 0 or Infinity', () => {
    expect(formatStatsLine(stats({ ttftMs: null, decodeTps: null, generatedTokens: 1 }))).toBe(
      'TTFT — · — tok/s · 1 tok · ctx 20',
    );
  });
});

describe('units', () => {
  it('formats counts, times and rates', () => {
    expect([formatCount(999), formatCount(1000), formatCount(12_345)]).toEqual(['999', '1.0K', '12K']);
    expect([formatMs(999.6), formatMs(1000)]).toEqual(['1000 ms', '1.0 s']);
    expect([formatTps(99.94), formatTps(100)]).toEqual(['99.9 tok/s', '100 tok/s']);
    expect([formatBytes(281_368), formatBytes(12_500_000), formatBytes(4.3e9)]).toEqual(['0.3 MB', '13 MB', '4.3 GB']);
  });
});

describe('the cached prefix', () => {
  it('says how much of the prompt was not prefilled again, and from where', () => {
    const rows = (o: Partial<ShownStats>) => Object.fromEntries(statsDetails(stats(o)))['Cached, not prefilled'];
    expect(rows({})).toBe('none');
    expect(rows({ promptTokens: 900, reusedTokens: 640, reusedFrom: 'disk' })).toBe('640 of 900, from disk');
    expect(rows({ promptTokens: 900, reusedTokens: 640, reusedFrom: 'memory' })).toBe('640 of 900, in memory');
    expect(rows({ promptTokens: 900, reusedTokens: 640, reusedFrom: null })).toBe('640 of 900');
  });
});

describe('statsDetails', () => {
  it('lists every label, with batch, model and how it ended', () => {
    const rows = Object.fromEntries(statsDetails(stats(), 'length'));
    expect(rows).toMatchObject({
      'Time to first token': '25 ms',
      Prefill: '812 tok/s',
      Decode: '193 tok/s',
      'End to end': '161 tok/s',
      'Prompt tokens': '20',
      'Generated tokens': '40',
      'Context at start': '20',
      Batch: '1',
      'Peak memory': '13 MB',
      Model: 'headroom-demo-tiny',
      'KV cache': '8-bit (group 64)',
      Ended: 'hit the token limit',
    });
  });
});
