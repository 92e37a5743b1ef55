import { Channel } from '@tauri-apps/api/core';
import { mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { benchRun, type BenchProgress } from './bench';

describe('benchRun', () => {
  it('invokes bench_run with the plan and a Channel, and streams progress', async () => {
    const calls: Array<[string, Record<string, unknown>]> = [];
    mockIPC((cmd, args) => {
      const a = args as Record<string, unknown>;
      calls.push([cmd, a]);
      const channel = a.onProgress as Channel<BenchProgress>;
      channel.onmessage({ depth: 0, run: 0, runs: 2, decodeTps: 40 });
      channel.onmessage({ depth: 0, run: 1, runs: 2, decodeTps: null });
      return { id: 3, depths: [] };
    });
    const seen: BenchProgress[] = [];
    const report = await benchRun({ depths: [0, 4096], p: 512, n: 128, r: 2 }, (p) => seen.push(p));
    expect(report.id).toBe(3);
    const [cmd, args] = calls[0] ?? ['', {}];
    expect(cmd).toBe('bench_run');
    expect(args).toMatchObject({ depths: [0, 4096], p: 512, n: 128, r: 2, theme: 'light' });
    expect(seen.map((p) => [p.run, p.decodeTps])).toEqual([
      [0, 40],
      [1, null],
    ]);
  });

});
