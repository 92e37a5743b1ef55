import { mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { onMemory, type MemorySample } from './memory';

const SAMPLE: MemorySample = {
  atUnixMs: 1,
  total: 32,
  available: 12,
  used: 20,
  swapTotal: 2,
  swapUsed: 0,
  pressure: 'normal',
  processRss: 1,
  mlxActive: null,
  mlxPeak: null,
};

describe('memory', () => {
  it('hands each memory event payload to the handler until stopped', async () => {
    mockIPC(() => null, { shouldMockEvents: true });
    const { emit } = await import('@tauri-apps/api/event');
    const heard: MemorySample[] = [];
    const stop = await onMemory((s) => heard.push(s));
    await emit('memory', SAMPLE);
    expect(heard).toEqual([SAMPLE]);
    stop();
    await new Promise((resolve) => setTimeout(resolve, 0));
    await emit('memory', SAMPLE);
    expect(heard).toHaveLength(1);
  });

});
