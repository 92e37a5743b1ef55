// Typed binding for the desktop integration's state
// (src-tauri/src/commands/desktop.rs); changing it goes through settings_set.
import { call } from './invoke';

/** Mirrors `ShortcutStatus`. */
export interface ShortcutStatus {
  /** The shortcut the settings ask for, if any. */
  shortcut: string | null;
  /** Whether it works: registered with the OS. */
  registered: boolean;
  /** Why it is not, if it is not (e.g. another app holds it). */
  error: string | null;
}

/** Mirrors `DesktopStatus`. */
export interface DesktopStatus {
  /** The folder the app writes its logs to; null: stderr only. */
  logDir: string | null;
  /** The newest log file in it. */
  logFile: string | null;
  shortcut: ShortcutStatus;
  /** Whether the OS starts Headroom at login; null where unknown. */
  launchAtLogin: boolean | null;
}

export function desktopStatus(): Promise<DesktopStatus> {
  return call<DesktopStatus>('desktop_status');
}
