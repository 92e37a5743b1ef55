// Typed bindings for the popover window commands (src-tauri/src/commands/window.rs).
import { call } from './invoke';

/** Hides the popover; the menu-bar icon brings it back. */
export function hideWindow(): Promise<void> {
  return call<void>('hide_window');
}
