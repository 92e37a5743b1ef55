// Typed binding for the opener plugin (tauri-plugin-opener, registered in
// src-tauri/src/desktop.rs; capabilities/default.json allows http, https
// and mailto URLs only): what `@tauri-apps/plugin-opener`'s openUrl sends.
import { call } from './invoke';

/** Opens `url` in the user's default browser (or mail app), never in the popover. */
export function openUrl(url: string): Promise<void> {
  return call<void>('plugin:opener|open_url', { url });
}
