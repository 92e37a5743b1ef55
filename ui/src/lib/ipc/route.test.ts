import { mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { isSensitive, routePreview, type Decision } from './route';

const LOCAL: Decision = {
  target: { kind: 'local', model: 'qwen2.5-7b' },
  reasons: [
    {
      code: 'SENSITIVE_EMAIL',
      message: 'This message contains an email address (j***@example.com): it stays on this Mac.',
      finding: { kind: 'email', masked: 'j***@example.com', start: 8, end: 25 },
      earlierMessage: null,
    },
    { code: 'SHORT_INPUT', message: 'The input is 9 tokens, within the local limit of 8192.' },
  ],
  inputTokens: 9,
  tokensExact: true,
  thresholdTokens: 8192,
  neededContext: 521,
};

describe('route', () => {
  it('asks route_preview with every flag spelled out', async () => {
    const calls: [string, unknown][] = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      return LOCAL;
    });
    await expect(routePreview('mail to j.doe@example.com', { needsWeb: true, force: 'cloud' })).resolves.toEqual(LOCAL);
    expect(calls).toEqual([
      [
        'route_preview',
        {
          text: 'mail to j.doe@example.com',
          sessionId: null,
          needsTools: false,
          needsWeb: true,
          force: 'cloud',
          allowSensitive: false,
        },
      ],
    ]);
  });

  it('names the chat, so its earlier messages count as they will when sent', async () => {
    let seen: Record<string, unknown> = {};
    mockIPC((_cmd, args) => {
      seen = args as Record<string, unknown>;
      return LOCAL;
    });
    await routePreview('and then?', { sessionId: 's1' });
    expect(seen).toMatchObject({ text: 'and then?', sessionId: 's1' });
  });

  it('tells sensitive decisions apart', () => {
    expect(isSensitive(LOCAL)).toBe(true);
    expect(isSensitive({ ...LOCAL, reasons: LOCAL.reasons.slice(1) })).toBe(false);
  });

});
