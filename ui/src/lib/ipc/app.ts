// Typed bindings for the `app` commands (src-tauri/src/commands/app.rs).
import type { AppInfo } from './generated';
import { command } from './invoke';

export type { AppInfo };

export function appInfo(): Promise<AppInfo> {
  return command('app_info');
}
