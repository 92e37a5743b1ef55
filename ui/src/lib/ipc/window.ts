// Typed bindings for the popover window commands (src-tauri/src/commands/window.rs).
import { command } from './invoke';

/** Hides the popover; the menu-bar icon brings it back. */
export function hideWindow(): Promise<null> {
  return command('hide_window');
}
