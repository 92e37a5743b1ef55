import { Channel } from '@tauri-apps/api/core';
import { mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { chatSend, withheldNotes, type ChatEvent, type RouteInfo } from './chat';

const STATS: ChatEvent = {
  event: 'stats',
  data: {
    ttftMs: 25,
    prefillTps: 800,
    decodeTps: 193,
    e2eTps: 160,
    promptTokens: 20,
    reusedTokens: 0,
    reusedFrom: 'none',
    generatedTokens: 2,
    thinkingTokens: 0,
    contextTokens: 20,
    batch: 1,
    peakMemoryBytes: 1e7,
    model: 'demo',
    slowdown: null,
    kvCache: 'bf16',
    speculation: null,
    twoMacs: null,
  },
};

describe('chatSend', () => {
  it('invokes chat_send with a Channel and streams its events to the handler', async () => {
    const calls: Array<[string, Record<string, unknown>]> = [];
    mockIPC((cmd, args) => {
      const a = args as Record<string, unknown>;
      calls.push([cmd, a]);
      const channel = a.onEvent as Channel<ChatEvent>;
      setTimeout(() => {
        for (const e of [
          { event: 'started', data: { runId: 7, promptTokens: 20, reusedTokens: 0 } },
          { event: 'token', data: { text: 'Hel' } },
          { event: 'token', data: { text: 'lo' } },
          STATS,
          { event: 'finished', data: { reason: 'stop' } },
        ] as ChatEvent[])
          channel.onmessage(e);
      });
      return 7;
    });

    const events: ChatEvent[] = [];
    const done = new Promise<void>((resolve) => {
      void chatSend('s1', 'hi', (e) => {
        events.push(e);
        if (e.event === 'finished') resolve();
      }).then((id) => expect(id).toBe(7));
    });
    await done;

    expect(calls).toHaveLength(1);
    expect(calls[0]?.[0]).toBe('chat_send');
    expect(calls[0]?.[1]).toMatchObject({ sessionId: 's1', text: 'hi' });
    expect(calls[0]?.[1]).not.toHaveProperty('maxTokens');
    expect(calls[0]?.[1].onEvent).toBeInstanceOf(Channel);
    expect(events.map((e) => e.event)).toEqual(['started', 'token', 'token', 'stats', 'finished']);
  });

  it('passes maxTokens when given', async () => {
    let seen: Record<string, unknown> = {};
    mockIPC((_cmd, args) => {
      seen = args as Record<string, unknown>;
      return 1;
    });
    await chatSend('s', 'x', () => {}, { maxTokens: 4096 });
    expect(seen.maxTokens).toBe(4096);
  });

});

describe('withheldNotes', () => {
  it('picks the notes about what stayed on this Mac, in order', () => {
    const route: RouteInfo = {
      target: 'cloud',
      modelOrProvider: 'gpt-x',
      reasons: [
        { code: 'FORCED_CLOUD', message: 'You asked for the cloud.' },
        { code: 'HISTORY_WITHHELD', message: 'Earlier message 3 stays on this Mac.' },
        { code: 'SUMMARY_WITHHELD', message: 'The summary stays on this Mac.' },
      ],
    };
    expect(withheldNotes(route).map((r) => r.code)).toEqual(['HISTORY_WITHHELD', 'SUMMARY_WITHHELD']);
    expect(withheldNotes({ ...route, reasons: route.reasons.slice(0, 1) })).toEqual([]);
    expect(withheldNotes(undefined)).toEqual([]);
  });
});
