import { describe, expect, it } from 'vitest';
import type { PingReply } from '../ipc/app';
import { ECHO_PREVIEW_CHARS, formatAppInfo, formatPingReply } from './format';

const reply = (overrides: Partial<PingReply> = {}): PingReply => ({
  echo: 'hello world!',
  chars: 12,
  version: '0.1.0',
  mlx_version: '0.32.2',
  device: 'cpu',
  ...overrides,
});

describe('formatPingReply', () => {
  it('builds the sentence from the reply', () => {
    expect(formatPingReply(reply())).toBe(
      'Headroom 0.1.0 received your 12 characters ("hello world!") — MLX 0.32.2 on cpu. No model is loaded yet.',
    );
  });

  it('takes versions and device from the reply, not from constants', () => {
    const text = formatPingReply(reply({ version: '9.8.7', mlx_version: '1.2.3', device: 'gpu' }));
    expect(text).toContain('Headroom 9.8.7');
    expect(text).toContain('MLX 1.2.3 on gpu');
  });

  it('uses the singular for one character', () => {
    expect(formatPingReply(reply({ echo: 'a', chars: 1 }))).toContain('your 1 character ("a")');
  });

  it("reports the backend's count, not the UI's", () => {
    // Rust counts Unicode scalar values; JS .length would say 2 here.
    expect(formatPingReply(reply({ echo: '🙂', chars: 1 }))).toContain('1 character ("🙂")');
  });

  it('quotes a multi-line echo on one line', () => {
    expect(formatPingReply(reply({ echo: 'two\nlines', chars: 9 }))).toContain('("two lines")');
  });

  it('shortens a long echo without splitting a character', () => {
    const long = '🙂'.repeat(ECHO_PREVIEW_CHARS + 5);
    const text = formatPingReply(reply({ echo: long, chars: long.length }));
    const quoted = /\("(.*)"\)/u.exec(text)?.[1] ?? '';
    expect(quoted).toBe(`${'🙂'.repeat(ECHO_PREVIEW_CHARS - 1)}…`);
  });
});

describe('formatAppInfo', () => {
  it('is the quiet footer line', () => {
    expect(formatAppInfo({ version: '0.1.0', mlx_version: '0.32.2', device: 'cpu', platform: 'linux' })).toBe(
      'v0.1.0 · MLX cpu',
    );
  });
});
