import { mockIPC } from '@tauri-apps/api/mocks';
import { expect, it } from 'vitest';
import { desktopStatus, type DesktopStatus } from './desktop';

it('desktopStatus invokes `desktop_status` and returns its answer', async () => {
  const status: DesktopStatus = {
    logDir: '/home/u/.local/share/app.headroom.menubar/logs',
    logFile: '/home/u/.local/share/app.headroom.menubar/logs/headroom.2026-12-01.log',
    shortcut: { shortcut: 'Alt+Space', registered: true, error: null },
    launchAtLogin: false,
  };
  const commands: string[] = [];
  mockIPC((cmd) => {
    commands.push(cmd);
    return status;
  });
  await expect(desktopStatus()).resolves.toEqual(status);
  expect(commands).toEqual(['desktop_status']);
});
