import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { appInfo, type AppInfo } from './app';
import { IPC_ERROR, NO_BACKEND } from './invoke';

const INFO: AppInfo = { version: '0.1.0', mlx_version: '0.32.2', device: 'gpu', platform: 'macos' };

describe('appInfo', () => {
  it('passes a CommandError from Rust through unchanged', async () => {
    const error = { code: 'ENGINE_INTERNAL', message: 'The engine stopped.', details: { why: 1 } };
    mockIPC(() => {
      throw error;
    });

    await expect(appInfo()).rejects.toEqual(error);
  });

  it("turns Tauri's string errors into a CommandError", async () => {
    mockIPC(() => Promise.reject('command app_info not found'));

    await expect(appInfo()).rejects.toEqual({ code: IPC_ERROR, message: 'command app_info not found' });
  });

  it('reports a missing backend as a CommandError, not a TypeError', async () => {
    mockIPC(() => INFO);
    clearMocks(); // what a plain browser tab looks like: no IPC bridge

    const error = await appInfo().catch((e: unknown) => e);

    expect(error).toMatchObject({ code: NO_BACKEND, message: expect.stringContaining('backend') });
  });
});
