// Typed bindings for the `app` commands (src-tauri/src/commands/app.rs).
import { call } from './invoke';

export interface PingReply {
  echo: string;
  chars: number;
  version: string;
  mlx_version: string;
  device: string;
}

export interface AppInfo {
  version: string;
  mlx_version: string;
  device: string;
  platform: string;
}

/** Round-trips `text` through the backend; the foundation's stand-in for chat. */
export function ping(text: string): Promise<PingReply> {
  return call<PingReply>('ping', { text });
}

export function appInfo(): Promise<AppInfo> {
  return call<AppInfo>('app_info');
}
