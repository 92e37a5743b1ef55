// Typed bindings for the `app` commands (src-tauri/src/commands/app.rs).
import { call } from './invoke';

export interface AppInfo {
  version: string;
  mlx_version: string;
  device: string;
  platform: string;
}

export function appInfo(): Promise<AppInfo> {
  return call<AppInfo>('app_info');
}
