import { describe, expect, it } from 'vitest';
import type { StoredMessage, StoredTurnStats } from '../ipc/sessions';
import { formatCount, formatWhen, toChatMessages } from './format';

const STATS: StoredTurnStats = {
  modelId: 'demo',
  quantization: '4-bit',
  kvDtype: 'float16',
  batch: 1,
  contextTokens: 40,
  promptTokens: 20,
  reusedTokens: 0,
  generatedTokens: 8,
  ttftMs: 30,
  prefillTps: 600,
  decodeTps: 90,
  e2eTps: 70,
  prefillMs: 30,
  firstTokenMs: 30,
  lastTokenMs: 110,
  peakMemoryBytes: 1e6,
  pressure: 'normal',
  swapDeltaBytes: 0,
  finishReason: 'length',
  quantKernel: 'cpu-f32',
  slowdown: 'slowed by swap: 3.1 → 0.8 tok/s while swap grew 1.2 GB',
  speculation: 'lookup: 62% accepted, 2.5 tok/pass',
  twoMacs: 'across two Macs: layers 15–29 on 10.0.0.2:7070, hand-off 1.2 ms a pass',
};

function msg(over: Partial<StoredMessage>): StoredMessage {
  return {
    id: 1,
    sessionId: 's',
    role: 'user',
    content: 'hi',
    model: null,
    route: 'local',
    status: 'complete',
    error: null,
    createdAt: 0,
    updatedAt: 0,
    stats: null,
    ...over,
  };
}

describe('toChatMessages', () => {
  it('keeps order, maps stats, marks interrupted and failed answers, hides system prompts', () => {
    const out = toChatMessages([
      msg({ id: 1, role: 'system', content: 'be brief' }),
      msg({ id: 2 }),
      msg({ id: 3, role: 'assistant', content: 'Hello', stats: STATS }),
      msg({ id: 4, content: 'more' }),
      msg({ id: 5, role: 'assistant', content: 'Hal', status: 'interrupted' }),
      msg({ id: 6, role: 'assistant', content: '', status: 'error', error: 'The engine stopped.' }),
    ]);
    expect(out.map((m) => m.id)).toEqual([2, 3, 4, 5, 6]);
    expect(out[1]?.stats).toMatchObject({ model: 'demo', decodeTps: 90, contextTokens: 40, slowdown: STATS.slowdown, kvCache: 'float16', speculation: STATS.speculation, twoMacs: STATS.twoMacs });
    expect(out[1]?.reason).toBe('length');
    expect(out[3]).toMatchObject({ interrupted: true, reason: 'cancelled', text: 'Hal' });
    expect(out[4]?.failed).toBe('The engine stopped.');
    expect(out[1]?.route).toEqual({ target: 'local', modelOrProvider: 'demo', reasons: [] });
    expect(out[0]?.route).toBeUndefined();
    const [cached] = toChatMessages([msg({ role: 'assistant', route: 'cloud', stats: { ...STATS, modelId: 'cache:gpt-x' } })]);
    expect(cached?.route).toEqual({ target: 'cached', modelOrProvider: 'gpt-x', reasons: [] });
  });
});

describe('list words', () => {
  it('says when as a list does', () => {
    const now = new Date(2026, 10, 29, 18, 0).getTime();
    expect(formatWhen(new Date(2026, 10, 29, 9, 5).getTime(), now)).toBe('09:05');
    expect(formatWhen(new Date(2026, 10, 28, 23, 0).getTime(), now)).toBe('Yesterday');
    expect(formatWhen(new Date(2026, 10, 25, 12, 0).getTime(), now)).toBe('Wed');
    expect(formatWhen(new Date(2026, 2, 3, 12, 0).getTime(), now)).toBe('3 Mar');
    expect(formatWhen(new Date(2025, 2, 3, 12, 0).getTime(), now)).toBe('3 Mar 2025');
    expect(formatCount(1)).toBe('1 message');
    expect(formatCount(4)).toBe('4 messages');
  });
});
