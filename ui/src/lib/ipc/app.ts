// Typed bindings for the `app` commands (src-tauri/src/commands/app.rs).
import type { AppInfo } from './generated';
import { call } from './invoke';

export type { AppInfo };

export function appInfo(): Promise<AppInfo> {
  return call<AppInfo>('app_info');
}
