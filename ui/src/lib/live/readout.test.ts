import { describe, expect, it } from 'vitest';
import type { LiveMemoryPoint, LiveView } from '../ipc/charts';
import { memoryAt, rateAt, readout, slowdownAt, summary, timeAt, xAt } from './readout';

const GB = 1024 ** 3;
const T0 = 1_800_000_000_000;

function mem(atS: number, spanS: number, usedGb: number, pressure: LiveMemoryPoint['pressure'] = 'normal'): LiveMemoryPoint {
  return {
    atMs: T0 + atS * 1000,
    spanMs: spanS * 1000,
    totalBytes: 24 * GB,
    availableBytes: (24 - usedGb) * GB,
    usedBytes: usedGb * GB,
    swapTotalBytes: 0,
    swapUsedBytes: 0,
    processRssBytes: GB,
    pressure,
  };
}

const VIEW: LiveView = {
  svg: '<svg/>',
  plot: { left: 40, right: 360, top: 20, bottom: 180, startMs: T0, endMs: T0 + 300_000 },
  budgetBytes: 20 * GB,
  memory: [mem(0, 60, 6), mem(60, 10, 8, 'warning'), mem(200, 1, 9)],
  rates: [
    { modelId: 'demo', startMs: T0 + 64_000, atMs: T0 + 65_000, tokens: 20, tps: 20 },
    { modelId: 'demo', startMs: T0 + 65_000, atMs: T0 + 66_000, tokens: 4, tps: 4 },
  ],
  slowdowns: [{ modelId: 'demo', startMs: T0 + 65_000, endMs: T0 + 70_000, sentence: 'slowed by swap: 20.0 → 4.0 tok/s while swap grew 1.2 GB' }],
};

describe('live read-out', () => {
  it('maps pixels to moments and back, clamped to the plot', () => {
    expect(timeAt(VIEW.plot, 40)).toBe(T0);
    expect(timeAt(VIEW.plot, 200)).toBe(T0 + 150_000);
    expect(timeAt(VIEW.plot, 999)).toBe(T0 + 300_000);
    expect(timeAt(VIEW.plot, 0)).toBe(T0);
    expect(xAt(VIEW.plot, T0 + 150_000)).toBe(200);
  });

  it('finds the reading that stands at a moment, and none in a gap', () => {
    expect(memoryAt(VIEW.memory, T0 + 30_000)?.usedBytes).toBe(6 * GB);
    expect(memoryAt(VIEW.memory, T0 + 65_000)?.pressure).toBe('warning');
    expect(memoryAt(VIEW.memory, T0 + 140_000)).toBeNull();
    expect(memoryAt(VIEW.memory, T0 + 200_500)?.usedBytes).toBe(9 * GB);
    expect(memoryAt(VIEW.memory, T0 + 201_400)?.usedBytes).toBe(9 * GB);
  });

  it('finds a rate only near where one was measured, and the slowdown around it', () => {
    expect(rateAt(VIEW.rates, T0 + 65_400)?.tps).toBe(20);
    expect(rateAt(VIEW.rates, T0 + 65_600)?.tps).toBe(4);
    expect(rateAt(VIEW.rates, T0 + 90_000)).toBeNull();
    expect(slowdownAt(VIEW.slowdowns, T0 + 66_000)?.sentence).toMatch(/^slowed by swap/);
    expect(slowdownAt(VIEW.slowdowns, T0 + 71_000)).toBeNull();
  });

  it('says the exact figures at a moment', () => {
    const lines = readout(VIEW, T0 + 66_000);
    expect(lines[0]).toMatch(/^\d\d:\d\d:\d\d$/);
    expect(lines.slice(1)).toEqual([
      'used 8.0/24.0 GB · budget 20.0 GB · swap 0.0 GB · pressure warning',
      '4.0 tok/s decoding (demo)',
      'slowed by swap: 20.0 → 4.0 tok/s while swap grew 1.2 GB',
    ]);
    expect(readout(VIEW, T0 + 140_000)[1]).toBe('no memory reading (Headroom was not running)');
    expect(readout({ ...VIEW, budgetBytes: null }, T0 + 1_000)[1]).toBe('used 6.0/24.0 GB · swap 0.0 GB · pressure normal');
  });

  it('sums the graph up for a screen reader', () => {
    expect(summary(VIEW, 5)).toBe(
      'Live graph of the last 5 minutes: memory used 9.0/24.0 GB, swap 0.0 GB, pressure normal; 2 decode rate points, last 4.0 tok/s; slowed by swap: 20.0 → 4.0 tok/s while swap grew 1.2 GB. Use the arrow keys to read the figures at each moment.',
    );
    expect(summary({ ...VIEW, memory: [], rates: [], slowdowns: [] }, 60)).toMatch(/no memory readings; no answers decoding\./);
  });
});
