import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { appInfo, ping, type AppInfo, type PingReply } from './app';
import { IPC_ERROR, NO_BACKEND } from './invoke';

const REPLY: PingReply = {
  echo: 'hello world!',
  chars: 12,
  version: '0.1.0',
  mlx_version: '0.32.2',
  device: 'cpu',
};

const INFO: AppInfo = { version: '0.1.0', mlx_version: '0.32.2', device: 'gpu', platform: 'macos' };

describe('ping', () => {
  it('invokes the `ping` command with { text } and resolves to the reply', async () => {
    const calls: Array<[string, unknown]> = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      return REPLY;
    });

    const reply = await ping('hello world!');

    expect(calls).toEqual([['ping', { text: 'hello world!' }]]);
    expect(reply).toEqual(REPLY);
    // The typed fields are usable as such.
    expect(reply.chars + 1).toBe(13);
  });

  it('passes a CommandError from Rust through unchanged', async () => {
    const error = { code: 'TEXT_TOO_LONG', message: 'That message is too long.', details: { max: 10 } };
    mockIPC(() => {
      throw error;
    });

    await expect(ping('x')).rejects.toEqual(error);
  });

  it("turns Tauri's string errors into a CommandError", async () => {
    mockIPC(() => Promise.reject('command ping not found'));

    await expect(ping('x')).rejects.toEqual({ code: IPC_ERROR, message: 'command ping not found' });
  });

  it('reports a missing backend as a CommandError, not a TypeError', async () => {
    mockIPC(() => REPLY);
    clearMocks(); // what a plain browser tab looks like: no IPC bridge

    const error = await ping('x').catch((e: unknown) => e);

    expect(error).toMatchObject({ code: NO_BACKEND, message: expect.stringContaining('backend') });
  });
});

describe('appInfo', () => {
  it('invokes `app_info` with no arguments and resolves to AppInfo', async () => {
    const calls: Array<[string, unknown]> = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      return INFO;
    });

    await expect(appInfo()).resolves.toEqual(INFO);
    expect(calls).toEqual([['app_info', {}]]);
  });
});
