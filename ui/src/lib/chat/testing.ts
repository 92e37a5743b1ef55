// Test fixture: a turn's figures as the stats line shows them, for the
// tests of the line and of the answers that carry it. (Not shipped: only
// *.test.ts files import it.)
import type { ShownStats } from './stats';

export function shownStats(o: Partial<ShownStats> = {}): ShownStats {
  return {
    ttftMs: 25.4,
    prefillTps: 812.3,
    decodeTps: 193.2,
    e2eTps: 160.9,
    promptTokens: 20,
    reusedTokens: 0,
    reusedFrom: 'none',
    generatedTokens: 40,
    thinkingTokens: 0,
    contextTokens: 20,
    batch: 1,
    peakMemoryBytes: 12_500_000,
    model: 'headroom-demo-tiny',
    slowdown: null,
    kvCache: '8-bit (group 64)',
    speculation: null,
    twoMacs: null,
    ...o,
  };
}
