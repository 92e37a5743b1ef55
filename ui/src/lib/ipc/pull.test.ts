import { Channel } from '@tauri-apps/api/core';
import { mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { modelPull, modelPullCancel, PULL_CANCELLED, type PullEvent } from './pull';

describe('pull', () => {
  it('pulls with a Channel and streams its events to the handler', async () => {
    let seen: Record<string, unknown> = {};
    mockIPC((_cmd, args) => {
      seen = args as Record<string, unknown>;
      const channel = seen.onProgress as Channel<PullEvent>;
      channel.onmessage({ event: 'started', repo: 'org/m', commit: 'abc', files: 1, total_bytes: 10, cached_bytes: 0 });
      channel.onmessage({
        event: 'progress',
        file: 'model.safetensors',
        file_bytes: 10,
        file_size: 10,
        done_bytes: 10,
        total_bytes: 10,
        bytes_per_sec: 100,
        eta_secs: 0,
      });
      return { snapshot: '/hub/models--org--m/snapshots/abc', downloaded_bytes: 10, entry: null };
    });
    const events: PullEvent[] = [];
    const result = await modelPull('org/m', (e) => events.push(e), { override: true });
    expect(result.downloaded_bytes).toBe(10);
    expect(seen).toMatchObject({ repo: 'org/m', override: true });
    expect(seen.onProgress).toBeInstanceOf(Channel);
    expect(events.map((e) => e.event)).toEqual(['started', 'progress']);
  });

  it('passes a cancelled pull through as a CommandError and cancels with model_pull_cancel', async () => {
    const error = { code: PULL_CANCELLED, message: 'the pull of org/m was cancelled' };
    mockIPC((cmd) => {
      if (cmd === 'model_pull_cancel') return true;
      throw error;
    });
    await expect(modelPull('org/m', () => {})).rejects.toEqual(error);
    await expect(modelPullCancel()).resolves.toBe(true);
  });
});
