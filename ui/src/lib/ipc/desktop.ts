// Typed binding for the desktop integration's state
// (src-tauri/src/commands/desktop.rs); changing it goes through settings_set.
import type { DesktopStatus, ShortcutStatus } from './generated';
import { command } from './invoke';

export type { DesktopStatus, ShortcutStatus };
export function desktopStatus(): Promise<DesktopStatus> {
  return command('desktop_status');
}
