// Typed binding for the desktop integration's state
// (src-tauri/src/commands/desktop.rs); changing it goes through settings_set.
import type { DesktopStatus, ShortcutStatus } from './generated';
import { call } from './invoke';

export type { DesktopStatus, ShortcutStatus };
export function desktopStatus(): Promise<DesktopStatus> {
  return call<DesktopStatus>('desktop_status');
}
