import { describe, expect, it } from 'vitest';
import type { FitReport, ModelEntry } from '../ipc/models';
import {
  architectureNote,
  basisShort,
  expertsPart,
  formatContext,
  formatGB,
  formatUsed,
  groupBySize,
  kvParts,
  refuses,
  sparkline,
  swapSentence,
  verdictLabel,
  verdictLevel,
} from './format';

const GB = 1024 ** 3;
const report = (verdict: FitReport['verdict'], largest: number | null = 4096): FitReport => ({
  estimate: { context_tokens: 8192, weight_bytes: 8 * GB, kv_cache_bytes: 3 * GB, overhead: { total_bytes: GB }, predicted_peak_bytes: 12 * GB },
  budget: { available_bytes: 14 * GB, freed_by_unload_bytes: 0, os_headroom_bytes: 4 * GB, budget_bytes: 10 * GB },
  verdict,
  spare_bytes: -2 * GB,
  largest_context_that_fits: largest,
});
const entry = (size_bytes: number, id = `m${size_bytes}`): ModelEntry => ({
  id,
  name: id,
  path: '/m',
  arch: null,
  bits: null,
  size_bytes,
  loaded: false,
  fit: null,
});

describe('fit format', () => {
  it('says what a prediction rests on in a few words', () => {
    expect(basisShort(null)).toBe('');
    expect(basisShort(report({ kind: 'fits' }))).toBe('estimated');
    const calibration = {
      at_context: 4096,
      peak_bytes: 9 * GB,
      formula_bytes: 8 * GB,
      offset_bytes: GB,
      capped: false,
      confirmed_at: null,
      for_context: 4096,
      weight_percent: 100,
      rule: 'the rule',
    };
    expect(basisShort({ ...report({ kind: 'fits' }), calibration })).toBe('measured here at 4K');
  });

  it('colours verdicts green, amber, red', () => {
    expect(verdictLevel({ kind: 'fits' })).toBe('normal');
    expect(verdictLevel({ kind: 'tight' })).toBe('warning');
    expect(verdictLevel({ kind: 'would_swap', by_bytes: 1 })).toBe('critical');
    expect(verdictLevel({ kind: 'cannot_fit', by_bytes: 1 })).toBe('critical');
    expect(verdictLevel(null)).toBe('unknown');
    expect(verdictLabel({ kind: 'would_swap', by_bytes: 2.3 * GB })).toBe('would swap by 2.3 GB');
  });

  it('says contexts and sizes the way people do', () => {
    expect([formatContext(8192), formatContext(4096), formatContext(1536), formatContext(512)]).toEqual(['8K', '4K', '1.5K', '512']);
    expect(formatGB(4.3 * GB)).toBe('4.3 GB');
    expect(formatUsed(19.1 * GB, 32 * GB)).toBe('19.1/32.0 GB');
  });

  it('writes the warning sentence', () => {
    expect(swapSentence('Qwen2.5-14B', report({ kind: 'would_swap', by_bytes: 2.3 * GB }))).toBe(
      'Qwen2.5-14B would push this Mac into swap by 2.3 GB at 8K context',
    );
    expect(swapSentence('huge', report({ kind: 'cannot_fit', by_bytes: 180 * GB }, null))).toContain('no smaller context fits');
    expect(refuses(report({ kind: 'would_swap', by_bytes: 1 }))).toBe(true);
    expect(refuses(report({ kind: 'tight' }))).toBe(false);
    expect(refuses(null)).toBe(false);
  });

  it('groups by size in order and draws a sparkline', () => {
    const groups = groupBySize([entry(2e6), entry(3e6), entry(4.3e9), entry(200e9)]);
    expect(groups.map((g) => [g.label, g.models.length])).toEqual([
      ['Under 1 GB', 2],
      ['1–8 GB', 1],
      ['Over 24 GB', 1],
    ]);
    expect(sparkline([0, 5, 10], 10, 60, 14)).toBe('0.0,14.0 30.0,7.0 60.0,0.0');
    expect(sparkline([], 10, 60, 14)).toBe('');
  });

  it('names experts, windows and fixed state in words, and nothing for a plain dense model', () => {
    const dense: FitReport = {
      ...report({ kind: 'fits' }),
      footprint: { kv_layers: [{ layers: 28, kv_heads: 4, head_dim: 128, window: null, state_bytes: 0 }], experts: null, active_weight_bytes: 4 * GB },
    };
    expect([expertsPart(dense), kvParts(dense), architectureNote(dense)]).toEqual([null, [], '']);
    expect(architectureNote(report({ kind: 'fits' }))).toBe('');

    const hybrid: FitReport = {
      ...report({ kind: 'fits' }),
      estimate: { ...report({ kind: 'fits' }).estimate, kv_full_bytes: 2 * GB, kv_window_bytes: 0.5 * GB, kv_state_bytes: 0.5 * GB },
      footprint: {
        kv_layers: [
          { layers: 8, kv_heads: 8, head_dim: 256, window: null, state_bytes: 0 },
          { layers: 40, kv_heads: 8, head_dim: 256, window: 1024, state_bytes: 0 },
          { layers: 30, kv_heads: 0, head_dim: 0, window: null, state_bytes: 2e6 },
        ],
        experts: { count: 128, per_token: 8, resident_bytes: 15 * GB, active_bytes: 1 * GB },
        active_weight_bytes: 1.6 * GB,
      },
    };
    expect(expertsPart(hybrid)).toEqual({ key: 'experts', label: 'Experts: all 128 in memory, 8 used per token', bytes: 15 * GB });
    expect(kvParts(hybrid).map((p) => [p.key, p.label, p.bytes])).toEqual([
      ['kv-full', '8 full-attention layers: grows with context', 2 * GB],
      ['kv-window', '40 sliding layers: last 1K tokens only', 0.5 * GB],
      ['kv-state', '30 linear layers: fixed state, any length', 0.5 * GB],
    ]);
    expect(architectureNote(hybrid)).toBe('8 of 128 experts per token · KV window 1K · fixed-size state');
  });
});
