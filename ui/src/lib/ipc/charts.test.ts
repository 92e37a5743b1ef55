import { mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { LIVE_WINDOWS, liveChart, sessionChart } from './charts';

describe('charts', () => {
  it('asks for the live graph by window and theme, and the session chart by id', async () => {
    const calls: Array<[string, unknown]> = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      return cmd === 'live_chart' ? { svg: '<svg/>', plot: {}, budgetBytes: null, memory: [], rates: [], slowdowns: [] } : '<svg/>';
    });
    await expect(liveChart(15, 'dark')).resolves.toMatchObject({ svg: '<svg/>', rates: [] });
    await expect(sessionChart('s1', 'light')).resolves.toBe('<svg/>');
    expect(calls).toEqual([
      ['live_chart', { minutes: 15, theme: 'dark' }],
      ['session_chart', { sessionId: 's1', theme: 'light' }],
    ]);
    expect(LIVE_WINDOWS).toEqual([5, 15, 60]);
  });

  it('rejects with the command error', async () => {
    mockIPC(() => {
      throw { code: 'INVALID_INPUT', message: 'The live graph shows 5, 15 or 60 minutes, not 7.' };
    });
    await expect(liveChart(5, 'light')).rejects.toEqual({ code: 'INVALID_INPUT', message: 'The live graph shows 5, 15 or 60 minutes, not 7.' });
  });
});
