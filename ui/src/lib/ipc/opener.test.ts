import { mockIPC } from '@tauri-apps/api/mocks';
import { expect, it } from 'vitest';
import { openUrl } from './opener';

it('openUrl asks the opener plugin to open the URL', async () => {
  const calls: [string, unknown][] = [];
  mockIPC((cmd, args) => {
    calls.push([cmd, args]);
    return null;
  });

  await openUrl('https://example.com/a?b=c');

  expect(calls).toEqual([['plugin:opener|open_url', { url: 'https://example.com/a?b=c' }]]);
});

it('openUrl rejects with a CommandError when the URL is out of scope', async () => {
  mockIPC(() => {
    throw 'Not allowed to open url file:///etc/passwd';
  });

  await expect(openUrl('file:///etc/passwd')).rejects.toMatchObject({ code: 'IPC_ERROR' });
});
