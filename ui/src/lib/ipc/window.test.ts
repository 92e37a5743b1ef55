import { mockIPC } from '@tauri-apps/api/mocks';
import { expect, it } from 'vitest';
import { hideWindow } from './window';

it('hideWindow invokes `hide_window`', async () => {
  const commands: string[] = [];
  mockIPC((cmd) => {
    commands.push(cmd);
    return null;
  });

  await hideWindow();

  expect(commands).toEqual(['hide_window']);
});

it('hideWindow rejects with the CommandError from Rust', async () => {
  mockIPC(() => {
    throw { code: 'WINDOW', message: 'The popover window is gone. Quit and reopen Headroom.' };
  });

  await expect(hideWindow()).rejects.toMatchObject({ code: 'WINDOW' });
});
